"""Detached processes: how the launcher starts and stops brokers, links and mirrors.

Every process ``mq up`` starts runs in its own session (closing the terminal does not
stop it), with stdout and stderr appended to its log and its pid in a pid file beside
it. ``spawn`` starts one; ``stop_all`` stops several at once (SIGTERM, then SIGKILL).

Besides the brokers, ``mq up`` starts a ``Service`` per link pair
(``python -m mq.deploy.link``), per mirror flow (``python -m mirror run``, a separate
package that mq never imports: it starts only when ``mirror_available()``) and one lag
exporter (``python -m mq.deploy.lag_exporter``, unless ``mq up --no-lag-export``).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mq.deploy import process
from mq.deploy.topology import FlowSpec, LinkPair

LINK_MODULE = "mq.deploy.link"
MIRROR_MODULE = "mirror"
LAG_EXPORTER_MODULE = "mq.deploy.lag_exporter"
LAG_EXPORTER_KEY = "lag-exporter"


@dataclass(frozen=True)
class StopResult:
    name: str
    pid: int | None
    outcome: str  # "stopped" | "killed" | "not running"
    waited_ms: int


@dataclass(frozen=True)
class Service:
    """A process other than a broker: its key in cluster.json (``link/east-west``,
    ``mirror/east-to-west``), command, files, and the argv elements that identify it."""

    key: str
    command: tuple[str, ...]
    data_dir: str
    log_path: str
    pid_path: str
    markers: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.key


def link_service(python: str, cluster_path: str, pair: LinkPair) -> Service:
    command = (python, "-m", LINK_MODULE, "--cluster", cluster_path, "--pair", pair.name)
    return Service(f"link/{pair.name}", command, pair.data_dir, pair.log_path, pair.pid_path,
                   (cluster_path, pair.name))


def mirror_service(python: str, cluster_path: str, flow: FlowSpec) -> Service:
    """The mirror process of a flow, as the geo contract fixes its command line."""
    command = (python, "-m", MIRROR_MODULE, "run", "--cluster", cluster_path, "--flow", flow.name)
    return Service(f"mirror/{flow.name}", command, flow.data_dir, flow.log_path, flow.pid_path,
                   (cluster_path, flow.name))


@dataclass(frozen=True)
class LagExporterSettings:
    """How ``mq up`` runs the lag exporter (``mq up --lag-interval``, ``--lag-metrics-listen``)."""

    interval_ms: int = 5000
    metrics_listen: str = "127.0.0.1:0"


def lag_exporter_service(python: str, cluster_path: str, settings: LagExporterSettings | None = None) -> Service:
    """The lag exporter of a whole deployment: every region, every flow (``mq.deploy.lag_exporter``),
    under ``<data_dir>/lag-exporter/`` with its log, pid file and status.json."""
    settings = settings or LagExporterSettings()
    data_dir = os.path.join(os.path.dirname(cluster_path), LAG_EXPORTER_KEY)
    command = (python, "-m", LAG_EXPORTER_MODULE, "--cluster", cluster_path,
               "--interval", f"{settings.interval_ms}ms", "--metrics-listen", settings.metrics_listen,
               "--status-file", os.path.join(data_dir, "status.json"))
    return Service(LAG_EXPORTER_KEY, command, data_dir, os.path.join(data_dir, "lag-exporter.log"),
                   os.path.join(data_dir, "lag-exporter.pid"), (cluster_path, LAG_EXPORTER_MODULE))


def mirror_available() -> bool:
    """True when ``python -m mirror`` can run here. Looks for ``mirror/__main__.py`` on the
    path without importing the package (mq never imports mirror)."""
    try:
        spec = importlib.util.find_spec(MIRROR_MODULE)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(os.path.isfile(os.path.join(d, "__main__.py")) for d in spec.submodule_search_locations)


def spawn(command: Sequence[str], *, log_path: str, pid_path: str, cwd: str,
          reason: str = "mq up") -> tuple[subprocess.Popen, int]:
    """Start ``command`` detached; returns the process and the log's size before it (where
    its own lines start)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    os.makedirs(cwd, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        log_start = log.tell()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        log.write(f"--- {reason} {stamp}: {' '.join(command)}\n".encode())
        log.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, cwd=cwd, env=env,
        )
    finally:
        log.close()
    with open(pid_path, "w", encoding="ascii") as f:
        f.write(f"{proc.pid}\n")
    return proc, log_start


def read_pid(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def remove_file(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def stop_all(targets: Sequence[tuple[str, int | None]], timeout_s: float) -> list[StopResult]:
    """SIGTERM every pid at once (SIGCONT too: a paused process handles it only once
    running), wait for all up to ``timeout_s``, SIGKILL the rest. One StopResult per
    target, in order."""
    started = time.monotonic()
    outcome: dict[int, tuple[str, int]] = {}
    waiting: list[tuple[int, int]] = []
    for index, (_, pid) in enumerate(targets):
        if pid is None or not process.send_signal(pid, signal.SIGTERM):
            outcome[index] = ("not running", 0)
        else:
            process.send_signal(pid, signal.SIGCONT)
            waiting.append((index, pid))
    deadline = started + timeout_s
    while waiting:
        for index, pid in list(waiting):
            if not process.is_alive(pid):
                outcome[index] = ("stopped", int((time.monotonic() - started) * 1000))
                waiting.remove((index, pid))
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for _, pid in waiting:
        process.send_signal(pid, signal.SIGKILL)
    for index, pid in waiting:
        process.wait_for_exit(pid, 5.0)
        outcome[index] = ("killed", int((time.monotonic() - started) * 1000))
    return [StopResult(name, pid, *outcome[i]) for i, (name, pid) in enumerate(targets)]
