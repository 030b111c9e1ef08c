"""Start, stop and inspect the broker processes of a ``Topology`` on this machine.

Each broker runs as a detached OS process (its own session, so closing the terminal
that ran ``mq up`` does not stop it), with stdout and stderr appended to
``<broker-dir>/broker.log`` and its pid in ``<broker-dir>/broker.pid``.
``<data-dir>/cluster.json`` records the topology and the pids, so that ``mq status``
and ``mq down``, run later from another shell, act on exactly what was started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from mq.deploy import probe, process
from mq.deploy.errors import DeployError
from mq.deploy.readiness import region_problems
from mq.deploy.topology import BrokerSpec, Topology
from mq.protocol.messages import MetadataResponse

STATE_FILE = "cluster.json"
STATE_FORMAT = 1
LOG_TAIL_LINES = 20
BROKER_MODULE = "mq.aio.runner"
# A broker's SIGTERM is a controlled shutdown (leadership handed over, logs flushed):
# give it this long before SIGKILL.
DOWN_TIMEOUT_S = 15.0


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

    def to_json(self) -> dict:
        return {
            "name": self.spec.name, "node_id": self.spec.node_id, "pid": self.pid,
            "alive": self.alive, "answering": self.answering, "endpoint": self.spec.listen,
            "metrics": self.spec.metrics_endpoint, "data_dir": self.spec.data_dir,
            "log": self.spec.log_path, "topics": self.topics, "partitions": self.partitions,
            "log_bytes": self.log_bytes, "started_at_ms": self.started_at_ms, "paused": self.paused,
        }


@dataclass(frozen=True)
class UpResult:
    topology: Topology
    already_running: bool
    brokers: tuple[BrokerStatus, ...]


@dataclass(frozen=True)
class StopResult:
    name: str
    pid: int | None
    outcome: str  # "stopped" | "killed" | "not running"
    waited_ms: int


@dataclass(frozen=True)
class BrokerAction:
    """What ``kill``/``pause``/``resume``/``restart`` did to one broker."""

    name: str
    node_id: int
    action: str  # "killed" | "paused" | "resumed" | "restarted"
    pid: int | None  # the pid acted on; for "restarted", the new process
    old_pid: int | None = None  # "restarted": the process stopped first, if one ran
    waited_ms: int = 0


def log_tail(path: str, *, start: int = 0, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the file written after byte ``start``."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return ""
    return b"\n".join(data.rstrip(b"\n").split(b"\n")[-lines:]).decode(errors="replace")


class Launcher:
    """Runs the brokers of a topology as local processes under its data directory."""

    def __init__(self, data_dir: str, *, python: str = sys.executable) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.python = python

    # ------------------------------------------------------------------ state file

    @property
    def state_path(self) -> str:
        return os.path.join(self.data_dir, STATE_FILE)

    def _read_state(self) -> dict | None:
        try:
            with open(self.state_path, encoding="utf-8") as f:
                state = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DeployError(f"cannot read {self.state_path}: {exc}",
                              "remove it after checking that no broker runs (`ps aux | grep mq`)") from None
        return state if state.get("format") == STATE_FORMAT else None

    def _write_state(self, topology: Topology, pids: dict[str, dict]) -> None:
        state = {"format": STATE_FORMAT, "bootstrap": topology.bootstrap,
                 "topology": topology.to_json(), "processes": pids}
        tmp = self.state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.state_path)

    def recorded_topology(self) -> Topology | None:
        state = self._read_state()
        return Topology.from_json(state["topology"]) if state else None

    def _recorded_pid(self, state: dict | None, spec: BrokerSpec) -> tuple[int | None, int | None]:
        entry = (state or {}).get("processes", {}).get(spec.name, {})
        pid = entry.get("pid")
        if pid is None:
            try:
                with open(spec.pid_path, encoding="ascii") as f:
                    pid = int(f.read().strip())
            except (OSError, ValueError):
                pid = None
        return pid, entry.get("started_at_ms")

    def _running_pid(self, state: dict | None, spec: BrokerSpec) -> int | None:
        pid, _ = self._recorded_pid(state, spec)
        return pid if pid is not None and process.runs(pid, spec.data_dir) else None

    # ------------------------------------------------------------------ up

    def up(self, topology: Topology, *, ready_timeout_s: float = 30.0,
           port_hint: str = "pick free ports with `mq up --listen HOST:PORT`") -> UpResult:
        """Start every broker of ``topology`` that is not already running, all at once; wait
        until each answers and the region is ready (``mq.deploy.readiness``: an active
        controller, every broker registered and unfenced). Idempotent: a running topology
        is reported, not restarted. On failure the brokers this call started are stopped."""
        state = self._read_state()
        recorded = Topology.from_json(state["topology"]) if state else None
        if recorded is not None and all(self._running_pid(state, b) for b in recorded.brokers):
            return UpResult(recorded, True, tuple(self.status()))
        if recorded is not None and any(self._running_pid(state, b) for b in recorded.brokers):
            topology = recorded  # partly up: complete what was started, keep its addresses
        to_start = [spec for spec in topology.brokers if not self._running_pid(state, spec)]
        for spec in to_start:  # every port first: never leave half a region running
            self._check_free(spec, port_hint)
        os.makedirs(self.data_dir, exist_ok=True)
        processes: dict[str, dict] = dict((state or {}).get("processes", {}))
        started: list[tuple[BrokerSpec, subprocess.Popen, int]] = []
        try:
            for spec in to_start:
                proc, log_start = self._spawn(spec)
                processes[spec.name] = {"pid": proc.pid, "started_at_ms": time.time_ns() // 1_000_000,
                                        "command": proc.args, "log": spec.log_path}
                self._write_state(topology, processes)
                started.append((spec, proc, log_start))
            self._wait_ready(topology, started, list(topology.brokers), [b.node_id for b in topology.brokers],
                             ready_timeout_s)
        except BaseException:
            for spec, proc, _ in started:
                if proc.poll() is None:
                    self._stop_all([(spec, proc.pid)], 5.0)
                    proc.wait()
                self._forget(spec)
            raise
        return UpResult(topology, False, tuple(self.status()))

    def _check_free(self, spec: BrokerSpec, hint: str = "pick free ports") -> None:
        for what, address in (("native", spec.listen), ("metrics", spec.metrics_endpoint)):
            if probe.port_in_use(address):
                raise DeployError(
                    f"{address} ({what} port of {spec.name}) is already in use by another process",
                    f"stop it, or {hint}",
                )

    def _spawn(self, spec: BrokerSpec, *, reason: str = "mq up") -> tuple[subprocess.Popen, int]:
        os.makedirs(spec.data_dir, exist_ok=True)
        # The broker's own entry point (what `mq broker` execs): `mq up` already checked
        # the arguments, and one interpreter start is saved.
        command = [self.python, "-m", BROKER_MODULE, *spec.broker_args()]
        log = open(spec.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            log_start = log.tell()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log.write(f"--- {reason} {stamp}: {' '.join(command)}\n".encode())
            log.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, cwd=self.data_dir, env=env,
            )
        finally:
            log.close()
        with open(spec.pid_path, "w", encoding="ascii") as f:
            f.write(f"{proc.pid}\n")
        return proc, log_start

    def _wait_ready(self, topology: Topology, started: list[tuple[BrokerSpec, subprocess.Popen, int]],
                    asked: list[BrokerSpec], required: list[int], timeout_s: float) -> None:
        """Poll until every started broker answers ApiVersions and every broker in ``asked``
        reports an active controller and the ``required`` brokers registered and unfenced.
        A broker that exits, or the deadline, raises DeployError with the logs' tails."""
        deadline = time.monotonic() + timeout_s
        silent = [spec for spec, _, _ in started]
        problems: list[str] = []
        while True:
            for spec, proc, log_start in started:
                code = proc.poll()
                if code is not None:
                    raise DeployError(
                        f"{spec.name} exited with code {code} before it answered on {spec.listen}",
                        f"see {_shown(spec.log_path)}", log_tail=log_tail(spec.log_path, start=log_start))
            for spec in list(silent):
                try:
                    probe.api_versions(spec.listen, timeout_s=0.5)
                    silent.remove(spec)
                except probe.ProbeError:
                    pass
            if not silent:
                problems = region_problems(asked, required, self._ask_metadata(asked))
                if not problems:
                    return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        tails = _log_tails([(spec, start) for spec, _, start in started])
        if silent:
            names = ", ".join(f"{s.name} on {s.listen}" for s in silent)
            raise DeployError(f"{names} did not answer within {timeout_s:g} s",
                              "see the broker log, or retry with a longer --timeout", log_tail=tails)
        raise DeployError(
            f"region {topology.name} was not ready within {timeout_s:g} s: {'; '.join(problems[:4])}",
            "a region needs a majority of its voters running (`mq status` shows them); see the broker "
            "logs, or retry with a longer --timeout", log_tail=tails)

    @staticmethod
    def _ask_metadata(specs: list[BrokerSpec]) -> dict[int, MetadataResponse | str]:
        answers: dict[int, MetadataResponse | str] = {}
        for spec in specs:
            try:
                answers[spec.node_id] = probe.metadata(spec.listen, timeout_s=1.0)
            except probe.ProbeError as exc:
                answers[spec.node_id] = str(exc)
        return answers

    def _forget(self, spec: BrokerSpec) -> None:
        """Drop a broker that is not running from the pid file and cluster.json."""
        try:
            os.remove(spec.pid_path)
        except FileNotFoundError:
            pass
        state = self._read_state()
        if state is None:
            return
        processes = dict(state.get("processes", {}))
        processes.pop(spec.name, None)
        if processes:
            self._write_state(Topology.from_json(state["topology"]), processes)
        else:
            os.remove(self.state_path)

    # ------------------------------------------------------------------ down

    def down(self, *, timeout_s: float = DOWN_TIMEOUT_S) -> list[StopResult]:
        """SIGTERM every broker at once (each does a controlled shutdown: hands its
        leadership over, flushes, checkpoints), SIGKILL any still alive after
        ``timeout_s``. Data stays; only the process state is removed."""
        state = self._read_state()
        if state is None:
            return []
        topology = Topology.from_json(state["topology"])
        results = self._stop_all([(spec, self._running_pid(state, spec)) for spec in topology.brokers],
                                 timeout_s)
        for spec in topology.brokers:
            self._forget(spec)
        if os.path.exists(self.state_path):
            os.remove(self.state_path)
        return results

    @staticmethod
    def _stop_all(targets: list[tuple[BrokerSpec, int | None]], timeout_s: float) -> list[StopResult]:
        """SIGTERM every pid (SIGCONT too: a paused process only handles it once running),
        wait for all up to ``timeout_s``, SIGKILL the rest. One StopResult per target, in order."""
        started = time.monotonic()
        outcome: dict[str, tuple[str, int]] = {}
        waiting: list[tuple[BrokerSpec, int]] = []
        for spec, pid in targets:
            if pid is None or not process.send_signal(pid, signal.SIGTERM):
                outcome[spec.name] = ("not running", 0)
            else:
                process.send_signal(pid, signal.SIGCONT)
                waiting.append((spec, pid))
        deadline = started + timeout_s
        while waiting:
            for spec, pid in list(waiting):
                if not process.is_alive(pid):
                    outcome[spec.name] = ("stopped", int((time.monotonic() - started) * 1000))
                    waiting.remove((spec, pid))
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        for spec, pid in waiting:
            process.send_signal(pid, signal.SIGKILL)
        for spec, pid in waiting:
            process.wait_for_exit(pid, 5.0)
            outcome[spec.name] = ("killed", int((time.monotonic() - started) * 1000))
        return [StopResult(spec.name, pid, *outcome[spec.name]) for spec, pid in targets]

    @classmethod
    def _stop(cls, spec: BrokerSpec, pid: int | None, timeout_s: float) -> StopResult:
        return cls._stop_all([(spec, pid)], timeout_s)[0]

    # ------------------------------------------------------------------ status

    def status(self) -> list[BrokerStatus]:
        """One ``BrokerStatus`` per recorded broker (empty when nothing was started)."""
        state = self._read_state()
        if state is None:
            return []
        return [self._broker_status(state, spec)
                for spec in Topology.from_json(state["topology"]).brokers]

    def _broker_status(self, state: dict, spec: BrokerSpec) -> BrokerStatus:
        pid, started_at_ms = self._recorded_pid(state, spec)
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
                            _log_bytes(spec.data_dir), started_at_ms if alive else None, paused)

    # ------------------------------------------------------------------ one broker

    def _display_state_path(self) -> str:
        rel = os.path.relpath(self.state_path)
        return self.state_path if rel.startswith("..") else rel

    def _find(self, node_id: int) -> tuple[dict, Topology, BrokerSpec]:
        """The recorded state, topology and spec of broker ``node_id``, or a DeployError."""
        state = self._read_state()
        if state is None:
            raise DeployError(f"no cluster under {os.path.dirname(self._display_state_path()) or '.'}"
                              f" ({STATE_FILE} not found)", "start one with `mq up`")
        topology = Topology.from_json(state["topology"])
        for spec in topology.brokers:
            if spec.node_id == node_id:
                return state, topology, spec
        raise DeployError(f"no broker {node_id} in {self._display_state_path()}", "see `mq status`")

    def _find_running(self, node_id: int) -> tuple[BrokerSpec, int]:
        _, _, spec = self._find(node_id)
        pid = self._running_pid(self._read_state(), spec)
        if pid is None:
            raise DeployError(f"{spec.name} is not running",
                              f"start it again with `mq broker restart {node_id}`")
        return spec, pid

    def kill(self, node_id: int, *, timeout_s: float = 5.0) -> BrokerAction:
        """SIGKILL broker ``node_id`` (a crash: no flush, no checkpoint). Its pid file and
        cluster.json entry stay, now stale, so ``status`` shows it dead and ``restart`` knows
        how to start it again."""
        spec, pid = self._find_running(node_id)
        started = time.monotonic()
        process.send_signal(pid, signal.SIGKILL)  # also ends a paused process
        if not process.wait_for_exit(pid, timeout_s):
            raise DeployError(f"{spec.name} (pid {pid}) is still alive {timeout_s:g} s after SIGKILL",
                              f"check it with `ps -p {pid}`")
        return BrokerAction(spec.name, node_id, "killed", pid,
                            waited_ms=int((time.monotonic() - started) * 1000))

    def pause(self, node_id: int, *, timeout_s: float = 5.0) -> BrokerAction:
        """SIGSTOP broker ``node_id``: it keeps its sockets but answers nothing (a hung
        process or a long GC pause, as clients and peers see it) until ``resume``."""
        spec, pid = self._find_running(node_id)
        if process.is_paused(pid):
            raise DeployError(f"{spec.name} is already paused", f"resume it with `mq broker resume {node_id}`")
        process.send_signal(pid, signal.SIGSTOP)
        if not process.wait_for_state(pid, True, timeout_s):
            raise DeployError(f"{spec.name} (pid {pid}) did not stop after SIGSTOP", f"check it with `ps -p {pid}`")
        return BrokerAction(spec.name, node_id, "paused", pid)

    def resume(self, node_id: int, *, timeout_s: float = 5.0) -> BrokerAction:
        """SIGCONT a broker stopped by ``pause``."""
        spec, pid = self._find_running(node_id)
        if not process.is_paused(pid):
            raise DeployError(f"{spec.name} is not paused", f"pause it first with `mq broker pause {node_id}`")
        process.send_signal(pid, signal.SIGCONT)
        if not process.wait_for_state(pid, False, timeout_s):
            raise DeployError(f"{spec.name} (pid {pid}) did not continue after SIGCONT",
                              f"check it with `ps -p {pid}`")
        return BrokerAction(spec.name, node_id, "resumed", pid)

    def restart(self, node_id: int, *, stop_timeout_s: float = DOWN_TIMEOUT_S,
                ready_timeout_s: float = 30.0) -> BrokerAction:
        """Stop broker ``node_id`` gracefully if it runs (SIGTERM, SIGKILL after
        ``stop_timeout_s``), then start it with the arguments recorded in cluster.json and
        wait until it answers and sees an active controller with itself registered and
        unfenced. Also starts a killed broker."""
        state, topology, spec = self._find(node_id)
        started = time.monotonic()
        old_pid = self._running_pid(state, spec)
        if old_pid is not None:
            self._stop(spec, old_pid, stop_timeout_s)  # SIGCONTs a paused broker too
        self._check_free(spec)
        proc, log_start = self._spawn(spec, reason="mq broker restart")
        processes = dict((self._read_state() or state).get("processes", {}))
        processes[spec.name] = {"pid": proc.pid, "started_at_ms": time.time_ns() // 1_000_000,
                                "command": proc.args, "log": spec.log_path}
        self._write_state(topology, processes)
        try:
            self._wait_ready(topology, [(spec, proc, log_start)], [spec], [node_id], ready_timeout_s)
        except DeployError as exc:
            if proc.poll() is None and "was not ready" in exc.what:
                raise DeployError(  # it runs and keeps trying to join: leave it to the user
                    exc.what.replace(f"region {topology.name}", spec.name, 1),
                    f"it keeps running and trying; {exc.todo}", log_tail=exc.log_tail) from None
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            self._forget(spec)
            raise
        return BrokerAction(spec.name, node_id, "restarted", proc.pid, old_pid,
                            int((time.monotonic() - started) * 1000))


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _log_tails(entries: list[tuple[BrokerSpec, int]], *, lines: int = LOG_TAIL_LINES) -> str:
    """The tail of each broker's log since ``start``; several brokers share the lines."""
    if len(entries) == 1:
        spec, start = entries[0]
        return log_tail(spec.log_path, start=start, lines=lines)
    per = max(5, lines // len(entries))
    parts = []
    for spec, start in entries:
        tail = log_tail(spec.log_path, start=start, lines=per)
        parts.append(f"{spec.name} ({_shown(spec.log_path)}):\n" + "\n".join(f"  {t}" for t in tail.splitlines()))
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
