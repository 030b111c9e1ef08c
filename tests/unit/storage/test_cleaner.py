"""Log compaction: latest value per key, offsets kept, bounds, ratios, lags, tombstones."""

from __future__ import annotations

from dataclasses import replace

from cleaner_helpers import DAY, append, compact_config, fill, latest, open_compacted
from storage_helpers import DIR, NOW, read_all

from mq.core.types import CleanupPolicy, CompressionType, TimestampType
from mq.protocol.record_batch import (
    build_batch,
    decode_records,
    iter_batches,
    iter_records,
    read_header,
    rebuild_batch,
)
from mq.storage import Log, MemoryFileIO
from mq.storage.cleaner import LogCleaning, clean_now, cleanable_log
from mq.storage.cleaner_checkpoint import CLEANER_CHECKPOINT_FILE, read_cleaner_checkpoint


def _clean(log: Log, now: int = NOW, hw: int | None = None) -> None:
    clean_now(log, high_watermark=log.log_end_offset if hw is None else hw, now_ms=now)


def _offsets(log: Log) -> list[int]:
    return [r.offset for r in read_all(log)]


# ---------------------------------------------------------------- the batch rebuild


def test_rebuild_batch_keeps_header_fields_and_offsets() -> None:
    original = build_batch(
        [(b"k%d" % i, b"v%d" % i, (("h", b"x"),) if i == 1 else (), 1000 + i) for i in range(5)],
        base_offset=100, partition_leader_epoch=3, producer_id=7, producer_epoch=2, base_sequence=9,
        compression=CompressionType.GZIP,
    )
    header = read_header(original)
    records = decode_records(original)
    kept = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records if r.offset in (101, 104)]
    rebuilt = rebuild_batch(header, kept)
    new = read_header(rebuilt)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(rebuilt)] == kept
    for field in ("base_offset", "partition_leader_epoch", "attributes", "last_offset_delta",
                  "first_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence"):
        assert getattr(new, field) == getattr(header, field), field
    assert new.record_count == 2
    empty = rebuild_batch(header, [])
    assert decode_records(empty) == [] and read_header(empty).next_offset == header.next_offset


# ---------------------------------------------------------------- what survives


def test_keeps_latest_value_per_key_at_original_offsets() -> None:
    log = open_compacted()
    fill(log, 60, keys=5)
    log.roll(NOW)
    before, before_size = read_all(log), log.size_bytes
    _clean(log)
    after = read_all(log)
    assert {r.key: (r.offset, r.value) for r in after} == {k: (r.offset, r.value) for k, r in latest(before).items()}
    assert [r.offset for r in after] == [55, 56, 57, 58, 59]
    assert log.log_end_offset == 60 and log.verify() == []
    assert log.size_bytes < before_size // 2


def test_active_segment_is_never_cleaned() -> None:
    log = open_compacted(cfg=compact_config(segment_bytes=1 << 20))
    fill(log, 30, keys=2)
    _clean(log)
    assert _offsets(log) == list(range(30))  # everything is in the active segment


def test_high_watermark_and_min_lag_bound_the_cleaning() -> None:
    log = open_compacted()
    fill(log, 60, keys=3)
    log.roll(NOW)
    bases = [s.base_offset for s in log.segments]
    hw = bases[3] + 1  # inside the fourth segment: it and those after stay dirty
    found = cleanable_log(log, high_watermark=hw, now_ms=NOW)
    assert found.first_uncleanable_offset == bases[3]
    before = read_all(log)
    _clean(log, hw=hw)
    after = read_all(log)
    assert [r for r in after if r.offset >= bases[3]] == [r for r in before if r.offset >= bases[3]]
    assert len([r for r in after if r.offset < bases[3]]) == 3

    lagged = open_compacted(MemoryFileIO(), compact_config(min_compaction_lag_ms=500))
    fill(lagged, 20, keys=2, ts=NOW)
    fill(lagged, 20, keys=2, ts=NOW + 1000)
    lagged.roll(NOW + 1000)
    found = cleanable_log(lagged, high_watermark=40, now_ms=NOW + 1000)
    assert 20 <= found.first_uncleanable_offset < 40  # the young records stay dirty
    _clean(lagged, now=NOW + 1000)
    assert [o for o in _offsets(lagged) if o >= 20] == list(range(found.first_uncleanable_offset, 40))
    _clean(lagged, now=NOW + 1600)
    assert _offsets(lagged) == [38, 39]


def test_keyless_records_are_kept() -> None:
    # mq's produce path does not refuse keyless records on compacted topics (Kafka does).
    log = open_compacted()
    for i in range(10):
        append(log, (None, b"n%d" % i), (b"k", b"v%d" % i))
    log.roll(NOW)
    _clean(log)
    after = read_all(log)
    assert [r.value for r in after if r.key is None] == [b"n%d" % i for i in range(10)]
    assert [r.value for r in after if r.key == b"k"] == [b"v9"]


def test_rewritten_batches_keep_producer_fields_epoch_timestamps_and_codec() -> None:
    log = open_compacted()
    data = build_batch([(b"a", b"1", (), NOW + 5), (b"b", b"2", (), NOW + 7), (b"a", b"3", (), NOW + 9)],
                       producer_id=42, producer_epoch=3, base_sequence=0, compression=CompressionType.GZIP)
    log.append_as_leader(data, leader_epoch=6, now_ms=NOW)
    log.roll(NOW)
    _clean(log)
    stored = log.read(0, max_bytes=10_000).records
    (_, header), = list(iter_batches(stored))
    assert (header.base_offset, header.last_offset, header.record_count) == (0, 2, 2)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 0)
    assert header.partition_leader_epoch == 6 and header.compression == CompressionType.GZIP
    assert (header.first_timestamp, header.max_timestamp) == (NOW + 5, NOW + 9)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(stored)] == [
        (1, b"b", b"2", NOW + 7), (2, b"a", b"3", NOW + 9)]


def test_log_append_time_batches_keep_their_time() -> None:
    log = open_compacted(cfg=compact_config(message_timestamp_type=TimestampType.LOG_APPEND_TIME))
    append(log, (b"a", b"1"), (b"b", b"2"), (b"a", b"3"), ts=NOW + 50)
    log.roll(NOW)
    _clean(log)
    records = read_all(log)
    assert [(r.offset, r.timestamp) for r in records] == [(1, NOW + 50), (2, NOW + 50)]


def test_read_at_a_removed_offset_returns_the_next_record() -> None:
    log = open_compacted()
    fill(log, 40, keys=4)
    append(log, (b"k0", b"x"), (b"k9", b"y"), (b"k0", b"z"))  # 40..42: 40 goes, a hole in a batch
    log.roll(NOW)
    _clean(log)
    assert _offsets(log) == [37, 38, 39, 41, 42]
    assert next(iter_records(log.read(40, max_bytes=1).records)).offset == 41
    for removed, expected in ((0, 37), (20, 37), (36, 37), (40, 41)):
        for max_bytes in (1, 10_000):
            # As a consumer: an emptied batch (kept to end a rewritten segment) holds
            # no record, and a read serves one segment; the next read goes on after it.
            position, found = removed, None
            while found is None:
                data = log.read(position, max_bytes=max_bytes).records
                found = next((r for r in iter_records(data) if r.offset >= position), None)
                position = [h for _, h in iter_batches(data)][-1].next_offset
            assert found.offset == expected


def test_last_batch_of_a_group_stays_so_offsets_never_go_back() -> None:
    fs = MemoryFileIO()
    log = open_compacted(fs)
    fill(log, 20, keys=2)
    end_first = log.segments[1].base_offset
    log.roll(NOW)
    append(log, (b"k0", b"new"), (b"k1", b"new"))  # supersedes everything before
    log.roll(NOW)
    _clean(log)
    assert _offsets(log) == [20, 21]
    assert log.segments[0].next_offset == end_first  # an empty batch ends it
    log.close()
    again = Log.open(fs, DIR, compact_config(), now_ms=NOW, recovery_point=0)
    assert again.log_end_offset == 22 and _offsets(again) == [20, 21]
    assert append(again, (b"k2", b"v")) == 22


# ---------------------------------------------------------------- tombstones


def test_tombstones_stay_until_the_delete_horizon() -> None:
    log = open_compacted(cfg=compact_config(delete_retention_ms=1000))
    append(log, (b"gone", b"v1"), (b"kept", b"v"))
    append(log, (b"gone", b"v2"))
    append(log, (b"gone", None))
    log.roll(NOW)
    _clean(log, now=NOW)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"kept", b"v"), (b"gone", None)]
    horizon = read_cleaner_checkpoint(log.fileio, DIR).horizons
    assert [ms for _, ms in horizon] == [NOW + 1000]
    _clean(log, now=NOW + 999)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"kept", b"v"), (b"gone", None)]
    assert cleanable_log(log, high_watermark=log.log_end_offset, now_ms=NOW + 1000).due(
        min_dirty_ratio=0.5, max_lag_ms=2**62, now_ms=NOW + 1000)
    _clean(log, now=NOW + 1000)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"kept", b"v")]
    assert read_cleaner_checkpoint(log.fileio, DIR).horizons == ()


def test_a_horizon_is_not_pushed_back_by_later_cleanings() -> None:
    log = open_compacted(cfg=compact_config(delete_retention_ms=1000, segment_bytes=1 << 20))
    append(log, (b"a", None))
    log.roll(NOW)
    _clean(log, now=NOW)
    for t in (300, 600, 900):  # more tombstones, each cleaned later
        append(log, (b"b%d" % t, None), ts=NOW + t)
        log.roll(NOW + t)
        _clean(log, now=NOW + t)
    _clean(log, now=NOW + 1000)
    assert b"a" not in {r.key for r in read_all(log)}
    assert {r.key for r in read_all(log)} == {b"b300", b"b600", b"b900"}


# ---------------------------------------------------------------- dirty ratio and lags


def test_dirty_ratio_and_checkpoint() -> None:
    fs = MemoryFileIO()
    log = open_compacted(fs)
    fill(log, 40, keys=40)  # unique keys: cleaning removes nothing
    log.roll(NOW)
    found = cleanable_log(log, high_watermark=40, now_ms=NOW)
    assert (found.first_dirty_offset, found.first_uncleanable_offset) == (0, 40)
    assert found.clean_bytes == 0 and found.dirty_bytes == log.size_bytes and found.dirty_ratio == 1.0
    _clean(log)
    found = cleanable_log(log, high_watermark=40, now_ms=NOW)
    assert found.first_dirty_offset == 40 and found.dirty_bytes == 0 and found.dirty_ratio == 0.0
    assert not found.due(min_dirty_ratio=0.5, max_lag_ms=0, now_ms=NOW)
    fill(log, 10, keys=40)
    log.roll(NOW)
    found = cleanable_log(log, high_watermark=50, now_ms=NOW)
    assert found.first_dirty_offset == 40 and found.dirty_bytes > 0
    assert 0 < found.dirty_ratio == found.dirty_bytes / (found.dirty_bytes + found.clean_bytes) < 0.5
    assert not found.due(min_dirty_ratio=0.5, max_lag_ms=DAY, now_ms=NOW)
    assert found.due(min_dirty_ratio=0.15, max_lag_ms=DAY, now_ms=NOW)
    assert found.oldest_dirty_ms == NOW
    assert found.due(min_dirty_ratio=0.5, max_lag_ms=DAY, now_ms=NOW + DAY + 1)  # max.compaction.lag.ms
    log.close()
    again = Log.open(fs, DIR, compact_config(), now_ms=NOW)
    assert cleanable_log(again, high_watermark=50, now_ms=NOW).first_dirty_offset == 40


def test_the_active_segment_rolls_within_max_compaction_lag() -> None:
    log = open_compacted(cfg=compact_config(segment_bytes=1 << 20, max_compaction_lag_ms=1000))
    append(log, (b"a", b"1"), ts=NOW)
    append(log, (b"a", b"2"), ts=NOW + 1000)
    assert len(log.segments) == 1
    append(log, (b"a", b"3"), ts=NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    plain = open_compacted(MemoryFileIO(), compact_config(cleanup_policy=CleanupPolicy.DELETE,
                                                          segment_bytes=1 << 20, max_compaction_lag_ms=1000))
    append(plain, (b"a", b"1"), ts=NOW)
    append(plain, (b"a", b"3"), ts=NOW + 5000)
    assert len(plain.segments) == 1


def test_small_segments_are_merged() -> None:
    log = open_compacted()
    fill(log, 200, keys=3)
    log.roll(NOW)
    many = len(log.segments)
    _clean(log)
    _clean(log)
    assert len(log.segments) < many // 4
    assert _offsets(log) == [197, 198, 199] and log.verify() == []


def test_truncation_moves_the_checkpoint_back() -> None:
    log = open_compacted()
    fill(log, 40, keys=4)
    log.roll(NOW)
    _clean(log)
    assert read_cleaner_checkpoint(log.fileio, DIR).first_dirty_offset == 40
    log.truncate_to(38)
    assert read_cleaner_checkpoint(log.fileio, DIR).first_dirty_offset <= log.active_segment.base_offset
    assert _offsets(log) == [36, 37]


def test_compact_delete_still_applies_retention() -> None:
    log = open_compacted(cfg=compact_config(cleanup_policy=CleanupPolicy.COMPACT_DELETE, retention_ms=100))
    fill(log, 40, keys=40, ts=NOW)
    log.roll(NOW)
    _clean(log)
    assert log.apply_retention(NOW + 1000) > 0
    assert log.log_start_offset == 40


def test_bounded_steps_and_a_changed_log_is_abandoned() -> None:
    log = open_compacted()
    fill(log, 100, keys=5)
    log.roll(NOW)
    cleaning = LogCleaning(log, cleanable_log(log, high_watermark=100, now_ms=NOW), now_ms=NOW)
    steps = 0
    while not cleaning.step(100, now_ms=NOW):
        assert cleaning.is_valid()
        append(log, (b"k1", b"concurrent"))  # appends go on meanwhile
        steps += 1
    assert steps > 10
    assert [r.value for r in read_all(log) if r.key == b"k1"][-1] == b"concurrent"

    other = open_compacted(MemoryFileIO(), compact_config(cleanup_policy=CleanupPolicy.COMPACT_DELETE))
    fill(other, 100, keys=5)
    other.roll(NOW)
    cleaning = LogCleaning(other, cleanable_log(other, high_watermark=100, now_ms=NOW), now_ms=NOW)
    cleaning.step(100, now_ms=NOW)
    other.update_config(replace(other.config, retention_bytes=0))
    other.apply_retention(NOW)
    assert not cleaning.is_valid()
    cleaning.abort()
    assert not [p for p in other.fileio.files if p.endswith(".cleaned")]  # type: ignore[attr-defined]
    assert CLEANER_CHECKPOINT_FILE  # nothing checkpointed by the abandoned pass
    assert read_cleaner_checkpoint(other.fileio, DIR).first_dirty_offset == 0


def test_an_unreadable_cleaner_checkpoint_means_all_dirty() -> None:
    log = open_compacted()
    fill(log, 40, keys=4, tombstone_every=4)
    log.roll(NOW)
    _clean(log)
    path = f"{DIR}/{CLEANER_CHECKPOINT_FILE}"
    log.fileio.files[path].data[:] = b"garbage"  # type: ignore[attr-defined]
    found = cleanable_log(log, high_watermark=40, now_ms=NOW)
    assert found.first_dirty_offset == 0 and found.checkpoint.horizons == ()
    _clean(log, now=NOW + 5000)  # tombstones get a fresh horizon instead of going at once
    assert [r.value for r in read_all(log)].count(None) > 0
