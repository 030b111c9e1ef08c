"""OffsetIndex and TimeIndex: Kafka's formats, lookups, truncation, reload, checks."""

from __future__ import annotations

import struct

from mq.storage import MemoryFileIO, OffsetIndex, TimeIndex


def _fs() -> MemoryFileIO:
    fs = MemoryFileIO()
    fs.makedirs("/d")
    return fs


def test_offset_index_lookup_and_format() -> None:
    fs = _fs()
    index = OffsetIndex(fs, "/d/x.index", 100, max_entries=1000)
    assert index.lookup(150) == (100, 0)
    for i in range(1, 11):
        index.append(100 + 10 * i, 1000 * i)
    index.append(105, 99_999)  # out of order: ignored
    assert len(index) == 10
    assert index.lookup(99) == (100, 0)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 1000)
    assert index.lookup(155) == (150, 5000)
    assert index.lookup(10**9) == (200, 10_000)
    index.flush()
    raw = fs.open("/d/x.index").pread(0, 100)
    assert raw[:16] == struct.pack(">iiii", 10, 1000, 20, 2000)
    reloaded = OffsetIndex(fs, "/d/x.index", 100, max_entries=1000)
    assert reloaded.entries() == index.entries() and reloaded.last_entry == (200, 10_000)


def test_offset_index_truncate_and_full() -> None:
    fs = _fs()
    index = OffsetIndex(fs, "/d/x.index", 0, max_entries=5)
    for i in range(1, 6):
        index.append(i, 100 * i)
    assert index.is_full
    index.append(6, 600)
    assert len(index) == 5
    index.flush()
    index.truncate_to_position(300)
    assert index.entries() == [(1, 100), (2, 200)]
    index.append(3, 310)
    index.close()
    assert OffsetIndex(fs, "/d/x.index", 0, max_entries=5).entries() == [(1, 100), (2, 200), (3, 310)]


def test_unflushed_entries_are_lost_and_malformed_files_refused() -> None:
    fs = _fs()
    index = OffsetIndex(fs, "/d/x.index", 0, max_entries=100)
    index.append(1, 10)
    index.flush()
    index.append(2, 20)
    fs.crash()
    assert OffsetIndex(fs, "/d/x.index", 0, max_entries=100).entries() == [(1, 10)]
    h = fs.open("/d/x.index")
    h.append(b"\x00\x00\x00")  # not a whole entry
    assert not OffsetIndex(fs, "/d/x.index", 0, max_entries=100).load()
    h.truncate(0)
    h.append(struct.pack(">iiii", 5, 50, 4, 60))  # offsets go backwards
    assert not OffsetIndex(fs, "/d/x.index", 0, max_entries=100).load()
    assert not OffsetIndex(fs, "/d/missing.index", 0, max_entries=100).load()


def test_rewrite_after_failed_load() -> None:
    fs = _fs()
    h = fs.open("/d/x.index")
    h.append(b"garbage!!")
    index = OffsetIndex(fs, "/d/x.index", 0, max_entries=100)
    assert not index.load()
    index.append(3, 30)
    index.flush()
    assert OffsetIndex(fs, "/d/x.index", 0, max_entries=100).entries() == [(3, 30)]


def test_time_index() -> None:
    fs = _fs()
    index = TimeIndex(fs, "/d/x.timeindex", 50, max_entries=3)
    assert index.lookup(10**12) == (-1, 50)
    index.maybe_append(1000, 55)
    index.maybe_append(1000, 56)  # not larger: skipped
    index.maybe_append(900, 57)
    index.maybe_append(2000, 60)
    index.maybe_append(3000, 70)
    index.maybe_append(4000, 80)  # full
    assert index.entries() == [(1000, 55), (2000, 60), (3000, 70)]
    index.maybe_append(4000, 80, force=True)
    assert index.lookup(999) == (-1, 50)
    assert index.lookup(2500) == (2000, 60)
    index.flush()
    raw = fs.open("/d/x.timeindex").pread(0, 12)
    assert raw == struct.pack(">qi", 1000, 5)
    index.truncate_to_offset(70)
    assert index.entries() == [(1000, 55), (2000, 60)]
    index.close()
    assert TimeIndex(fs, "/d/x.timeindex", 50, max_entries=3).entries() == [(1000, 55), (2000, 60)]
