"""Partition assignors: the coordinator computes every member's partitions (KIP-848 style).

Four assignors with Kafka's names and layouts, as pure functions of the members'
subscriptions and the partition counts:

- ``range`` (Kafka's ``RangeAssignor``): per topic, the subscribed members in order
  each take a contiguous range; the first ``n % members`` take one extra.
- ``round-robin`` (``RoundRobinAssignor``): every partition of every subscribed topic,
  sorted, dealt in turn to the members in order, skipping members not subscribed.
- ``sticky`` (``StickyAssignor``): balanced (no member holds two more than another
  member that could take one of its partitions), keeping as many previously owned
  partitions as possible.
- ``cooperative-sticky`` (``CooperativeStickyAssignor``): the same target as ``sticky``;
  the coordinator then withholds partitions still owned by another member
  (:func:`cooperative_withhold`, KIP-429's two-phase hand-off).

Member order for range and round-robin is Kafka's ``MemberInfo`` order: static members
(with a ``group.instance.id``) first, by instance id, then dynamic members by member id.
Nothing here depends on set or dict-of-hash iteration order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

ASSIGNORS: tuple[str, ...] = ("range", "round-robin", "sticky", "cooperative-sticky")
COOPERATIVE_ASSIGNORS: tuple[str, ...] = ("cooperative-sticky",)

Assignment = dict[str, list[TopicPartition]]


@dataclass(frozen=True)
class MemberSubscription:
    """One member as the assignor sees it. ``topics``: the topics its subscription
    matches (already resolved, sorted); ``owned``: what it held in the previous
    generation (used by the sticky assignors)."""

    member_id: str
    group_instance_id: str | None
    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()


def validate(name: str) -> None:
    """Raise INCONSISTENT_GROUP_PROTOCOL unless ``name`` is a known assignor."""
    if name not in ASSIGNORS:
        raise MqError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                      f"unknown assignor {name!r}; known: {', '.join(ASSIGNORS)}")


def is_cooperative(name: str) -> bool:
    """Whether the protocol is cooperative (KIP-429) with this assignor."""
    return name in COOPERATIVE_ASSIGNORS


def assign(name: str, members: Sequence[MemberSubscription],
           partitions_per_topic: Mapping[str, int]) -> Assignment:
    """member_id -> its sorted partitions, every member present (possibly empty).

    Topics a member subscribes to that are missing from ``partitions_per_topic`` (or
    have no partitions) are ignored, as Kafka does.
    """
    validate(name)
    ids = [m.member_id for m in members]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate member ids: {sorted(ids)}")
    result = _ASSIGN[name](list(members), partitions_per_topic)
    return {m.member_id: sorted(result[m.member_id]) for m in sorted(members, key=_by_member_id)}


def cooperative_withhold(target: Mapping[str, list[TopicPartition]],
                         owned: Mapping[str, Sequence[TopicPartition]]) -> Assignment:
    """KIP-429's first phase: remove from each member's target every partition that a
    *different* member currently owns. The owner gets an assignment without it, so it
    revokes it; the partition is handed over in the next generation."""
    owners: dict[TopicPartition, list[str]] = {}
    for member_id in sorted(owned):
        for tp in owned[member_id]:
            owners.setdefault(tp, []).append(member_id)
    return {member_id: sorted(tp for tp in target[member_id]
                              if all(o == member_id for o in owners.get(tp, ())))
            for member_id in sorted(target)}


# --- helpers ---------------------------------------------------------------------------


def _by_member_id(m: MemberSubscription) -> str:
    return m.member_id


def _kafka_order(m: MemberSubscription) -> tuple[int, str, str]:
    """Kafka's MemberInfo order: static members first by instance id, then member id."""
    if m.group_instance_id is not None:
        return (0, m.group_instance_id, m.member_id)
    return (1, m.member_id, "")


def _topic_partitions(topic: str, partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(max(0, partitions_per_topic.get(topic, 0)))]


def _subscribed_topics(members: Sequence[MemberSubscription],
                       partitions_per_topic: Mapping[str, int]) -> list[str]:
    topics = {t for m in members for t in m.topics}
    return sorted(t for t in topics if partitions_per_topic.get(t, 0) > 0)


# --- range ------------------------------------------------------------------------------


def _range(members: list[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment:
    out: Assignment = {m.member_id: [] for m in members}
    ordered = sorted(members, key=_kafka_order)
    for topic in _subscribed_topics(members, partitions_per_topic):
        consumers = [m.member_id for m in ordered if topic in m.topics]
        partitions = _topic_partitions(topic, partitions_per_topic)
        per, extra = divmod(len(partitions), len(consumers))
        for i, member_id in enumerate(consumers):
            start = per * i + min(i, extra)
            out[member_id].extend(partitions[start:start + per + (1 if i < extra else 0)])
    return out


# --- round-robin ------------------------------------------------------------------------


def _round_robin(members: list[MemberSubscription],
                 partitions_per_topic: Mapping[str, int]) -> Assignment:
    out: Assignment = {m.member_id: [] for m in members}
    ordered = sorted(members, key=_kafka_order)
    subscribed = [frozenset(m.topics) for m in ordered]
    cursor = 0
    for topic in _subscribed_topics(members, partitions_per_topic):
        for tp in _topic_partitions(topic, partitions_per_topic):
            # Some member subscribes to `topic`, so this loop ends within one lap.
            while topic not in subscribed[cursor]:
                cursor = (cursor + 1) % len(ordered)
            out[ordered[cursor].member_id].append(tp)
            cursor = (cursor + 1) % len(ordered)
    return out


# --- sticky -----------------------------------------------------------------------------


def _sticky(members: list[MemberSubscription], partitions_per_topic: Mapping[str, int]) -> Assignment:
    """Keep, fill, balance.

    1. Keep: each member keeps the previously owned partitions it may still have (topic
       subscribed, partition exists). A partition claimed by two members is kept by
       neither (only a broken history produces one; it is reassigned cleanly).
    2. Fill: unowned partitions, those with the fewest possible consumers first, go to
       the eligible member with the fewest partitions.
    3. Balance: while a member holds at least two more partitions than another member
       that could take one of them, move one (a partition the donor did not own before
       if it has one) from the fullest member to the emptiest eligible one. Each move
       lowers the sum of squared counts, so this ends; it ends with Kafka's notion of
       balanced, and with identical subscriptions that is "within one" reached with the
       fewest moves (only members above their final quota ever give partitions away).
    """
    ordered = sorted(members, key=_by_member_id)
    topics_of = {m.member_id: frozenset(m.topics) for m in ordered}
    consumers_of: dict[str, list[str]] = {}
    for topic in _subscribed_topics(ordered, partitions_per_topic):
        consumers_of[topic] = [m.member_id for m in ordered if topic in topics_of[m.member_id]]
    valid = {tp for topic in consumers_of for tp in _topic_partitions(topic, partitions_per_topic)}

    claims: dict[TopicPartition, list[str]] = {}
    for m in ordered:
        for tp in sorted(set(m.owned)):
            if tp in valid and tp.topic in topics_of[m.member_id]:
                claims.setdefault(tp, []).append(m.member_id)
    out: dict[str, set[TopicPartition]] = {m.member_id: set() for m in ordered}
    for tp, claimants in claims.items():
        if len(claimants) == 1:
            out[claimants[0]].add(tp)
    previously = {member_id: frozenset(tps) for member_id, tps in out.items()}

    unowned = sorted((tp for tp in valid if tp not in claims or len(claims[tp]) > 1),
                     key=lambda tp: (len(consumers_of[tp.topic]), tp))
    for tp in unowned:
        target = min(consumers_of[tp.topic], key=lambda mid: (len(out[mid]), mid))
        out[target].add(tp)

    _balance(out, consumers_of, previously)
    return {member_id: sorted(tps) for member_id, tps in out.items()}


def _balance(out: dict[str, set[TopicPartition]], consumers_of: Mapping[str, list[str]],
             previously: Mapping[str, frozenset[TopicPartition]]) -> None:
    while True:
        lowest = min((len(tps) for tps in out.values()), default=0)
        moved = False
        for donor in sorted(out, key=lambda mid: (-len(out[mid]), mid)):
            if len(out[donor]) - lowest < 2:
                break  # donors are in descending order: nobody further can give
            moved = _move_one(donor, out, consumers_of, previously[donor])
            if moved:
                break
        if not moved:
            return


def _move_one(donor: str, out: dict[str, set[TopicPartition]], consumers_of: Mapping[str, list[str]],
              kept: frozenset[TopicPartition]) -> bool:
    size = len(out[donor])
    # Give away partitions the donor did not own before first, then its highest ones.
    candidates: list[tuple[int, TopicPartition, str]] = []
    for tp in out[donor]:
        takers = [mid for mid in consumers_of[tp.topic] if len(out[mid]) + 1 < size]
        if takers:
            taker = min(takers, key=lambda mid: (len(out[mid]), mid))
            candidates.append((len(out[taker]), tp, taker))
    if not candidates:
        return False
    _, tp, taker = max(candidates, key=lambda c: (-c[0], c[1] not in kept, c[1]))
    out[donor].remove(tp)
    out[taker].add(tp)
    return True


_ASSIGN: dict[str, Callable[[list[MemberSubscription], Mapping[str, int]], Assignment]] = {
    "range": _range,
    "round-robin": _round_robin,
    "sticky": _sticky,
    "cooperative-sticky": _sticky,
}
