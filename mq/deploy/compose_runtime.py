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

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from mq.deploy import state as cluster_state
from mq.deploy.compose import ComposeError, host_cluster
from mq.deploy.topology import Deployment

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
