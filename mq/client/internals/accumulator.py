"""RecordAccumulator: per-partition queues of ProducerBatch, as in Kafka's producer.

``append`` adds a record to the last open batch of its partition (a new batch when the
last one is full), reserving ``buffer_memory`` for it; ``ready`` says which leaders have
something to send (a full batch, ``linger_ms`` elapsed, a flush, a close); ``drain``
takes whole batches for one request per leader. A batch gives its memory back when it
completes (acknowledged, failed or expired). Retried batches go back to the *front* of
their queue, after ``retry_backoff_ms``.

Memory is accounted per record (payload + a fixed overhead) rather than Kafka's per
batch, so a producer with ``buffer_memory`` smaller than ``batch_size`` still works and
back-pressure starts exactly when the records waiting exceed the budget.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from mq.core.errors import ErrorCode, MqError
from mq.core.types import CompressionType, TopicPartition
from mq.protocol.record_batch import HEADER_SIZE, BatchBuilder

RECORD_OVERHEAD = 24
"""Bytes charged per record beyond key and value: msgpack framing, deltas, headers' bulk."""

NEW_BATCH_NEEDED = "new-batch-needed"
NO_MEMORY = "no-memory"

Headers = tuple[tuple[str, bytes], ...]


def record_cost(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """What one record charges against ``buffer_memory`` and ``batch_size``."""
    cost = RECORD_OVERHEAD + (len(value) if value is not None else 0)
    if key is not None:
        cost += len(key)
    for name, hvalue in headers:
        cost += len(name) + len(hvalue) + 4
    return cost


def _seq_after(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes after ``b`` (sequences wrap at 2**31)."""
    return 0 < (a - b) % 2**31 < 2**30


class ProducerBatch:
    """Records for one partition, sent and acknowledged together.

    ``future`` is whatever the shell's ``future_factory`` made (an asyncio future in
    ``mq.client.producer``); the core never touches it. ``payload`` is the built batch,
    kept so a retry resends the same bytes.
    """

    __slots__ = (
        "append",
        "attempts",
        "base_sequence",
        "builder",
        "closed",
        "created_ms",
        "estimated_size",
        "future",
        "payload",
        "producer_epoch",
        "record_count",
        "reserved_bytes",
        "retry_at_ms",
        "topic_partition",
    )

    def __init__(self, topic_partition: TopicPartition, builder: BatchBuilder, created_ms: int,
                 future: object) -> None:
        self.topic_partition = topic_partition
        self.builder: BatchBuilder | None = builder
        self.record_count = 0
        self.estimated_size = HEADER_SIZE
        self.created_ms = created_ms
        self.reserved_bytes = 0
        self.attempts = 0
        self.retry_at_ms = 0
        self.future = future
        self.payload: bytes | None = None
        self.closed = False
        self.append = builder.append if builder is not None else None  # bound: hot path
        self.base_sequence = -1  # idempotence: stamped when first sent (-1: not yet)
        self.producer_epoch = -1

    def close(self) -> bytes:
        """Stop appending and build the bytes (once)."""
        if self.payload is None:
            assert self.builder is not None
            self.payload = self.builder.build()
            self.builder = None
            self.append = None
        self.closed = True
        return self.payload

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.topic_partition}, records={self.record_count}, "
                f"attempts={self.attempts})")


class PartitionQueue:
    """One partition's batches, oldest first, and the open batch appends go to.

    The producer keeps a handle per partition so the per-record path never hashes a
    TopicPartition (a Python-level ``__hash__``)."""

    __slots__ = ("batches", "open", "topic_partition")

    def __init__(self, topic_partition: TopicPartition) -> None:
        self.topic_partition = topic_partition
        self.batches: deque[ProducerBatch] = deque()
        self.open: ProducerBatch | None = None

    def close_open(self) -> None:
        batch = self.open
        if batch is not None:
            self.open = None
            batch.close()


class RecordAccumulator:
    def __init__(self, *, batch_size: int, linger_ms: int, buffer_memory: int,
                 compression: CompressionType = CompressionType.NONE,
                 delivery_timeout_ms: int = 120_000, retry_backoff_ms: int = 100,
                 future_factory: Callable[[], object] = lambda: None) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.available_memory = buffer_memory
        self.compression = CompressionType.parse(compression)
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.future_factory = future_factory
        self.queues: dict[TopicPartition, PartitionQueue] = {}
        self.idempotence: Any = None
        """An ``IdempotenceManager`` when the producer is idempotent: it gates and stamps
        what ``drain`` takes (``mq.client.internals.idempotence``)."""
        self.transactional = False  # a transactional producer's batches (attribute bit 4)
        self.flushing = False
        self.closing = False

    def queue_for(self, tp: TopicPartition) -> PartitionQueue:
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = PartitionQueue(tp)
        return queue

    # ------------------------------------------------------------------ append

    def append(self, queue: PartitionQueue, timestamp_ms: int, key: bytes | None,
               value: bytes | None, headers: Headers) -> ProducerBatch | str:
        """Add one record to the open batch of ``queue`` (from ``queue_for``).

        Returns the batch (the record is at ``record_count - 1``); ``NEW_BATCH_NEEDED``
        when there is no open batch with room (the caller may switch partition — the
        sticky partitioner does — then calls ``open_batch`` with the time and appends
        again); or ``NO_MEMORY`` (the caller waits for memory). This runs once per
        record, so the clock is read only per batch and the cost is inlined."""
        cost = RECORD_OVERHEAD + (len(value) if value is not None else 0)
        if key is not None:
            cost += len(key)
        if headers:
            cost = record_cost(key, value, headers)
        if cost > self.available_memory:
            if cost > self.buffer_memory:
                raise MqError(ErrorCode.RECORD_TOO_LARGE,
                              f"a {cost}-byte record is larger than buffer_memory={self.buffer_memory}")
            return NO_MEMORY
        batch = queue.open
        if batch is None or (batch.record_count and batch.estimated_size + cost > self.batch_size):
            return NEW_BATCH_NEEDED
        batch.estimated_size = batch.append(timestamp_ms, key, value, headers)
        batch.record_count += 1
        batch.reserved_bytes += cost
        self.available_memory -= cost
        return batch

    def open_batch(self, queue: PartitionQueue, now_ms: int) -> ProducerBatch:
        """Close the partition's open batch (it is full) and open an empty one."""
        queue.close_open()
        batch = ProducerBatch(queue.topic_partition, BatchBuilder(compression=self.compression,
                                                                   is_transactional=self.transactional),
                              now_ms, self.future_factory())
        queue.batches.append(batch)
        queue.open = batch
        return batch

    def add_built_batch(self, tp: TopicPartition, payload: bytes, record_count: int, cost: int,
                        now_ms: int) -> ProducerBatch:
        """Bulk path: queue a batch the caller built whole (``send_many``), charging ``cost``
        bytes of memory (the caller waited until they were available)."""
        batch = ProducerBatch(tp, None, now_ms, self.future_factory())
        batch.payload = payload
        batch.closed = True
        batch.record_count = record_count
        batch.estimated_size = cost
        batch.reserved_bytes = cost
        self.available_memory -= cost
        queue = self.queue_for(tp)
        queue.close_open()
        queue.batches.append(batch)
        return batch

    # ------------------------------------------------------------------ sending

    def ready(self, now_ms: int, leader_for: Callable[[TopicPartition], int | None]
              ) -> tuple[list[int], int | None, list[TopicPartition]]:
        """(leaders with sendable batches in first-seen order, ms until the next batch
        becomes sendable or None, partitions whose leader is unknown)."""
        nodes: list[int] = []
        next_ms: int | None = None
        unknown: list[TopicPartition] = []
        for tp, queue in self.queues.items():
            batches = queue.batches
            if not batches:
                continue
            first = batches[0]
            if first.retry_at_ms > now_ms:
                wait = first.retry_at_ms - now_ms
                next_ms = wait if next_ms is None else min(next_ms, wait)
                continue
            leader = leader_for(tp)
            if leader is None:
                unknown.append(tp)
                continue
            if (len(batches) > 1 or first.closed or self.flushing or self.closing
                    or now_ms - first.created_ms >= self.linger_ms):
                if leader not in nodes:
                    nodes.append(leader)
            else:
                wait = first.created_ms + self.linger_ms - now_ms
                next_ms = wait if next_ms is None else min(next_ms, wait)
        return nodes, next_ms, unknown

    def drain(self, node: int, leader_for: Callable[[TopicPartition], int | None],
              max_request_size: int, now_ms: int) -> list[ProducerBatch]:
        """Take batches for one request to ``node``: every sendable batch of each partition
        it leads, oldest first, until ``max_request_size`` (at least one batch)."""
        drained: list[ProducerBatch] = []
        size = 0
        idempotence = self.idempotence
        for tp, queue in self.queues.items():
            batches = queue.batches
            if not batches or leader_for(tp) != node:
                continue
            while batches:
                first = batches[0]
                if first.retry_at_ms > now_ms:
                    break
                if idempotence is not None and not idempotence.can_send(tp, first):
                    break
                if queue.open is first:
                    queue.open = None
                payload = first.close()
                if drained and size + len(payload) > max_request_size:
                    return drained
                batches.popleft()
                retry = first.attempts > 0
                first.attempts += 1
                if idempotence is not None:
                    idempotence.stamp(first)
                drained.append(first)
                size += len(payload)
                if idempotence is not None and retry:
                    break  # a retry goes alone: the leader may answer it as a duplicate
        return drained

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """Put a batch that failed retriably back at the front of its queue, after backoff."""
        batch.retry_at_ms = now_ms + self.retry_backoff_ms
        batches = self.queue_for(batch.topic_partition).batches
        if batch.base_sequence < 0:
            batches.appendleft(batch)
            return
        # Idempotent: answers of several in-flight requests come back in any order;
        # the queue must stay in sequence order for the leader to accept the retries.
        for i, queued in enumerate(batches):
            if queued.base_sequence < 0 or queued.producer_epoch != batch.producer_epoch \
                    or _seq_after(queued.base_sequence, batch.base_sequence):
                batches.insert(i, batch)
                return
        batches.append(batch)

    def deallocate(self, batch: ProducerBatch) -> None:
        """Give a completed batch's memory back."""
        self.available_memory += batch.reserved_bytes
        batch.reserved_bytes = 0

    # ------------------------------------------------------------------ expiry and state

    def expired(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches older than ``delivery_timeout_ms``."""
        out: list[ProducerBatch] = []
        for queue in self.queues.values():
            batches = queue.batches
            while batches and now_ms - batches[0].created_ms >= self.delivery_timeout_ms:
                batch = batches.popleft()
                if queue.open is batch:
                    queue.open = None
                batch.close()
                out.append(batch)
        return out

    def abort_all(self) -> list[ProducerBatch]:
        """Remove every queued batch (on forced close)."""
        out = []
        for queue in self.queues.values():
            out.extend(queue.batches)
            queue.batches.clear()
            queue.open = None
        return out

    def has_undrained(self) -> bool:
        return any(queue.batches for queue in self.queues.values())

    def queued_batches(self) -> Iterable[ProducerBatch]:
        for queue in self.queues.values():
            yield from queue.batches
