"""ListOffsets (earliest, latest, by timestamp), DeleteRecords and
OffsetsForLeaderEpoch, all served by the partition's leader only.

DeleteRecords moves the leader's log start at once and wakes the followers' parked
fetches; each follower takes the leader's log start from its next fetch answer and
checkpoints it (``FollowerPartition._follow_log_start``), and its fetch after that tells
the leader. The answer waits (Kafka's ``DelayedDeleteRecords``, here in the
``DeleteRecordsPurgatory``) until the partition's *low watermark*, the smallest log start
of its in-sync replicas (``PartitionState.low_watermark``), reached the requested offset:
then no replica that could be elected still serves the deleted records. An in-sync
replica that does not fetch within ``timeout_ms`` makes it REQUEST_TIMED_OUT (the leader's
records are deleted all the same; a retry waits again); a leadership change, NOT_LEADER.
The ``low_watermark`` answered is that minimum."""

from __future__ import annotations

from dataclasses import dataclass, replace
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
from mq.replication import DeleteRecordsPurgatory, PurgatoryPoll

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode


def handle_list_offsets(node: BrokerNode, request: ListOffsetsRequest) -> ListOffsetsResponse:
    topics = []
    for topic in request.topics:
        results = [_list_offset(node, TopicPartition(topic.name, p.partition), p, request.isolation_level == 1)
                   for p in topic.partitions]
        topics.append(ListOffsetsTopicResponse(topic.name, results))
    return ListOffsetsResponse(topics)


def _list_offset(node: BrokerNode, tp: TopicPartition, p: ListOffsetsPartition,
                 read_committed: bool = False) -> ListOffsetsPartitionResponse:
    found = find_leader(node, tp, p.current_leader_epoch)
    if isinstance(found, tuple):
        return ListOffsetsPartitionResponse(tp.partition, found[0])
    partition = found
    epoch = partition.leader_epoch
    hw = partition.high_watermark
    if p.timestamp == LATEST_TIMESTAMP:  # read_committed: the last stable offset, as Kafka
        latest = partition.log.last_stable_offset(hw) if read_committed else hw
        return ListOffsetsPartitionResponse(tp.partition, ErrorCode.NONE, -1, latest, epoch)
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


@dataclass(frozen=True, slots=True)
class DeleteRecordsOutcome:
    response: DeleteRecordsResponse
    required_offsets: dict[TopicPartition, int]  # partitions whose low watermark must reach the offset


def handle_delete_records(node: BrokerNode, request: DeleteRecordsRequest) -> DeleteRecordsOutcome:
    topics = []
    required: dict[TopicPartition, int] = {}
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition)
            result, offset = _delete_records(node, tp, p.offset)
            results.append(result)
            if offset is not None:
                required[tp] = offset
        topics.append(DeleteRecordsTopicResult(topic.name, results))
    return DeleteRecordsOutcome(DeleteRecordsResponse(topics), required)


def _delete_records(node: BrokerNode, tp: TopicPartition, offset: int) -> tuple[DeleteRecordsPartitionResult, int | None]:
    """The partition's answer now, and the offset its low watermark must reach before
    it is given (None: answered now)."""
    found = find_leader(node, tp)
    if isinstance(found, tuple):
        return DeleteRecordsPartitionResult(tp.partition, found[0]), None
    partition = found
    hw = partition.high_watermark
    target = hw if offset == -1 else offset
    if target < 0 or target > hw:
        return DeleteRecordsPartitionResult(tp.partition, ErrorCode.OFFSET_OUT_OF_RANGE, partition.log_start_offset), None
    if target > partition.log_start_offset:
        try:
            partition.log.delete_records(target)
        except MqError as err:
            return DeleteRecordsPartitionResult(tp.partition, err.code, partition.log_start_offset), None
        node.log_start_moved(partition)
    # Also when nothing moved here: a follower may not have taken an earlier one yet.
    return DeleteRecordsPartitionResult(tp.partition, ErrorCode.NONE, partition.log_start_offset), target


class DeleteRecordsWaits:
    """DeleteRecords answers parked in the ``DeleteRecordsPurgatory`` by op id."""

    def __init__(self) -> None:
        self.purgatory = DeleteRecordsPurgatory()
        self._responses: dict[int, DeleteRecordsResponse] = {}

    def __len__(self) -> int:
        return len(self._responses)

    def __contains__(self, op_id: int) -> bool:
        return op_id in self._responses

    def park(self, op_id: int, outcome: DeleteRecordsOutcome, *, deadline_ms: int) -> None:
        self._responses[op_id] = outcome.response
        self.purgatory.watch(op_id, outcome.required_offsets, deadline_ms=deadline_ms)

    def cancel(self, op_id: int) -> None:
        self._responses.pop(op_id, None)  # its purgatory entry ends unanswered

    def poll(self, node: BrokerNode, now_ms: int) -> tuple[list[tuple[int, DeleteRecordsResponse]], int | None]:
        """The answers due (each partition's final error and current low watermark) and
        the next deadline."""
        polled: PurgatoryPoll = self.purgatory.poll(now_ms)
        answers = []
        for completion in polled.completed:
            response = self._responses.pop(completion.request_id, None)
            if response is None:
                continue
            topics = []
            for topic in response.topics:
                parts = []
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition)
                    code = completion.errors.get(tp)
                    if code is None:  # answered at once (an error)
                        parts.append(part)
                        continue
                    partition = node.partitions.get(tp)
                    state = None if partition is None else partition.leader
                    low = -1 if state is None else state.low_watermark
                    parts.append(replace(part, error_code=code, low_watermark=low))
                topics.append(replace(topic, partitions=parts))
            answers.append((completion.request_id, replace(response, topics=topics)))
        return answers, polled.next_deadline_ms


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
