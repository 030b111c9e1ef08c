"""Fetch: read whole batches below the high watermark, long-polling when there are none.

A fetch that finds fewer than ``min_bytes`` becomes a ``DelayedFetch`` held in the
``FetchPurgatory`` (Kafka's names), watched by each partition it reads. When a
partition's high watermark moves, the broker re-tries the fetches watching it; the
shell completes the rest when ``max_wait_ms`` runs out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.messages import (
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
)
from mq.storage import LogCorruptedError

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode


@dataclass(slots=True)
class FetchResult:
    response: FetchResponse
    bytes_read: int
    has_error: bool


def read_fetch(node: BrokerNode, request: FetchRequest) -> FetchResult:
    """One pass over the requested partitions within the byte budgets."""
    budget = max(0, min(request.max_bytes, node.config.fetch_max_bytes))
    total = 0
    has_error = False
    topics = []
    for topic in request.topics:
        results = []
        for fp in topic.partitions:
            result = _read_partition(node, TopicPartition(topic.name, fp.partition), fp,
                                     budget - total, first=(total == 0))
            size = len(result.records)
            total += size
            has_error = has_error or result.error_code != ErrorCode.NONE
            results.append(result)
        topics.append(FetchTopicResponse(topic.name, results))
    return FetchResult(FetchResponse(topics), total, has_error)


def _read_partition(
    node: BrokerNode, tp: TopicPartition, fp: FetchPartition, budget: int, *, first: bool
) -> FetchPartitionResponse:
    partition = node.partitions.get(tp)
    if partition is None:
        return FetchPartitionResponse(tp.partition, ErrorCode.UNKNOWN_TOPIC,
                                      error_message=f"unknown topic-partition {tp}")
    hw, start = partition.high_watermark, partition.log_start_offset
    epoch_error = check_leader_epoch(fp.current_leader_epoch, partition.leader_epoch)
    if epoch_error is not None:
        return FetchPartitionResponse(tp.partition, epoch_error, hw, hw, start)
    if fp.partition_max_bytes < 0:
        return FetchPartitionResponse(tp.partition, ErrorCode.INVALID_FETCH_SIZE, hw, hw, start,
                                      error_message="partition_max_bytes < 0")
    offset = fp.fetch_offset
    if offset < start or offset > partition.log.log_end_offset:
        return FetchPartitionResponse(
            tp.partition, ErrorCode.OFFSET_OUT_OF_RANGE, hw, hw, start,
            error_message=f"offset {offset} outside [{start}, {partition.log.log_end_offset}]")
    max_bytes = min(fp.partition_max_bytes, budget)
    if offset >= hw or max_bytes <= 0 and not first:
        return FetchPartitionResponse(tp.partition, ErrorCode.NONE, hw, hw, start)
    try:
        data = partition.log.read(offset, max_bytes=max(max_bytes, 0), max_offset=hw, min_one_batch=first).records
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
    node.stats.fetched(tp.topic, data)
    return FetchPartitionResponse(tp.partition, ErrorCode.NONE, hw, hw, start, data)


def check_leader_epoch(requested: int, current: int) -> ErrorCode | None:
    """KIP-320: a client with an older epoch is fenced; a newer one means we are behind."""
    if requested < 0 or requested == current:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


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
