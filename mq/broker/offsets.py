"""ListOffsets (earliest, latest, by timestamp), DeleteRecords and
OffsetsForLeaderEpoch, all served by the partition's leader only.

DeleteRecords answers as soon as the leader's log start moved (its ``low_watermark`` is
the leader's, not Kafka's minimum over the ISR: there is no DeleteRecords purgatory).
It wakes the followers' parked fetches; each follower takes the leader's log start from
its next fetch answer and checkpoints it (``FollowerPartition._follow_log_start``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mq.broker.leadership import find_leader
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition
from mq.protocol.inter_broker import (
    EpochEndOffsetResult,
    OffsetForLeaderPartition,
    OffsetForLeaderTopicResult,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from mq.protocol.messages import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode


def handle_list_offsets(node: BrokerNode, request: ListOffsetsRequest) -> ListOffsetsResponse:
    topics = []
    for topic in request.topics:
        results = [_list_offset(node, TopicPartition(topic.name, p.partition), p) for p in topic.partitions]
        topics.append(ListOffsetsTopicResponse(topic.name, results))
    return ListOffsetsResponse(topics)


def _list_offset(node: BrokerNode, tp: TopicPartition, p: ListOffsetsPartition) -> ListOffsetsPartitionResponse:
    found = find_leader(node, tp, p.current_leader_epoch)
    if isinstance(found, tuple):
        return ListOffsetsPartitionResponse(tp.partition, found[0])
    partition = found
    epoch = partition.leader_epoch
    hw = partition.high_watermark
    if p.timestamp == LATEST_TIMESTAMP:
        return ListOffsetsPartitionResponse(tp.partition, ErrorCode.NONE, -1, hw, epoch)
    if p.timestamp == EARLIEST_TIMESTAMP:
        return ListOffsetsPartitionResponse(tp.partition, ErrorCode.NONE, -1, partition.log_start_offset, epoch)
    if p.timestamp < 0:
        return ListOffsetsPartitionResponse(tp.partition, ErrorCode.INVALID_REQUEST)
    found = partition.log.offset_for_timestamp(p.timestamp)
    if found is None or found[0] >= hw:
        # Kafka: no record at or after the timestamp (among committed ones) -> -1.
        return ListOffsetsPartitionResponse(tp.partition, ErrorCode.NONE, -1, -1, epoch)
    offset, timestamp = found
    return ListOffsetsPartitionResponse(tp.partition, ErrorCode.NONE, timestamp, offset, epoch)


def handle_delete_records(node: BrokerNode, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            results.append(_delete_records(node, TopicPartition(topic.name, p.partition), p.offset))
        topics.append(DeleteRecordsTopicResult(topic.name, results))
    return DeleteRecordsResponse(topics)


def _delete_records(node: BrokerNode, tp: TopicPartition, offset: int) -> DeleteRecordsPartitionResult:
    found = find_leader(node, tp)
    if isinstance(found, tuple):
        return DeleteRecordsPartitionResult(tp.partition, found[0])
    partition = found
    hw = partition.high_watermark
    target = hw if offset == -1 else offset
    if target < 0 or target > hw:
        return DeleteRecordsPartitionResult(tp.partition, ErrorCode.OFFSET_OUT_OF_RANGE, partition.log_start_offset)
    if target <= partition.log_start_offset:
        return DeleteRecordsPartitionResult(tp.partition, ErrorCode.NONE, partition.log_start_offset)
    try:
        low = partition.log.delete_records(target)
    except MqError as err:
        return DeleteRecordsPartitionResult(tp.partition, err.code, partition.log_start_offset)
    node.log_start_moved(partition)
    return DeleteRecordsPartitionResult(tp.partition, ErrorCode.NONE, low)


def handle_offsets_for_leader_epoch(node: BrokerNode, request: OffsetsForLeaderEpochRequest) -> OffsetsForLeaderEpochResponse:
    """Where each asked-for epoch ends on this leader (KIP-101, KIP-279), from its
    leader epoch cache, fenced by the sender's ``current_leader_epoch``."""
    topics = []
    for topic in request.topics:
        results = [_epoch_end(node, TopicPartition(topic.name, p.partition), p) for p in topic.partitions]
        topics.append(OffsetForLeaderTopicResult(topic.name, results))
    return OffsetsForLeaderEpochResponse(topics)


def _epoch_end(node: BrokerNode, tp: TopicPartition, p: OffsetForLeaderPartition) -> EpochEndOffsetResult:
    found = find_leader(node, tp, p.current_leader_epoch)
    if isinstance(found, tuple):
        return EpochEndOffsetResult(tp.partition, found[0])
    answer = found.epoch_cache.end_offset_for(p.leader_epoch, found.log.log_end_offset)
    return EpochEndOffsetResult(tp.partition, ErrorCode.NONE, answer.epoch, answer.end_offset)
