"""Copy one offset range of a partition, batch for batch, to a mirror topic partition.

Fail-back saves the old primary's diverged tail this way: ``[start, end)`` of
``orders-0`` goes to ``orders.diverged-0`` at the *same offsets* (the first append asks the
empty destination to start at ``start``), bytes unchanged, so the saved records keep their
offsets, timestamps and CRCs. Re-running it is harmless: batches the destination already
has are acknowledged as duplicates.
"""

from __future__ import annotations

from mirror.batches import Misaligned, split_fetched
from mq.client import Admin
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

FETCH_BYTES = 1024 * 1024


async def copy_range(source: Admin, source_tp: TopicPartition, target: Admin, target_tp: TopicPartition,
                     start: int, end: int) -> int:
    """Copy ``[start, end)``; returns the records copied. ``end`` must be a batch boundary
    at or below the source's high watermark."""
    offset = start
    copied = 0
    while offset < end:
        raw = await source.fetch_raw(source_tp, offset, FETCH_BYTES)
        found = split_fetched(raw.records, offset)
        if isinstance(found, Misaligned):
            raise MqError(ErrorCode.CORRUPT_MESSAGE, f"{source_tp}: {found.reason}")
        if found is None:
            raise MqError(ErrorCode.OFFSET_OUT_OF_RANGE,
                          f"{source_tp}: nothing to read at {offset} (high watermark "
                          f"{raw.high_watermark}), expected records up to {end}")
        await target.mirror_append(target_tp, found.data, acks=-1, fetch_offset=offset,
                                   start_offset=start if offset == start else -1)
        copied += found.next_offset - offset
        offset = found.next_offset
    return copied
