"""Produce: append opaque batches to partition logs.

The broker never parses records here: the log checks each batch's header and CRC and
rewrites its base offset in place (unless the topic asks for recompression). Under
flush policy ``always`` an ``acks`` >= 1 response waits for the group commit that
fsyncs its offsets (``DelayedProduce``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mq.broker.partition import Partition
from mq.broker.recompress import needs_recompression, recompress, target_codec
from mq.core.errors import ErrorCode, MqError
from mq.core.types import FlushPolicy, TopicPartition
from mq.protocol.messages import (
    ProducePartitionData,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
)

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


def handle_produce(node: BrokerNode, request: ProduceRequest, *, now_ms: int) -> tuple[ProduceResponse, list[tuple[Partition, int]]]:
    """The response and the (partition, end offset) pairs an ``always`` ack waits for."""
    waits: list[tuple[Partition, int]] = []
    topics = []
    for topic in request.topics:
        results = []
        for data in topic.partitions:
            if request.acks not in VALID_ACKS:
                results.append(ProducePartitionResponse(
                    data.partition, ErrorCode.INVALID_REQUIRED_ACKS, error_message=f"acks={request.acks}"))
                continue
            tp = TopicPartition(topic.name, data.partition)
            result, partition = _append(node, tp, data, request.acks, now_ms)
            results.append(result)
            if partition is not None and result.error_code == ErrorCode.NONE:
                waits.append((partition, partition.log.log_end_offset))
        topics.append(ProduceTopicResponse(topic.name, results))
    if node.config.log_flush_policy != FlushPolicy.ALWAYS or request.acks == 0:
        waits = []
    return ProduceResponse(topics), waits


def _append(
    node: BrokerNode, tp: TopicPartition, data: ProducePartitionData, acks: int, now_ms: int
) -> tuple[ProducePartitionResponse, Partition | None]:
    partition = node.partitions.get(tp)
    if partition is None:
        return ProducePartitionResponse(tp.partition, ErrorCode.UNKNOWN_TOPIC,
                                        error_message=f"unknown topic-partition {tp}"), None
    config = partition.config
    if acks == -1:
        isr = node.image.partition(tp).isr  # type: ignore[union-attr]
        if len(isr) < config.min_insync_replicas:
            return ProducePartitionResponse(
                tp.partition, ErrorCode.NOT_ENOUGH_REPLICAS,
                error_message=f"{len(isr)} in-sync replica(s) < min.insync.replicas={config.min_insync_replicas}",
            ), None
    records = data.records
    try:
        codec = target_codec(config.compression_type)
        if codec is not None and needs_recompression(records, codec):
            records = recompress(records, codec, max_message_bytes=config.max_message_bytes)
        info = partition.log.append_as_leader(records, leader_epoch=partition.leader_epoch, now_ms=now_ms)
    except MqError as err:
        node.stats.produce_failed(tp.topic)
        return ProducePartitionResponse(tp.partition, err.code, error_message=err.message), None
    node.stats.produced(tp.topic, info.record_count, info.size_bytes)
    node.appended(partition, now_ms=now_ms)
    return ProducePartitionResponse(
        tp.partition, ErrorCode.NONE, info.first_offset, info.log_append_time_ms,
        partition.log_start_offset,
    ), partition
