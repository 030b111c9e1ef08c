"""Time as a value. Cores take ``now_ms`` arguments; shells read a ``Clock``."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch: for timestamps and retention."""

    def monotonic_ms(self) -> int:
        """Milliseconds from an arbitrary origin that never goes back: for timeouts."""


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to (tests, simulation)."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic_ms: int = 0) -> None:
        self._wall_ms = wall_ms
        self._monotonic_ms = monotonic_ms

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    def advance(self, ms: int) -> None:
        self._wall_ms += ms
        self._monotonic_ms += ms
