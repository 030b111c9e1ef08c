"""Which source partitions to fetch now, in which requests: the flow's fetch plan (sans-IO).

A fetch through a WAN link brings at most what it asked for once per round trip, so the
copy rate of a flow is at most *bytes asked per round trip / round trip*: through a 50 ms
link (100 ms there and back) 1 MiB per partition per round is ~10 MiB/s per partition,
whatever the brokers could do. Enough bytes must be in flight to fill the link's
bandwidth-delay product, and only so many may wait in the mirror's memory. Three bounds:

* **per partition**: a fetch asks at most ``partition_max_bytes``
  (``max.partition.fetch.bytes``), and a partition is fetched only while what it holds
  (fetched, not yet appended) is below its own bound
  (``PartitionMirror.max_buffered_bytes``, ``PARTITION_BUFFER_FETCHES`` fetches' worth), so
  one slow target partition cannot take the whole flow's memory;
* **per flow**: what every partition holds plus what the fetches in flight may still bring
  (each request's ``max_bytes``) stays within ``buffer_max_bytes`` (``buffer.max.bytes``)
  however many partitions the flow has;
* **per source leader**: at most ``fetches_per_leader`` requests in flight
  (``fetches.per.leader``), each on its own connection (``slot``), so a partition that
  has room again does not wait a whole round trip for the request that left without it;
  the broker answers a connection's requests in order, and a long-poll of one request
  never holds up another's answer. A partition is in one fetch at a time (the next
  fetch starts where the previous answer ended).

A request asks at most its share of the flow's budget (``buffer_max_bytes`` over the
slots of every leader), so the long-polls of some leaders never hold the budget the
others need, and at most the room left in it; with no room left, fetching waits for
appends. The broker fills a request's partitions in order until its ``max_bytes`` is
used, but always answers the first with at least one batch (so a small request still
makes progress, and a response may exceed ``max_bytes`` by one batch). The partitions
that brought records longest ago come first, so when the budget is short they take
turns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mirror.partition import PartitionMirror
from mq.core.types import TopicPartition

MIB = 1024 * 1024
PARTITION_BUFFER_FETCHES = 4  # a partition holds at most this many fetches' worth


@dataclass(frozen=True, slots=True)
class FetchSettings:
    partition_max_bytes: int = 4 * MIB
    buffer_max_bytes: int = 64 * MIB
    fetches_per_leader: int = 2

    @property
    def partition_buffer_bytes(self) -> int:
        return PARTITION_BUFFER_FETCHES * self.partition_max_bytes


@dataclass(frozen=True, slots=True)
class PlannedFetch:
    """One request to send: to ``leader`` on connection ``slot``; ``partitions`` are
    (partition, fetch offset, epoch of its core to hand back with the answer)."""

    leader: int
    slot: int
    max_bytes: int
    partitions: tuple[tuple[TopicPartition, int, int], ...]


class FetchPlanner:
    """The fetches in flight and the flow's byte budget; ``plan`` says what to send now."""

    def __init__(self, settings: FetchSettings | None = None) -> None:
        self.settings = settings or FetchSettings()
        self.in_flight: dict[tuple[int, int], int] = {}  # (leader, slot) -> the request's max_bytes

    def done(self, leader: int, slot: int) -> None:
        """A request was answered (or failed): its slot and its bytes are free again."""
        self.in_flight.pop((leader, slot), None)

    def held_bytes(self, partitions: Mapping[TopicPartition, PartitionMirror]) -> int:
        """Fetched and not yet appended, plus what the requests in flight may bring."""
        return sum(pm.held_bytes for pm in partitions.values()) + sum(self.in_flight.values())

    def plan(self, partitions: Mapping[TopicPartition, PartitionMirror],
             leader_of: Callable[[TopicPartition], int | None], now_ms: int) -> tuple[list[PlannedFetch], bool]:
        """The requests to send now (their partitions marked in flight), and whether a
        partition that wants a fetch has no known leader (metadata should be refreshed)."""
        s = self.settings
        ready: dict[int, list[TopicPartition]] = {}
        leaders: set[int] = set()
        missing_leader = False
        for tp, pm in partitions.items():
            leader = leader_of(tp)
            if leader is not None:
                leaders.add(leader)
            if not pm.wants_fetch(now_ms):
                continue
            if leader is None:
                missing_leader = True
            else:
                ready.setdefault(leader, []).append(tp)
        room = s.buffer_max_bytes - self.held_bytes(partitions)
        share = max(1, s.buffer_max_bytes // max(1, len(leaders) * s.fetches_per_leader))
        fetches = []
        for leader, tps in sorted(ready.items()):
            slot = next((k for k in range(s.fetches_per_leader) if (leader, k) not in self.in_flight), None)
            if slot is None or room <= 0:
                continue
            max_bytes = min(share, room, len(tps) * s.partition_max_bytes)
            tps.sort(key=lambda tp: (partitions[tp].fetched_records_ms, tp))
            sent = tuple((tp, *partitions[tp].fetch_sent(now_ms)) for tp in tps)
            self.in_flight[(leader, slot)] = max_bytes
            room -= max_bytes
            fetches.append(PlannedFetch(leader, slot, max_bytes, sent))
        return fetches, missing_leader
