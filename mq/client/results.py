"""What a send returns: per-record futures that cost one small object, and the lazy
result list of ``send_many``.

A ``RecordFuture`` is (batch, index in batch, timestamp): awaiting it awaits the
batch's single asyncio future and computes ``RecordMetadata(offset = base_offset +
index)``. Resolving a batch of 1,000 records therefore sets one future, not 1,000.

Consumer groups' values live in the sans-IO ``internals.offset_commit`` (the cores use
them) and are re-exported here: ``OffsetAndMetadata(offset, metadata="",
leader_epoch=-1)`` (offset = next record to read) and ``GroupMetadata(group_id,
generation_id, member_id, group_instance_id)``.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Callable, Generator, Sequence
from typing import Any

from mq.client.internals.accumulator import ProducerBatch
from mq.client.internals.offset_commit import GroupMetadata, OffsetAndMetadata
from mq.core.types import RecordMetadata

__all__ = ["GroupMetadata", "OffsetAndMetadata", "PendingRecordFuture", "RecordFuture",
           "RecordMetadataList"]


class RecordFuture(tuple):
    """The delivery of one appended record: awaitable, with ``done``, ``result``,
    ``exception`` and ``add_done_callback`` like an ``asyncio.Future``.

    A tuple ``(batch, index, timestamp)`` so that making one per record is a single
    C-level allocation (``tuple.__new__(RecordFuture, (...))``)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        fut = self[0].future
        if not fut.done():
            yield from fut
        return self.result()

    def done(self) -> bool:
        return self[0].future.done()

    def result(self) -> RecordMetadata:
        batch, index, timestamp = self
        base, log_append_time = batch.future.result()
        tp = batch.topic_partition
        return RecordMetadata(tp.topic, tp.partition, base + index if base >= 0 else -1,
                              log_append_time if log_append_time >= 0 else timestamp)

    def exception(self) -> BaseException | None:
        return self[0].future.exception()

    def add_done_callback(self, fn: Callable[[Any], Any]) -> None:
        """``fn(self)`` once the record is acknowledged or failed."""
        self[0].future.add_done_callback(lambda _: fn(self))

    def __repr__(self) -> str:
        return f"<RecordFuture {'done' if self.done() else 'pending'} index={self[1]}>"


class PendingRecordFuture:
    """A record still waiting for buffer memory or metadata (``Producer.send`` when the
    buffer is full): the same surface as ``RecordFuture``, resolved in two steps."""

    __slots__ = ("_appended", "_waiter")

    def __init__(self, waiter: asyncio.Future) -> None:
        self._appended: RecordFuture | PendingRecordFuture | None = None
        self._waiter = waiter

    def attach(self, appended: RecordFuture | PendingRecordFuture) -> None:
        self._appended = appended
        if not self._waiter.done():
            self._waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self._waiter.done():
            self._waiter.set_exception(error)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if self._appended is None:
            yield from self._waiter
        assert self._appended is not None
        return (yield from self._appended.__await__())

    def done(self) -> bool:
        if self._appended is None:
            return self._waiter.done()
        return self._appended.done()

    def result(self) -> RecordMetadata:
        if self._appended is None:
            self._waiter.result()  # raises the failure, or InvalidStateError if pending
            raise asyncio.InvalidStateError("record not appended yet")
        return self._appended.result()

    def exception(self) -> BaseException | None:
        if self._appended is None:
            return self._waiter.exception()
        return self._appended.exception()

    def add_done_callback(self, fn: Callable[[Any], Any]) -> None:
        def on_waiter(waiter: asyncio.Future) -> None:
            if self._appended is None:
                fn(self)
            else:  # a RecordFuture, or another producer's PendingRecordFuture (home routing)
                self._appended.add_done_callback(lambda _: fn(self))

        self._waiter.add_done_callback(on_waiter)

    def __repr__(self) -> str:
        return f"<PendingRecordFuture {'done' if self.done() else 'pending'}>"


class RecordMetadataList(Sequence[RecordMetadata]):
    """``send_many``'s answer: RecordMetadata per input record, in input order, made on
    access (creating a million dataclasses up front would cost more than sending them)."""

    def __init__(self, pieces: list[tuple[ProducerBatch, list[int] | None, int, int]],
                 count: int, timestamp: int) -> None:
        self._pieces = pieces  # (batch, input indices or None, base_offset, log_append_time)
        self._count = count
        self._timestamp = timestamp
        self._index: list[tuple[int, int]] | None = None  # input index -> (piece, position)
        self._starts: list[int] = []
        contiguous = all(indices is None for _, indices, _, _ in pieces)
        if contiguous:
            start = 0
            for batch, _, _, _ in pieces:
                self._starts.append(start)
                start += batch.record_count

    @classmethod
    async def gather(cls, pieces: list[tuple[ProducerBatch, list[int] | None]], count: int,
                     timestamp: int) -> RecordMetadataList:
        """Wait for every batch; raise the first failure."""
        futures = [batch.future for batch, _ in pieces]
        if futures:
            await asyncio.wait(futures)  # type: ignore[arg-type]
        for fut in futures:
            exc = fut.exception()  # type: ignore[attr-defined]
            if exc is not None:
                for other in futures:
                    other.exception()  # type: ignore[attr-defined]  (mark retrieved)
                raise exc
        resolved = []
        for batch, indices in pieces:
            base, lat = batch.future.result()  # type: ignore[attr-defined]
            resolved.append((batch, indices, base, lat))
        return cls(resolved, count, timestamp)

    def __len__(self) -> int:
        return self._count

    def _locate(self, i: int) -> tuple[int, int]:
        if self._starts:
            piece = bisect_right(self._starts, i) - 1
            return piece, i - self._starts[piece]
        if self._index is None:
            index: list[tuple[int, int]] = [(0, 0)] * self._count
            offsets: dict[int, int] = {}
            for p, (batch, indices, _, _) in enumerate(self._pieces):
                # indices of one group span several consecutive batches
                key = id(indices)
                start = offsets.get(key, 0)
                assert indices is not None
                for j in range(batch.record_count):
                    index[indices[start + j]] = (p, j)
                offsets[key] = start + batch.record_count
            self._index = index
        return self._index[i]

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        piece, pos = self._locate(i)
        batch, _, base, lat = self._pieces[piece]
        tp = batch.topic_partition
        return RecordMetadata(tp.topic, tp.partition, base + pos if base >= 0 else -1,
                              lat if lat >= 0 else self._timestamp)

    def __repr__(self) -> str:
        return f"<RecordMetadataList {self._count} records in {len(self._pieces)} batches>"
