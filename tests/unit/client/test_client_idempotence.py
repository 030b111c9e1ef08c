"""The idempotent producer's bookkeeping with the accumulator (no I/O): stamping,
the per-partition in-flight limit, retries alone and in sequence order, and the
KIP-360 epoch bump."""

from __future__ import annotations

from mq.client.internals.accumulator import ProducerBatch, RecordAccumulator
from mq.client.internals.idempotence import MAX_IN_FLIGHT_PER_PARTITION, IdempotenceManager
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch, crc_ok, read_header

TP = TopicPartition("t", 0)
PID = 1 << 30


def setup(batches: int, records: int = 2) -> tuple[RecordAccumulator, IdempotenceManager, list[ProducerBatch]]:
    acc = RecordAccumulator(batch_size=1 << 20, linger_ms=0, buffer_memory=1 << 24, retry_backoff_ms=0)
    idem = IdempotenceManager()
    acc.idempotence = idem
    out = [acc.add_built_batch(TP, build_batch([(None, b"v%d" % i, (), 1) for i in range(records)]),
                               records, 100, 0) for _ in range(batches)]
    return acc, idem, out


def drain(acc: RecordAccumulator) -> list[ProducerBatch]:
    return acc.drain(1, lambda tp: 1, 1 << 30, 0)


def header(batch: ProducerBatch):
    assert batch.payload is not None
    return read_header(batch.payload)


def test_nothing_is_sent_before_the_producer_id() -> None:
    acc, idem, _ = setup(2)
    assert drain(acc) == []
    idem.set_producer_id(PID, 0)
    sent = drain(acc)
    assert [(header(b).producer_id, header(b).producer_epoch, header(b).base_sequence) for b in sent] == [
        (PID, 0, 0), (PID, 0, 2)]
    assert all(crc_ok(b.payload, 0, header(b)) for b in sent)


def test_at_most_five_batches_in_flight_per_partition() -> None:
    acc, idem, batches = setup(8)
    idem.set_producer_id(PID, 0)
    first = drain(acc)
    assert len(first) == MAX_IN_FLIGHT_PER_PARTITION and drain(acc) == []
    idem.on_done(first[0])
    idem.on_acked(first[0])
    assert drain(acc) == [batches[5]]


def test_failed_batches_return_in_sequence_order_and_retry_alone() -> None:
    acc, idem, batches = setup(4)
    idem.set_producer_id(PID, 0)
    sent = drain(acc)
    # Answers arrive out of order: the third, then the first, then the rest.
    for b in (sent[2], sent[0], sent[1], sent[3]):
        idem.on_done(b)
        assert idem.should_retry(b, ErrorCode.NOT_LEADER) is None  # the usual rules: retriable
        acc.reenqueue(b, 0)
    assert [b.base_sequence for b in acc.queue_for(TP).batches] == [0, 2, 4, 6]
    again = drain(acc)
    assert again == [batches[0]] and header(again[0]).base_sequence == 0  # alone, same sequence
    assert drain(acc) == []  # nothing else of the partition while a retry is in flight
    idem.on_done(again[0])
    idem.on_acked(again[0])
    assert drain(acc) == [batches[1]]


def test_out_of_order_behind_an_unanswered_batch_is_retried_without_a_bump() -> None:
    acc, idem, batches = setup(2)
    idem.set_producer_id(PID, 0)
    first, second = drain(acc)
    assert idem.should_retry(second, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER) is True
    assert not idem.bump_requested


def test_a_real_gap_bumps_the_epoch_and_restamps_from_zero() -> None:
    acc, idem, batches = setup(3)
    idem.set_producer_id(PID, 4)
    first, second, third = drain(acc)
    for b in (first, second, third):
        idem.on_done(b)
    idem.on_acked(first)
    assert idem.should_retry(second, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER) is True  # next after acked
    assert idem.bump_requested
    acc.reenqueue(second, 0)
    acc.reenqueue(third, 0)
    assert drain(acc) == []  # nothing goes while the bump waits
    assert idem.maybe_bump_epoch() is False and idem.producer_epoch == 5 and idem.epoch_bumps == 1
    again = drain(acc)
    assert again == [second]
    assert (header(second).producer_epoch, header(second).base_sequence) == (5, 0)


def test_unknown_producer_bumps_and_a_stale_epoch_fails() -> None:
    acc, idem, (batch,) = setup(1)
    idem.set_producer_id(PID, 0)
    drain(acc)
    assert idem.should_retry(batch, ErrorCode.UNKNOWN_PRODUCER_ID) is True and idem.bump_requested
    assert idem.should_retry(batch, ErrorCode.INVALID_PRODUCER_EPOCH) is False


def test_a_batch_that_failed_for_good_bumps_only_if_it_was_not_appended() -> None:
    acc, idem, batches = setup(3)
    idem.set_producer_id(PID, 0)
    first, second, third = drain(acc)
    idem.on_done(first)
    idem.on_failed(first)  # e.g. delivery timeout: appended or not, unknown
    assert not idem.bump_requested
    idem.on_done(second)
    idem.on_acked(second)  # accepted after it: ``first`` was appended, nothing to do
    assert not idem.bump_requested
    acc2, idem2, (a, b) = setup(2)
    idem2.set_producer_id(PID, 0)
    drain(acc2)
    idem2.on_done(a)
    idem2.on_failed(a)
    idem2.on_done(b)
    assert idem2.should_retry(b, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER) is True
    assert idem2.bump_requested  # ``a`` never landed: the gap is real


def test_epoch_overflow_asks_for_a_new_producer_id() -> None:
    acc, idem, (batch,) = setup(1)
    idem.set_producer_id(PID, 32767)
    drain(acc)
    idem.on_done(batch)
    idem.should_retry(batch, ErrorCode.UNKNOWN_PRODUCER_ID)
    assert idem.maybe_bump_epoch() is True and not idem.has_producer_id
