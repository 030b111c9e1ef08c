"""Log: appends, validation, reads, timestamps, truncation, retention, flush, reopen."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import DIR, NOW, batch, config, open_log, read_all, values

from mq.core.errors import ErrorCode, MqError
from mq.core.types import CleanupPolicy, TimestampType
from mq.protocol.record_batch import compute_crc, iter_batches, read_header
from mq.storage import Log, LogCorruptedError, MemoryFileIO


def _with_header(data: bytes, fmt: str, at: int, value: int, *, fix_crc: bool = True) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, at, value)
    if fix_crc:
        struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


# ---------------------------------------------------------------- append_as_leader


def test_leader_assigns_offsets_epoch_and_returns_info() -> None:
    log = open_log()
    first = log.append_as_leader(batch(3), leader_epoch=7, now_ms=NOW)
    second = log.append_as_leader(batch(2) + batch(4), leader_epoch=7, now_ms=NOW)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset, second.record_count) == (3, 8, 6)
    assert second.log_append_time_ms == -1 and second.max_timestamp == NOW + 3
    assert log.log_end_offset == 9
    data = log.read(0, max_bytes=10_000).records
    headers = [h for _, h in iter_batches(data)]
    assert [h.base_offset for h in headers] == [0, 3, 5]
    assert {h.partition_leader_epoch for h in headers} == {7}
    assert [r.offset for r in read_all(log)] == list(range(9))


def test_leader_does_not_modify_the_callers_bytes() -> None:
    log = open_log()
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    request = bytearray(batch(2))
    before = bytes(request)
    log.append_as_leader(request, leader_epoch=0, now_ms=NOW)
    assert bytes(request) == before


def test_log_append_time_rewrites_timestamps() -> None:
    log = open_log(cfg=config(message_timestamp_type=TimestampType.LOG_APPEND_TIME))
    info = log.append_as_leader(batch(2, ts=5), leader_epoch=0, now_ms=NOW + 99)
    assert info.log_append_time_ms == NOW + 99 and info.max_timestamp == NOW + 99
    header = read_header(log.read(0, max_bytes=1000).records)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in read_all(log)] == [NOW + 99] * 2


@pytest.mark.parametrize(
    "bad, code",
    [
        (_with_header(batch(2), ">I", 17, 1234, fix_crc=False), ErrorCode.CORRUPT_MESSAGE),
        (batch(2)[:-1], ErrorCode.CORRUPT_MESSAGE),
        (_with_header(batch(2), ">b", 16, 1, fix_crc=False), ErrorCode.CORRUPT_MESSAGE),
        (batch(40, size=100), ErrorCode.RECORD_TOO_LARGE),
        (batch(2, ts=NOW - 10_000), ErrorCode.INVALID_TIMESTAMP),
        (batch(2, ts=NOW + 10_000), ErrorCode.INVALID_TIMESTAMP),
        (_with_header(batch(2), ">i", 57, 3), ErrorCode.INVALID_RECORD),  # record_count
        (_with_header(batch(2), ">h", 21, 0x20), ErrorCode.INVALID_RECORD),  # control
    ],
    ids=["crc", "short", "magic", "too-large", "old-ts", "future-ts", "count", "control"],
)
def test_a_bad_batch_appends_nothing(bad: bytes, code: ErrorCode) -> None:
    cfg = config(max_message_bytes=2048, message_timestamp_difference_max_ms=5_000)
    log = open_log(cfg=cfg)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    size = log.size_bytes
    with pytest.raises(MqError) as err:
        log.append_as_leader(batch(3) + bad, leader_epoch=0, now_ms=NOW)
    assert err.value.code == code
    assert log.log_end_offset == 1 and log.size_bytes == size


@settings(max_examples=300, deadline=None)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
    junk=st.binary(max_size=80),
)
def test_mangled_requests_get_a_named_error(flips: list[tuple[int, int]], cut: int, junk: bytes) -> None:
    log = open_log(cfg=config(max_message_bytes=4096, message_timestamp_difference_max_ms=10**6))
    request = bytearray(batch(3) + batch(4, size=50))
    for at, value in flips:
        request[at % len(request)] = value
    request = request[: max(1, cut % (len(request) + 1))] + junk
    try:
        info = log.append_as_leader(bytes(request), leader_epoch=0, now_ms=NOW)
    except MqError as exc:
        assert exc.code != ErrorCode.UNKNOWN_SERVER_ERROR
        assert log.log_end_offset == 0 and log.size_bytes == 0
    else:
        assert log.log_end_offset == info.last_offset + 1
        assert len(read_all(log)) == log.log_end_offset


def test_an_empty_request_is_refused() -> None:
    log = open_log()
    with pytest.raises(MqError) as err:
        log.append_as_leader(b"", leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.INVALID_RECORD and log.log_end_offset == 0


def test_roll_by_size_and_offsets_continue_across_segments() -> None:
    log = open_log(cfg=config(segment_bytes=1024))
    for i in range(40):
        log.append_as_leader(batch(2, tag=f"b{i}-"), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 3
    assert all(s.size <= 1024 for s in log.segments)
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    assert [r.offset for r in read_all(log)] == list(range(80))


def test_roll_by_age_uses_first_batch_timestamp() -> None:
    log = open_log(cfg=config(segment_ms=1000))
    log.append_as_leader(batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW + 999), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=NOW + 1001), leader_epoch=0, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_index_full() -> None:
    log = open_log(cfg=config(segment_bytes=10**6, index_interval_bytes=0, segment_index_bytes=64))
    for _ in range(20):
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) >= 3
    assert all(len(s.offset_index) <= 8 for s in log.segments)


def test_explicit_roll_on_empty_active_is_noop() -> None:
    log = open_log()
    assert log.roll(NOW) is log.active_segment and len(log.segments) == 1
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log.roll(NOW)
    log.roll(NOW)
    assert [s.base_offset for s in log.segments] == [0, 2]


# ------------------------------------------------------------------------ follower


def test_follower_keeps_offsets_and_allows_gaps() -> None:
    leader = open_log()
    leader.append_as_leader(batch(3), leader_epoch=2, now_ms=NOW)
    leader.append_as_leader(batch(2), leader_epoch=2, now_ms=NOW)
    fetched = leader.read(0, max_bytes=10_000).records
    follower = open_log(MemoryFileIO())
    info = follower.append_as_follower(fetched, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert follower.read(0, max_bytes=10_000).records == fetched
    gap = bytearray(batch(1))
    struct.pack_into(">q", gap, 0, 100)
    follower.append_as_follower(bytes(gap), now_ms=NOW)
    assert follower.log_end_offset == 101
    assert follower.read(5, max_bytes=1000).first_offset == 100
    with pytest.raises(MqError) as err:
        follower.append_as_follower(fetched, now_ms=NOW)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


# ---------------------------------------------------------------------------- read


def _log_with(n_batches: int, count: int = 2, **cfg: object) -> Log:
    log = open_log(cfg=config(**cfg))
    for i in range(n_batches):
        log.append_as_leader(batch(count, tag=f"b{i}-", ts=NOW + 10 * i), leader_epoch=0, now_ms=NOW)
    return log


def test_read_returns_whole_batches_from_the_one_holding_the_offset() -> None:
    log = _log_with(10)
    info = log.read(5, max_bytes=10_000)
    assert info.first_offset == 4
    assert next(h.base_offset for _, h in iter_batches(info.records)) == 4


def test_read_cuts_at_batch_boundary_and_min_one_batch() -> None:
    log = _log_with(10)
    size = read_header(log.read(0, max_bytes=1000).records).size
    assert len(log.read(0, max_bytes=size * 3 - 1).records) == size * 2
    assert len(log.read(0, max_bytes=1).records) == size
    assert log.read(0, max_bytes=1, min_one_batch=False).records == b""


def test_read_respects_max_offset_and_range() -> None:
    log = _log_with(10)
    data = log.read(0, max_bytes=10_000, max_offset=6).records
    assert [h.base_offset for _, h in iter_batches(data)] == [0, 2, 4]
    assert log.read(6, max_bytes=100, max_offset=6).records == b""
    assert log.read(20, max_bytes=100) .records == b""
    for bad in (-1, 21):
        with pytest.raises(MqError) as err:
            log.read(bad, max_bytes=100)
        assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_offset_for_timestamp() -> None:
    log = _log_with(30, segment_bytes=1024)
    assert len(log.segments) > 1
    # batch i has records at NOW + 10 i and NOW + 10 i + 1, offsets 2i and 2i + 1
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 101) == (21, NOW + 101)
    assert log.offset_for_timestamp(NOW + 102) == (22, NOW + 110)
    assert log.offset_for_timestamp(NOW + 1000) is None
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(-1) == (60, -1)
    log.delete_records(23)
    assert log.offset_for_timestamp(NOW) == (23, NOW + 111)


# ------------------------------------------------------------------ truncate/delete


def test_truncate_to_batch_boundary_and_across_segments() -> None:
    log = _log_with(40, segment_bytes=1024)
    n = len(log.segments)
    log.truncate_to(13)  # mid-batch: the batch 12..13 goes too
    assert log.log_end_offset == 12 and len(log.segments) < n
    assert [r.offset for r in read_all(log)] == list(range(12))
    log.append_as_leader(batch(1, tag="new"), leader_epoch=1, now_ms=NOW)
    assert values(read_all(log))[-1] == b"new0"
    log.truncate_to(100)
    assert log.log_end_offset == 13


def test_truncate_below_log_start_restarts_the_log() -> None:
    log = _log_with(40, segment_bytes=1024)
    log.delete_records(30)
    log.truncate_to(10)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (10, 10, 1)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert [r.offset for r in read_all(log)] == [10]


@pytest.mark.parametrize("restart_at", [500, 25, 0])
def test_truncate_fully_and_start_at_restarts_an_empty_log_durably(restart_at: int) -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=1024))
    for i in range(40):
        log.append_as_leader(batch(2, tag=f"b{i}-"), leader_epoch=0, now_ms=NOW)
    log.flush()
    assert len(log.segments) > 1
    log.truncate_fully_and_start_at(restart_at)
    assert (log.log_start_offset, log.log_end_offset) == (restart_at, restart_at)
    assert [s.base_offset for s in log.segments] == [restart_at] and log.size_bytes == 0
    assert log.read(restart_at, max_bytes=1000).records == b""
    with pytest.raises(MqError) as err:
        log.read(max(restart_at - 1, restart_at + 1), max_bytes=1000)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    fetched = _log_with(1).read(0, max_bytes=1000).records  # a leader's batch at offset 0..1
    moved = bytearray(fetched)
    struct.pack_into(">q", moved, 0, restart_at)
    log.append_as_follower(bytes(moved), now_ms=NOW)  # offsets kept from the restart point
    log.flush()
    fs.crash()
    again = open_log(fs, config(segment_bytes=1024))
    assert (again.log_start_offset, again.log_end_offset) == (restart_at, restart_at + 2)
    assert [r.offset for r in read_all(again)] == [restart_at, restart_at + 1]
    assert [s.base_offset for s in again.segments] == [restart_at]
    assert again.recovery_point <= again.log_end_offset


def test_truncate_fully_and_start_at_survives_a_crash_right_after() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=1024))
    for i in range(40):
        log.append_as_leader(batch(2, tag=f"b{i}-"), leader_epoch=0, now_ms=NOW)
    log.flush()
    log.truncate_fully_and_start_at(300)
    fs.crash()  # no flush or close: the call itself made the restart durable
    again = open_log(fs, config(segment_bytes=1024))
    assert (again.log_start_offset, again.log_end_offset) == (300, 300)
    assert [s.base_offset for s in again.segments] == [300]


def test_truncate_fully_and_start_at_refuses_a_negative_offset_and_io_errors() -> None:
    fs = MemoryFileIO()
    log = open_log(fs)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    with pytest.raises(MqError) as err:
        log.truncate_fully_and_start_at(-1)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and not log.is_offline
    fs.faults["io"] = OSError(28, "ENOSPC")
    with pytest.raises(MqError) as err:
        log.truncate_fully_and_start_at(10)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    del fs.faults["io"]
    assert log.is_offline  # the files' state is unknown: nothing more is served
    with pytest.raises(MqError) as err:
        log.truncate_fully_and_start_at(10)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_delete_records_moves_start_and_deletes_whole_segments() -> None:
    log = _log_with(40, segment_bytes=1024)
    second = log.segments[1].base_offset
    assert log.delete_records(second + 1) == second + 1
    assert log.segments[0].base_offset == second
    with pytest.raises(MqError):
        log.read(second, max_bytes=100)
    assert read_all(log)[0].offset == second + 1
    assert log.delete_records(5) == second + 1
    with pytest.raises(MqError) as err:
        log.delete_records(81)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.delete_records(80) == 80 and log.log_end_offset == 80


def test_retention_by_time_rolls_and_may_delete_everything() -> None:
    log = _log_with(40, segment_bytes=1024, retention_ms=1000)
    n = len(log.segments)
    # batch i holds timestamps NOW + 10 i and NOW + 10 i + 1
    assert log.apply_retention(NOW + 500) == 0
    deleted = log.apply_retention(NOW + 391 + 1001)  # newest record: NOW + 391
    assert deleted == n and len(log.segments) == 1
    assert log.log_start_offset == log.log_end_offset == 80 and log.size_bytes == 0
    assert log.apply_retention(NOW + 10**9) == 0


def test_retention_by_time_deletes_only_old_prefix() -> None:
    log = _log_with(40, segment_bytes=1024, retention_ms=1000)
    first, second = log.segments[0], log.segments[1]
    deleted = log.apply_retention(first.max_timestamp + 1001)
    assert deleted == 1 and log.log_start_offset == second.base_offset


def test_retention_by_size_and_high_watermark() -> None:
    log = _log_with(40, segment_bytes=1024, retention_bytes=2048, retention_ms=-1)
    assert log.apply_retention(NOW, high_watermark=0) == 0
    log.apply_retention(NOW)
    assert log.size_bytes <= 2048 + 1024
    assert log.size_bytes > 2048 - 1024
    assert read_all(log)[-1].offset == 79


def test_compact_policy_skips_time_and_size_retention() -> None:
    log = _log_with(40, segment_bytes=1024, retention_bytes=0, cleanup_policy=CleanupPolicy.COMPACT)
    assert log.apply_retention(NOW + 10**12) == 0


# --------------------------------------------------------------- flush and reopen


def test_flush_advances_recovery_point_and_counters() -> None:
    log = _log_with(3, flush_messages=5, flush_ms=100)
    assert log.unflushed_messages == 6 and log.unflushed_bytes > 0
    assert log.should_flush(NOW)
    log.flush()
    assert log.recovery_point == 6 and log.unflushed_messages == 0 and not log.should_flush(NOW)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert not log.should_flush(NOW + 99) and log.should_flush(NOW + 100)


def test_clean_close_and_reopen_recovers_nothing() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=1024))
    for i in range(40):
        log.append_as_leader(batch(2, tag=f"b{i}-"), leader_epoch=0, now_ms=NOW)
    log.delete_records(3)
    expected = read_all(log)
    log.close()
    fs.crash()  # nothing unsynced is left to lose
    again = open_log(fs, config(segment_bytes=1024))
    assert again.segments_recovered_on_open == 0
    assert (again.log_start_offset, again.log_end_offset, again.recovery_point) == (3, 80, 80)
    assert read_all(again) == expected


def test_open_with_recovery_point_zero_rechecks_everything() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=1024))
    for i in range(40):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log.close()
    again = open_log(fs, config(segment_bytes=1024), recovery_point=0)
    assert again.segments_recovered_on_open == len(again.segments)
    assert again.bytes_truncated_on_open == 0 and again.log_end_offset == 80


def test_unflushed_appends_are_lost_on_crash_flushed_ones_kept() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=1024))
    for i in range(20):
        log.append_as_leader(batch(2, tag=f"b{i}-"), leader_epoch=0, now_ms=NOW)
    log.flush()
    kept = read_all(log)
    for i in range(20):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    model = read_all(log)
    active_base = log.active_segment.base_offset
    assert 40 < active_base < 80  # some of the unflushed records sit in rolled segments
    fs.crash()
    again = open_log(fs, config(segment_bytes=1024))
    # A roll fsyncs the segment it closes: only the active segment's records are lost.
    assert again.log_end_offset == active_base and read_all(again) == model[:active_base]
    assert read_all(again)[:40] == kept
    again.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert again.log_end_offset == active_base + 1


def test_missing_or_garbled_index_is_rebuilt() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=100_000, index_interval_bytes=100))
    for i in range(50):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    entries = log.active_segment.offset_index.entries()
    assert len(entries) > 10
    log.close()
    fs.remove(f"{DIR}/00000000000000000000.index")
    again = open_log(fs, config(segment_bytes=100_000, index_interval_bytes=100))
    assert again.active_segment.offset_index.entries() == entries
    again.close()
    handle = fs.open(f"{DIR}/00000000000000000000.index")
    handle.truncate(handle.size() - 3)
    again = open_log(fs, config(segment_bytes=100_000, index_interval_bytes=100))
    assert again.active_segment.offset_index.entries() == entries
    assert [r.offset for r in read_all(again)] == list(range(100))
    assert again.verify() == []


def test_an_io_error_takes_the_log_offline() -> None:
    fs = MemoryFileIO()
    log = open_log(fs)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    fs.faults["fsync"] = OSError(5, "EIO")
    with pytest.raises(MqError) as err:
        log.flush()
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    del fs.faults["fsync"]
    assert log.is_offline
    with pytest.raises(MqError) as err:
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_corrupt_batch_is_never_served() -> None:
    fs = MemoryFileIO()
    log = open_log(fs)
    for i in range(5):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log.close()
    path = f"{DIR}/00000000000000000000.log"
    fs.files[path].data[3 * 100 + 70] ^= 0x01  # inside the payload of a middle batch
    again = open_log(fs)
    good = again.read(0, max_bytes=10_000).records
    assert len(good) < fs.files[path].data.__len__()
    assert all(again.read(0, max_bytes=10_000).records == good for _ in range(2))
    bad_offset = max(h.next_offset for _, h in iter_batches(good))
    with pytest.raises(LogCorruptedError):
        again.read(bad_offset, max_bytes=10_000)
    assert again.verify()


def test_delete_removes_directory() -> None:
    fs = MemoryFileIO()
    log = open_log(fs)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    log.delete()
    assert not fs.exists(DIR)


@settings(max_examples=40, deadline=None)
@given(
    appends=st.lists(st.integers(1, 6), min_size=1, max_size=30),
    fetch_bytes=st.integers(1, 3000),
)
def test_follower_copy_is_byte_identical(appends: list[int], fetch_bytes: int) -> None:
    leader = open_log(cfg=config(segment_bytes=1024))
    for i, count in enumerate(appends):
        leader.append_as_leader(batch(count, tag=f"{i}-", size=i * 7), leader_epoch=3, now_ms=NOW)
    follower = open_log(MemoryFileIO(), config(segment_bytes=700))
    while follower.log_end_offset < leader.log_end_offset:
        fetched = leader.read(follower.log_end_offset, max_bytes=fetch_bytes).records
        follower.append_as_follower(fetched, now_ms=NOW)
    assert read_all(follower) == read_all(leader)
    leader_bytes = b"".join(leader.read(s.base_offset, max_bytes=10**6).records for s in leader.segments)
    follower_bytes = b"".join(
        follower.read(s.base_offset, max_bytes=10**6).records for s in follower.segments
    )
    assert leader_bytes == follower_bytes
