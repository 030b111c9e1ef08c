"""CreatePartitions: grow a topic to a new total partition count.

Kafka's rules (``ReplicationControlManager.createPartitions``):

- the topic must exist (``UNKNOWN_TOPIC``); a topic named twice in one request is
  ``INVALID_REQUEST``;
- the new ``count`` must be larger than the current one (``INVALID_PARTITIONS``:
  partitions are never removed, since records and offsets live in them) and at most
  ``MAX_PARTITIONS_PER_TOPIC``;
- the new partitions get the topic's current replication factor (that of partition
  0), placed over the live brokers like a new topic's (``mq.metadata.placement``);
  fewer live brokers than that is ``INVALID_REPLICATION_FACTOR``;
- manual ``assignments`` (one replica list per new partition) must name distinct,
  live brokers and keep the replication factor (``INVALID_REPLICA_ASSIGNMENT``);
- ``validate_only`` answers as if done and writes nothing.

Each new partition is a ``PartitionRecord`` (leader = first replica, ISR = replicas,
leader epoch 0), exactly as CreateTopics writes them; the brokers see a partition
appear in an existing topic and open its log.

Keys: the default partitioner maps a key to ``murmur2(key) % partitions``, so after
an increase most keys go to another partition than before (Kafka's behaviour too):
per-key order holds within each partition, not across the change.
"""

from __future__ import annotations

from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.metadata.image import MetadataImage, TopicImage
from mq.metadata.placement import assign_replicas
from mq.metadata.records import MetadataRecord, PartitionRecord
from mq.metadata.result import ControllerResult
from mq.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
)

__all__ = ["create_partitions"]


def create_partitions(
    image: MetadataImage, request: CreatePartitionsRequest, *, rng: Rng, max_partitions: int,
) -> ControllerResult[CreatePartitionsResponse]:
    records: list[MetadataRecord] = []
    results: list[CreatePartitionsTopicResult] = []
    names = [t.name for t in request.topics]
    for topic in request.topics:
        if names.count(topic.name) > 1:
            results.append(CreatePartitionsTopicResult(
                topic.name, ErrorCode.INVALID_REQUEST, "topic named more than once in the request"))
            continue
        try:
            new_records = _grow(image, topic, rng=rng, max_partitions=max_partitions)
        except MqError as err:
            results.append(CreatePartitionsTopicResult(topic.name, err.code, err.message))
            continue
        if not request.validate_only:
            records.extend(new_records)
        results.append(CreatePartitionsTopicResult(topic.name, ErrorCode.NONE))
    return ControllerResult(records, CreatePartitionsResponse(results))


def _grow(image: MetadataImage, request: CreatePartitionsTopic, *, rng: Rng,
          max_partitions: int) -> list[PartitionRecord]:
    topic = image.topic(request.name)
    if topic is None:
        raise MqError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {request.name!r}")
    current = len(topic.partitions)
    if request.count <= current:
        raise MqError(ErrorCode.INVALID_PARTITIONS,
                      f"topic {request.name} has {current} partitions; the count can only grow "
                      f"(asked for {request.count})")
    if request.count > max_partitions:
        raise MqError(ErrorCode.INVALID_PARTITIONS,
                      f"the partition count must be at most {max_partitions}, got {request.count}")
    added = request.count - current
    rf = _replication_factor(topic)
    live = image.live_broker_ids()
    if request.assignments is not None:
        placed = _manual(request, added, rf, live)
    else:
        if rf > len(live):
            raise MqError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"topic {request.name} has replication factor {rf} but only {len(live)} "
                          f"brokers are live ({live}); start brokers or wait for them to rejoin")
        start = rng.randint(0, len(live) - 1)
        shift = rng.randint(0, max(0, len(live) - 2))
        placed = assign_replicas(live, added, rf, start_index=start, shift=shift)
    return [PartitionRecord(topic.name, current + i, replicas, replicas[0], 0, replicas, 0)
            for i, replicas in enumerate(placed)]


def _replication_factor(topic: TopicImage) -> int:
    first = next(iter(topic.partitions.values()), None)
    return 1 if first is None else len(first.replicas)


def _manual(request: CreatePartitionsTopic, added: int, rf: int, live: list[int]) -> list[tuple[int, ...]]:
    assignments = request.assignments or []
    if len(assignments) != added:
        raise MqError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                      f"{len(assignments)} assignments given for {added} new partitions of {request.name}")
    placed = []
    for i, assignment in enumerate(assignments):
        replicas = tuple(assignment.broker_ids)
        where = f"new partition {i} of {request.name}"
        if len(set(replicas)) != len(replicas):
            raise MqError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{where} names a broker twice: {list(replicas)}")
        if len(replicas) != rf:
            raise MqError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          f"{where} has {len(replicas)} replicas; the topic's replication factor is {rf}")
        dead = [b for b in replicas if b not in live]
        if dead:
            raise MqError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          f"{where} names brokers that are not live: {dead} (live: {live})")
        placed.append(replicas)
    return placed
