"""AlterPartition: a partition leader asks the controller to change its ISR.

The checks run in Kafka's order (``ReplicationControlManager.alterPartition``):

1. the sender's ``broker_epoch`` is its current registration, else the whole request
   fails with ``STALE_BROKER_EPOCH``;
2. per partition: unknown → ``UNKNOWN_TOPIC``; an older leader epoch (a zombie leader)
   or a sender that is not the leader → ``FENCED_LEADER_EPOCH``; a newer leader epoch
   (this controller is behind) → ``NOT_CONTROLLER``; a ``partition_epoch`` other than the
   current one → ``INVALID_UPDATE_VERSION``; an empty ISR, duplicates or an ISR without
   the leader → ``INVALID_REQUEST``; a member that is not a replica, is fenced,
   unregistered, shutting down, or carries a stale broker epoch (KIP-903) →
   ``INELIGIBLE_REPLICA``;
3. else one PartitionChangeRecord: same leader and leader epoch, ``partition_epoch + 1``;
   with ``bump_leader_epoch`` (mq's own, for MirrorTruncate) the leader epoch goes up by
   one too, even when the ISR is unchanged: the leader cut its log and the new epoch,
   starting at the cut, makes the followers truncate there by leader epoch.

The answer for an accepted partition is its new state (or the current one when the ISR
did not change, with no record).
"""

from __future__ import annotations

from collections.abc import Callable

from mq.core.errors import ErrorCode
from mq.metadata.image import MetadataImage, PartitionImage
from mq.metadata.records import MetadataRecord, PartitionChangeRecord
from mq.metadata.result import ControllerResult
from mq.protocol.inter_broker import (
    AlterPartitionPartition,
    AlterPartitionPartitionResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopicResult,
    BrokerState,
)


def alter_partition(
    image: MetadataImage, request: AlterPartitionRequest, *, shutting_down: Callable[[int], bool]
) -> ControllerResult[AlterPartitionResponse]:
    sender = image.broker(request.broker_id)
    if sender is None or sender.broker_epoch != request.broker_epoch:
        return ControllerResult([], AlterPartitionResponse([], error_code=ErrorCode.STALE_BROKER_EPOCH))
    records: list[MetadataRecord] = []
    changed: dict[tuple[str, int], PartitionImage] = {}  # a partition named twice sees the first change
    topic_results = []
    for topic in request.topics:
        results = []
        for data in topic.partitions:
            key = (topic.name, data.partition_index)
            topic_image = image.topic(topic.name)
            part = changed.get(key) or (
                None if topic_image is None else topic_image.partitions.get(data.partition_index))
            if part is None:
                results.append(AlterPartitionPartitionResult(data.partition_index, ErrorCode.UNKNOWN_TOPIC))
                continue
            error = _validate(image, request.broker_id, part, data, shutting_down)
            if error != ErrorCode.NONE:
                results.append(AlterPartitionPartitionResult(data.partition_index, error))
                continue
            new_isr = tuple(s.broker_id for s in _states(data))
            if new_isr != part.isr or data.bump_leader_epoch:
                leader_epoch = part.leader_epoch + 1 if data.bump_leader_epoch else part.leader_epoch
                record = PartitionChangeRecord(topic.name, data.partition_index, part.leader,
                                               leader_epoch, new_isr, part.partition_epoch + 1)
                records.append(record)
                part = PartitionImage(part.replicas, part.leader, leader_epoch, new_isr,
                                      record.partition_epoch)
                changed[key] = part
            results.append(AlterPartitionPartitionResult(
                data.partition_index, ErrorCode.NONE, part.leader, part.leader_epoch, list(part.isr),
                part.partition_epoch))
        topic_results.append(AlterPartitionTopicResult(topic.name, results))
    return ControllerResult(records, AlterPartitionResponse(topic_results))


def _states(data: AlterPartitionPartition) -> list[BrokerState]:
    """The proposed ISR with broker epochs (KIP-903), or without (-1: not checked)."""
    return list(data.new_isr_with_epochs) or [BrokerState(b) for b in data.new_isr]


def _validate(
    image: MetadataImage, sender: int, part: PartitionImage, data: AlterPartitionPartition,
    shutting_down: Callable[[int], bool],
) -> ErrorCode:
    if data.leader_epoch < part.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if data.leader_epoch > part.leader_epoch:
        return ErrorCode.NOT_CONTROLLER
    if sender != part.leader:
        return ErrorCode.FENCED_LEADER_EPOCH
    if data.partition_epoch != part.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    states = _states(data)
    ids = [s.broker_id for s in states]
    if not ids or len(set(ids)) != len(ids) or part.leader not in ids:
        return ErrorCode.INVALID_REQUEST
    for state in states:
        broker = image.broker(state.broker_id)
        if broker is None or state.broker_id not in part.replicas:
            return ErrorCode.INELIGIBLE_REPLICA
        if state.broker_epoch != -1 and state.broker_epoch != broker.broker_epoch:
            return ErrorCode.INELIGIBLE_REPLICA
        if state.broker_id != sender and (broker.fenced or shutting_down(state.broker_id)):
            return ErrorCode.INELIGIBLE_REPLICA
    return ErrorCode.NONE
