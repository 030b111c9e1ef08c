"""Facts about OS processes by pid: alive, a zombie, and which command it runs.

``mq down`` and ``mq status`` run in a different process from the ``mq up`` that
started the broker, so all they have is a pid from a file. A pid can be reused and a
dead child can linger as a zombie when nobody reaps it (PID 1 in many containers
does not), so "``kill(pid, 0)`` succeeded" is not enough: on Linux we read
``/proc/<pid>/stat`` for the state and ``/proc/<pid>/cmdline`` to check the process
is still the broker we started.
"""

from __future__ import annotations

import os
import signal
import time

_PROC = "/proc"


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc (R, S, Z, ...), or None when there is no such pid."""
    try:
        with open(f"{_PROC}/{pid}/stat", encoding="ascii", errors="replace") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data.rsplit(")", 1)[-1].split()[0]


def is_paused(pid: int) -> bool:
    """True when ``pid`` is stopped by a signal (SIGSTOP: state ``T``; ``t`` under a tracer)."""
    return _proc_state(pid) in ("T", "t")


def wait_for_state(pid: int, paused: bool, timeout_s: float) -> bool:
    """Poll until ``pid`` is (or is no longer) stopped: a signal is delivered asynchronously."""
    deadline = time.monotonic() + timeout_s
    while is_paused(pid) != paused:
        if time.monotonic() >= deadline or not is_alive(pid):
            return False
        time.sleep(0.01)
    return True


def reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our own child (no zombie left behind)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def is_alive(pid: int) -> bool:
    reap(pid)
    if os.path.isdir(_PROC):
        state = _proc_state(pid)
        return state is not None and state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def command_line(pid: int) -> list[str] | None:
    """The argv of ``pid`` when the platform tells us (Linux), else None."""
    try:
        with open(f"{_PROC}/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def runs(pid: int, *markers: str) -> bool:
    """True when ``pid`` is alive and (where we can check) its argv contains every marker."""
    if not is_alive(pid):
        return False
    argv = command_line(pid)
    return argv is None or all(marker in argv for marker in markers)


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Poll until ``pid`` is gone or ``timeout_s`` passes; True when it exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return not is_alive(pid)


def send_signal(pid: int, signum: int = signal.SIGTERM) -> bool:
    """Signal ``pid``; False when it no longer exists."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True
