"""Helpers for the CLI tests: run the real ``mq`` command, pick free ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
MQ_SCRIPT = VENV_BIN / "mq"


def mq_command() -> list[str]:
    """The installed console script when there is one, else the module."""
    return [str(MQ_SCRIPT)] if MQ_SCRIPT.exists() else [sys.executable, "-m", "mq.cli.main"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_listen() -> str:
    """A loopback address whose port and port + 10000 (metrics) are both free."""
    for _ in range(50):
        port = free_port()
        if port + 10000 < 65536:
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return f"127.0.0.1:{port}"
    raise RuntimeError("no free port pair found")


def free_listens(count: int) -> list[str]:
    """``count`` addresses as ``free_listen`` gives, none of whose ports (each port and its
    metrics port + 10000) is another's."""
    listens: list[str] = []
    taken: set[int] = set()
    while len(listens) < count:
        port = int(free_listen().rsplit(":", 1)[1])
        if {port, port + 10000} & taken:
            continue
        taken |= {port, port + 10000}
        listens.append(f"127.0.0.1:{port}")
    return listens


def run_mq(*args: str, env: dict | None = None, input: bytes | None = None, timeout: float = 60,
           cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([*mq_command(), *args], check=False, input=input, capture_output=True, env=env,
                            timeout=timeout, cwd=cwd)
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
    return result


def base_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.pop("MQ_BOOTSTRAP", None)
    env.pop("MQ_DEBUG", None)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@dataclass
class LocalCluster:
    data_dir: Path
    listen: str
    env: dict

    def mq(self, *args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        return run_mq(*args, env=self.env, input=input, timeout=timeout)

    def shell(self, script: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a bash pipeline with `mq` on PATH (as a user would type it)."""
        result = subprocess.run(["bash", "-o", "pipefail", "-c", script], check=False, capture_output=True,
                                env=self.env, timeout=timeout, cwd=self.data_dir.parent)
        assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
        return result
