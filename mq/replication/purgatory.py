"""Where ``acks=all`` produce requests wait for the high watermark (Kafka's
``DelayedProduce`` in the produce purgatory).

A request is parked with, for each partition it wrote, the offset the high
watermark must reach (its last offset + 1) and one deadline (``timeout_ms`` of the
request). It completes when every partition is settled:

- the high watermark reached the offset → NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND
  when the ISR had meanwhile shrunk below ``min.insync.replicas`` (the record is in
  the log, but fewer copies than promised acknowledged it);
- leadership was lost → NOT_LEADER (the new leader may or may not keep the record;
  the producer retries, idempotence removes the duplicate);
- the deadline passed → REQUEST_TIMED_OUT for the partitions still waiting.

The broker reports partition changes with ``on_partition_update`` /
``on_leadership_lost`` and calls ``poll(now_ms)``, which returns the finished
requests in the order they were parked and when to poll again.

``DeleteRecordsPurgatory`` is the same wait on another watermark (Kafka's
``DelayedDeleteRecords``): a DeleteRecords request is answered once the partition's
*low* watermark, the smallest log start offset of its in-sync replicas, reached the
requested offset (``on_low_watermark``), or with NOT_LEADER / REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition

__all__ = ["DelayedProduce", "DeleteRecordsPurgatory", "ProduceCompletion", "ProducePurgatory", "PurgatoryPoll"]


@dataclass(slots=True)
class DelayedProduce:
    request_id: int
    deadline_ms: int
    required_offsets: dict[TopicPartition, int]
    errors: dict[TopicPartition, ErrorCode] = field(default_factory=dict)

    @property
    def is_settled(self) -> bool:
        return len(self.errors) == len(self.required_offsets)


@dataclass(frozen=True, slots=True)
class ProduceCompletion:
    request_id: int
    errors: dict[TopicPartition, ErrorCode]
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class PurgatoryPoll:
    completed: list[ProduceCompletion]
    next_deadline_ms: int | None


class ProducePurgatory:
    def __init__(self) -> None:
        self._waiting: dict[int, DelayedProduce] = {}  # insertion order = parking order
        self._by_partition: dict[TopicPartition, dict[int, None]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def watch(
        self, request_id: int, required_offsets: dict[TopicPartition, int], *, deadline_ms: int,
        settled: dict[TopicPartition, ErrorCode] | None = None,
    ) -> None:
        """Park a request. ``settled`` holds partitions already answered (an append
        that failed, or a high watermark already past the offset)."""
        if request_id in self._waiting:
            raise ValueError(f"request {request_id} is already waiting")
        errors = dict(settled or {})
        delayed = DelayedProduce(
            request_id, deadline_ms, {**required_offsets, **{tp: -1 for tp in errors}}, errors,
        )
        self._waiting[request_id] = delayed
        for tp in required_offsets:
            if tp not in errors:
                self._by_partition.setdefault(tp, {})[request_id] = None

    def on_partition_update(
        self, tp: TopicPartition, *, high_watermark: int, isr_size: int, min_insync_replicas: int
    ) -> None:
        """The partition's high watermark or ISR moved: settle what it satisfies."""
        error = ErrorCode.NONE if isr_size >= min_insync_replicas else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        self._settle(tp, high_watermark, error)

    def _settle(self, tp: TopicPartition, watermark: int, error: ErrorCode) -> None:
        """Settle, with ``error``, the requests waiting on ``tp`` whose offset ``watermark`` reached."""
        waiting = self._by_partition.get(tp)
        if not waiting:
            return
        for request_id in list(waiting):
            delayed = self._waiting[request_id]
            if watermark >= delayed.required_offsets[tp]:
                delayed.errors[tp] = error
                del waiting[request_id]

    def watches(self, tp: TopicPartition) -> bool:
        return bool(self._by_partition.get(tp))

    def on_leadership_lost(self, tp: TopicPartition) -> None:
        for request_id in self._by_partition.pop(tp, {}):
            self._waiting[request_id].errors[tp] = ErrorCode.NOT_LEADER

    def poll(self, now_ms: int) -> PurgatoryPoll:
        completed = []
        next_deadline = None
        for request_id in list(self._waiting):
            delayed = self._waiting[request_id]
            timed_out = not delayed.is_settled and now_ms >= delayed.deadline_ms
            if timed_out:
                for tp in delayed.required_offsets:
                    if tp not in delayed.errors:
                        delayed.errors[tp] = ErrorCode.REQUEST_TIMED_OUT
                        self._by_partition[tp].pop(request_id, None)
            if delayed.is_settled:
                del self._waiting[request_id]
                ordered = {tp: delayed.errors[tp] for tp in delayed.required_offsets}
                completed.append(ProduceCompletion(request_id, ordered, timed_out))
            elif next_deadline is None or delayed.deadline_ms < next_deadline:
                next_deadline = delayed.deadline_ms
        for tp in [tp for tp, waiting in self._by_partition.items() if not waiting]:
            del self._by_partition[tp]
        return PurgatoryPoll(completed, next_deadline)


class DeleteRecordsPurgatory(ProducePurgatory):
    """DeleteRecords requests waiting for the low watermark (see the module docstring);
    ``required_offsets`` are the offsets the log start must reach."""

    def on_low_watermark(self, tp: TopicPartition, low_watermark: int) -> None:
        """The partition's low watermark (``PartitionState.low_watermark``) may have moved."""
        self._settle(tp, low_watermark, ErrorCode.NONE)
