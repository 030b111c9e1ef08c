"""Log.append_as_mirror: the source's batches at their own offsets, contiguous, or with
the holes a compacted source leaves (``holes=True``): segments roll at the hole, the
indexes and recovery find every batch, reads from inside a hole return the next batch."""

from __future__ import annotations

import pytest
from storage_helpers import NOW, config, open_log

from mq.core.errors import ErrorCode, MqError
from mq.protocol.record_batch import build_batch, iter_batches, iter_records
from mq.storage import MemoryFileIO

SOURCE_EPOCH = 42


def batch(base: int, count: int = 2, *, size: int = 60) -> bytes:
    return build_batch([(b"k%d" % (base + i), b"v%d." % (base + i) + bytes(size), (), NOW + base + i)
                        for i in range(count)], base_offset=base, partition_leader_epoch=SOURCE_EPOCH)


# Offsets 2-9, 12-39 and 42-99 are holes: batches the source's cleaner removed whole.
BASES = [0, 10, 40, 100, 102]


def holey() -> bytes:
    return b"".join(batch(b) for b in BASES)


def stored(log) -> list[bytes]:
    """Every stored batch, read across segments."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=1 << 20).records
        for pos, h in iter_batches(data):
            out.append(data[pos:pos + h.size])
            offset = h.next_offset
    return out


def stored_bases(log) -> list[int]:
    return [h.base_offset for data in stored(log) for _, h in iter_batches(data)]


def test_contiguous_by_default_holes_only_when_asked() -> None:
    log = open_log()
    log.append_as_mirror(batch(0), leader_epoch=3, now_ms=NOW)
    for records in (batch(5), batch(2) + batch(10)):
        with pytest.raises(MqError) as err:
            log.append_as_mirror(records, leader_epoch=3, now_ms=NOW)
        assert err.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(MqError) as err:  # never backwards, holes or not
        log.append_as_mirror(batch(1), leader_epoch=3, now_ms=NOW, holes=True)
    assert err.value.code == ErrorCode.INVALID_RECORD and "at least 2" in err.value.message
    info = log.append_as_mirror(batch(10) + batch(40), leader_epoch=3, now_ms=NOW, holes=True)
    assert (info.first_offset, info.last_offset, info.record_count) == (10, 41, 4)
    assert log.log_end_offset == 42


def test_holes_across_segments_are_read_indexed_and_recovered() -> None:
    fs = MemoryFileIO()
    cfg = config(segment_bytes=1024, index_interval_bytes=64)
    log = open_log(fs, cfg)
    for base in BASES:  # one request per batch: the segment rolls while the log has a hole at its end
        log.append_as_mirror(batch(base, size=150), leader_epoch=3, now_ms=NOW, holes=True)
    assert log.log_end_offset == 104
    # holes inside segments and at their ends: a roll starts the new segment at the
    # incoming batch, never inside the hole before it
    assert [s.base_offset for s in log.segments] == [0, 40, 102]
    assert sum(len(s.offset_index.entries()) for s in log.segments) >= 2
    assert stored_bases(log) == BASES
    for inside_hole, next_base in ((2, 10), (12, 40), (41, 40), (42, 100), (99, 100)):
        assert log.read(inside_hole, max_bytes=1).first_offset == next_base
    # every stored byte is the source's but the leader epoch, which is the target's
    data = log.read(100, max_bytes=1 << 20).records
    assert {h.partition_leader_epoch for _, h in iter_batches(data)} == {3}
    assert log.verify() == []
    log.close()
    again = open_log(fs, cfg, recovery_point=0)  # re-read and re-index everything
    assert again.bytes_truncated_on_open == 0 and again.log_end_offset == 104
    assert stored_bases(again) == BASES and again.verify() == []
    assert [r.offset for r in iter_records(again.read(12, max_bytes=1 << 20).records)] == [40, 41, 100, 101]


def test_a_follower_copies_the_holes_byte_for_byte() -> None:
    leader = open_log(cfg=config(segment_bytes=1024))
    leader.append_as_mirror(holey(), leader_epoch=3, now_ms=NOW, holes=True)
    follower = open_log(MemoryFileIO(), config(segment_bytes=700))
    while follower.log_end_offset < leader.log_end_offset:
        fetched = leader.read(follower.log_end_offset, max_bytes=200).records
        follower.append_as_follower(fetched, now_ms=NOW)
    assert stored_bases(follower) == BASES
    assert stored(follower) == stored(leader)
