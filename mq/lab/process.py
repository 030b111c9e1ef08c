"""Child processes for labs and benchmarks: free ports, readiness, clean stops.

Brokers, nats-server and redis-server are all started the same way: pick free
loopback ports, spawn the process with its output going to a log file (a pipe
nobody reads would fill up and stall the child), poll until its port accepts a
connection, and stop it by its own pid (SIGTERM, then SIGKILL after a deadline).
The process stays our child so it is reaped at once, never left as a zombie.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel picks it; a race is possible
    but rare, and ``ChildProcess.start`` reports it clearly if it happens)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int, *, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_until(
    condition: Callable[[], T], *, timeout_s: float, interval_s: float = 0.05, what: str = "condition"
) -> T:
    """Poll ``condition`` until it returns something truthy; return that value.

    Raises ``TimeoutError`` naming ``what`` after ``timeout_s``. This is how labs and
    tests wait for the broker to do something (roll, retention): poll with a deadline,
    never sleep for a guessed time.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def _load_prctl() -> Callable[..., int] | None:
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()  # looked up here, never in the forked child


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM it when its parent dies, so a
    notebook kernel or test that crashes does not leave brokers running (the broker
    treats SIGTERM as a graceful stop). One C call and no Python-level locks, which is
    what makes a ``preexec_fn`` safe in a process that has threads."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


class ChildProcess:
    """One server process we started, with its log file and listening port."""

    def __init__(self, name: str, argv: Sequence[str], *, host: str, port: int, log_path: Path,
                 env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.host = host
        self.port = port
        self.log_path = Path(log_path)
        self.env = env
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.log_offset = 0  # where the log stood at the last spawn

    def start(self, *, ready_timeout_s: float = 30.0,
              ready: Callable[[], bool] | None = None) -> ChildProcess:
        """Spawn and wait until ``ready()`` (default: the port accepts connections); on
        early exit or timeout raise ``RuntimeError`` carrying the tail of the log."""
        self.spawn()
        return self.wait_ready(ready_timeout_s=ready_timeout_s, ready=ready)

    def spawn(self) -> ChildProcess:
        """Start the process without waiting (several brokers of a region must all run
        before any of them can be ready: they need a quorum)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.log_offset = log.tell()
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, cwd=self.cwd,
                preexec_fn=_die_with_parent if _PRCTL else None,  # noqa: PLW1509 - see there
            )
        return self

    def wait_ready(self, *, ready_timeout_s: float = 30.0,
                   ready: Callable[[], bool] | None = None) -> ChildProcess:
        """Poll ``ready()`` until it holds; ``RuntimeError`` with the log's tail if the
        process exits first or the deadline passes (the process is killed then)."""
        assert self.process is not None, "spawn() first"
        is_ready = ready or (lambda: port_open(self.host, self.port))
        deadline = time.monotonic() + ready_timeout_s
        while not is_ready():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with code {self.process.returncode} before it was ready "
                    f"on {self.host}:{self.port}; log {self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                self.kill()
                raise RuntimeError(
                    f"{self.name} was not ready on {self.host}:{self.port} within "
                    f"{ready_timeout_s:g} s; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.02)
        return self

    def log_since_spawn(self) -> str:
        """What the process logged since the last ``spawn`` (its ready line, say)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, *, timeout_s: float = 10.0, signal_sent: bool = False,
             hurry_after_s: float | None = None) -> int | None:
        """SIGTERM (graceful: the broker flushes and checkpoints), SIGKILL if it is still
        running after ``timeout_s``. Returns the exit code. ``signal_sent``: SIGTERM went
        out already, only wait. ``hurry_after_s``: send a second SIGTERM then (a broker
        cuts its controlled shutdown short, still closing its logs cleanly)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            if not signal_sent:
                self.process.send_signal(signal.SIGTERM)
            if hurry_after_s is not None and hurry_after_s < timeout_s:
                try:
                    self.process.wait(timeout=hurry_after_s)
                except subprocess.TimeoutExpired:
                    self.process.send_signal(signal.SIGTERM)
                    timeout_s -= hurry_after_s
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> int | None:
        """SIGKILL: a crash. Nothing is flushed; unsynced page-cache data survives (the
        kernel still has it), which is what a process crash looks like."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        return self.process.returncode

    def send_signal(self, signum: int) -> None:
        """Send any signal (SIGSTOP/SIGCONT to pause and resume)."""
        if self.running:
            assert self.process is not None
            os.kill(self.process.pid, signum)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def rss_mb(pid: int | None) -> float | None:
    """Resident set size of a process in MiB (None when it is gone or psutil is missing)."""
    if pid is None:
        return None
    try:
        import psutil
    except ImportError:
        return None
    try:
        return round(psutil.Process(pid).memory_info().rss / (1024 * 1024), 1)
    except psutil.Error:
        return None
