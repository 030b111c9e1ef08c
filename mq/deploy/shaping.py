"""What an emulated WAN link does to bytes, sans-IO: when each chunk is delivered.

This machine has no ``netem``, so a link between two regions is a TCP proxy
(``mq.deploy.link_proxy``) that reads chunks from one socket and writes them to the
other. This module decides *when*: a ``Shaper`` is one direction of a link (east->west),
shared by every connection crossing it, and ``schedule(stream, nbytes, now_ms)`` returns
the time at which a chunk read at ``now_ms`` may be written on. Time and randomness are
arguments (``now_ms``, a seeded ``Rng``), so every rule below is a unit test.

- **bandwidth**: the link's wire is shared: a chunk starts when the previous one (of any
  connection) has been serialized, and takes ``nbytes * 8 / bandwidth`` to serialize.
- **latency and jitter**: then it travels ``latency_ms`` plus a uniform draw in
  ``[-jitter_ms, +jitter_ms]`` (never below 0).
- **loss, as stalls**: TCP never loses bytes, it retransmits: a lost segment shows up as
  a stall of about one retransmission timeout. With probability ``loss`` a chunk is
  delayed by ``loss_stall_ms`` more (200 ms: Linux's minimum RTO).
- **stall**: ``stall(now_ms, duration_ms)`` holds every chunk of the direction until the
  stall ends (a congested or flapping path).
- **order**: a connection's bytes are never reordered, whatever the jitter: a chunk is
  never delivered before the previous chunk of the same ``Stream``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from mq.core.rng import Rng

DEFAULT_LOSS_STALL_MS = 200.0
SETTING_NAMES = ("latency_ms", "jitter_ms", "bandwidth_mbit", "loss", "loss_stall_ms")


@dataclass(frozen=True)
class LinkSettings:
    """How one direction of a link behaves. ``bandwidth_mbit`` None: unlimited."""

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    bandwidth_mbit: float | None = None
    loss: float = 0.0
    loss_stall_ms: float = DEFAULT_LOSS_STALL_MS

    def problems(self) -> list[str]:
        """What is wrong with these settings, one phrase each (empty: valid)."""
        out = []
        for name in ("latency_ms", "jitter_ms", "loss_stall_ms"):
            value = getattr(self, name)
            if not _finite(value) or value < 0:
                out.append(f"{name} must be a number >= 0, not {value!r}")
        if self.bandwidth_mbit is not None and (not _finite(self.bandwidth_mbit) or self.bandwidth_mbit <= 0):
            out.append(f"bandwidth_mbit must be a number > 0 (or unset: unlimited), not {self.bandwidth_mbit!r}")
        if not _finite(self.loss) or not 0 <= self.loss < 1:
            out.append(f"loss must be a fraction from 0 to below 1 (0.01 is 1%), not {self.loss!r}")
        return out

    def with_changes(self, **changes: Any) -> LinkSettings:
        """A copy with ``changes`` (names from SETTING_NAMES); ``bandwidth_mbit=0`` means unlimited."""
        unknown = sorted(set(changes) - set(SETTING_NAMES))
        if unknown:
            raise ValueError(f"unknown link setting {unknown[0]!r} (settings: {', '.join(SETTING_NAMES)})")
        if changes.get("bandwidth_mbit") == 0:
            changes["bandwidth_mbit"] = None
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SETTING_NAMES}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LinkSettings:
        bandwidth = data.get("bandwidth_mbit")
        return cls(latency_ms=float(data.get("latency_ms", 0.0)), jitter_ms=float(data.get("jitter_ms", 0.0)),
                   bandwidth_mbit=None if bandwidth in (None, 0) else float(bandwidth),
                   loss=float(data.get("loss", 0.0)),
                   loss_stall_ms=float(data.get("loss_stall_ms", DEFAULT_LOSS_STALL_MS)))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Stream:
    """One connection's bytes in one direction: remembers its last delivery time, so
    jitter never lets a later chunk overtake an earlier one."""

    __slots__ = ("last_delivery_ms",)

    def __init__(self) -> None:
        self.last_delivery_ms = -math.inf


class Shaper:
    """One direction of a link (see the module docstring). Not thread-safe: one event
    loop owns it."""

    def __init__(self, settings: LinkSettings, rng: Rng) -> None:
        problems = settings.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self._settings = settings
        self._rng = rng
        self.wire_free_at_ms = -math.inf  # when the wire has serialized everything queued
        self.stalled_until_ms = -math.inf
        self.chunks = 0
        self.bytes = 0
        self.loss_stalls = 0

    @property
    def settings(self) -> LinkSettings:
        return self._settings

    def update(self, settings: LinkSettings) -> None:
        """New settings apply to chunks scheduled from now on; scheduled ones keep their time."""
        problems = settings.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self._settings = settings

    def stall(self, now_ms: float, duration_ms: float) -> None:
        """Deliver nothing of this direction before ``now_ms + duration_ms``."""
        if duration_ms < 0:
            raise ValueError(f"a stall lasts 0 ms or more, not {duration_ms}")
        self.stalled_until_ms = max(self.stalled_until_ms, now_ms + duration_ms)

    def stall_left_ms(self, now_ms: float) -> float:
        return max(0.0, self.stalled_until_ms - now_ms)

    def is_transparent(self) -> bool:
        """True when every chunk goes through at once (nothing to shape)."""
        s = self._settings
        return s.latency_ms == 0 and s.jitter_ms == 0 and s.bandwidth_mbit is None and s.loss == 0

    def schedule(self, stream: Stream, nbytes: int, now_ms: float) -> float:
        """When a chunk of ``nbytes`` read at ``now_ms`` on ``stream`` may be delivered."""
        s = self._settings
        start = max(now_ms, self.wire_free_at_ms)
        serialized = start + (nbytes * 8 / (s.bandwidth_mbit * 1000) if s.bandwidth_mbit else 0.0)
        self.wire_free_at_ms = serialized
        delay = s.latency_ms
        if s.jitter_ms:
            delay = max(0.0, delay + self._rng.uniform(-s.jitter_ms, s.jitter_ms))
        if s.loss and self._rng.random() < s.loss:
            delay += s.loss_stall_ms
            self.loss_stalls += 1
        at = max(serialized + delay, self.stalled_until_ms, stream.last_delivery_ms)
        stream.last_delivery_ms = at
        self.chunks += 1
        self.bytes += nbytes
        return at
