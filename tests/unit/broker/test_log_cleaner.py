"""LogCleanerManager: picks the dirtiest compacted log, bounded work per poll, backoff,
lags, abandoned passes and failures."""

from __future__ import annotations

from mq.broker.log_cleaner import LogCleanerManager
from mq.core.config import BrokerConfig, TopicConfig
from mq.core.types import CleanupPolicy, TopicPartition
from mq.protocol.record_batch import build_batch, iter_batches, iter_records
from mq.storage import Log, MemoryFileIO

NOW = 1_700_000_000_000
BACKOFF = 15_000
A, B, C = TopicPartition("a", 0), TopicPartition("b", 0), TopicPartition("c", 0)


def _config(**overrides: object) -> TopicConfig:
    base: dict[str, object] = {
        "cleanup_policy": CleanupPolicy.COMPACT, "segment_bytes": 400, "index_interval_bytes": 64,
        "segment_index_bytes": 4096, "retention_ms": -1,
    }
    base.update(overrides)
    return TopicConfig(**base)  # type: ignore[arg-type]


def _log(fs: MemoryFileIO, name: str, n: int, keys: int, **overrides: object) -> Log:
    log = Log.open(fs, f"/data/{name}", _config(**overrides), now_ms=NOW)
    for i in range(n):
        log.append_as_leader(build_batch([(b"k%d" % (i % keys), b"v%d" % i, (), NOW)]),
                             leader_epoch=1, now_ms=NOW)
    log.roll(NOW)
    return log


def _manager(**overrides: object) -> LogCleanerManager:
    return LogCleanerManager(BrokerConfig(**overrides))  # type: ignore[arg-type]


def _run(manager: LogCleanerManager, logs: dict, now: int = NOW, limit: int = 10_000) -> int:
    """Poll until the manager backs off (nothing left to clean); returns polls made."""
    for polls in range(1, limit):
        deadline = manager.poll(logs, now_ms=now)
        if deadline is None or deadline > now:
            return polls
    raise AssertionError("the cleaner never backed off")


def _values(log: Log) -> list[tuple[int, bytes | None]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=1 << 20).records
        recs = [r for r in iter_records(data) if r.offset >= offset]
        out += [(r.offset, r.key) for r in recs]
        offset = max(offset + 1, recs[-1].offset + 1 if recs else offset + 1)
    return out


def test_cleans_the_dirtiest_log_first_then_the_others_then_backs_off() -> None:
    fs = MemoryFileIO()
    dirty = _log(fs, "a-0", 60, keys=2)
    less = _log(fs, "b-0", 60, keys=30)
    plain = _log(fs, "c-0", 60, keys=2, cleanup_policy=CleanupPolicy.DELETE)
    logs = {A: (dirty, 60), B: (less, 60), C: (plain, 60)}
    manager = _manager()
    manager.poll(logs, now_ms=NOW)  # a whole pass fits in one poll's budget here
    assert list(manager.last_clean) == [A]  # both have ratio 1.0 (never cleaned): sorted order breaks the tie
    _run(manager, logs)
    assert manager.cleaner_runs_total == 2 and set(manager.last_clean) == {A, B}
    assert [k for _, k in _values(dirty)] == [b"k0", b"k1"]
    assert len(_values(plain)) == 60  # the delete policy is never compacted
    assert manager.poll(logs, now_ms=NOW) == NOW + BACKOFF
    stats = manager.last_clean[A]
    assert stats.records_removed == 58 and stats.size_after < stats.size_before
    assert manager.cleaned_bytes_total >= stats.bytes_read > 0


def test_picks_the_larger_dirty_ratio() -> None:
    fs = MemoryFileIO()
    logs = {A: (_log(fs, "a-0", 40, keys=40, min_cleanable_dirty_ratio=0.1), 40),
            B: (_log(fs, "b-0", 40, keys=40, min_cleanable_dirty_ratio=0.1), 40)}
    manager = _manager()
    _run(manager, logs)
    for tp, n in ((A, 5), (B, 30)):  # new dirty bytes: B gets a larger share
        log = logs[tp][0]
        for i in range(n):
            log.append_as_leader(build_batch([(b"k%d" % i, b"new", (), NOW)]), leader_epoch=1, now_ms=NOW)
        log.roll(NOW)
        logs[tp] = (log, log.log_end_offset)
    manager.poll(logs, now_ms=NOW + BACKOFF)
    assert manager.last_clean[B].finished_ms == NOW + BACKOFF
    assert manager.last_clean[A].finished_ms == NOW
    manager.poll(logs, now_ms=NOW + BACKOFF + 1)
    assert manager.last_clean[A].finished_ms == NOW + BACKOFF + 1
    assert 0.1 < manager.last_clean[A].dirty_ratio < manager.last_clean[B].dirty_ratio


def test_bounded_bytes_per_poll_while_producing() -> None:
    fs = MemoryFileIO()
    log = _log(fs, "a-0", 200, keys=3)
    biggest = max(h.size for _, h in iter_batches(log.read(0, max_bytes=1 << 20).records))
    manager = _manager(log_cleaner_io_max_bytes_per_poll=300)
    logs = {A: (log, 200)}
    polls = 0
    while manager.cleaner_runs_total == 0:
        before = manager.cleaned_bytes_total
        assert manager.poll(logs, now_ms=NOW) == NOW  # more to do: call again at once
        assert manager.cleaned_bytes_total - before <= 300 + biggest
        polls += 1
        log.append_as_leader(build_batch([(b"k1", b"live%d" % polls, (), NOW)]), leader_epoch=1, now_ms=NOW)
    assert polls > 20
    assert _values(log)[-1] == (log.log_end_offset - 1, b"k1")  # produce went on meanwhile
    assert [k for o, k in _values(log) if o < 200] == [b"k2", b"k0", b"k1"]


def test_min_ratio_and_max_lag() -> None:
    fs = MemoryFileIO()
    log = _log(fs, "a-0", 40, keys=40, max_compaction_lag_ms=60_000)
    logs = {A: (log, 40)}
    manager = _manager()
    _run(manager, logs)
    for i in range(3):  # a little dirt: below min.cleanable.dirty.ratio
        log.append_as_leader(build_batch([(b"k%d" % i, b"new", (), NOW)]), leader_epoch=1, now_ms=NOW)
    log.roll(NOW)
    logs[A] = (log, log.log_end_offset)
    runs = manager.cleaner_runs_total
    deadline = manager.poll(logs, now_ms=NOW + BACKOFF)
    assert manager.cleaner_runs_total == runs and deadline == NOW + 2 * BACKOFF
    assert 0 < manager.max_dirty_ratio < 0.5
    assert manager.poll(logs, now_ms=NOW + 4 * BACKOFF) == NOW + 60_001  # the lag deadline comes first
    _run(manager, logs, now=NOW + 60_001)  # the oldest dirty record is past max.compaction.lag.ms
    assert manager.cleaner_runs_total == runs + 1


def test_disabled_and_high_watermark() -> None:
    fs = MemoryFileIO()
    log = _log(fs, "a-0", 40, keys=2)
    assert _manager(log_cleaner_enable=False).poll({A: (log, 40)}, now_ms=NOW) is None
    manager = _manager()
    _run(manager, {A: (log, 0)})  # nothing is below the high watermark
    assert manager.cleaner_runs_total == 0 and len(_values(log)) == 40


def test_a_pass_is_abandoned_when_the_log_changes_or_goes() -> None:
    fs = MemoryFileIO()
    log = _log(fs, "a-0", 100, keys=3)
    manager = _manager(log_cleaner_io_max_bytes_per_poll=200)
    manager.poll({A: (log, 100)}, now_ms=NOW)
    assert manager.cleaning == A
    log.truncate_to(10)
    assert manager.poll({A: (log, 10)}, now_ms=NOW) == NOW
    assert manager.cleaning is None and manager.cleaner_aborts_total == 1
    assert not [p for p in fs.files if p.endswith(".cleaned")]

    other = _log(fs, "b-0", 100, keys=3)
    manager.poll({B: (other, 100)}, now_ms=NOW)
    assert manager.cleaning == B
    manager.poll({}, now_ms=NOW)  # the partition moved away
    assert manager.cleaning is None and manager.cleaner_aborts_total == 2
    assert manager.take_errors() == []


def test_a_corrupt_log_is_reported_once_and_left_uncleanable() -> None:
    fs = MemoryFileIO()
    log = _log(fs, "a-0", 40, keys=2)
    first = log.segments[0].log_path
    fs.files[first].data[100] ^= 0xFF  # a flipped bit: the batch fails its CRC
    healthy = _log(fs, "b-0", 40, keys=2)
    logs = {A: (log, 40), B: (healthy, 40)}
    manager = _manager()
    _run(manager, logs)
    errors = manager.take_errors()
    assert [tp for tp, _ in errors] == [A] and "KAFKA_STORAGE_ERROR" in errors[0][1]
    assert manager.cleaner_runs_total == 1 and B in manager.last_clean
    assert not log.is_offline
    manager.poll(logs, now_ms=NOW + 1)
    assert manager.cleaning is None
    # Corrupt data is not retried after the backoff (Kafka's uncleanable partitions)...
    later = NOW + 10 * manager.config.log_cleaner_backoff_ms
    for step in range(20):
        manager.poll(logs, now_ms=later + step)
    assert manager.take_errors() == [] and manager.cleaning is None
    # ...until the partition's log is reopened.
    runs = manager.cleaner_runs_total
    _run(manager, {A: (_log(fs, "c-0", 40, keys=2), 40), B: (healthy, 40)},
         now=later + 2 * manager.config.log_cleaner_backoff_ms)
    assert manager.cleaner_runs_total == runs + 1 and manager.take_errors() == []


def test_small_batches_are_bounded_by_count_too() -> None:
    fs = MemoryFileIO()
    log = _log(fs, "a-0", 3000, keys=3, segment_bytes=1 << 20)
    log.append_as_leader(build_batch([(b"x", b"y", (), NOW)]), leader_epoch=1, now_ms=NOW)
    log.roll(NOW)
    manager = _manager()  # 8 MiB per poll: all of it, but for the batch cap
    polls = _run(manager, {A: (log, log.log_end_offset)})
    assert polls >= 2 and manager.cleaner_runs_total == 1
