"""A seeded, single-threaded event scheduler on virtual time.

Events sit in a heap keyed by ``(time_ms, seq)``: the sequence number breaks ties in
the order events were scheduled, so a run depends only on its seed, never on hash
order or wall time. After every event the registered invariants run (Kafka's
``RaftEventSimulationTest.EventScheduler``, FoundationDB's simulator).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable


class InvariantViolation(AssertionError):
    """An invariant failed after an event; the message says which and when."""


class EventScheduler:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.now_ms = 0
        self.events_run = 0
        self.invariants: list[Callable[[], None]] = []

    def schedule(self, at_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(at_ms, self.now_ms), self._seq, action))

    def run_until(self, condition: Callable[[], bool] | None = None, *, until_ms: int) -> bool:
        """Run events up to ``until_ms``; stop early, returning True, once ``condition``
        holds after an event. The clock ends at ``until_ms`` if the condition never held."""
        if condition is not None and condition():
            return True
        heap = self._heap
        while heap and heap[0][0] <= until_ms:
            at_ms, _, action = heapq.heappop(heap)
            self.now_ms = at_ms
            action()
            self.events_run += 1
            for invariant in self.invariants:
                invariant()
            if condition is not None and condition():
                return True
        self.now_ms = max(self.now_ms, until_ms)
        return False

    def run_for(self, duration_ms: int) -> None:
        self.run_until(until_ms=self.now_ms + duration_ms)
