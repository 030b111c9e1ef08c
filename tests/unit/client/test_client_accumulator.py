"""RecordAccumulator: batch_size, linger_ms, buffer_memory accounting, drain, retry, expiry."""

import pytest

from mq.client.internals.accumulator import (
    NEW_BATCH_NEEDED,
    NO_MEMORY,
    RECORD_OVERHEAD,
    RecordAccumulator,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.types import CompressionType, TopicPartition
from mq.protocol.record_batch import decode_records, read_header

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
VALUE = b"v" * 100
COST = RECORD_OVERHEAD + len(VALUE)


def make(**kw) -> RecordAccumulator:
    args = dict(batch_size=16 * 1024, linger_ms=5, buffer_memory=1 << 20,
                delivery_timeout_ms=1000, retry_backoff_ms=100)
    args.update(kw)
    return RecordAccumulator(**args)


def append(acc: RecordAccumulator, tp: TopicPartition, now_ms: int, value: bytes = VALUE,
           key: bytes | None = None, headers=()):
    queue = acc.queue_for(tp)
    batch = acc.append(queue, 1_000 + now_ms, key, value, headers)
    if batch is NEW_BATCH_NEEDED:
        acc.open_batch(queue, now_ms)
        batch = acc.append(queue, 1_000 + now_ms, key, value, headers)
    return batch


def leader_of(tp: TopicPartition) -> int:
    return {TP0: 1, TP1: 2}.get(tp)  # type: ignore[return-value]


def test_first_append_asks_for_a_batch_then_fills_it() -> None:
    acc = make()
    queue = acc.queue_for(TP0)
    assert acc.append(queue, 1, None, VALUE, ()) is NEW_BATCH_NEEDED
    acc.open_batch(queue, 0)
    batch = acc.append(queue, 1, b"k", VALUE, ())
    assert batch.record_count == 1 and batch.topic_partition == TP0
    assert acc.append(queue, 2, None, VALUE, ()) is batch
    assert batch.record_count == 2


def test_batch_size_bounds_a_batch() -> None:
    acc = make(batch_size=1000)
    batches = {id(append(acc, TP0, 0)) for _ in range(30)}
    queue = acc.queue_for(TP0)
    assert len(batches) == len(queue.batches) > 3
    for batch in list(queue.batches)[:-1]:
        payload = batch.close()
        assert len(payload) <= 1000 + COST  # at most one record beyond the target
        assert read_header(payload).record_count == batch.record_count


def test_record_larger_than_batch_size_gets_its_own_batch() -> None:
    acc = make(batch_size=100)
    big = append(acc, TP0, 0, value=b"x" * 500)
    assert big.record_count == 1
    nxt = append(acc, TP0, 0)
    assert nxt is not big


def test_linger_decides_readiness() -> None:
    acc = make(linger_ms=5)
    append(acc, TP0, now_ms=100)
    nodes, next_ms, unknown = acc.ready(102, leader_of)
    assert nodes == [] and next_ms == 3 and unknown == []
    nodes, _, _ = acc.ready(105, leader_of)
    assert nodes == [1]


def test_full_batch_is_ready_before_linger() -> None:
    acc = make(batch_size=500, linger_ms=10_000)
    for _ in range(6):
        append(acc, TP0, 0)
    nodes, _, _ = acc.ready(1, leader_of)
    assert nodes == [1]


def test_flush_and_close_make_everything_ready() -> None:
    acc = make(linger_ms=10_000)
    append(acc, TP0, 0)
    assert acc.ready(1, leader_of)[0] == []
    acc.flushing = True
    assert acc.ready(1, leader_of)[0] == [1]


def test_unknown_leader_is_reported() -> None:
    acc = make(linger_ms=0)
    append(acc, TopicPartition("other", 0), 0)
    nodes, _, unknown = acc.ready(0, leader_of)
    assert nodes == [] and unknown == [TopicPartition("other", 0)]


def test_buffer_memory_is_reserved_per_record_and_released_per_batch() -> None:
    acc = make(buffer_memory=COST * 3)
    batch = append(acc, TP0, 0)
    append(acc, TP0, 0)
    append(acc, TP0, 0)
    assert acc.available_memory == 0
    assert acc.append(acc.queue_for(TP0), 0, None, VALUE, ()) is NO_MEMORY
    assert batch.reserved_bytes == 3 * COST
    drained = acc.drain(1, leader_of, 1 << 20, 0)
    assert drained == [batch]
    assert acc.available_memory == 0  # in flight still holds its memory
    acc.deallocate(batch)
    assert acc.available_memory == 3 * COST
    assert append(acc, TP0, 0) is not NO_MEMORY


def test_key_and_headers_count_against_memory() -> None:
    acc = make()
    append(acc, TP0, 0, key=b"k" * 10, headers=(("h", b"12345"),))
    assert acc.buffer_memory - acc.available_memory > COST + 10 + 5


def test_a_record_larger_than_buffer_memory_is_refused() -> None:
    acc = make(buffer_memory=1000)
    with pytest.raises(MqError) as err:
        acc.append(acc.queue_for(TP0), 0, None, b"x" * 2000, ())
    assert err.value.code == ErrorCode.RECORD_TOO_LARGE


def test_drain_takes_only_the_nodes_partitions_up_to_max_request_size() -> None:
    acc = make(batch_size=600, linger_ms=0)
    for _ in range(20):
        append(acc, TP0, 0)
        append(acc, TP1, 0)
    first = acc.drain(1, leader_of, 1500, 0)
    assert first and all(b.topic_partition == TP0 for b in first)
    assert sum(len(b.payload) for b in first) <= 1500 or len(first) == 1
    assert all(b.attempts == 1 and b.closed for b in first)
    rest = acc.drain(1, leader_of, 1 << 20, 0)
    assert rest and all(b.topic_partition == TP0 for b in rest)
    assert not acc.queue_for(TP0).batches
    assert acc.queue_for(TP1).batches  # node 2's partition untouched
    # the open batch was drained: the next append opens a new one
    assert acc.append(acc.queue_for(TP0), 0, None, VALUE, ()) is NEW_BATCH_NEEDED


def test_reenqueue_goes_first_after_backoff() -> None:
    acc = make(linger_ms=0, retry_backoff_ms=100)
    append(acc, TP0, 0)
    [batch] = acc.drain(1, leader_of, 1 << 20, 0)
    append(acc, TP0, 10)
    acc.reenqueue(batch, now_ms=10)
    nodes, next_ms, _ = acc.ready(50, leader_of)
    assert nodes == [] and next_ms == 60
    assert acc.drain(1, leader_of, 1 << 20, 50) == []  # backoff also holds later batches
    drained = acc.drain(1, leader_of, 1 << 20, 110)
    assert drained[0] is batch and batch.attempts == 2 and len(drained) == 2


def test_expired_batches_leave_the_queue() -> None:
    acc = make(delivery_timeout_ms=1000, linger_ms=10_000)
    old = append(acc, TP0, 0)
    assert acc.expired(999) == []
    assert acc.expired(1000) == [old]
    assert not acc.has_undrained()


def test_built_payload_round_trips_with_codec() -> None:
    acc = make(compression=CompressionType.LZ4)
    batch = append(acc, TP0, 0, key=b"k1", headers=(("a", b"b"),))
    append(acc, TP0, 1, value=b"second")
    records = decode_records(batch.close())
    assert [(r.key, r.value, r.headers) for r in records] == [
        (b"k1", VALUE, (("a", b"b"),)), (None, b"second", ())]
    assert read_header(batch.payload).compression == CompressionType.LZ4


def test_bulk_batch_closes_the_open_one_and_keeps_order() -> None:
    acc = make()
    opened = append(acc, TP0, 0)
    bulk = acc.add_built_batch(TP0, b"payload", 10, 500, 0)
    assert opened.closed and list(acc.queue_for(TP0).batches) == [opened, bulk]
    assert acc.available_memory == acc.buffer_memory - COST - 500
