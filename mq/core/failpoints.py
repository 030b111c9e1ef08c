"""Failpoints: named places in the code where a test can inject a fault.

A chaos or integration test starts a broker with ``MQ_FAILPOINTS`` set, e.g.
``storage.before_fsync=oserror(EIO);storage.before_append=1*panic``, to make a
scenario (KIP-101, KIP-279, Raft figure 8, ENOSPC) happen at an exact step instead
of hoping a random kill lands there. Grammar, one entry per ``;``::

    entry  := name ["@" scope] "=" [count "*"] action
    action := off | panic | error(ERROR_CODE_NAME) | oserror(ERRNO_NAME)

- ``off``: nothing happens (a named no-op; the harness uses it to test plumbing).
- ``panic``: the process dies at once. The registry calls its ``on_panic`` hook
  (the broker shell installs one that logs a line and calls
  ``os._exit(PANIC_EXIT_CODE)``); without a hook, or if it returns, ``FailpointPanic`` is
  raised — a ``BaseException``, so ``except Exception`` cleanup cannot swallow it.
- ``error(CODE)``: raise ``MqError(ErrorCode.CODE)``.
- ``oserror(ENOSPC)``: raise ``OSError`` with that errno (any ``errno`` name).
- ``N*action``: fire on the first N hits only, then behave as ``off``.
- ``name@scope``: fire only where the code passes that scope (storage passes the
  partition directory's name, e.g. ``orders-0``), so one partition's disk can fail
  while the metadata log keeps working.

Design: cores stay free of ``os.environ``. Code calls the module-level ``hit(name)``,
which consults the process-wide registry installed with ``install`` — only the shell
(``mq.aio.runner``) builds one from the environment; otherwise it is empty. With no
failpoints set, ``hit`` returns after one truth test of an empty dict, so production
paths pay nothing measurable. Tests install a registry with ``installed(...)``.
Not thread-safe (one event loop owns each broker's cores), and stdlib only.
"""

from __future__ import annotations

import errno as errno_names
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError

__all__ = ["PANIC_EXIT_CODE", "Failpoint", "FailpointPanic", "Failpoints", "hit", "install",
           "installed", "registry"]

PANIC_EXIT_CODE = 70  # EX_SOFTWARE: distinguishes a failpoint panic from a crash or a signal
ACTIONS = ("off", "panic", "error(CODE)", "oserror(ERRNO)")


class FailpointPanic(BaseException):
    """Raised by a ``panic`` failpoint when no hook ended the process first."""

    def __init__(self, name: str) -> None:
        super().__init__(f"failpoint {name} panicked")
        self.name = name


@dataclass(frozen=True, slots=True)
class Failpoint:
    """One parsed entry: ``kind`` is off | panic | error | oserror; ``count`` None
    means every hit fires."""

    kind: str
    error_code: ErrorCode | None = None
    errno: int | None = None
    count: int | None = None

    def describe(self) -> str:
        body = self.kind
        if self.error_code is not None:
            body = f"error({self.error_code.name})"
        elif self.errno is not None:
            body = f"oserror({errno_names.errorcode[self.errno]})"
        return body if self.count is None else f"{self.count}*{body}"


def _argument(action: str, prefix: str, entry: str) -> str:
    if not action.endswith(")") or len(action) <= len(prefix) + 1:
        raise ValueError(f"failpoint {entry!r}: expected {prefix}NAME)")
    return action[len(prefix):-1].strip()


def parse_action(text: str, *, entry: str = "") -> Failpoint:
    """``[N*]action`` -> ``Failpoint``; ``ValueError`` naming the bad part."""
    entry = entry or text
    count: int | None = None
    head, star, rest = text.partition("*")
    if star:
        head = head.strip()
        if not head.isdigit() or int(head) < 1:
            raise ValueError(f"failpoint {entry!r}: count {head!r} must be a positive integer")
        count, text = int(head), rest
    action = text.strip()
    if action in ("off", "panic"):
        return Failpoint(action, count=count)
    if action.startswith("error("):
        name = _argument(action, "error(", entry)
        if name not in ErrorCode.__members__:
            raise ValueError(f"failpoint {entry!r}: unknown error code {name!r}")
        return Failpoint("error", error_code=ErrorCode[name], count=count)
    if action.startswith("oserror("):
        name = _argument(action, "oserror(", entry)
        number = getattr(errno_names, name, None) if name.isupper() else None
        if not isinstance(number, int):
            raise ValueError(f"failpoint {entry!r}: unknown errno {name!r} (e.g. ENOSPC, EIO)")
        return Failpoint("oserror", errno=number, count=count)
    raise ValueError(f"failpoint {entry!r}: unknown action {action!r}; expected one of {', '.join(ACTIONS)}")


class Failpoints:
    """A registry of set failpoints; ``hit`` fires the action set for a name."""

    def __init__(self, points: dict[str, Failpoint] | None = None, *,
                 on_panic: Callable[[str], None] | None = None) -> None:
        self._points = dict(points or {})
        self._remaining = {name: p.count for name, p in self._points.items() if p.count is not None}
        self.fired: dict[str, int] = {}
        self.on_panic = on_panic

    @classmethod
    def parse(cls, text: str, *, on_panic: Callable[[str], None] | None = None) -> Failpoints:
        """``name=action;name=action`` (blank entries ignored; a name set twice is an
        error, since which one wins would be a surprise)."""
        points: dict[str, Failpoint] = {}
        for entry in filter(None, (part.strip() for part in text.split(";"))):
            name, sep, action = entry.partition("=")
            name = name.strip()
            if not sep or not name or any(c.isspace() for c in name):
                raise ValueError(f"failpoint entry {entry!r}: expected name=action")
            if name.endswith("@") or name.startswith("@"):
                raise ValueError(f"failpoint entry {entry!r}: empty name or scope around '@'")
            if name in points:
                raise ValueError(f"failpoint {name!r} is set twice")
            points[name] = parse_action(action, entry=entry)
        return cls(points, on_panic=on_panic)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._points))

    def get(self, name: str) -> Failpoint | None:
        return self._points.get(name)

    def __str__(self) -> str:
        return ";".join(f"{name}={self._points[name].describe()}" for name in self.names)

    def hit(self, name: str, scope: str | None = None) -> None:
        """Fire the action set for ``name@scope`` (first) or ``name``; no-op if unset."""
        if not self._points:
            return
        key = name
        point = self._points.get(f"{name}@{scope}") if scope is not None else None
        if point is None:
            point = self._points.get(name)
        else:
            key = f"{name}@{scope}"
        if point is None:
            return
        if point.count is not None:
            left = self._remaining[key]
            if left <= 0:
                return
            self._remaining[key] = left - 1
        self.fired[key] = self.fired.get(key, 0) + 1
        self._fire(key, point)

    def _fire(self, key: str, point: Failpoint) -> None:
        if point.kind == "panic":
            if self.on_panic is not None:
                self.on_panic(key)
            raise FailpointPanic(key)
        if point.error_code is not None:
            raise MqError(point.error_code, f"injected by failpoint {key}")
        if point.errno is not None:
            raise OSError(point.errno, f"{errno_names.errorcode[point.errno]} injected by failpoint {key}")


_registry = Failpoints()


def registry() -> Failpoints:
    """The process-wide registry (empty unless the shell installed one)."""
    return _registry


def install(points: Failpoints) -> Failpoints:
    """Make ``points`` the process-wide registry; returns the previous one."""
    global _registry
    previous, _registry = _registry, points
    return previous


@contextmanager
def installed(points: Failpoints | str) -> Iterator[Failpoints]:
    """For tests: install ``points`` (or parse a string) for the ``with`` block."""
    registry_ = Failpoints.parse(points) if isinstance(points, str) else points
    previous = install(registry_)
    try:
        yield registry_
    finally:
        install(previous)


def hit(name: str, scope: str | None = None) -> None:
    """Fire failpoint ``name`` in the process-wide registry (no-op when unset)."""
    _registry.hit(name, scope)
