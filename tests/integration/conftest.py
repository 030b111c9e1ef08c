"""Shared fixtures for integration tests: real broker processes on loopback.

``broker`` starts ``python -m mq.aio.runner`` on a free port in a temporary data dir,
waits until its ready line is logged and it accepts connections, and stops it
(SIGTERM, then SIGKILL) after the test. ``broker_factory(**configs)`` starts more, or
with settings (``broker_factory({"log.flush.policy": "always"})``). A ``BrokerProcess``
can be killed (SIGKILL), stopped (SIGTERM) and restarted on the same port and data
dir. Its stderr goes to ``<data_dir>/../broker-<n>.stderr`` (``stderr_text()``), so a
test can assert that no stack trace was logged.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
READY = re.compile(r"broker node_id=(\d+) listening=([^:\s]+):(\d+) metrics=([^:\s]+):(\d+)")
START_TIMEOUT_S = 20.0


def broker_command(
    node_id: int, data_dir: Path, host: str, port: int, configs: dict[str, str]
) -> list[str]:
    """The command line of one broker child process (configs in sorted order)."""
    cmd = [sys.executable, "-m", "mq.aio.runner", "--node-id", str(node_id),
           "--data-dir", str(data_dir), "--listen", f"{host}:{port}",
           "--metrics-listen", f"{host}:0"]
    for name in sorted(configs):
        cmd += ["--config", f"{name}={configs[name]}"]
    return cmd


def wait_until_ready(
    proc: subprocess.Popen, stderr_text: Callable[[], str], offset: int,
    host: str, port: int, timeout_s: float, name: str,
) -> int:
    """Poll (with a deadline) until the broker logs its ready line after ``offset`` of its
    stderr and its port accepts; returns the metrics port. RuntimeError if it exits,
    TimeoutError if the deadline passes (the caller decides what to do with the process)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{stderr_text()[offset:]}")
        match = READY.search(stderr_text()[offset:])
        if match and _accepts(host, port):
            return int(match.group(5))
        time.sleep(0.02)  # polling the ready condition, with a deadline
    raise TimeoutError(f"{name} not ready after {timeout_s}s:\n{stderr_text()[offset:]}")


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class BrokerProcess:
    data_dir: Path
    port: int
    node_id: int = 1
    configs: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    metrics_port: int = 0
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def stderr_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.stderr"

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def command(self) -> list[str]:
        return broker_command(self.node_id, self.data_dir, self.host, self.port, self.configs)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> BrokerProcess:
        """Start and wait until the ready line is logged and the port accepts."""
        self.starts += 1
        offset = self.stderr_path.stat().st_size if self.stderr_path.exists() else 0
        with open(self.stderr_path, "ab") as err:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.proc = subprocess.Popen(self.command(), cwd=REPO, stdout=subprocess.DEVNULL,
                                         stderr=err, env=env)
        try:
            self.metrics_port = wait_until_ready(
                self.proc, self.stderr_text, offset, self.host, self.port, timeout_s, "broker")
        except TimeoutError:
            self.kill()
            raise
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM (graceful shutdown); SIGKILL if it does not exit in time."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def make(configs: dict[str, str] | None = None, *, node_id: int = 1) -> BrokerProcess:
        data_dir = tmp_path / f"broker-{len(started) + 1}"
        proc = BrokerProcess(data_dir, free_port(), node_id=node_id, configs=dict(configs or {}))
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One default broker shared by a module's tests (each test uses its own topics)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("module-broker") / "data", free_port())
    proc.start()
    yield proc
    proc.stop()
