"""Crash safety of log compaction: power loss at every step of a cleaning pass.

``CrashingFileIO`` counts every mutating file operation (append, truncate, fsync,
rename, remove, directory fsync) and loses power at the n-th, for every n up to the
number a whole pass takes. After each crash the reopened log must be sound, hold the
same offsets range, lose no latest value, change no record, leave no cleaner files
behind, and a new pass must reach exactly the result of an uninterrupted one.
"""

from __future__ import annotations

import pytest
from cleaner_helpers import append, compact_config, fill, latest
from storage_helpers import DIR, NOW, read_all

from mq.core.rng import Rng
from mq.protocol.record_batch import Record
from mq.storage import Log, MemoryFileIO
from mq.storage.cleaner import clean_now
from mq.storage.fileio import MemoryFileHandle


class PowerLoss(Exception):
    pass


class _Handle:
    def __init__(self, fs: CrashingFileIO, inner: MemoryFileHandle) -> None:
        self._fs, self._inner = fs, inner

    def append(self, data: bytes | bytearray | memoryview) -> int:
        self._fs.tick()
        return self._inner.append(data)

    def truncate(self, n: int) -> None:
        self._fs.tick()
        self._inner.truncate(n)

    def fsync(self) -> None:
        self._fs.tick()
        self._inner.fsync()

    def pread(self, pos: int, n: int) -> bytes:
        return self._inner.pread(pos, n)

    def size(self) -> int:
        return self._inner.size()

    def prefetch(self, pos: int, n: int) -> None:
        self._inner.prefetch(pos, n)

    def close(self) -> None:
        self._inner.close()


class CrashingFileIO(MemoryFileIO):
    def __init__(self) -> None:
        super().__init__()
        self.countdown: int | None = None
        self.ops = 0

    def tick(self) -> None:
        self.ops += 1
        if self.countdown is not None:
            self.countdown -= 1
            if self.countdown < 0:
                self.countdown = None
                raise PowerLoss

    def open(self, path: str) -> _Handle:  # type: ignore[override]
        return _Handle(self, super().open(path))

    def rename(self, src: str, dst: str) -> None:
        self.tick()
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self.tick()
        super().remove(path)

    def fsync_dir(self, path: str) -> None:
        self.tick()
        super().fsync_dir(path)


def _build(fs: MemoryFileIO) -> Log:
    cfg = compact_config(segment_bytes=700, delete_retention_ms=100)
    log = Log.open(fs, DIR, cfg, now_ms=NOW)
    fill(log, 30, keys=4, tombstone_every=7)
    append(log, (None, b"keyless"), (b"k1", b"x"), (b"k1", b"y"))
    log.roll(NOW)
    fill(log, 3, keys=4)  # the active segment
    log.flush()
    log.checkpoint()
    return log


def _check_sound(log: Log, original: list[Record], cleaned: list[Record]) -> None:
    assert log.verify() == []
    records = read_all(log)
    by_offset = {r.offset: r for r in original}
    assert [r.offset for r in records] == sorted({r.offset for r in records})
    assert all(by_offset[r.offset] == r for r in records)  # no record changed or invented
    assert {r.offset for r in cleaned} <= {r.offset for r in records}
    now_latest, was_latest = latest(records), latest(original)
    assert all(was_latest[k] == r for k, r in now_latest.items())  # no older value resurfaced
    assert set(latest(cleaned)) <= set(now_latest)  # only tombstones past their horizon went
    assert log.log_end_offset == original[-1].offset + 1
    leftovers = [p for p in log.fileio.files if p.endswith((".cleaned", ".swap"))]  # type: ignore[attr-defined]
    assert leftovers == []


@pytest.mark.parametrize("now", [NOW, NOW + 100], ids=["tombstones-kept", "tombstones-dropped"])
def test_power_loss_at_every_step_of_a_cleaning(now: int) -> None:
    reference_fs = CrashingFileIO()
    reference = _build(reference_fs)
    original = read_all(reference)
    clean_now(reference, high_watermark=reference.log_end_offset, now_ms=NOW)  # sets the horizons
    first = read_all(reference)
    fs_ops = reference_fs.ops
    clean_now(reference, high_watermark=reference.log_end_offset, now_ms=now)
    cleaned = read_all(reference)
    total = reference_fs.ops - fs_ops
    assert total > 10 and len(cleaned) < len(original)

    rng = Rng(7)
    for n in range(total + 1):
        fs = CrashingFileIO()
        log = _build(fs)
        clean_now(log, high_watermark=log.log_end_offset, now_ms=NOW)
        fs.countdown = n
        try:
            clean_now(log, high_watermark=log.log_end_offset, now_ms=now)
        except PowerLoss:
            pass
        else:
            assert n >= total, n
        fs.countdown = None
        fs.crash(rng if n % 2 else None)
        again = Log.open(fs, DIR, log.config, now_ms=now)
        _check_sound(again, first, cleaned)
        clean_now(again, high_watermark=again.log_end_offset, now_ms=now)
        assert read_all(again) == cleaned, f"crash at operation {n}"
        again.close()


def test_power_loss_during_the_first_cleaning() -> None:
    reference_fs = CrashingFileIO()
    reference = _build(reference_fs)
    original = read_all(reference)
    before = reference_fs.ops
    clean_now(reference, high_watermark=reference.log_end_offset, now_ms=NOW)
    cleaned = read_all(reference)
    total = reference_fs.ops - before
    for n in range(total + 1):
        fs = CrashingFileIO()
        log = _build(fs)
        fs.countdown = n
        try:
            clean_now(log, high_watermark=log.log_end_offset, now_ms=NOW)
        except PowerLoss:
            pass
        else:
            assert n >= total, n
        fs.countdown = None
        fs.crash()
        again = Log.open(fs, DIR, log.config, now_ms=NOW, recovery_point=0)
        _check_sound(again, original, cleaned)
        clean_now(again, high_watermark=again.log_end_offset, now_ms=NOW)
        assert read_all(again) == cleaned, f"crash at operation {n}"
