"""Checkpoint files are rewritten only when their value moves, so closing an idle
log costs no write and no fsync (shutting down a broker with many partitions)."""

from __future__ import annotations

from collections import Counter

import pytest

from mq.core.errors import ErrorCode, MqError
from mq.storage import MemoryFileIO
from mq.storage.checkpoint import LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, read_checkpoint
from mq.storage.fileio import MemoryFileHandle
from tests.unit.storage.storage_helpers import DIR, NOW, batch, open_log, read_all, values


class _CountingHandle:
    def __init__(self, inner: MemoryFileHandle, counts: Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    def append(self, data: bytes | bytearray | memoryview) -> int:
        self._counts["append"] += 1
        return self._inner.append(data)

    def fsync(self) -> None:
        self._counts["fsync"] += 1
        self._inner.fsync()

    def truncate(self, n: int) -> None:
        self._counts["truncate"] += 1
        self._inner.truncate(n)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


class CountingFileIO(MemoryFileIO):
    """MemoryFileIO that counts every mutating call (writes, fsyncs, renames)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def open(self, path: str) -> _CountingHandle:  # type: ignore[override]
        return _CountingHandle(super().open(path), self.counts)

    def rename(self, src: str, dst: str) -> None:
        self.counts["rename"] += 1
        super().rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        self.counts["fsync_dir"] += 1
        super().fsync_dir(path)

    def remove(self, path: str) -> None:
        self.counts["remove"] += 1
        super().remove(path)


def test_close_without_change_writes_nothing() -> None:
    fs = CountingFileIO()
    log = open_log(fs)
    log.append_as_leader(batch(5), leader_epoch=0, now_ms=NOW)
    log.close()
    # The recovery point moved (0 → 5) and the producer state is snapshotted at the log
    # end (a restart replays nothing); a log start of 0 needs no file.
    assert fs.counts["rename"] == 2
    assert fs.exists(f"{DIR}/{5:020d}.snapshot")
    assert read_checkpoint(fs, DIR, LOG_START_OFFSET_FILE) is None
    reopened = open_log(fs)
    fs.counts.clear()
    reopened.close()
    assert fs.counts == Counter(), f"idle close wrote: {dict(fs.counts)}"
    again = open_log(fs)
    assert again.log_end_offset == 5 and again.recovery_point == 5
    assert values(read_all(again)) == [f"v{i}".encode() for i in range(5)]


def test_new_empty_log_closes_without_io() -> None:
    fs = CountingFileIO()
    log = open_log(fs)
    fs.counts.clear()
    log.close()
    assert fs.counts == Counter(), f"empty close wrote: {dict(fs.counts)}"
    assert open_log(fs).log_end_offset == 0


def test_checkpoint_rewrites_only_the_file_that_moved() -> None:
    fs = CountingFileIO()
    log = open_log(fs)
    log.append_as_leader(batch(4), leader_epoch=0, now_ms=NOW)
    log.flush()
    log.checkpoint()
    fs.counts.clear()
    log.checkpoint()
    assert fs.counts["rename"] == 0 and fs.counts["fsync"] == 0
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log.flush()
    fs.counts.clear()
    log.checkpoint()
    # Only the recovery point moved: one temp write + fsync + rename (+ dir fsync).
    assert fs.counts["rename"] == 1 and fs.counts["fsync"] == 1
    assert read_checkpoint(fs, DIR, RECOVERY_POINT_FILE) == 6
    log.delete_records(3)
    assert read_checkpoint(fs, DIR, LOG_START_OFFSET_FILE) == 3
    fs.counts.clear()
    log.checkpoint()
    assert fs.counts["rename"] == 0


def test_failed_checkpoint_write_is_retried_and_survives_crash() -> None:
    fs = CountingFileIO()
    log = open_log(fs)
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    log.flush()
    fs.faults["fsync"] = OSError(5, "EIO")
    with pytest.raises(MqError) as info:  # the log goes offline; the file must not claim 3
        log.checkpoint()
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    del fs.faults["fsync"]
    fs.crash()
    assert read_checkpoint(fs, DIR, RECOVERY_POINT_FILE) in (None, 0)
    reopened = open_log(fs)
    reopened.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    reopened.close()
    fs.crash()
    assert read_checkpoint(fs, DIR, RECOVERY_POINT_FILE) == reopened.log_end_offset
