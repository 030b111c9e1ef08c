"""Broker processes owned by the chaos harness: start, crash, pause, power loss.

Each broker is a child of the test process (``python -m mq.aio.runner``), so the
harness can signal it and reap it: a SIGKILLed child that nobody waits for lingers
as a zombie, keeps its port half-owned and confuses "is it alive?" checks
(TOOLCHAIN.md). Every exit path here calls ``wait``.

Two environment variables are set on the child:

- ``MQ_FILEIO_JOURNAL``: the broker's ``OsFileIO`` appends the durable length of a
  file after every fsync (and creations, truncations, renames, removals) to this
  journal. ``power_loss()`` SIGKILLs the broker and then cuts every journaled file
  back to that length with ``mq.storage.fileio.power_loss`` — what a kernel crash or
  a power cut does to the page cache. A plain SIGKILL loses nothing that was
  written, which is why both faults exist.
- ``MQ_FAILPOINTS``: ``name=action;name=action`` (e.g.
  ``raft.before_persist=panic;storage.before_fsync=oserror(ENOSPC)``), passed through
  unchanged. The harness only plumbs the string; what a name means is decided by
  the broker-side failpoint registry, which reads this variable.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from mq.core.rng import Rng
from mq.storage.fileio import power_loss as truncate_to_durable

from ...integration.conftest import REPO, broker_command, wait_until_ready

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
LISTEN_PORTS = (20_000, 32_000)
"""Where brokers of the harness listen: below Linux's ephemeral range (32768-60999
by default). A broker keeps its port across restarts; a port from the ephemeral range
(what binding port 0 gives) can be taken meanwhile by any outgoing connection on the
machine, and the restarted broker then fails with "address already in use"."""


def listen_port(*, attempts: int = 200) -> int:
    """A free port outside the ephemeral range (see ``LISTEN_PORTS``)."""
    low, high = LISTEN_PORTS
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            high = min(high, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(attempts):
        port = random.randrange(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{low}, {high}) after {attempts} attempts")


def format_failpoints(points: Mapping[str, str]) -> str:
    """``{"a": "panic", "b": "sleep(10)"}`` -> ``"a=panic;b=sleep(10)"`` (sorted by name,
    so the same mapping always gives the same string)."""
    for name, action in points.items():
        if not name or any(c in name for c in "=;") or ";" in action:
            raise ValueError(f"bad failpoint {name!r}={action!r}")
    return ";".join(f"{name}={points[name]}" for name in sorted(points))


def parse_failpoints(text: str) -> dict[str, str]:
    """The inverse of ``format_failpoints`` (empty entries ignored)."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, sep, action = item.partition("=")
        if not sep or not name:
            raise ValueError(f"bad failpoint entry {item!r} in {text!r}")
        out[name.strip()] = action.strip()
    return out


@dataclass
class BrokerNode:
    """One broker process on loopback with its own data dir, journal and stderr file.

    The port and data dir stay the same across restarts, so a client's bootstrap
    string keeps working. ``events`` records what was done to it, in order."""

    name: str
    root: Path
    port: int
    node_id: int = 1
    configs: dict[str, str] = field(default_factory=dict)
    failpoints: str = ""
    host: str = "127.0.0.1"
    proc: subprocess.Popen | None = None
    metrics_port: int = 0
    starts: int = 0
    paused: bool = False
    events: list[str] = field(default_factory=list)
    _ready_offset: int = 0

    @property
    def data_dir(self) -> Path:
        return self.root / self.name

    @property
    def journal_path(self) -> Path:
        return self.root / f"{self.name}.fileio-journal"

    @property
    def stderr_path(self) -> Path:
        return self.root / f"{self.name}.stderr"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        """Alive (possibly paused). Polling reaps an exited child."""
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def command(self) -> list[str]:
        return broker_command(self.node_id, self.data_dir, self.host, self.port, self.configs)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1", MQ_FILEIO_JOURNAL=str(self.journal_path))
        env.pop("MQ_FAILPOINTS", None)  # only this node's failpoints, never the test's own
        if self.failpoints:
            env["MQ_FAILPOINTS"] = self.failpoints
        return env

    # ----------------------------------------------------------------- lifecycle

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> BrokerNode:
        """Start and wait until the ready line is logged and the port accepts."""
        return self.spawn().wait_ready(timeout_s=timeout_s)

    def spawn(self) -> BrokerNode:
        """Start the process without waiting for it to be ready: brokers of a region
        only become ready once a quorum of them runs, so a region spawns them all and
        then waits (``wait_ready``)."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.root.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self._ready_offset = self.stderr_path.stat().st_size if self.stderr_path.exists() else 0
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self.command(), cwd=REPO, stdout=subprocess.DEVNULL,
                                         stderr=err, env=self.environment())
        self.paused = False
        self.events.append("start")
        return self

    def wait_ready(self, *, timeout_s: float = START_TIMEOUT_S) -> BrokerNode:
        """Wait until this incarnation logs its ready line and the port accepts; a
        broker that is not ready in time is killed (TimeoutError)."""
        assert self.proc is not None, "spawn() first"
        try:
            self.metrics_port = wait_until_ready(
                self.proc, self.stderr_text, self._ready_offset, self.host, self.port, timeout_s,
                self.name)
        except TimeoutError:
            self.kill()
            raise
        return self

    def _signal(self, sig: signal.Signals) -> bool:
        if not self.running:
            return False
        assert self.proc is not None
        self.proc.send_signal(sig)
        return True

    def kill(self) -> None:
        """SIGKILL (a crash) and reap. Works on a paused process too."""
        if self._signal(signal.SIGKILL):
            self.events.append("kill")
        self._reap(timeout_s=10.0)

    def terminate(self, *, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (controlled shutdown: flush + checkpoints), SIGKILL if it hangs.
        A paused process is resumed first, or it would never see the SIGTERM."""
        if self.paused:
            self.resume()
        if self._signal(signal.SIGTERM):
            self.events.append("terminate")
            try:
                assert self.proc is not None
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reap(timeout_s=10.0)
        return self.proc.returncode if self.proc is not None else None

    def state(self) -> str | None:
        """The kernel's one-letter state (``R``, ``S``, ``T`` stopped, ``Z`` zombie) from
        /proc, or None when the process is gone (or not on Linux)."""
        if self.proc is None:
            return None
        try:
            with open(f"/proc/{self.proc.pid}/stat", encoding="ascii", errors="replace") as f:
                return f.read().rsplit(")", 1)[-1].split()[0]
        except OSError:
            return None

    def pause(self, *, timeout_s: float = 5.0) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a GC pause or a
        VM stall, Jepsen's ``pause``). Returns once the kernel reports it stopped, so the
        pause really lasts as long as the caller holds it."""
        if not self._signal(signal.SIGSTOP):
            return
        self.paused = True
        self.events.append("pause")
        deadline = time.monotonic() + timeout_s
        while os.path.isdir("/proc") and self.state() not in ("T", "t", None):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not stopped {timeout_s}s after SIGSTOP")
            time.sleep(0.001)

    def resume(self) -> None:
        if self._signal(signal.SIGCONT):
            self.events.append("resume")
        self.paused = False

    def power_loss(self, *, rng: Rng | None = None) -> dict[str, int]:
        """SIGKILL, then cut every file to its last fsynced length (with ``rng``, keep a
        random part of the unsynced tail: a torn write). Returns ``{path: length}``."""
        self.kill()
        self.events.append("power_loss")
        if not self.journal_path.exists():
            return {}
        return truncate_to_durable(str(self.journal_path), rng=rng)

    def restart(self, *, timeout_s: float = START_TIMEOUT_S) -> BrokerNode:
        """Controlled restart: SIGTERM, wait, start."""
        self.terminate()
        return self.start(timeout_s=timeout_s)

    def _reap(self, *, timeout_s: float) -> None:
        if self.proc is not None:
            self.proc.wait(timeout=timeout_s)
        self.paused = False


def power_loss(node: BrokerNode, *, rng: Rng | None = None) -> dict[str, int]:
    """TESTING.md's ``power_loss(node)``: SIGKILL, then truncate every file to its
    durable length from the node's journal (see ``BrokerNode.power_loss``)."""
    return node.power_loss(rng=rng)


@dataclass
class Processes:
    """The brokers of one chaos run; ``close()`` (or the context manager) stops and
    reaps every one of them, whatever state a failing test left them in."""

    root: Path
    nodes: list[BrokerNode] = field(default_factory=list)

    def add(self, configs: Mapping[str, str] | None = None, *, node_id: int | None = None,
            failpoints: Mapping[str, str] | str = "", start: bool = True) -> BrokerNode:
        number = len(self.nodes) + 1
        text = failpoints if isinstance(failpoints, str) else format_failpoints(failpoints)
        node = BrokerNode(f"n{number}", self.root, listen_port(), node_id=node_id or number,
                          configs=dict(configs or {}), failpoints=text)
        self.nodes.append(node)
        return node.start() if start else node

    def __iter__(self) -> Iterator[BrokerNode]:
        return iter(self.nodes)

    def __getitem__(self, name: str) -> BrokerNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def close(self) -> None:
        for node in self.nodes:
            if node.running:
                node.terminate(timeout_s=5.0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
