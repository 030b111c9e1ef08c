"""RecordFuture and RecordMetadataList: metadata computed from batch results."""

import asyncio

import pytest

from mq.client.internals.accumulator import RecordAccumulator
from mq.client.results import PendingRecordFuture, RecordFuture, RecordMetadataList
from mq.core.errors import ErrorCode, MqError
from mq.core.types import RecordMetadata, TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def resolved_batch(loop, tp: TopicPartition, count: int, base: int, log_append_time: int = -1):
    acc = RecordAccumulator(batch_size=1 << 20, linger_ms=0, buffer_memory=1 << 20,
                            future_factory=loop.create_future)
    queue = acc.queue_for(tp)
    batch = acc.open_batch(queue, 0)
    for i in range(count):
        acc.append(queue, 100 + i, None, b"v", ())
    batch.future.set_result((base, log_append_time))
    return batch


async def test_record_future_offsets_and_timestamps() -> None:
    loop = asyncio.get_running_loop()
    batch = resolved_batch(loop, TP0, 3, base=40)
    fut = tuple.__new__(RecordFuture, (batch, 2, 102))
    assert fut.done() and await fut == RecordMetadata("t", 0, 42, 102)
    seen = []
    fut.add_done_callback(seen.append)
    await asyncio.sleep(0)
    assert seen == [fut]
    log_time = resolved_batch(loop, TP0, 1, base=7, log_append_time=999)
    assert tuple.__new__(RecordFuture, (log_time, 0, 5)).result().timestamp == 999


async def test_pending_record_future_resolves_through_its_batch_or_fails() -> None:
    loop = asyncio.get_running_loop()
    pending = PendingRecordFuture(loop.create_future())
    assert not pending.done()
    pending.attach(tuple.__new__(RecordFuture, (resolved_batch(loop, TP1, 1, base=3), 0, 1)))
    assert (await pending).offset == 3
    failing = PendingRecordFuture(loop.create_future())
    failing.fail(MqError(ErrorCode.BUFFER_EXHAUSTED, "full"))
    with pytest.raises(MqError) as err:
        await failing
    assert err.value.code == ErrorCode.BUFFER_EXHAUSTED and failing.exception() is not None


async def test_metadata_list_maps_input_order_across_partitions() -> None:
    loop = asyncio.get_running_loop()
    # inputs 0,2,4 went to partition 0 (two batches), inputs 1,3 to partition 1
    p0_indices, p1_indices = [0, 2, 4], [1, 3]
    pieces = [(resolved_batch(loop, TP0, 2, base=10), p0_indices),
              (resolved_batch(loop, TP0, 1, base=12), p0_indices),
              (resolved_batch(loop, TP1, 2, base=50), p1_indices)]
    result = await RecordMetadataList.gather(pieces, 5, timestamp=77)
    assert [(m.partition, m.offset) for m in result] == [(0, 10), (1, 50), (0, 11), (1, 51), (0, 12)]
    assert result[-1].offset == 12 and len(result[1:3]) == 2 and result[0].timestamp == 77
    with pytest.raises(IndexError):
        result[5]


async def test_metadata_list_of_contiguous_batches() -> None:
    loop = asyncio.get_running_loop()
    pieces = [(resolved_batch(loop, TP0, 3, base=0), None), (resolved_batch(loop, TP0, 2, base=3), None)]
    result = await RecordMetadataList.gather(pieces, 5, timestamp=1)
    assert [m.offset for m in result] == [0, 1, 2, 3, 4]


async def test_metadata_list_raises_a_failed_batch() -> None:
    loop = asyncio.get_running_loop()
    bad = resolved_batch(loop, TP0, 1, base=0)
    bad.future = loop.create_future()
    bad.future.set_exception(MqError(ErrorCode.RECORD_TOO_LARGE, "big"))
    with pytest.raises(MqError):
        await RecordMetadataList.gather([(bad, None)], 1, timestamp=1)
