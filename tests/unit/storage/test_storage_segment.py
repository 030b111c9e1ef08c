"""LogSegment: append, translate, read, recover, truncate, roll rules; dump."""

from __future__ import annotations

import pytest
from storage_helpers import NOW, batch, config

from mq.core.errors import MqError
from mq.protocol.record_batch import iter_batches, read_header, set_base_offset
from mq.storage import LogCorruptedError, LogSegment, MemoryFileIO
from mq.storage.dump import dump_segment


def _segment(n: int = 20, *, base: int = 1000, **cfg: object) -> tuple[MemoryFileIO, LogSegment]:
    fs = MemoryFileIO()
    fs.makedirs("/p")
    segment = LogSegment.create(fs, "/p", base, config(**cfg), now_ms=NOW)
    offset = base
    for i in range(n):
        data = bytearray(batch(3, tag=f"s{i}-", ts=NOW + 100 * i))
        set_base_offset(data, 0, offset)
        header = read_header(data)
        segment.append(data, [(0, header.size, header.last_offset, header.max_timestamp)])
        offset = header.next_offset
    return fs, segment


def test_names_and_state() -> None:
    _, segment = _segment(base=42)
    assert segment.log_path == "/p/00000000000000000042.log"
    assert segment.offset_index.path.endswith("00000000000000000042.index")
    assert segment.next_offset == 42 + 60
    assert segment.max_timestamp == NOW + 1902
    assert len(segment.offset_index) > 3


def test_translate_and_read() -> None:
    _, segment = _segment()
    _, header = segment.translate_offset(1031)
    assert header.base_offset == 1030 and header.last_offset == 1032
    assert segment.translate_offset(1060) is None
    data, first = segment.read(1031, max_bytes=header.size * 2 + 5)
    assert first == 1030 and [h.base_offset for _, h in iter_batches(data)] == [1030, 1033]
    data, _ = segment.read(1000, max_bytes=10**6, max_offset=1006)
    assert [h.base_offset for _, h in iter_batches(data)] == [1000, 1003]
    assert segment.read(1000, max_bytes=10**6, limit_offset=1006) is not None


def test_limit_offset_refuses_batches_running_into_next_segment() -> None:
    _, segment = _segment(2)
    with pytest.raises(LogCorruptedError):
        segment.read(1000, max_bytes=10**6, limit_offset=1002)


def test_recover_truncates_torn_tail_and_rebuilds_indexes() -> None:
    fs, segment = _segment(index_interval_bytes=100)
    entries = segment.offset_index.entries()
    handle = fs.open(segment.log_path)
    handle.append(batch(2)[:-10])  # a torn write
    reopened = LogSegment(fs, "/p", 1000, config(index_interval_bytes=100), created_ms=NOW)
    assert not reopened.tail_clean_at_open()
    assert reopened.recover() == len(batch(2)) - 10
    assert reopened.offset_index.entries() == entries
    assert reopened.next_offset == 1060 and reopened.verify() == []


def test_truncate_to() -> None:
    _, segment = _segment(index_interval_bytes=100)
    removed = segment.truncate_to(1031)
    assert removed > 0 and segment.next_offset == 1030
    assert all(off < 1030 for off, _ in segment.offset_index.entries())
    assert segment.max_timestamp == NOW + 902
    assert segment.truncate_to(5000) == 0


def test_roll_rules() -> None:
    _, segment = _segment(2)
    cfg = config(segment_bytes=10**6, segment_ms=1000)
    ok: dict[str, int] = {"incoming_bytes": 10, "last_offset": 1006, "now_ms": NOW}
    # the first batch's max timestamp is NOW + 2
    assert not segment.should_roll(cfg, max_timestamp=NOW + 1002, **ok)
    assert segment.should_roll(cfg, max_timestamp=NOW + 1003, **ok)
    assert segment.should_roll(config(segment_bytes=segment.size + 9), max_timestamp=NOW, **ok)
    assert segment.should_roll(cfg, max_timestamp=NOW, incoming_bytes=1, last_offset=1000 + 2**31, now_ms=NOW)
    empty = LogSegment.create(MemoryFileIO(), "/", 0, cfg, now_ms=NOW)
    assert not empty.should_roll(config(segment_bytes=1024), max_timestamp=NOW, incoming_bytes=10**6, last_offset=5, now_ms=NOW + 10**9)


def test_dump_log_and_indexes() -> None:
    fs, segment = _segment(5, index_interval_bytes=100)
    segment.close()
    batches = list(dump_segment(fs, segment.log_path, decode=True))
    assert [b["base_offset"] for b in batches] == [1000, 1003, 1006, 1009, 1012]
    assert all(b["crc_ok"] and b["count"] == 3 and b["codec"] == "none" for b in batches)
    assert [r["offset"] for r in batches[1]["records"]] == [1003, 1004, 1005]
    entries = list(dump_segment(fs, segment.offset_index.path))
    assert entries and all(e["type"] == "index_entry" and e["valid"] for e in entries)
    times = list(dump_segment(fs, segment.time_index.path))
    assert times and all(e["type"] == "time_index_entry" and e["valid"] for e in times)
    fs.files[segment.log_path].data[200] ^= 0xFF
    fs.open(segment.log_path).append(b"\x00" * 20)
    dumped = list(dump_segment(fs, segment.log_path))
    assert any(d.get("crc_ok") is False for d in dumped)
    assert dumped[-1]["type"] == "error" and dumped[-1]["valid"] is False
    with pytest.raises(MqError):
        dump_segment(fs, "/p/not-a-segment.txt")


def test_segments_never_outgrow_32_bit_positions() -> None:
    _, segment = _segment(1)
    segment._size = 2**31 - 100  # as if the file were that large
    huge = config(segment_bytes=2**40)
    assert segment.should_roll(huge, max_timestamp=NOW, incoming_bytes=200, last_offset=1003, now_ms=NOW)
    assert not segment.should_roll(huge, max_timestamp=NOW, incoming_bytes=50, last_offset=1003, now_ms=NOW)
