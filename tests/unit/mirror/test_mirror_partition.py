"""The mirror's per-partition core, driven without sockets: fetched bytes, append answers
and time in; what to fetch and append next, the mirrored end, lag, gaps and state out."""

from __future__ import annotations

import pytest

from mirror.batches import Misaligned, split_fetched
from mirror.partition import PartitionMirror, PartitionState
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch

TP = TopicPartition("orders", 0)


def batch(base: int, count: int, ts: int = 1_000) -> bytes:
    return build_batch([(None, b"v%d" % i, (), ts + i) for i in range(count)], base_offset=base)


def batches(*spans: tuple[int, int]) -> bytes:
    return b"".join(batch(base, count) for base, count in spans)


def fetched(pm: PartitionMirror, data: bytes, *, hw: int, start: int = 0, now: int = 0,
            wall: int = 10_000) -> None:
    _, epoch = pm.fetch_sent(now)
    pm.on_fetched(epoch, data, hw, start, now, wall)


def test_split_skips_batches_below_the_expected_offset_and_keeps_bytes_unchanged() -> None:
    data = batches((0, 3), (3, 2), (5, 4))
    chunk = split_fetched(data, 3)
    assert chunk is not None and not isinstance(chunk, Misaligned)
    assert (chunk.base_offset, chunk.next_offset, chunk.record_count, chunk.batch_count) == (3, 9, 6, 2)
    assert chunk.data == batches((3, 2), (5, 4))
    assert split_fetched(data, 9) is None


def test_split_reports_a_batch_straddling_the_expected_offset() -> None:
    found = split_fetched(batches((0, 5)), 2)
    assert isinstance(found, Misaligned) and "straddles" in found.reason


def test_split_reports_a_hole_and_keeps_the_batches_before_it() -> None:
    assert isinstance(split_fetched(batches((4, 2)), 0), Misaligned)
    chunk = split_fetched(batches((0, 2), (5, 1)), 0)
    assert chunk is not None and not isinstance(chunk, Misaligned) and chunk.next_offset == 2


def test_split_refuses_a_batch_with_a_bad_crc() -> None:
    from mirror.batches import CorruptFetch

    data = bytearray(batch(0, 3))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptFetch, match="CRC"):
        split_fetched(bytes(data), 0)


def test_fetches_run_ahead_of_the_append_in_flight_within_the_buffer_bound() -> None:
    pm = PartitionMirror(TP, max_buffered_bytes=10_000)
    assert pm.state == PartitionState.WAITING and not pm.wants_fetch(0)
    pm.reset(0)
    assert pm.wants_fetch(0)
    fetched(pm, batches((0, 10)), hw=30)
    chunk = pm.next_append(0)
    assert chunk is not None and (chunk.base_offset, chunk.next_offset) == (0, 10)
    assert pm.next_append(0) is None  # one append in flight
    assert pm.wants_fetch(0) and pm.fetch_offset == 10  # the next fetch while it is in flight
    fetched(pm, batches((10, 10)), hw=30)
    fetched(pm, batches((20, 10)), hw=30)
    outcome = pm.on_appended(high_watermark=10, duplicates=0, now_ms=5, wall_ms=11_000)
    assert outcome.records == 10 and pm.mirrored_end == 10 and pm.lag_records() == 20
    joined = pm.next_append(5)  # the two fetched chunks go as one append
    assert joined is not None and (joined.base_offset, joined.next_offset, joined.batch_count) == (10, 30, 2)
    pm.on_appended(high_watermark=30, duplicates=0, now_ms=6, wall_ms=11_000)
    assert pm.lag_records() == 0 and pm.lag_seconds(11_000) == 0.0


def test_a_full_buffer_stops_fetching() -> None:
    pm = PartitionMirror(TP, max_buffered_bytes=1)
    pm.reset(0)
    fetched(pm, batches((0, 10)), hw=100)
    assert not pm.wants_fetch(0)


def test_latency_is_arrival_minus_batch_max_timestamp() -> None:
    pm = PartitionMirror(TP)
    pm.reset(0)
    fetched(pm, batch(0, 5, ts=1_000), hw=5)  # max timestamp 1_004
    pm.next_append(0)
    outcome = pm.on_appended(high_watermark=5, duplicates=0, now_ms=1, wall_ms=1_254)
    assert outcome.latencies_ms == (250,)
    assert pm.status(1_254).latency_p50_ms == 250


def test_duplicates_are_counted_and_not_measured_again() -> None:
    pm = PartitionMirror(TP)
    pm.reset(0)
    fetched(pm, batches((0, 2), (2, 3)), hw=5)
    pm.next_append(0)
    outcome = pm.on_appended(high_watermark=5, duplicates=1, now_ms=1, wall_ms=2_000)
    assert outcome.duplicates == 1 and outcome.batches == 1 and len(outcome.latencies_ms) == 1


def test_a_retriable_append_failure_stalls_and_retries_the_same_bytes_after_the_backoff() -> None:
    pm = PartitionMirror(TP, retry_backoff_ms=100)
    pm.reset(0)
    fetched(pm, batches((0, 4)), hw=4)
    first = pm.next_append(0)
    pm.on_append_error(ErrorCode.NOT_LEADER, "moved", now_ms=10)
    assert pm.state == PartitionState.STALLED and "NOT_LEADER" in pm.reason
    assert pm.next_append(50) is None
    assert pm.next_append(110) is first
    pm.on_appended(high_watermark=4, duplicates=0, now_ms=120, wall_ms=5_000)
    assert pm.state == PartitionState.RUNNING and pm.mirrored_end == 4


def test_a_gap_below_the_source_log_start_is_recorded_exactly_and_mirroring_continues() -> None:
    pm = PartitionMirror(TP)
    pm.reset(100)
    _, epoch = pm.fetch_sent(0)
    pm.on_fetch_error(epoch, ErrorCode.OFFSET_OUT_OF_RANGE, "gone", 0, 50_000,
                      high_watermark=900, log_start_offset=700)
    assert not pm.new_gaps and pm.needs_end_check() and not pm.wants_fetch(1)  # the target decides
    pm.confirm_gap(100, 50_000)
    assert [(g.from_offset, g.to_offset) for g in pm.new_gaps] == [(100, 700)]
    assert pm.gap_records == 600 and pm.fetch_offset == 700
    fetched(pm, batches((700, 5)), hw=900, start=700)
    chunk = pm.next_append(1)
    assert chunk is not None and chunk.start_offset == 700  # the target starts the partition there
    pm.on_appended(high_watermark=705, duplicates=0, now_ms=2, wall_ms=50_000)
    assert pm.mirrored_end == 705 and pm.status(50_000).gaps == ((100, 700),)


def test_a_source_that_ends_below_the_mirrored_end_blocks_the_partition() -> None:
    pm = PartitionMirror(TP)
    pm.reset(500)
    _, epoch = pm.fetch_sent(0)
    pm.on_fetch_error(epoch, ErrorCode.OFFSET_OUT_OF_RANGE, "ahead", 0, 1, high_watermark=300,
                      log_start_offset=0)
    assert pm.state == PartitionState.BLOCKED and "below the mirrored offset 500" in pm.reason
    assert not pm.wants_fetch(10_000)


def test_an_offset_gap_from_the_target_makes_the_partition_read_the_target_end_again() -> None:
    pm = PartitionMirror(TP)
    pm.reset(10)
    _, old_epoch = pm.fetch_sent(0)
    pm.on_fetched(old_epoch, batches((10, 5)), 20, 0, 0, 1)
    pm.next_append(0)
    _, in_flight = pm.fetch_sent(1)
    pm.on_append_error(ErrorCode.MIRROR_OFFSET_GAP, "target ends at 3", 2)
    assert pm.needs_reset() and pm.state == PartitionState.WAITING
    pm.on_fetched(in_flight, batches((15, 5)), 20, 0, 3, 3)  # stale answer: ignored
    assert not pm.buffered
    pm.reset(3)
    assert pm.fetch_offset == 3


def test_a_fetch_without_an_answer_for_too_long_says_stalled() -> None:
    pm = PartitionMirror(TP, stall_timeout_ms=1_000)
    pm.reset(0)
    pm.fetch_sent(0)
    pm.tick(500)
    assert pm.state == PartitionState.RUNNING
    pm.tick(1_500)
    assert pm.state == PartitionState.STALLED and "link down" in pm.reason


def test_lag_seconds_is_the_age_of_the_oldest_fetched_unmirrored_record() -> None:
    pm = PartitionMirror(TP)
    pm.reset(0)
    fetched(pm, batch(0, 3, ts=4_000), hw=3)
    assert pm.lag_seconds(7_000) == 3.0


def test_a_diverged_or_promoted_target_blocks_the_partition() -> None:
    for code in (ErrorCode.MIRROR_DIVERGED, ErrorCode.NOT_MIRROR_TOPIC):
        pm = PartitionMirror(TP)
        pm.reset(0)
        fetched(pm, batches((0, 2)), hw=2)
        pm.next_append(0)
        pm.on_append_error(code, "no", 1)
        assert pm.state == PartitionState.BLOCKED and code.name in pm.reason
        assert pm.next_append(10_000) is None and not pm.wants_fetch(10_000)


def test_no_gap_when_the_target_already_went_further_than_this_mirror_knew() -> None:
    pm = PartitionMirror(TP)
    pm.reset(100)  # a killed predecessor's append of [100, 150) lands after this read
    _, epoch = pm.fetch_sent(0)
    pm.on_fetch_error(epoch, ErrorCode.OFFSET_OUT_OF_RANGE, "gone", 0, 1, high_watermark=900,
                      log_start_offset=120)
    assert pm.confirm_gap(150, 2) is None and not pm.gaps
    assert pm.fetch_offset == 150 and pm.wants_fetch(3)
