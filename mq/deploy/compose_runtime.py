"""A compose cluster from the host: ``attach`` it (a ``cluster.json`` the other commands
read) and act on its containers (``Containers``: state, kill, pause, start, stop).

``attach(compose_file, data_dir)`` reads the ``x-mq-cluster`` block of a file written by
``mq docker compose`` and writes ``<data_dir>/cluster.json`` in the host's view
(``mq.deploy.compose.host_cluster``) with a ``docker`` section naming the containers.
Faults are container operations — ``docker kill`` is a crash, ``docker pause`` (the
cgroup freezer) a hung process, ``docker stop`` a controlled shutdown (SIGTERM) — run
through the ``docker`` command line, as a person would.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from mq.deploy import state as cluster_state
from mq.deploy.compose import CONTAINER_DATA_DIR, ComposeError, host_cluster
from mq.deploy.errors import DeployError
from mq.deploy.topology import BrokerSpec, Deployment, Topology

DOCKER_TIMEOUT_S = 60.0


def read_compose_cluster(compose_file: str) -> dict[str, Any]:
    """The container view a compose file carries (its ``x-mq-cluster`` block)."""
    try:
        with open(compose_file, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as exc:
        raise ComposeError(f"cannot read {compose_file}: {exc.strerror or exc}",
                           "pass the compose file `mq docker compose` wrote (default docker/compose.yaml)") from None
    except yaml.YAMLError as exc:
        raise ComposeError(f"{compose_file} is not YAML ({exc.__class__.__name__})",
                           "pass a compose file written by `mq docker compose`") from None
    text = doc.get("x-mq-cluster") if isinstance(doc, dict) else None
    if not isinstance(text, str):
        raise ComposeError(f"{compose_file} has no x-mq-cluster block: it was not written by `mq docker compose`",
                           "generate it with `mq docker compose REGION_FILE -o FILE`")
    try:
        cluster = json.loads(text.replace("$$", "$"))
    except ValueError as exc:
        raise ComposeError(f"{compose_file}: x-mq-cluster is not JSON ({exc})",
                           "generate the file again with `mq docker compose`") from None
    return cluster


def attach(compose_file: str, data_dir: str) -> tuple[str, Deployment]:
    """Write ``<data_dir>/cluster.json`` for the compose cluster; (its path, the deployment)."""
    doc = host_cluster(read_compose_cluster(compose_file), data_dir)
    data_dir = doc["data_dir"]
    with cluster_state.locked(data_dir):
        existing = cluster_state.read_state(data_dir)
        if existing is not None and "docker" not in existing:
            raise ComposeError(f"{data_dir} holds the topology `mq up` started (cluster.json without a docker "
                               "section)", "attach to another --data-dir, or `mq down` that topology first")
        path = cluster_state.state_path(data_dir)
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({**doc, "processes": {}}, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    return path, Deployment.from_json(doc)


def docker_section(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``docker`` section of a cluster.json (None: `mq up` started it)."""
    docker = (state or {}).get("docker")
    return docker if isinstance(docker, dict) else None


# ---------------------------------------------------------------------- containers


@functools.cache
def compose_command() -> tuple[str, ...]:
    """``docker compose`` (Compose v2) when the plugin is installed, else ``docker-compose`` (v1)."""
    docker = shutil.which("docker")
    if docker is not None:
        try:
            v2 = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            v2 = None
        if v2 is not None and v2.returncode == 0:
            return (docker, "compose")
    v1 = shutil.which("docker-compose")
    if v1 is not None:
        return (v1,)
    raise DockerError("neither `docker compose` nor `docker-compose` is installed",
                      "install Docker Compose (Debian: apt-get install docker-compose)")


class DockerError(ComposeError):
    """A docker command failed."""


@dataclass(frozen=True)
class ContainerState:
    name: str
    status: str  # docker's: created | running | paused | restarting | exited | dead | missing
    pid: int | None
    health: str | None  # starting | healthy | unhealthy | None (no healthcheck)
    exit_code: int | None
    started_at: str

    @property
    def running(self) -> bool:
        return self.status in ("running", "paused")

    @property
    def paused(self) -> bool:
        return self.status == "paused"


class Containers:
    """The containers of one compose cluster, by service name (``east-1``, ``link-east-west``)."""

    def __init__(self, names: dict[str, str], *, docker: str | None = None) -> None:
        self.names = dict(names)  # service -> container
        self.docker = docker or shutil.which("docker") or "docker"

    @classmethod
    def of(cls, cluster: dict[str, Any], *, docker: str | None = None) -> Containers:
        section = docker_section(cluster)
        if section is None:
            raise ComposeError("this cluster.json describes processes `mq up` started, not containers",
                               "use `mq broker ...` and `mq down` for those")
        return cls(dict(section.get("containers", {})), docker=docker)

    def container(self, service: str) -> str:
        try:
            return self.names[service]
        except KeyError:
            raise ComposeError(f"no service {service!r} in this compose cluster",
                               f"one of: {', '.join(self.names)}") from None

    def broker(self, region: str, node_id: int) -> str:
        return self.container(f"{region}-{node_id}")

    def run(self, *args: str, timeout_s: float = DOCKER_TIMEOUT_S, check: bool = True) -> str:
        try:
            done = subprocess.run([self.docker, *args], capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
        except FileNotFoundError:
            raise DockerError("the docker command is not installed", "install Docker (Debian: docker.io)") from None
        except subprocess.TimeoutExpired:
            raise DockerError(f"`docker {' '.join(args)}` did not finish within {timeout_s:g} s",
                              "is the Docker engine running and responsive? (`docker info`)") from None
        if check and done.returncode != 0:
            raise DockerError(f"`docker {' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}",
                              "check the container with `docker ps -a` and `docker logs NAME`")
        return done.stdout

    def states(self, services: Sequence[str] | None = None) -> dict[str, ContainerState]:
        """``{service: ContainerState}``; a container that does not exist is ``missing``."""
        wanted = list(services) if services is not None else list(self.names)
        containers = [self.container(s) for s in wanted]
        out = self.run("inspect", *containers, check=False) if containers else "[]"
        try:
            found = {str(d.get("Name", "")).lstrip("/"): d for d in json.loads(out or "[]")}
        except ValueError:
            found = {}
        result = {}
        for service, name in zip(wanted, containers, strict=True):
            d = found.get(name)
            if d is None:
                result[service] = ContainerState(name, "missing", None, None, None, "")
                continue
            st = d.get("State", {})
            health = (st.get("Health") or {}).get("Status")
            result[service] = ContainerState(name, str(st.get("Status", "")), int(st.get("Pid") or 0) or None,
                                             health, st.get("ExitCode"), str(st.get("StartedAt", "")))
        return result

    def kill(self, service: str) -> None:
        """A crash: SIGKILL to the container's processes."""
        self.run("kill", self.container(service))

    def pause(self, service: str) -> None:
        """A hung process: every process of the container frozen (it keeps its sockets)."""
        self.run("pause", self.container(service))

    def unpause(self, service: str) -> None:
        self.run("unpause", self.container(service))

    def stop(self, service: str, *, timeout_s: float = 30.0) -> None:
        """SIGTERM (for a broker: a controlled shutdown), SIGKILL after ``timeout_s``."""
        self.run("stop", "--time", str(int(timeout_s)), self.container(service), timeout_s=timeout_s + 30)

    def start(self, service: str) -> None:
        self.run("start", self.container(service))

    def logs(self, service: str, *, tail: int = 50) -> str:
        name = self.container(service)
        try:
            done = subprocess.run([self.docker, "logs", "--tail", str(tail), name], capture_output=True,
                                  text=True, timeout=DOCKER_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"(no logs of {name}: {exc})"
        return done.stdout + done.stderr

    def read_file(self, service: str, path: str) -> str | None:
        """A file inside a running container (``docker exec cat``), None when unreadable."""
        name = self.container(service)
        try:
            done = subprocess.run([self.docker, "exec", name, "cat", path], capture_output=True, text=True,
                                  timeout=DOCKER_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None


# ---------------------------------------------------------------------- what the launcher asks


def _started_ms(started_at: str) -> int | None:
    """Docker's ``2026-01-02T03:04:05.123456789Z`` as epoch ms (None when unknown)."""
    from datetime import datetime

    if not started_at or started_at.startswith("0001-"):
        return None
    head, _, frac = started_at.rstrip("Z").partition(".")
    try:
        when = datetime.fromisoformat(f"{head}.{(frac or '0')[:6]:0<6}+00:00")
    except ValueError:
        return None
    return int(when.timestamp() * 1000)


def _data_bytes(containers: Containers, service: str) -> int:
    out = containers.run("exec", containers.container(service), "du", "-sb", f"{CONTAINER_DATA_DIR}/data",
                         check=False, timeout_s=10)
    first = out.split()[:1]
    return int(first[0]) if first and first[0].isdigit() else 0


def broker_statuses(state: dict[str, Any]) -> list:
    """``Launcher.status`` for a compose cluster: each broker's container (host pid,
    running, paused) and what the broker answers at its published address."""
    from mq.deploy import probe
    from mq.deploy.launcher import BrokerStatus

    deployment = Deployment.from_json(state)
    containers = Containers.of(state)
    services = [f"{r.name}-{b.node_id}" for r in deployment.regions for b in r.brokers]
    states = containers.states(services)
    out = []
    for region in deployment.regions:
        for spec in region.brokers:
            service = f"{region.name}-{spec.node_id}"
            st = states[service]
            answering, topics, partitions = False, None, None
            if st.running and not st.paused:
                try:
                    meta = probe.metadata(spec.listen, timeout_s=1.0)
                    answering = True
                    user = [t for t in meta.topics if not t.is_internal and not t.name.startswith("__")]
                    topics, partitions = len(user), sum(len(t.partitions) for t in user)
                except probe.ProbeError:
                    pass
            size = _data_bytes(containers, service) if st.running and not st.paused else 0
            out.append(BrokerStatus(spec, st.pid if st.running else None, st.running, answering, topics, partitions,
                                    size, _started_ms(st.started_at) if st.running else None, st.paused,
                                    region.name))
    return out


def service_statuses(state: dict[str, Any], services: Sequence) -> list:
    """``Launcher.service_status`` for the link and mirror containers."""
    from mq.deploy.launcher import ServiceStatus

    containers = Containers.of(state)
    names = [svc.key.replace("/", "-") for svc in services]  # link/east-west -> link-east-west
    states = containers.states(names)
    return [ServiceStatus(svc, states[n].pid if states[n].running else None, states[n].running,
                          _started_ms(states[n].started_at) if states[n].running else None)
            for svc, n in zip(services, names, strict=True)]


def refuse_processes(state: dict[str, Any] | None, data_dir: str, what: str) -> None:
    """``mq up`` and ``mq down`` leave a compose cluster to Docker."""
    section = docker_section(state)
    if section is None:
        return
    project = section.get("project", "mq")
    raise ComposeError(f"{data_dir} describes a Docker Compose cluster (project {project}, `mq docker attach`): "
                       f"`{what}` does not start or stop containers",
                       "use `docker compose -f FILE up -d` / `down -v` (or docker-compose), or another --data-dir")


def broker_verb(state: dict[str, Any], region: Topology, spec: BrokerSpec, verb: str, *, name: str,
                stop_timeout_s: float = 30.0, ready_timeout_s: float = 60.0):
    """``mq broker kill|pause|resume|restart`` on a broker's container: ``docker kill`` (a
    crash), ``pause``/``unpause`` (the cgroup freezer), ``stop`` (SIGTERM: a controlled
    shutdown) then ``start`` and wait until it serves again."""
    import time

    from mq.deploy.broker_verbs import BrokerAction

    containers = Containers.of(state)
    service = f"{region.name}-{spec.node_id}"
    container = containers.container(service)
    st = containers.states([service])[service]
    flag = f" --region {region.name}"
    if verb != "restart" and not st.running:
        raise DeployError(f"{name} (container {container}) is not running ({st.status})",
                          f"start it again with `mq broker restart {spec.node_id}{flag}` (or `docker start {container}`)")
    if verb == "pause" and st.paused:
        raise DeployError(f"{name} is already paused", f"resume it with `mq broker resume {spec.node_id}{flag}`")
    if verb == "resume" and not st.paused:
        raise DeployError(f"{name} is not paused", f"pause it first with `mq broker pause {spec.node_id}{flag}`")
    started = time.monotonic()
    if verb == "kill":
        containers.kill(service)
        return BrokerAction(name, spec.node_id, "killed", st.pid, waited_ms=_ms_since(started), region=region.name)
    if verb in ("pause", "resume"):
        (containers.pause if verb == "pause" else containers.unpause)(service)
        return BrokerAction(name, spec.node_id, "paused" if verb == "pause" else "resumed", st.pid,
                            region=region.name)
    if st.running:
        if st.paused:
            containers.unpause(service)
        containers.stop(service, timeout_s=stop_timeout_s)
    containers.start(service)
    wait_serving(region, spec, timeout_s=ready_timeout_s, name=name, logs=lambda: containers.logs(service))
    new = containers.states([service])[service]
    return BrokerAction(name, spec.node_id, "restarted", new.pid, st.pid if st.running else None,
                        _ms_since(started), region=region.name)


def _ms_since(started: float) -> int:
    import time

    return int((time.monotonic() - started) * 1000)


def wait_serving(region: Topology, spec: BrokerSpec, *, timeout_s: float, name: str, logs=None) -> None:
    """Until the broker answers Metadata naming a controller, itself registered and unfenced."""
    import time

    from mq.deploy import probe
    from mq.deploy.readiness import region_problems

    deadline = time.monotonic() + timeout_s
    problems = ["not asked yet"]
    while time.monotonic() < deadline:
        try:
            answer: Any = probe.metadata(spec.listen, timeout_s=1.0)
        except probe.ProbeError as exc:
            answer = str(exc)
        problems = region_problems([spec], [spec.node_id], {spec.node_id: answer})
        if not problems:
            return
        time.sleep(0.2)  # polling a container we just started, with a deadline
    raise DeployError(f"{name} was not serving within {timeout_s:g} s: {'; '.join(problems)}",
                      "look at its log (`docker logs CONTAINER`)", log_tail=logs() if logs else "")


def mirror_status(data_dir: str, flow: str) -> dict[str, Any] | None:
    """A compose cluster's mirror status.json, read inside its container (None: not a
    compose cluster, or the mirror has written none yet)."""
    state = cluster_state.read_state(data_dir)
    if docker_section(state) is None:
        return None
    containers = Containers.of(state)  # type: ignore[arg-type]
    text = containers.read_file(f"mirror-{flow}", f"{CONTAINER_DATA_DIR}/mirror-{flow}/status.json")
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
