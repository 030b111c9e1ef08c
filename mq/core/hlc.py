"""Hybrid logical clocks (Kulkarni, Demirbas et al., "Logical Physical Clocks", 2014).

A stamp is ``(wall_ms, logical)``: ``wall_ms`` is the largest physical time (milliseconds
since the epoch) the node has heard of, from its own clock or from a message; ``logical``
counts events that happened while ``wall_ms`` stood still. Stamps compare as tuples, so
they order events like Lamport clocks (an event that happened before another has a smaller
stamp) while staying within the clock skew of physical time: ``wall_ms`` is never behind
the node's own clock and never ahead of the fastest clock in the system.

The rules, with ``pt`` the node's physical time and ``(l, c)`` its last stamp:

- **send** (or a local event, here: stamping a record): ``l' = max(l, pt)``;
  ``c' = c + 1`` if ``l' == l`` else ``0``.
- **receive** a stamp ``(l_m, c_m)``: ``l' = max(l, l_m, pt)``; ``c'`` is
  ``max(c, c_m) + 1`` when ``l' == l == l_m``, ``c + 1`` when only ``l' == l``,
  ``c_m + 1`` when only ``l' == l_m``, else ``0``.

Pure functions (``tick``, ``receive``): physical time is an argument. The header ``mq.hlc``
carries a stamp as ASCII ``"<wall_ms>.<logical>"`` (``b"1732528800000.3"``): readable in
``mq consume`` output and typed by hand in tests, at most 21 bytes. Bounds: ``wall_ms`` below
2**48 (year 10889), ``logical`` below 2**16. Decoding is strict (digits only, no sign, no
leading zeros, both bounds): anything else is ``INVALID_HLC``. Should ``logical`` overflow
(65,536 stamps in one millisecond), the stamp moves to the next millisecond instead: still
strictly increasing, ahead of physical time by at most 1 ms per 65,536 stamps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError

HLC_HEADER = "mq.hlc"
"""The record header that carries a record's stamp (set by the producer)."""
MAX_WALL_MS = (1 << 48) - 1
MAX_LOGICAL = (1 << 16) - 1
MAX_ENCODED_BYTES = len(f"{MAX_WALL_MS}.{MAX_LOGICAL}")
_ENCODED = re.compile(rb"(0|[1-9][0-9]{0,14})\.(0|[1-9][0-9]{0,4})")


@dataclass(frozen=True, order=True, slots=True)
class Hlc:
    """One hybrid-logical-clock stamp; ordered as ``(wall_ms, logical)``."""

    wall_ms: int
    logical: int = 0

    def __post_init__(self) -> None:
        if not (0 <= self.wall_ms <= MAX_WALL_MS and 0 <= self.logical <= MAX_LOGICAL):
            raise ValueError(f"HLC ({self.wall_ms}, {self.logical}) outside [0, 2**48) x [0, 2**16)")

    def encode(self) -> bytes:
        """The ``mq.hlc`` header value: ``b"<wall_ms>.<logical>"``."""
        return b"%d.%d" % (self.wall_ms, self.logical)

    def __str__(self) -> str:
        return f"{self.wall_ms}.{self.logical}"


ZERO = Hlc(0, 0)
_new = object.__new__
_set_wall = Hlc.wall_ms.__set__  # type: ignore[attr-defined]
_set_logical = Hlc.logical.__set__  # type: ignore[attr-defined]


def _stamp(wall_ms: int, logical: int) -> Hlc:
    """``Hlc(wall_ms, logical)`` for values already known in range: the slots set directly,
    a third of the cost of the frozen dataclass's checked ``__init__`` (one per record)."""
    stamp = _new(Hlc)
    _set_wall(stamp, wall_ms)
    _set_logical(stamp, logical)
    return stamp


def decode_hlc(raw: bytes | bytearray | memoryview | None) -> Hlc:
    """The stamp of an ``mq.hlc`` header value; ``MqError(INVALID_HLC)`` naming what is wrong."""
    if raw is None:
        raise MqError(ErrorCode.INVALID_HLC, f"the {HLC_HEADER} header has no value")
    data = bytes(raw)
    if len(data) > MAX_ENCODED_BYTES:
        raise MqError(ErrorCode.INVALID_HLC,
                      f"{HLC_HEADER} is {len(data)} bytes, longer than any stamp ({MAX_ENCODED_BYTES})")
    match = _ENCODED.fullmatch(data)
    if match is None:
        shown = data.decode("ascii", errors="backslashreplace")
        raise MqError(ErrorCode.INVALID_HLC,
                      f"{HLC_HEADER}={shown!r} is not <wall_ms>.<logical> (decimal, no leading zeros)")
    wall, logical = int(match.group(1)), int(match.group(2))
    if wall > MAX_WALL_MS or logical > MAX_LOGICAL:
        raise MqError(ErrorCode.INVALID_HLC,
                      f"{HLC_HEADER}={data.decode()!r} is out of range (wall_ms < 2**48, logical < 2**16)")
    return Hlc(wall, logical)


def is_valid_hlc(raw: bytes) -> bool:
    """``decode_hlc(raw)`` would succeed: the broker's per-record check, without building a
    stamp (a regex match, and the bounds only when the digits could exceed them)."""
    match = _ENCODED.fullmatch(raw)
    if match is None:
        return False
    wall, logical = match.group(1), match.group(2)
    return (len(wall) < 15 or int(wall) <= MAX_WALL_MS) and (len(logical) < 5 or int(logical) <= MAX_LOGICAL)


def _next(wall_ms: int, logical: int) -> Hlc:
    if logical > MAX_LOGICAL:  # 65,536 stamps in one millisecond: borrow the next one
        return Hlc(wall_ms + 1, 0)  # checked: the borrowed millisecond must stay in range
    return _stamp(wall_ms, logical)


def _physical(now_ms: int) -> int:
    if not 0 <= now_ms <= MAX_WALL_MS:
        raise ValueError(f"physical time {now_ms} ms is outside [0, 2**48)")
    return now_ms


def tick(last: Hlc, now_ms: int) -> Hlc:
    """The stamp of a local or send event at physical time ``now_ms`` after ``last``."""
    pt = _physical(now_ms)
    if pt > last.wall_ms:
        return _stamp(pt, 0)
    return _next(last.wall_ms, last.logical + 1)


def receive(last: Hlc, remote: Hlc, now_ms: int) -> Hlc:
    """The stamp of receiving ``remote`` at physical time ``now_ms`` after ``last``."""
    pt = _physical(now_ms)
    wall = max(last.wall_ms, remote.wall_ms, pt)
    if wall == last.wall_ms and wall == remote.wall_ms:
        logical = max(last.logical, remote.logical) + 1
    elif wall == last.wall_ms:
        logical = last.logical + 1
    elif wall == remote.wall_ms:
        logical = remote.logical + 1
    else:
        logical = 0
    return _next(wall, logical)


class HybridLogicalClock:
    """One node's clock: the last stamp it issued, moved by ``now`` and ``observe``.

    Sans-IO like the functions above: the caller passes its physical time, so a test can
    skew each node's clock on purpose."""

    __slots__ = ("last",)

    def __init__(self, last: Hlc = ZERO) -> None:
        self.last = last

    def now(self, now_ms: int) -> Hlc:
        """A new stamp for a local event (a record about to be produced)."""
        self.last = tick(self.last, now_ms)
        return self.last

    def observe(self, remote: Hlc, now_ms: int) -> Hlc:
        """Merge a stamp seen in a message (a record read), so later stamps are above it."""
        self.last = receive(self.last, remote, now_ms)
        return self.last
