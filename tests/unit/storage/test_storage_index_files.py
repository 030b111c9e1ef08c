"""Index entries reach the ``.index``/``.timeindex`` files as they are added (no flush,
no close), as Kafka's mmapped indexes do, so ``mq dump-log`` on a live broker shows
them; files and memory stay equal through truncation, recovery and rolls."""

from __future__ import annotations

import posixpath
from pathlib import Path

from storage_helpers import NOW, batch, config, open_log

from mq.storage import Log, LogSegment, MemoryFileIO, OsFileIO
from mq.storage.dump import dump_segment
from mq.storage.fileio import FileIO


def _request(batches: int, *, tag: str, ts: int = NOW) -> bytes:
    """One produce request of ``batches`` batches of ~370 bytes (past the 256-byte interval)."""
    return b"".join(batch(10, tag=f"{tag}{i}-", size=20, ts=ts + 10 * i) for i in range(batches))


def _on_disk(fileio: FileIO, segment: LogSegment) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The entries of the segment's index files as ``mq dump-log`` reads them; every
    entry must check out against the ``.log``."""
    offsets = list(dump_segment(fileio, segment.offset_index.path))
    times = list(dump_segment(fileio, segment.time_index.path))
    assert all(e["valid"] for e in offsets + times), offsets + times
    return (
        [(e["offset"], e["position"]) for e in offsets],
        [(e["timestamp"], e["offset"]) for e in times],
    )


def _assert_files_match_memory(fileio: FileIO, log: Log) -> None:
    for segment in log.segments:
        assert _on_disk(fileio, segment) == (segment.offset_index.entries(), segment.time_index.entries())


def test_entries_are_in_the_files_after_append_without_flush() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=1 << 20))
    for i in range(5):
        log.append_as_leader(_request(4, tag=f"r{i}", ts=NOW + 100 * i), leader_epoch=0, now_ms=NOW)
    active = log.active_segment
    offsets, times = _on_disk(fs, active)
    assert len(offsets) >= 15 and len(times) >= 15  # one per batch after the first
    assert offsets == active.offset_index.entries() and times == active.time_index.entries()
    assert fs.durable_size(active.offset_index.path) == 0  # written, not fsynced
    log.flush()
    assert fs.durable_size(active.offset_index.path) == 0  # the active segment's: still not
    log.close()


def test_a_second_process_sees_the_entries_on_real_files(tmp_path: Path) -> None:
    directory = posixpath.join(str(tmp_path), "orders-0")
    log = Log.open(OsFileIO(), directory, config(segment_bytes=1 << 20), now_ms=NOW)
    log.append_as_leader(_request(8, tag="a"), leader_epoch=0, now_ms=NOW)
    reader = OsFileIO()  # its own descriptors, as the `mq dump-log` process has
    offsets, times = _on_disk(reader, log.active_segment)
    assert offsets == log.active_segment.offset_index.entries() and len(offsets) == 7
    assert times == log.active_segment.time_index.entries() and len(times) == 7
    log.close()


class _CountingFileIO(MemoryFileIO):
    """Counts writes to index files: entries are batched per append call."""

    def __init__(self) -> None:
        super().__init__()
        self.index_writes = 0

    def open(self, path: str):  # type: ignore[no-untyped-def]
        handle = super().open(path)
        if not path.endswith((".index", ".timeindex")):
            return handle
        outer = self

        class Counted:
            def __getattr__(self, name: str) -> object:
                return getattr(handle, name)

            def append(self, data: bytes | bytearray | memoryview) -> int:
                outer.index_writes += 1
                return handle.append(data)

        return Counted()


def test_one_write_per_index_file_per_append() -> None:
    fs = _CountingFileIO()
    log = open_log(fs, config(segment_bytes=1 << 20))
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)  # the first entry comes later
    assert fs.index_writes == 0
    log.append_as_leader(_request(20, tag="x"), leader_epoch=0, now_ms=NOW)
    assert len(log.active_segment.offset_index) == 19  # every batch but the first
    assert fs.index_writes == 2  # .index and .timeindex, once each
    _assert_files_match_memory(fs, log)


def test_truncation_keeps_files_and_memory_equal() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=1 << 20))
    log.append_as_leader(_request(10, tag="a"), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(_request(10, tag="b", ts=NOW + 1000), leader_epoch=0, now_ms=NOW)
    before = len(log.active_segment.offset_index)
    log.truncate_to(125)
    assert 0 < len(log.active_segment.offset_index) < before
    _assert_files_match_memory(fs, log)
    log.append_as_leader(_request(3, tag="c", ts=NOW + 2000), leader_epoch=0, now_ms=NOW)
    _assert_files_match_memory(fs, log)
    assert log.verify() == []


def test_rolls_and_recovery_keep_files_and_memory_equal() -> None:
    fs = MemoryFileIO()
    log = open_log(fs)  # 4 KiB segments: several rolls
    for i in range(12):
        log.append_as_leader(_request(3, tag=f"r{i}", ts=NOW + 100 * i), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 3
    _assert_files_match_memory(fs, log)
    log.flush()
    log.close()
    for segment in log.segments:  # garble every index: recovery must rebuild and rewrite them
        fs.open(segment.offset_index.path).append(b"bad")
        fs.open(segment.time_index.path).truncate(0)
    reopened = open_log(fs, recovery_point=0)
    assert reopened.segments_recovered_on_open == len(reopened.segments)
    _assert_files_match_memory(fs, reopened)  # before any flush or close
    assert all(len(s.offset_index) > 0 for s in reopened.segments)
    reopened.close()
