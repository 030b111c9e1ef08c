"""Fetch: consumers read whole batches below the high watermark, followers from their
fetch offset up (their fetch is how the leader learns their progress, KIP-320's
diverging epoch tells them where to truncate); both long-poll when there is nothing.

A fetch that finds fewer than ``min_bytes`` becomes a ``DelayedFetch`` held in the
``FetchPurgatory`` (Kafka's names), watched by each partition it reads. When a
partition's high watermark moves, the broker re-tries the fetches watching it; the
shell completes the rest when ``max_wait_ms`` runs out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq.broker.leadership import find_leader
from mq.broker.partition import Partition
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.messages import (
    AbortedTransaction,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
    Records,
)
from mq.replication import check_leader_epoch as replication_check_leader_epoch
from mq.storage import LogCorruptedError

READ_COMMITTED = 1
"""``FetchRequest.isolation_level``: 0 read_uncommitted (below the HW), 1 read_committed."""

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode


@dataclass(slots=True)
class FetchResult:
    response: FetchResponse
    bytes_read: int
    has_error: bool  # or a diverging epoch: answer at once either way


def read_fetch(node: BrokerNode, request: FetchRequest, *, now_ms: int) -> FetchResult:
    """One pass over the requested partitions within the byte budgets. A consumer
    (``replica_id`` -1) reads below the high watermark from the leader; a follower
    reads from its fetch offset with no upper bound (and its fetch moves the high
    watermark)."""
    budget = max(0, min(request.max_bytes, node.config.fetch_max_bytes))
    total = 0
    has_error = False
    topics = []
    for topic in request.topics:
        results = []
        for fp in topic.partitions:
            tp = TopicPartition(topic.name, fp.partition)
            if request.replica_id >= 0:
                result = _read_for_follower(node, tp, fp, request, budget - total, first=(total == 0), now_ms=now_ms)
            else:
                result = _read_partition(node, tp, fp, budget - total, first=(total == 0),
                                         read_committed=request.isolation_level == READ_COMMITTED)
            total += len(result.records)
            has_error = has_error or result.error_code != ErrorCode.NONE or result.diverging_epoch >= 0
            results.append(result)
        topics.append(FetchTopicResponse(topic.name, results))
    return FetchResult(FetchResponse(topics), total, has_error)


def _leader_or_error(node: BrokerNode, tp: TopicPartition, current_leader_epoch: int) -> Partition | FetchPartitionResponse:
    found = find_leader(node, tp, current_leader_epoch)
    if isinstance(found, tuple):
        return FetchPartitionResponse(tp.partition, found[0], error_message=found[1])
    return found


def _read_partition(
    node: BrokerNode, tp: TopicPartition, fp: FetchPartition, budget: int, *, first: bool,
    read_committed: bool = False,
) -> FetchPartitionResponse:
    found = _leader_or_error(node, tp, fp.current_leader_epoch)
    if isinstance(found, FetchPartitionResponse):
        return found
    partition = found
    hw, start = partition.high_watermark, partition.log_start_offset
    if fp.partition_max_bytes < 0:
        return FetchPartitionResponse(tp.partition, ErrorCode.INVALID_FETCH_SIZE, hw, hw, start,
                                      error_message="partition_max_bytes < 0")
    offset = fp.fetch_offset
    if offset < start or offset > partition.log.log_end_offset:
        return FetchPartitionResponse(
            tp.partition, ErrorCode.OFFSET_OUT_OF_RANGE, hw, hw, start,
            error_message=f"offset {offset} outside [{start}, {partition.log.log_end_offset}]")
    max_bytes = min(fp.partition_max_bytes, budget)
    # read_committed reads below the last stable offset (KIP-98), read_uncommitted below the HW.
    lso = partition.log.last_stable_offset(hw)
    upper = lso if read_committed else hw
    if offset >= upper or max_bytes <= 0 and not first:
        return FetchPartitionResponse(tp.partition, ErrorCode.NONE, hw, lso, start)
    data = _read(node, tp, partition, offset, max(max_bytes, 0), max_offset=upper, first=first)
    if isinstance(data, FetchPartitionResponse):
        return data
    node.stats.fetched(tp.topic, data)
    aborted = None
    if read_committed:
        aborted = [AbortedTransaction(t.producer_id, t.first_offset)
                   for t in partition.log.aborted_transactions(offset, upper)]
    return FetchPartitionResponse(tp.partition, ErrorCode.NONE, hw, lso, start, data, aborted_transactions=aborted)


def _read_for_follower(
    node: BrokerNode, tp: TopicPartition, fp: FetchPartition, request: FetchRequest, budget: int, *,
    first: bool, now_ms: int,
) -> FetchPartitionResponse:
    found = _leader_or_error(node, tp, fp.current_leader_epoch)
    if isinstance(found, FetchPartitionResponse):
        return found
    partition = found
    state = partition.leader
    assert state is not None
    decision = state.fetch_from_follower(
        request.replica_id, fetch_offset=fp.fetch_offset, last_fetched_epoch=fp.last_fetched_epoch,
        current_leader_epoch=fp.current_leader_epoch, now_ms=now_ms, broker_epoch=request.replica_epoch,
        log_start_offset=fp.log_start_offset,
    )
    node.follower_fetched(partition, decision)
    hw, start = decision.high_watermark, partition.log_start_offset
    if decision.error != ErrorCode.NONE:
        return FetchPartitionResponse(tp.partition, decision.error, hw, hw, start,
                                      error_message=f"follower fetch from {request.replica_id}: {decision.error.name}")
    if decision.diverging_epoch is not None:
        return FetchPartitionResponse(
            tp.partition, ErrorCode.NONE, hw, hw, start,
            diverging_epoch=decision.diverging_epoch.epoch, diverging_end_offset=decision.diverging_epoch.end_offset)
    max_bytes = min(fp.partition_max_bytes, budget)
    if fp.fetch_offset == partition.log.log_end_offset or max_bytes <= 0 and not first:
        return FetchPartitionResponse(tp.partition, ErrorCode.NONE, hw, hw, start)
    data = _read(node, tp, partition, fp.fetch_offset, max(max_bytes, 0), max_offset=None, first=first)
    if isinstance(data, FetchPartitionResponse):
        return data
    return FetchPartitionResponse(tp.partition, ErrorCode.NONE, hw, hw, start, data)


def _read(
    node: BrokerNode, tp: TopicPartition, partition: Partition, offset: int, max_bytes: int, *,
    max_offset: int | None, first: bool,
) -> Records | FetchPartitionResponse:
    hw, start = partition.high_watermark, partition.log_start_offset
    try:
        return partition.log.read(offset, max_bytes=max_bytes, max_offset=max_offset, min_one_batch=first).records
    except LogCorruptedError as err:
        # Never served; the client gets a named, retriable error (not the file path)
        # and the broker keeps serving every other partition and offset.
        node.report_corruption(tp, err)
        return FetchPartitionResponse(
            tp.partition, ErrorCode.KAFKA_STORAGE_ERROR, hw, hw, start,
            error_message=f"stored data at offset {offset} of {tp.topic}-{tp.partition} failed its check: "
                          f"{err.problem}")
    except MqError as err:
        return FetchPartitionResponse(tp.partition, err.code, hw, hw, start, error_message=err.message)


def check_leader_epoch(requested: int, current: int) -> ErrorCode | None:
    """KIP-320: a client with an older epoch is fenced; a newer one means we are behind."""
    code = replication_check_leader_epoch(requested, current)
    return None if code == ErrorCode.NONE else code


@dataclass(slots=True)
class DelayedFetch:
    op_id: int
    request: FetchRequest
    deadline_ms: int
    partitions: list[TopicPartition]


class FetchPurgatory:
    """Delayed fetches by id, and which ones watch each partition (insertion order)."""

    def __init__(self) -> None:
        self.ops: dict[int, DelayedFetch] = {}
        self._watchers: dict[TopicPartition, dict[int, None]] = {}

    def __len__(self) -> int:
        return len(self.ops)

    def add(self, op: DelayedFetch) -> None:
        self.ops[op.op_id] = op
        for tp in op.partitions:
            self._watchers.setdefault(tp, {})[op.op_id] = None

    def remove(self, op_id: int) -> DelayedFetch | None:
        op = self.ops.pop(op_id, None)
        if op is not None:
            for tp in op.partitions:
                watchers = self._watchers.get(tp)
                if watchers is not None:
                    watchers.pop(op_id, None)
                    if not watchers:
                        del self._watchers[tp]
        return op

    def watching(self, tp: TopicPartition) -> list[DelayedFetch]:
        return [self.ops[i] for i in self._watchers.get(tp, {})]

    def expired(self, now_ms: int) -> list[DelayedFetch]:
        return [op for op in self.ops.values() if op.deadline_ms <= now_ms]

    def next_deadline_ms(self) -> int | None:
        return min((op.deadline_ms for op in self.ops.values()), default=None)
