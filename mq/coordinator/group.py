"""A consumer group and its members, as one coordinator shard holds them in memory.

Persisted fields (generation, assignor, members with their subscriptions and
assignments, committed offsets) change only by replaying records
(``mq.coordinator.records``); the rest is transient and rebuilt after a fail-over:
session clocks restart at load, parked JoinGroup requests are answered
``NOT_COORDINATOR`` by the old coordinator, and a rebalance in progress starts again
when members rejoin.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from mq.coordinator.records import GroupMetadataValue, MemberMetadata, OffsetCommitValue
from mq.core.types import TopicPartition
from mq.protocol.group_messages import TopicPartitions

COOPERATIVE_ASSIGNOR = "cooperative-sticky"


class GroupState(str, Enum):
    """Kafka's names. CompletingRebalance is never entered: the coordinator computes
    the assignment itself, so there is no SyncGroup round to wait for."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    pattern: str | None
    assignors: tuple[str, ...]
    assignment: tuple[TopicPartition, ...] = ()
    # transient
    owned: tuple[TopicPartition, ...] = ()  # what the member said it owns when it last joined
    last_heartbeat_ms: int | None = None  # None: loaded, the session starts at the next call
    join_request_id: int | None = None  # a parked JoinGroup
    _regex: re.Pattern[str] | None = field(default=None, repr=False)

    def regex(self) -> re.Pattern[str] | None:
        if self.pattern is None:
            return None
        if self._regex is None or self._regex.pattern != self.pattern:
            self._regex = re.compile(self.pattern)  # validated when the member joined
        return self._regex

    def resolved_topics(self, topics: Mapping[str, int]) -> tuple[str, ...]:
        """The topics of ``topics`` (name -> partitions) this subscription matches, sorted.
        A pattern never matches internal topics (names starting with ``__``)."""
        names = {t for t in self.topics if t in topics}
        regex = self.regex()
        if regex is not None:
            names.update(t for t in topics if not t.startswith("__") and regex.fullmatch(t))
        return tuple(sorted(names))

    def same_subscription(self, topics: tuple[str, ...], pattern: str | None, assignors: tuple[str, ...]) -> bool:
        return self.topics == topics and self.pattern == pattern and self.assignors == assignors

    def session_deadline_ms(self) -> int | None:
        if self.join_request_id is not None or self.last_heartbeat_ms is None:
            return None  # a parked member is governed by the rebalance timeout
        return self.last_heartbeat_ms + self.session_timeout_ms

    def to_metadata(self) -> MemberMetadata:
        return MemberMetadata(
            self.member_id, self.group_instance_id, self.client_id, self.client_host, self.session_timeout_ms,
            self.rebalance_timeout_ms, self.topics, self.pattern, self.assignors, self.assignment)

    @classmethod
    def from_metadata(cls, m: MemberMetadata) -> Member:
        return cls(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                   m.rebalance_timeout_ms, m.topics, m.pattern, m.assignors, m.assignment, owned=m.assignment)


@dataclass(slots=True)
class Group:
    group_id: str
    protocol_type: str = ""
    generation: int = 0
    assignor: str = ""
    leader: str = ""
    state: GroupState = GroupState.EMPTY
    state_ts: int = -1
    members: dict[str, Member] = field(default_factory=dict)  # join order
    instances: dict[str, str] = field(default_factory=dict)  # group_instance_id -> member_id
    offsets: dict[TopicPartition, OffsetCommitValue] = field(default_factory=dict)  # committed ones only
    # transient rebalance state
    rebalance_deadline_ms: int | None = None
    initial_delay_until_ms: int | None = None
    initial_delay_cap_ms: int | None = None

    @property
    def cooperative(self) -> bool:
        return self.assignor == COOPERATIVE_ASSIGNOR

    def add(self, member: Member) -> None:
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.instances[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        instance_id = None if member is None else member.group_instance_id
        if instance_id is not None and self.instances.get(instance_id) == member_id:
            del self.instances[instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), "")
        return member

    def replace_member(self, old_id: str, member: Member) -> None:
        """A static member restarted: the new member id takes the old one's place (and
        its position in join order)."""
        self.members = {(member.member_id if mid == old_id else mid): (member if mid == old_id else m)
                        for mid, m in self.members.items()}
        if member.group_instance_id is not None:
            self.instances[member.group_instance_id] = member.member_id
        if self.leader == old_id:
            self.leader = member.member_id

    def fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """Kafka's ``isStaticMemberFenced``: the instance id belongs to another member."""
        if group_instance_id is None:
            return False
        current = self.instances.get(group_instance_id)
        return current is not None and current != member_id

    def all_joined(self) -> bool:
        return all(m.join_request_id is not None for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def metadata_value(self, now_ms: int) -> GroupMetadataValue:
        return GroupMetadataValue(self.protocol_type, self.generation, self.assignor, self.leader, now_ms,
                                  tuple(m.to_metadata() for m in self.members.values()))

    def apply_metadata(self, value: GroupMetadataValue) -> None:
        """Replay of a GroupMetadata record: members and generation become the record's;
        members the record keeps keep their transient state (session clock, parked join)."""
        old = self.members
        self.members, self.instances = {}, {}
        for meta in value.members:
            member = old.get(meta.member_id)
            if member is None:
                member = Member.from_metadata(meta)
            else:
                member.group_instance_id, member.client_id, member.client_host = (
                    meta.group_instance_id, meta.client_id, meta.client_host)
                member.session_timeout_ms, member.rebalance_timeout_ms = meta.session_timeout_ms, meta.rebalance_timeout_ms
                member.topics, member.pattern, member.assignors = meta.topics, meta.pattern, meta.assignors
                member.assignment = meta.assignment
            self.add(member)
        self.protocol_type, self.generation, self.assignor = value.protocol_type, value.generation, value.assignor
        self.leader, self.state_ts = value.leader, value.state_ts
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.rebalance_deadline_ms = self.initial_delay_until_ms = self.initial_delay_cap_ms = None

    def empty_since_ms(self) -> int:
        """When the group last changed, for offset expiry: its last state change or its
        newest commit, whichever is later (an admin reset restarts the clock)."""
        newest = max((v.commit_timestamp_ms for v in self.offsets.values()), default=-1)
        return max(self.state_ts, newest)


def assignment_to_wire(assignment: tuple[TopicPartition, ...]) -> list[TopicPartitions]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(assignment):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [TopicPartitions(t, parts) for t, parts in by_topic.items()]


def assignment_from_wire(items: list[TopicPartitions]) -> tuple[TopicPartition, ...]:
    return tuple(sorted({TopicPartition(t.topic, p) for t in items for p in t.partitions}))
