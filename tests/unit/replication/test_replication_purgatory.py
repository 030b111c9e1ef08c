from __future__ import annotations

import pytest

from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.replication import DeleteRecordsPurgatory, ProducePurgatory

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
OK = ErrorCode.NONE


def test_completes_when_the_high_watermark_passes_the_batch() -> None:
    p = ProducePurgatory()
    p.watch(1, {A: 10}, deadline_ms=1_000)
    p.on_partition_update(A, high_watermark=9, isr_size=2, min_insync_replicas=2)
    result = p.poll(0)
    assert result.completed == [] and result.next_deadline_ms == 1_000
    p.on_partition_update(A, high_watermark=10, isr_size=2, min_insync_replicas=2)
    result = p.poll(1)
    assert [(c.request_id, c.errors, c.timed_out) for c in result.completed] == [(1, {A: OK}, False)]
    assert result.next_deadline_ms is None and len(p) == 0


def test_waits_for_every_partition_of_the_request() -> None:
    p = ProducePurgatory()
    p.watch(7, {A: 5, B: 3}, deadline_ms=100)
    p.on_partition_update(B, high_watermark=3, isr_size=3, min_insync_replicas=2)
    assert p.poll(10).completed == []
    p.on_partition_update(A, high_watermark=6, isr_size=3, min_insync_replicas=2)
    [done] = p.poll(10).completed
    assert done.errors == {A: OK, B: OK}


def test_times_out_the_partitions_still_waiting() -> None:
    p = ProducePurgatory()
    p.watch(1, {A: 5, B: 3}, deadline_ms=100)
    p.watch(2, {A: 2}, deadline_ms=300)
    p.on_partition_update(B, high_watermark=3, isr_size=3, min_insync_replicas=2)
    assert p.poll(99).next_deadline_ms == 100
    result = p.poll(100)
    assert [(c.request_id, c.errors, c.timed_out) for c in result.completed] == [
        (1, {A: ErrorCode.REQUEST_TIMED_OUT, B: OK}, True)
    ]
    assert result.next_deadline_ms == 300
    p.on_partition_update(A, high_watermark=2, isr_size=3, min_insync_replicas=2)
    assert [c.request_id for c in p.poll(101).completed] == [2]


def test_isr_below_minimum_when_the_high_watermark_arrives() -> None:
    p = ProducePurgatory()
    p.watch(1, {A: 4}, deadline_ms=100)
    p.on_partition_update(A, high_watermark=4, isr_size=1, min_insync_replicas=2)
    [done] = p.poll(0).completed
    assert done.errors == {A: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}


def test_leadership_lost_fails_the_waiting_requests() -> None:
    p = ProducePurgatory()
    p.watch(1, {A: 4, B: 1}, deadline_ms=100)
    p.watch(2, {B: 2}, deadline_ms=100)
    p.on_leadership_lost(A)
    assert p.poll(0).completed == []  # B still waiting
    p.on_leadership_lost(B)
    result = p.poll(0)
    assert [(c.request_id, c.errors) for c in result.completed] == [
        (1, {A: ErrorCode.NOT_LEADER, B: ErrorCode.NOT_LEADER}), (2, {B: ErrorCode.NOT_LEADER}),
    ]
    p.on_partition_update(B, high_watermark=10, isr_size=3, min_insync_replicas=1)  # nothing left


def test_partitions_settled_before_parking() -> None:
    p = ProducePurgatory()
    p.watch(1, {A: 4}, deadline_ms=100, settled={B: ErrorCode.RECORD_TOO_LARGE})
    p.on_partition_update(A, high_watermark=4, isr_size=3, min_insync_replicas=2)
    [done] = p.poll(0).completed
    assert done.errors == {A: OK, B: ErrorCode.RECORD_TOO_LARGE}
    p.watch(2, {}, deadline_ms=5, settled={A: OK})
    assert [c.request_id for c in p.poll(0).completed] == [2]
    p.watch(3, {A: 1}, deadline_ms=5)
    with pytest.raises(ValueError):
        p.watch(3, {A: 1}, deadline_ms=5)


def test_completions_come_in_parking_order() -> None:
    p = ProducePurgatory()
    for request_id in (5, 3, 9):
        p.watch(request_id, {A: request_id}, deadline_ms=1_000)
    p.on_partition_update(A, high_watermark=9, isr_size=2, min_insync_replicas=1)
    assert [c.request_id for c in p.poll(0).completed] == [5, 3, 9]


def test_delete_records_waits_for_the_low_watermark_not_the_high_watermark() -> None:
    p = DeleteRecordsPurgatory()
    p.watch(3, {A: 20, B: 5}, deadline_ms=500)
    assert p.watches(A) and p.watches(B)
    p.on_partition_update(A, high_watermark=30, isr_size=3, min_insync_replicas=2)  # not what it waits for
    p.on_low_watermark(A, 19)
    assert p.poll(0).completed == []
    p.on_low_watermark(A, 20)
    assert not p.watches(A) and p.poll(0).completed == []  # B still waits
    p.on_leadership_lost(B)
    (done,) = p.poll(0).completed
    assert (done.request_id, done.errors) == (3, {A: OK, B: ErrorCode.NOT_LEADER})
    p.watch(4, {A: 40}, deadline_ms=500)
    (late,) = p.poll(500).completed
    assert late.errors == {A: ErrorCode.REQUEST_TIMED_OUT} and late.timed_out
