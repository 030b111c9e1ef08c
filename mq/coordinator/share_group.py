"""A share group: its members, their assignment, its share-partitions (sans-IO).

Share groups need no rebalance protocol: a partition may be assigned to several
members at once (records, not partitions, are what members hold exclusively), so a
new assignment takes effect at the next heartbeat with nothing to revoke first.
``assign`` is Kafka's ``SimpleAssignor`` idea, deterministic: with at least as many
members as partitions every member gets one partition and each partition is shared
by about ``members / partitions`` members; with fewer, partitions are dealt round.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mq.coordinator.share_partition import SharePartition, SharePartitionConfig
from mq.coordinator.share_records import ShareGroupValue, ShareMemberValue
from mq.core.types import TopicPartition


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """The share coordinator's settings (broker configs ``share.*``)."""

    partition: SharePartitionConfig = field(default_factory=SharePartitionConfig)
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5000
    auto_offset_reset: str = "latest"


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    session_deadline_ms: int | None = None  # None: loaded from the log, set at the next poll


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    auto_offset_reset: str = "latest"
    members: dict[str, ShareMember] = field(default_factory=dict)
    partitions: dict[TopicPartition, SharePartition] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def value(self) -> ShareGroupValue:
        return ShareGroupValue(self.epoch, self.auto_offset_reset, tuple(
            ShareMemberValue(m.member_id, m.client_id, m.client_host, m.topics)
            for m in sorted(self.members.values(), key=lambda m: m.member_id)))

    def assignment(self, topics: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
        return assign({m.member_id: m.topics for m in self.members.values()}, topics)

    def partition(self, tp: TopicPartition, *, log_start: int, high_watermark: int,
                  config: SharePartitionConfig) -> SharePartition:
        sp = self.partitions.get(tp)
        if sp is None:
            start = log_start if self.auto_offset_reset == "earliest" else high_watermark
            sp = self.partitions[tp] = SharePartition(start, config)
        return sp


def assign(subscriptions: Mapping[str, tuple[str, ...]], topics: Mapping[str, int]
           ) -> dict[str, list[TopicPartition]]:
    """member id -> its partitions, from each member's topics and the partition counts."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in sorted(subscriptions)}
    for topic in sorted({t for ts in subscriptions.values() for t in ts}):
        count = topics.get(topic, 0)
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        if count <= 0 or not members:
            continue
        if len(members) >= count:
            for i, member in enumerate(members):
                out[member].append(TopicPartition(topic, i % count))
        else:
            for p in range(count):
                out[members[p % len(members)]].append(TopicPartition(topic, p))
    for tps in out.values():
        tps.sort()
    return out
