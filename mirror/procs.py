"""Mirror processes by their pid files: stop one (SIGTERM, then SIGKILL), start one detached.

``mq up``'s launcher starts a mirror per flow and writes its pid beside its log in
``<data_dir>/mirror-<flow>/``; the mirror also writes ``mirror.pid`` there itself. Fail-over
stops the flow into the promoted region this way; fail-back starts the reverse flow and
later the original flow again, detached from the command (their own session), with the
pid file where ``mq down`` finds it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from mirror.flow_config import FlowConfig

PID_FILES = ("mirror.pid",)
LOG_FILE = "mirror.log"


def read_pid(state_dir: str) -> int | None:
    for name in PID_FILES:
        try:
            with open(os.path.join(state_dir, name), encoding="ascii") as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            continue
    return None


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs. A zombie (exited, not yet reaped by its parent, e.g. a test
    harness that started it) counts as gone: it no longer does anything."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


def running_pid(state_dir: str) -> int | None:
    pid = read_pid(state_dir)
    return pid if pid is not None and is_alive(pid) else None


def stop_flow(state_dir: str, *, timeout_s: float = 15.0) -> tuple[int | None, str]:
    """Stop the mirror whose pid file is in ``state_dir``: (pid, what happened)."""
    pid = read_pid(state_dir)
    if pid is None or not is_alive(pid):
        return pid, "not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return pid, "stopped (SIGTERM)"
        time.sleep(0.05)  # polling the process's exit, with a deadline
    os.kill(pid, signal.SIGKILL)
    return pid, f"killed (SIGKILL after {timeout_s:.0f} s)"


def start_flow(flow: FlowConfig, args: list[str]) -> int:
    """Start ``python -m mirror run ARGS`` detached; its log goes to ``mirror.log`` in the
    flow's state dir. Returns the pid (also written to its pid file, before the process
    writes it itself, so a stop right after the start finds it)."""
    os.makedirs(flow.state_dir, exist_ok=True)
    with open(os.path.join(flow.state_dir, LOG_FILE), "ab") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "mirror", "run", *args], stdin=subprocess.DEVNULL,
                                stdout=log_file, stderr=log_file, start_new_session=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    with open(flow.pid_path, "w", encoding="ascii") as f:
        f.write(f"{proc.pid}\n")
    return proc.pid
