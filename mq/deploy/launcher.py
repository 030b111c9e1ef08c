"""Start, stop and inspect what a ``Deployment`` names, as processes on this machine.

``up`` starts the brokers of every region (all at once), one link process per pair of
regions (``mq.deploy.link``) and, once every region is ready, one mirror process per
flow (``python -m mirror run``, when the mirror package is installed). Each runs
detached (``mq.deploy.services``) with its log and pid file under the data directory::

    .mq/cluster.json              what runs (``mq.deploy.state``), removed by ``mq down``
    .mq/topology.json             which topology the data belongs to, kept
    .mq/east/broker-1/            a broker's partitions, metadata log, broker.log, broker.pid
    .mq/links/east-west/          link.log, link.pid
    .mq/mirror-east-to-west/      mirror.log, mirror.pid, the mirror's own status.json
    .mq/lag-exporter/             lag-exporter.log, .pid, status.json (``mq up`` unless --no-lag-export)

(a one-region file keeps the layout of before regions: ``.mq/broker-1/``). ``mq status``,
``mq down`` and ``mq broker ...``, run later from another shell, act on exactly what
cluster.json records. The broker verbs (kill, pause, resume, restart) live in
``mq.deploy.broker_verbs``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

from mq.deploy import compose_runtime, probe, process, services
from mq.deploy import state as cluster_state
from mq.deploy.broker_verbs import BrokerAction, BrokerVerbs
from mq.deploy.errors import DeployError
from mq.deploy.links import control_request
from mq.deploy.readiness import region_problems
from mq.deploy.services import LagExporterSettings, Service, StopResult
from mq.deploy.topology import CLUSTER_FILE, BrokerSpec, Deployment, Topology
from mq.protocol.messages import MetadataResponse

__all__ = ["BrokerAction", "BrokerStatus", "Launcher", "ServiceStatus", "StopResult", "UpResult", "log_tail"]

STATE_FILE = CLUSTER_FILE
LOG_TAIL_LINES = 20
BROKER_MODULE = "mq.aio.runner"
# A broker's SIGTERM is a controlled shutdown (leadership handed over, logs flushed):
# give it this long before SIGKILL.
DOWN_TIMEOUT_S = 15.0
MIRROR_NOTE = ("the mirror service is not installed here (no `python -m mirror`): flows {flows} are recorded "
               "in cluster.json but not started; `mq up` starts them once it is")


@dataclass(frozen=True)
class BrokerStatus:
    spec: BrokerSpec
    pid: int | None
    alive: bool
    answering: bool
    topics: int | None  # None: unknown (broker not answering and nothing on disk)
    partitions: int | None
    log_bytes: int
    started_at_ms: int | None
    paused: bool = False  # alive but stopped by SIGSTOP (`mq broker pause`)
    region: str = ""

    def to_json(self) -> dict:
        return {
            "name": self.spec.name, "region": self.region, "node_id": self.spec.node_id, "pid": self.pid,
            "alive": self.alive, "answering": self.answering, "endpoint": self.spec.listen,
            "metrics": self.spec.metrics_endpoint, "data_dir": self.spec.data_dir,
            "log": self.spec.log_path, "topics": self.topics, "partitions": self.partitions,
            "log_bytes": self.log_bytes, "started_at_ms": self.started_at_ms, "paused": self.paused,
        }


@dataclass(frozen=True)
class ServiceStatus:
    """A link or mirror process: recorded pid and whether it still runs."""

    service: Service
    pid: int | None
    alive: bool
    started_at_ms: int | None = None

    def to_json(self) -> dict:
        return {"name": self.service.key, "pid": self.pid, "alive": self.alive, "log": self.service.log_path,
                "started_at_ms": self.started_at_ms}


@dataclass(frozen=True)
class UpResult:
    deployment: Deployment
    already_running: bool
    brokers: tuple[BrokerStatus, ...]
    links: tuple[ServiceStatus, ...] = ()
    mirrors: tuple[ServiceStatus, ...] = ()
    mirror_note: str = ""
    lag_exporter: ServiceStatus | None = None

    @property
    def topology(self) -> Topology:
        """The first (in a one-region deployment: the) region."""
        return self.deployment.regions[0]


@dataclass
class _Started:
    name: str
    proc: subprocess.Popen
    log_path: str
    log_start: int
    ready: bool = False


def log_tail(path: str, *, start: int = 0, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the file written after byte ``start``."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return ""
    return b"\n".join(data.rstrip(b"\n").split(b"\n")[-lines:]).decode(errors="replace")


class Launcher(BrokerVerbs):
    """Runs a deployment as local processes under its data directory."""

    def __init__(self, data_dir: str, *, python: str = sys.executable) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.python = python

    # ------------------------------------------------------------------ what is recorded

    @property
    def state_path(self) -> str:
        return cluster_state.state_path(self.data_dir)

    def recorded(self) -> Deployment | None:
        state = cluster_state.read_state(self.data_dir)
        return cluster_state.deployment_of(state) if state else None

    @staticmethod
    def broker_key(region: Topology, spec: BrokerSpec) -> str:
        return f"{region.name}/{spec.name}"

    @staticmethod
    def label(deployment: Deployment, region: Topology, spec: BrokerSpec) -> str:
        """How messages name a broker: ``broker-2``, or ``east/broker-2`` among several regions."""
        return f"{region.name}/{spec.name}" if len(deployment.regions) > 1 else spec.name

    def services(self, deployment: Deployment) -> tuple[list[Service], list[Service]]:
        """The link and mirror processes of ``deployment``."""
        path = self.state_path
        return ([services.link_service(self.python, path, p) for p in deployment.pairs],
                [services.mirror_service(self.python, path, f) for f in deployment.flows])

    def _recorded_pid(self, state: dict | None, key: str, pid_path: str) -> tuple[int | None, int | None]:
        entry = (state or {}).get("processes", {}).get(key, {})
        pid = entry.get("pid")
        if pid is None:
            pid = services.read_pid(pid_path)
        return pid, entry.get("started_at_ms")

    def _running_broker(self, state: dict | None, region: Topology, spec: BrokerSpec) -> int | None:
        pid, _ = self._recorded_pid(state, self.broker_key(region, spec), spec.pid_path)
        return pid if pid is not None and process.runs(pid, spec.data_dir) else None

    def _running_service(self, state: dict | None, svc: Service) -> int | None:
        pid, _ = self._recorded_pid(state, svc.key, svc.pid_path)
        return pid if pid is not None and process.runs(pid, *svc.markers) else None

    def _record(self, key: str, proc: subprocess.Popen, log_path: str) -> None:
        entry = {"pid": proc.pid, "started_at_ms": time.time_ns() // 1_000_000, "command": proc.args,
                 "log": log_path}
        cluster_state.update_state(self.data_dir, lambda s: {**s, "processes": {**s.get("processes", {}),
                                                                                key: entry}})

    def _forget(self, keys: list[str], pid_paths: list[str]) -> None:
        """Drop processes that are not running from their pid files and cluster.json (the
        file goes when nothing is left in it)."""
        for path in pid_paths:
            services.remove_file(path)

        def change(state: dict) -> dict | None:
            processes = {k: v for k, v in state.get("processes", {}).items() if k not in keys}
            return {**state, "processes": processes} if processes else None

        cluster_state.update_state(self.data_dir, change)

    # ------------------------------------------------------------------ up

    def up(self, what: Deployment | Topology, *, ready_timeout_s: float = 30.0,
           port_hint: str = "pick free ports with `mq up --listen HOST:PORT`",
           lag_exporter: LagExporterSettings | None = None) -> UpResult:
        """Start every process of ``what`` that is not already running and wait until each
        region is ready (``mq.deploy.readiness``) and each link answers; then start the
        mirrors and, with ``lag_exporter`` settings (``mq up`` passes them unless
        --no-lag-export), the lag exporter. Idempotent: a running deployment is reported,
        not restarted. On failure the processes this call started are stopped. A data
        directory holding another topology is refused."""
        deployment = what if isinstance(what, Deployment) else Deployment.of_region(what)
        state = cluster_state.read_state(self.data_dir)
        compose_runtime.refuse_processes(state, _shown(self.data_dir), "mq up")
        recorded = cluster_state.deployment_of(state) if state else None
        self._refuse_foreign(state, recorded, deployment)
        if recorded is not None and self._anything_running(state, recorded):
            deployment = recorded  # (partly) up: complete what was started, keep its addresses
        links, mirrors = self.services(deployment)
        brokers = [(r, s) for r in deployment.regions for s in r.brokers if not self._running_broker(state, r, s)]
        new_links = [svc for svc in links if not self._running_service(state, svc)]
        already = not brokers and not new_links
        for region, spec in brokers:  # every port first: never leave half a deployment running
            self._check_free(spec.listen, f"native port of {self.label(deployment, region, spec)}", port_hint)
            self._check_free(spec.metrics_endpoint, f"metrics port of {self.label(deployment, region, spec)}",
                             port_hint)
        for pair in deployment.pairs:
            if any(svc.key == f"link/{pair.name}" for svc in new_links):
                for route in pair.routes:
                    self._check_free(route.listen, f"link {pair.name} port for {route.region} broker "
                                     f"{route.node_id}", port_hint)
                self._check_free(pair.control, f"control port of link {pair.name}", port_hint)
        if not already:
            with cluster_state.locked(self.data_dir):
                current = cluster_state.read_state(self.data_dir)
                processes = dict((current or {}).get("processes", {}))
                cluster_state.write_state(self.data_dir, deployment, processes)
        started: list[tuple[_Started, str, str]] = []  # (process, key, pid file)
        try:
            for region, spec in brokers:
                proc, log_start = self._spawn_broker(spec)
                key = self.broker_key(region, spec)
                self._record(key, proc, spec.log_path)
                started.append((_Started(self.label(deployment, region, spec), proc, spec.log_path, log_start),
                                key, spec.pid_path))
            for svc in new_links:
                proc, log_start = services.spawn(svc.command, log_path=svc.log_path, pid_path=svc.pid_path,
                                                 cwd=svc.data_dir)
                self._record(svc.key, proc, svc.log_path)
                started.append((_Started(svc.key, proc, svc.log_path, log_start), svc.key, svc.pid_path))
            checks = [(r, list(r.brokers), [b.node_id for b in r.brokers]) for r in deployment.regions]
            self._wait_ready(deployment, [s for s, _, _ in started], checks, ready_timeout_s)
        except BaseException:
            self._stop_started(started)
            raise
        cluster_state.write_marker(self.data_dir, deployment)
        mirror_note = self._start_mirrors(mirrors)
        if lag_exporter is not None:
            self._start_lag_exporter(lag_exporter)
        link_status, mirror_status = self.service_status()
        return UpResult(deployment, already, tuple(self.status()), tuple(link_status), tuple(mirror_status),
                        mirror_note, self.lag_exporter_status())

    def _refuse_foreign(self, state: dict | None, recorded: Deployment | None, asked: Deployment) -> None:
        if recorded is not None and cluster_state.fingerprint(recorded) != cluster_state.fingerprint(asked):
            running = self._anything_running(state, recorded)
            there = cluster_state.describe_fingerprint(cluster_state.fingerprint(recorded))
            there += " (running)" if running else " (stopped)"
        else:
            there = cluster_state.foreign_data(self.data_dir, asked)
            running = False
        if there is None:
            return
        shown = _shown(self.data_dir)
        flag = "" if shown == ".mq" else f" --data-dir {shown}"
        wanted = cluster_state.describe_fingerprint(cluster_state.fingerprint(asked))
        stop = f"stop it with `mq down{flag}`, then " if running else ""
        raise DeployError(f"{shown} holds another topology: {there}; asked for {wanted}",
                          f"{stop}remove {shown} (its data goes with it), or start this one in another directory "
                          "with --data-dir DIR")

    def _anything_running(self, state: dict | None, deployment: Deployment) -> bool:
        links, mirrors = self.services(deployment)
        return any(self._running_broker(state, r, s) for r in deployment.regions for s in r.brokers) or \
            any(self._running_service(state, svc) for svc in (*links, *mirrors, self.lag_service()))

    def _start_mirrors(self, mirrors: list[Service]) -> str:
        """Start the mirror processes not running yet; a note when mirror is not installed."""
        state = cluster_state.read_state(self.data_dir)
        todo = [svc for svc in mirrors if not self._running_service(state, svc)]
        if not todo:
            return ""
        if not services.mirror_available():
            return MIRROR_NOTE.format(flows=", ".join(svc.key.split("/", 1)[1] for svc in todo))
        for svc in todo:
            proc, _ = services.spawn(svc.command, log_path=svc.log_path, pid_path=svc.pid_path, cwd=svc.data_dir)
            self._record(svc.key, proc, svc.log_path)
        return ""

    def lag_service(self, settings: LagExporterSettings | None = None) -> Service:
        return services.lag_exporter_service(self.python, self.state_path, settings)

    def _start_lag_exporter(self, settings: LagExporterSettings) -> None:
        svc = self.lag_service(settings)
        if self._running_service(cluster_state.read_state(self.data_dir), svc):
            return
        proc, _ = services.spawn(svc.command, log_path=svc.log_path, pid_path=svc.pid_path, cwd=svc.data_dir)
        self._record(svc.key, proc, svc.log_path)

    def lag_exporter_status(self) -> ServiceStatus | None:
        """The lag exporter ``mq up`` started (None when it started none)."""
        state = cluster_state.read_state(self.data_dir)
        svc = self.lag_service()
        if state is None or svc.key not in state.get("processes", {}):
            return None
        pid = self._running_service(state, svc)
        _, started = self._recorded_pid(state, svc.key, svc.pid_path)
        return ServiceStatus(svc, pid, pid is not None, started if pid is not None else None)

    def _stop_started(self, started: list[tuple[_Started, str, str]]) -> None:
        running = [(s, key, path) for s, key, path in started if s.proc.poll() is None]
        services.stop_all([(s.name, s.proc.pid) for s, _, _ in running], 5.0)
        for s, _, _ in started:
            s.proc.wait()
        self._forget([key for _, key, _ in started], [path for _, _, path in started])

    @staticmethod
    def _check_free(address: str, what: str, hint: str = "pick free ports") -> None:
        if probe.port_in_use(address):
            raise DeployError(f"{address} ({what}) is already in use by another process", f"stop it, or {hint}")

    def _spawn_broker(self, spec: BrokerSpec, *, reason: str = "mq up") -> tuple[subprocess.Popen, int]:
        # The broker's own entry point (what `mq broker` execs): `mq up` already checked
        # the arguments, and one interpreter start is saved.
        command = [self.python, "-m", BROKER_MODULE, *spec.broker_args()]
        return services.spawn(command, log_path=spec.log_path, pid_path=spec.pid_path, cwd=spec.data_dir,
                              reason=reason)

    def _wait_ready(self, deployment: Deployment, started: list[_Started],
                    checks: list[tuple[Topology, list[BrokerSpec], list[int]]], timeout_s: float) -> None:
        """Poll until every started broker answers ApiVersions, every started link answers
        on its control port, and in each ``(region, asked, required)`` every broker asked
        reports an active controller and the required brokers registered and unfenced. A
        process that exits, or the deadline, raises DeployError with the logs' tails."""
        deadline = time.monotonic() + timeout_s
        probes = self._probes(deployment)
        problems: list[str] = []
        while True:
            for s in started:
                code = s.proc.poll()
                if code is not None:
                    raise DeployError(f"{s.name} exited with code {code} before it was ready",
                                      f"see {_shown(s.log_path)}", log_tail=log_tail(s.log_path, start=s.log_start))
            for s in started:
                if not s.ready:
                    s.ready = probes[s.name]()
            if all(s.ready for s in started):
                problems = []
                for region, asked, required in checks:
                    found = region_problems(asked, required, self._ask_metadata(asked))
                    problems += [f"{region.name}: {p}" if len(deployment.regions) > 1 else p for p in found]
                if not problems:
                    return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        tails = _log_tails([(s.name, s.log_path, s.log_start) for s in started])
        silent = [s.name for s in started if not s.ready]
        if silent:
            raise DeployError(f"{', '.join(silent)} did not answer within {timeout_s:g} s",
                              "see the log, or retry with a longer --timeout", log_tail=tails)
        names = ", ".join(r.name for r, _, _ in checks)
        raise DeployError(
            f"region {names} was not ready within {timeout_s:g} s: {'; '.join(problems[:4])}",
            "a region needs a majority of its voters running (`mq status` shows them); see the broker "
            "logs, or retry with a longer --timeout", log_tail=tails)

    def _probes(self, deployment: Deployment) -> dict:
        """``{process name: () -> answers?}`` for every broker and link of ``deployment``."""
        def broker(address: str):
            def answers() -> bool:
                try:
                    probe.api_versions(address, timeout_s=0.5)
                    return True
                except probe.ProbeError:
                    return False
            return answers

        def link(address: str):
            def answers() -> bool:
                try:
                    return bool(control_request(address, {"op": "list"}, timeout_s=0.5).get("ok"))
                except (OSError, ValueError):
                    return False
            return answers

        found = {self.label(deployment, r, s): broker(s.listen) for r in deployment.regions for s in r.brokers}
        found.update({f"link/{p.name}": link(p.control) for p in deployment.pairs})
        return found

    @staticmethod
    def _ask_metadata(specs: list[BrokerSpec]) -> dict[int, MetadataResponse | str]:
        answers: dict[int, MetadataResponse | str] = {}
        for spec in specs:
            try:
                answers[spec.node_id] = probe.metadata(spec.listen, timeout_s=1.0)
            except probe.ProbeError as exc:
                answers[spec.node_id] = str(exc)
        return answers

    # ------------------------------------------------------------------ down

    def down(self, *, timeout_s: float = DOWN_TIMEOUT_S) -> list[StopResult]:
        """Stop the mirrors first (SIGTERM), then every broker and link at once (a broker's
        SIGTERM is a controlled shutdown: it hands its leadership over, flushes,
        checkpoints); SIGKILL whatever still runs after ``timeout_s``. Data stays; only the
        process state is removed."""
        state = cluster_state.read_state(self.data_dir)
        if state is None:
            return []
        compose_runtime.refuse_processes(state, _shown(self.data_dir), "mq down")
        deployment = cluster_state.deployment_of(state)
        links, mirrors = self.services(deployment)
        lag = self.lag_service()
        results = services.stop_all([(svc.key, self._running_service(state, svc)) for svc in (lag, *mirrors)],
                                    timeout_s)
        brokers = [(self.label(deployment, r, s), self._running_broker(state, r, s))
                   for r in deployment.regions for s in r.brokers]
        results += services.stop_all([*brokers, *((svc.key, self._running_service(state, svc)) for svc in links)],
                                     timeout_s)
        for region in deployment.regions:
            for spec in region.brokers:
                services.remove_file(spec.pid_path)
        for svc in (*links, *mirrors, lag):
            services.remove_file(svc.pid_path)
        with cluster_state.locked(self.data_dir):
            cluster_state.remove_state(self.data_dir)
        quiet = ("mirror/", lag.key)  # never started: silent
        return [r for r in results if r.pid is not None or not r.name.startswith(quiet)]

    @staticmethod
    def _stop_all(targets: list[tuple[BrokerSpec, int | None]], timeout_s: float) -> list[StopResult]:
        return services.stop_all([(spec.name, pid) for spec, pid in targets], timeout_s)

    # ------------------------------------------------------------------ status

    def status(self) -> list[BrokerStatus]:
        """One ``BrokerStatus`` per recorded broker of every region (empty when nothing was
        started)."""
        state = cluster_state.read_state(self.data_dir)
        if state is None:
            return []
        if compose_runtime.docker_section(state) is not None:  # containers (`mq docker attach`)
            return compose_runtime.broker_statuses(state)
        deployment = cluster_state.deployment_of(state)
        return [self._broker_status(state, r, s) for r in deployment.regions for s in r.brokers]

    def service_status(self) -> tuple[list[ServiceStatus], list[ServiceStatus]]:
        """The recorded link and mirror processes and whether each runs."""
        state = cluster_state.read_state(self.data_dir)
        if state is None:
            return [], []
        links, mirrors = self.services(cluster_state.deployment_of(state))
        if compose_runtime.docker_section(state) is not None:
            return (compose_runtime.service_statuses(state, links), compose_runtime.service_statuses(state, mirrors))

        def one(svc: Service) -> ServiceStatus:
            pid = self._running_service(state, svc)
            _, started = self._recorded_pid(state, svc.key, svc.pid_path)
            return ServiceStatus(svc, pid, pid is not None, started if pid is not None else None)

        return [one(s) for s in links], [one(s) for s in mirrors]

    def _broker_status(self, state: dict, region: Topology, spec: BrokerSpec) -> BrokerStatus:
        pid, started_at_ms = self._recorded_pid(state, self.broker_key(region, spec), spec.pid_path)
        alive = pid is not None and process.runs(pid, spec.data_dir)
        paused = alive and process.is_paused(pid)
        answering, topics, partitions = False, None, None
        if alive and not paused:  # a stopped process never answers: don't wait for it
            try:
                meta = probe.metadata(spec.listen, timeout_s=1.0)
                answering = True
                user_topics = [t for t in meta.topics if not t.is_internal and not t.name.startswith("__")]
                topics, partitions = len(user_topics), sum(len(t.partitions) for t in user_topics)
            except probe.ProbeError:
                pass
        if topics is None:
            topics, partitions = _partitions_on_disk(spec.data_dir)
        return BrokerStatus(spec, pid if alive else None, alive, answering, topics, partitions,
                            _log_bytes(spec.data_dir), started_at_ms if alive else None, paused, region.name)


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _log_tails(entries: list[tuple[str, str, int]], *, lines: int = LOG_TAIL_LINES) -> str:
    """The tail of each log since ``start``; several processes share the lines."""
    if len(entries) == 1:
        _, path, start = entries[0]
        return log_tail(path, start=start, lines=lines)
    per = max(5, lines // len(entries))
    parts = []
    for name, path, start in entries:
        tail = log_tail(path, start=start, lines=per)
        parts.append(f"{name} ({_shown(path)}):\n" + "\n".join(f"  {t}" for t in tail.splitlines()))
    return "\n".join(parts)


def _partition_dirs(data_dir: str) -> list[tuple[str, int]]:
    out = []
    try:
        names = sorted(os.listdir(data_dir))
    except OSError:
        return out
    for name in names:
        topic, sep, number = name.rpartition("-")
        if sep and number.isdigit() and not topic.startswith("__") and \
                os.path.isdir(os.path.join(data_dir, name)):
            out.append((topic, int(number)))
    return out


def _partitions_on_disk(data_dir: str) -> tuple[int | None, int | None]:
    dirs = _partition_dirs(data_dir)
    if not os.path.isdir(data_dir):
        return None, None
    return len({topic for topic, _ in dirs}), len(dirs)


def _log_bytes(data_dir: str) -> int:
    """Bytes of partition data (segments and indexes) under a broker's directory."""
    total = 0
    for topic, number in _partition_dirs(data_dir):
        directory = os.path.join(data_dir, f"{topic}-{number}")
        for entry in os.scandir(directory):
            if entry.is_file():
                total += entry.stat().st_size
    return total
