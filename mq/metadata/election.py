"""Leader election and ISR changes, as PartitionChangeRecords computed from an image.

Pure functions: each reads a ``MetadataImage`` and an ``eligible(broker_id)`` predicate
(registered, unfenced, not shutting down) and returns records; nothing changes until
they are replayed. The rules are Kafka's (``PartitionChangeBuilder``):

- a new leader is the first eligible ISR member in replica order;
- none → ``NO_LEADER``, unless the topic's ``unclean.leader.election.enable`` lets an
  eligible replica outside the ISR lead (its ISR becomes just that replica);
- the ISR never becomes empty: removing its last member keeps it (so that broker can
  lead again when it comes back);
- every change bumps ``partition_epoch``; a leader change also bumps ``leader_epoch``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from mq.core.config import TopicConfig
from mq.core.errors import MqError
from mq.metadata.image import MetadataImage, PartitionImage, TopicImage
from mq.metadata.records import NO_LEADER, PartitionChangeRecord

Eligible = Callable[[int], bool]
UNCLEAN_KEY = "unclean.leader.election.enable"


def unclean_enabled(topic: TopicImage) -> bool:
    value = topic.configs.get(UNCLEAN_KEY)
    if value is None:
        return False
    try:
        return TopicConfig.from_kafka({UNCLEAN_KEY: value}).unclean_leader_election_enable
    except MqError:
        return False


def eligible_in(image: MetadataImage, shutting_down: Callable[[int], bool]) -> Eligible:
    """Can this broker lead or join an ISR in ``image``?"""
    def eligible(broker_id: int) -> bool:
        broker = image.broker(broker_id)
        return broker is not None and not broker.fenced and not shutting_down(broker_id)
    return eligible


def change(
    topic: str, partition: int, part: PartitionImage, *, leader: int, isr: tuple[int, ...]
) -> PartitionChangeRecord | None:
    """The record moving ``part`` to ``leader``/``isr``; None when nothing changes."""
    if leader == part.leader and isr == part.isr:
        return None
    leader_epoch = part.leader_epoch + 1 if leader != part.leader else part.leader_epoch
    return PartitionChangeRecord(topic, partition, leader, leader_epoch, isr, part.partition_epoch + 1)


def elect(
    part: PartitionImage, isr: tuple[int, ...], *, eligible: Eligible, unclean: bool
) -> tuple[int, tuple[int, ...]]:
    """(leader, isr) after an election among ``isr``."""
    for replica in part.replicas:
        if replica in isr and eligible(replica):
            return replica, isr
    if unclean:
        for replica in part.replicas:
            if eligible(replica):
                return replica, (replica,)
    return NO_LEADER, isr


def _partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionImage]]:
    """Every partition in (topic, partition) order."""
    for topic in image.topics.values():
        for index, part in topic.partitions.items():
            yield topic, index, part


def remove_broker(image: MetadataImage, broker_id: int, *, eligible: Eligible) -> list[PartitionChangeRecord]:
    """``broker_id`` was fenced or replaced by a new incarnation: drop it from every ISR
    (keeping a last member) and re-elect where it led or nobody leads."""
    records = []
    for topic, index, part in _partitions(image):
        if broker_id not in part.isr and part.leader != broker_id:
            continue
        isr = tuple(r for r in part.isr if r != broker_id) or part.isr
        leader = part.leader
        if leader in (broker_id, NO_LEADER):
            leader, isr = elect(part, isr, eligible=eligible, unclean=unclean_enabled(topic))
        record = change(topic.name, index, part, leader=leader, isr=isr)
        if record is not None:
            records.append(record)
    return records


def controlled_shutdown(
    image: MetadataImage, broker_id: int, *, eligible: Eligible
) -> list[PartitionChangeRecord]:
    """Move leadership off ``broker_id`` to another eligible ISR member and drop it from
    ISRs; a partition nobody else can take stays led by it (and its ISR never empties)."""
    records = []
    for topic, index, part in _partitions(image):
        if broker_id not in part.isr and part.leader != broker_id:
            continue
        others = tuple(r for r in part.isr if r != broker_id)
        if part.leader == broker_id:
            successor = next((r for r in part.replicas if r in others and eligible(r)), None)
            if successor is None:
                continue
            record = change(topic.name, index, part, leader=successor, isr=others)
        elif others:
            record = change(topic.name, index, part, leader=part.leader, isr=others)
        else:
            continue
        if record is not None:
            records.append(record)
    return records


def elect_leaderless(
    image: MetadataImage, *, eligible: Eligible, broker_id: int | None = None, topic_name: str | None = None
) -> list[PartitionChangeRecord]:
    """Leaders for partitions that have none (of one broker's replicas, or of one topic)."""
    records = []
    for topic, index, part in _partitions(image):
        if part.leader != NO_LEADER:
            continue
        if broker_id is not None and broker_id not in part.replicas:
            continue
        if topic_name is not None and topic.name != topic_name:
            continue
        leader, isr = elect(part, part.isr, eligible=eligible, unclean=unclean_enabled(topic))
        if leader != NO_LEADER:
            record = change(topic.name, index, part, leader=leader, isr=isr)
            if record is not None:
                records.append(record)
    return records


def leads_movable(image: MetadataImage, broker_id: int, *, eligible: Eligible) -> bool:
    """Does ``broker_id`` lead a partition another eligible ISR member could take?"""
    for _, _, part in _partitions(image):
        if part.leader == broker_id and any(r != broker_id and eligible(r) for r in part.isr):
            return True
    return False


def preferred_leaders(image: MetadataImage, *, eligible: Eligible, imbalance_percentage: int) -> list[PartitionChangeRecord]:
    """Kafka's auto leader rebalance: each partition's preferred leader is the first of
    its replicas. For every broker that leads fewer of the partitions it prefers than
    ``imbalance_percentage`` allows, move those back to it where it is eligible and in
    the ISR (a clean move: the ISR is unchanged, the leader epoch bumps)."""
    preferred: dict[int, list[tuple[TopicImage, int, PartitionImage]]] = {}
    for topic, index, part in _partitions(image):
        if part.replicas:
            preferred.setdefault(part.replicas[0], []).append((topic, index, part))
    records = []
    for broker_id in sorted(preferred):
        owned = preferred[broker_id]
        elsewhere = [(t, i, p) for t, i, p in owned if p.leader != broker_id]
        if not elsewhere or 100 * len(elsewhere) <= imbalance_percentage * len(owned):
            continue
        if not eligible(broker_id):
            continue
        for topic, index, part in elsewhere:
            if broker_id in part.isr:
                record = change(topic.name, index, part, leader=broker_id, isr=part.isr)
                if record is not None:
                    records.append(record)
    return records
