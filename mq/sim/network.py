"""A simulated network between nodes: per-link filters and partitions.

A message is any object with ``source_id`` and ``destination_id``. On ``send`` the
network starts from one copy delivered after ``base_delay_ms`` and lets each filter
that matches the link rewrite the list of delivery delays: ``Drop`` empties it,
``Delay`` adds latency, ``Duplicate`` adds a copy, ``Reorder`` holds some messages back
long enough to overtake them. A cut link drops messages at send time and at delivery
time, so a partition also loses what was in flight (as TCP connections reset).
Randomness comes from the network's own ``Rng`` stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from mq.core.rng import Rng
from mq.sim.scheduler import EventScheduler


class NetworkFilter(Protocol):
    def apply(self, delays_ms: list[int], rng: Rng) -> list[int]:
        """Return the delays after this filter (one per copy delivered)."""


@dataclass(frozen=True, slots=True)
class Drop:
    rate: float

    def apply(self, delays_ms: list[int], rng: Rng) -> list[int]:
        return [d for d in delays_ms if rng.random() >= self.rate]


@dataclass(frozen=True, slots=True)
class Delay:
    min_ms: int
    max_ms: int

    def apply(self, delays_ms: list[int], rng: Rng) -> list[int]:
        return [d + rng.randint(self.min_ms, self.max_ms) for d in delays_ms]


@dataclass(frozen=True, slots=True)
class Duplicate:
    rate: float
    max_extra_ms: int = 50

    def apply(self, delays_ms: list[int], rng: Rng) -> list[int]:
        out = list(delays_ms)
        for d in delays_ms:
            if rng.random() < self.rate:
                out.append(d + rng.randint(0, self.max_extra_ms))
        return out


@dataclass(frozen=True, slots=True)
class Reorder:
    rate: float
    max_extra_ms: int

    def apply(self, delays_ms: list[int], rng: Rng) -> list[int]:
        return [d + rng.randint(1, self.max_extra_ms) if rng.random() < self.rate else d
                for d in delays_ms]


@dataclass(slots=True)
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    dropped: int = 0


class SimNetwork:
    def __init__(self, scheduler: EventScheduler, rng: Rng, deliver: Callable[[Any], None],
                 *, base_delay_ms: int = 1) -> None:
        self._scheduler = scheduler
        self._rng = rng
        self._deliver = deliver
        self.base_delay_ms = base_delay_ms
        self._filters: list[tuple[int | None, int | None, NetworkFilter]] = []
        self._cut: set[tuple[int, int]] = set()
        self.stats = NetworkStats()

    # -- topology --------------------------------------------------------------------

    def add_filter(self, network_filter: NetworkFilter, *, source: int | None = None,
                   destination: int | None = None) -> None:
        """Apply ``network_filter`` to one link, all links from/to a node, or all links."""
        self._filters.append((source, destination, network_filter))

    def clear_filters(self) -> None:
        self._filters.clear()

    def connected(self, source: int, destination: int) -> bool:
        return (source, destination) not in self._cut

    def cut(self, source: int, destination: int) -> None:
        """Drop everything from ``source`` to ``destination`` (one direction)."""
        self._cut.add((source, destination))

    def disconnect(self, a: int, b: int) -> None:
        self._cut.update(((a, b), (b, a)))

    def connect(self, a: int, b: int) -> None:
        self._cut.discard((a, b))
        self._cut.discard((b, a))

    def isolate(self, node: int, nodes: Iterable[int]) -> None:
        for other in nodes:
            if other != node:
                self.disconnect(node, other)

    def partition(self, *groups: Iterable[int]) -> None:
        """Cut every link between different groups; links inside a group stay as they are."""
        sets = [sorted(g) for g in groups]
        for i, group in enumerate(sets):
            for other in sets[i + 1:]:
                for a in group:
                    for b in other:
                        self.disconnect(a, b)

    def heal(self) -> None:
        self._cut.clear()

    # -- traffic ---------------------------------------------------------------------

    def send(self, message: Any) -> None:
        source, destination = message.source_id, message.destination_id
        self.stats.sent += 1
        if (source, destination) in self._cut:
            self.stats.dropped += 1
            return
        delays = [self.base_delay_ms]
        for src, dst, network_filter in self._filters:
            if (src is None or src == source) and (dst is None or dst == destination):
                delays = network_filter.apply(delays, self._rng)
        if not delays:
            self.stats.dropped += 1
        now = self._scheduler.now_ms
        for delay in delays:
            self._scheduler.schedule(now + delay, lambda m=message: self._arrive(m))

    def _arrive(self, message: Any) -> None:
        if (message.source_id, message.destination_id) in self._cut:
            self.stats.dropped += 1
            return
        self.stats.delivered += 1
        self._deliver(message)
