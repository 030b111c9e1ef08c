"""Produce: append opaque batches to partition logs.

A mirror topic (``mirror.source.region`` set) is read-only for producers: the answer is
``MIRROR_TOPIC_READ_ONLY`` naming the region that writes it (``mq.broker.mirror``). A topic
with a ``conflict.policy`` has its keyed records checked before the append
(``mq.broker.conflicts``): ``NOT_HOME_REGION`` or ``INVALID_HLC``, nothing written.

The broker never parses records here: the log checks each batch's header and CRC and
rewrites its base offset in place (unless the topic asks for recompression). Only the
partition's leader appends (others answer NOT_LEADER naming the leader they know),
stamping each batch with its leader epoch.

``acks=1`` answers after the local append; under flush policy ``always`` it waits for
the group commit that fsyncs its offsets (``DelayedProduce``). ``acks=all`` is refused
with NOT_ENOUGH_REPLICAS when the ISR is below ``min.insync.replicas``, else parked in
the ``mq.replication.ProducePurgatory`` until the high watermark passes the batch
(``AcksAllWaits`` keeps the response to send).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mq.broker.conflicts import check_conflicts
from mq.broker.leadership import find_leader, not_leader
from mq.broker.partition import Partition
from mq.broker.recompress import needs_recompression, recompress, target_codec
from mq.core.conflict import ConflictPolicy
from mq.core.errors import ErrorCode, MqError
from mq.core.types import FlushPolicy, TopicPartition
from mq.protocol.messages import (
    ProducePartitionData,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
    Response,
)
from mq.replication import ProduceCompletion

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode

VALID_ACKS = (0, 1, -1)


@dataclass(slots=True)
class DelayedProduce:
    """A produce response held until the fsync covering ``waits`` has finished."""

    op_id: int
    response: ProduceResponse
    waits: list[tuple[Partition, int]]  # (partition, offset that must be below its recovery point)

    def satisfied(self) -> bool:
        return all(p.log.recovery_point >= end or p.log.log_end_offset < end for p, end in self.waits)

    def fail(self, failed: dict[TopicPartition, MqError]) -> bool:
        """If a partition this produce waits on failed its fsync, answer now with the
        storage error for that partition (the append may not be durable)."""
        hit = {p.tp for p, _ in self.waits} & failed.keys()
        if not hit:
            return False
        topics = []
        for topic in self.response.topics:
            parts = []
            for part in topic.partitions:
                err = failed.get(TopicPartition(topic.name, part.partition))
                parts.append(part if err is None else replace(
                    part, error_code=err.code, base_offset=-1, error_message=err.message))
            topics.append(replace(topic, partitions=parts))
        self.response = replace(self.response, topics=topics)
        return True


@dataclass(slots=True)
class ProduceOutcome:
    response: ProduceResponse
    durable_waits: list[tuple[Partition, int]]
    """acks=1 under ``always``: (partition, end offset) pairs the fsync must cover."""
    required_offsets: dict[TopicPartition, int]
    """acks=all: the offset each partition's high watermark must reach."""
    settled: dict[TopicPartition, ErrorCode]
    """acks=all: partitions answered at once (an error before or during the append)."""


def handle_produce(node: BrokerNode, request: ProduceRequest, *, now_ms: int) -> ProduceOutcome:
    waits: list[tuple[Partition, int]] = []
    required: dict[TopicPartition, int] = {}
    settled: dict[TopicPartition, ErrorCode] = {}
    topics = []
    for topic in request.topics:
        results = []
        for data in topic.partitions:
            tp = TopicPartition(topic.name, data.partition)
            if request.acks not in VALID_ACKS:
                results.append(ProducePartitionResponse(
                    data.partition, ErrorCode.INVALID_REQUIRED_ACKS, error_message=f"acks={request.acks}"))
                settled[tp] = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            result, partition, end_offset = _append(node, tp, data, request.acks, now_ms)
            results.append(result)
            if partition is not None and result.error_code == ErrorCode.NONE:
                waits.append((partition, end_offset))
                required[tp] = end_offset
            else:
                settled[tp] = ErrorCode(result.error_code)
        topics.append(ProduceTopicResponse(topic.name, results))
    if node.config.log_flush_policy != FlushPolicy.ALWAYS or request.acks != 1:
        waits = []
    if request.acks != -1:
        required, settled = {}, {}
    return ProduceOutcome(ProduceResponse(topics), waits, required, settled)


def _append(
    node: BrokerNode, tp: TopicPartition, data: ProducePartitionData, acks: int, now_ms: int
) -> tuple[ProducePartitionResponse, Partition | None, int]:
    """The answer, the partition appended to and the end offset (one past the last)
    that acks=all or an fsync must cover: for an idempotent retry of batches already
    in the log, their original offsets (nothing is appended; the answer still waits
    until they are committed)."""
    found = find_leader(node, tp)
    if not isinstance(found, Partition) or found.leader is None:
        code, message = found if isinstance(found, tuple) else not_leader(node, tp)
        return ProducePartitionResponse(tp.partition, code, error_message=message), None, -1
    partition, state = found, found.leader
    config = partition.config
    refused = refuse_writes(tp, config.mirror_source_region, truncating=state.truncating)
    if refused is None and config.conflict_policy is not ConflictPolicy.NONE:
        refused = check_conflicts(data.records, config.conflict_rules, topic=tp.topic,
                                  region=node.config.region_name)
    if refused is not None:
        return ProducePartitionResponse(tp.partition, refused[0], error_message=refused[1]), None, -1
    if acks == -1 and state.check_produce(acks) != ErrorCode.NONE:
        return ProducePartitionResponse(
            tp.partition, ErrorCode.NOT_ENOUGH_REPLICAS,
            error_message=f"{len(state.isr)} in-sync replica(s) {list(state.isr)} < "
                          f"min.insync.replicas={config.min_insync_replicas}",
        ), None, -1
    records = data.records
    try:
        codec = target_codec(config.compression_type)
        if codec is not None and needs_recompression(records, codec):
            records = recompress(records, codec, max_message_bytes=config.max_message_bytes)
        info = partition.log.append_as_leader(records, leader_epoch=state.leader_epoch, now_ms=now_ms)
    except MqError as err:
        node.stats.produce_failed(tp.topic)
        return ProducePartitionResponse(tp.partition, err.code, error_message=err.message), None, -1
    if info.duplicate:
        node.stats.duplicate_produced(tp.topic)
    else:
        node.stats.produced(tp.topic, info.record_count, info.size_bytes)
        node.appended(partition, now_ms=now_ms)
    return ProducePartitionResponse(
        tp.partition, ErrorCode.NONE, info.first_offset, info.log_append_time_ms,
        partition.log_start_offset,
    ), partition, info.last_offset + 1


def refuse_writes(tp: TopicPartition, mirror_source_region: str, *, truncating: bool) -> tuple[ErrorCode, str] | None:
    """Produce to a mirror topic is refused, naming the region that writes it; while a
    MirrorTruncate or a restart starts a new leader epoch nothing is appended (retriable)."""
    if mirror_source_region:
        return ErrorCode.MIRROR_TOPIC_READ_ONLY, (
            f"topic {tp.topic} is a mirror of region {mirror_source_region}: produce in "
            f"{mirror_source_region}, or promote it (mq mirror failover)")
    if truncating:
        return truncating_refusal(tp)
    return None


def truncating_refusal(tp: TopicPartition) -> tuple[ErrorCode, str]:
    return ErrorCode.NOT_LEADER, (f"{tp} was cut by a MirrorTruncate, or restarts at a higher log start, and "
                                  "waits for its new leader epoch; retry in a moment")


_ACKS_ALL_MESSAGES = {
    ErrorCode.REQUEST_TIMED_OUT: "the in-sync replicas did not all acknowledge within timeout_ms",
    ErrorCode.NOT_LEADER: "leadership moved before the in-sync replicas acknowledged; the record may or may not be kept",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "appended, but the ISR shrank below min.insync.replicas before it was acknowledged",
}


class AcksAllWaits:
    """The answers of acks=all requests parked in the produce purgatory, by op id: a
    Produce's response (each partition gets its final error) or, for other requests
    waiting on the high watermark (MirrorAppend), a function building the answer."""

    def __init__(self) -> None:
        self._finish: dict[int, Callable[[ProduceCompletion], Response]] = {}

    def __len__(self) -> int:
        return len(self._finish)

    def __contains__(self, op_id: int) -> bool:
        return op_id in self._finish

    def add(self, op_id: int, response: ProduceResponse) -> None:
        self._finish[op_id] = lambda completion: _complete(response, completion)

    def add_finisher(self, op_id: int, finish: Callable[[ProduceCompletion], Response]) -> None:
        self._finish[op_id] = finish

    def discard(self, op_id: int) -> None:
        self._finish.pop(op_id, None)

    def complete(self, completion: ProduceCompletion) -> Response | None:
        """The answer with each partition's final error (None: cancelled meanwhile)."""
        finish = self._finish.pop(completion.request_id, None)
        return None if finish is None else finish(completion)


def acks_all_message(code: ErrorCode) -> str:
    return _ACKS_ALL_MESSAGES.get(code, "")


def _complete(response: ProduceResponse, completion: ProduceCompletion) -> ProduceResponse:
    topics = []
    for topic in response.topics:
        parts = []
        for part in topic.partitions:
            code = completion.errors.get(TopicPartition(topic.name, part.partition), ErrorCode.NONE)
            if part.error_code != ErrorCode.NONE or code == ErrorCode.NONE:
                parts.append(part)
            else:
                parts.append(replace(part, error_code=code, error_message=acks_all_message(code)))
        topics.append(replace(topic, partitions=parts))
    return replace(response, topics=topics)
