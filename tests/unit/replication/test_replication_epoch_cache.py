from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.core.errors import MqError
from mq.protocol.record_batch import build_batch
from mq.replication import (
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    format_checkpoint,
    parse_checkpoint,
)
from mq.storage import MemoryFileIO


def cache(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def pairs(c: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in c.entries]


def test_end_offset_for_answers_like_offsets_for_leader_epoch() -> None:
    c = cache((0, 0), (2, 6), (4, 9))
    assert c.end_offset_for(4, 12) == EpochEndOffset(4, 12)  # latest epoch: the log end
    assert c.end_offset_for(2, 12) == EpochEndOffset(2, 9)
    assert c.end_offset_for(3, 12) == EpochEndOffset(2, 9)  # unknown: the largest below
    assert c.end_offset_for(1, 12) == EpochEndOffset(0, 6)
    assert c.end_offset_for(0, 12) == EpochEndOffset(0, 6)
    assert c.end_offset_for(5, 12).is_undefined  # newer than any we know
    assert c.end_offset_for(-1, 12).is_undefined
    assert LeaderEpochCache().end_offset_for(0, 5).is_undefined


def test_end_offset_for_an_epoch_older_than_the_first_entry() -> None:
    c = cache((3, 10), (5, 20))
    assert c.end_offset_for(1, 30) == EpochEndOffset(1, 10)


def test_assign_appends_newer_epochs_and_ignores_repeats() -> None:
    c = LeaderEpochCache()
    assert c.assign(0, 0)
    assert not c.assign(0, 5)  # the same epoch, later offset: nothing new
    assert c.assign(1, 5)
    assert c.latest_epoch == 1 and c.earliest_epoch == 0
    assert pairs(c) == [(0, 0), (1, 5)]


def test_assign_removes_conflicting_entries() -> None:
    c = cache((0, 0), (1, 5), (3, 8))
    assert c.assign(2, 6)  # epoch 3 (≥ 2) and nothing else
    assert pairs(c) == [(0, 0), (1, 5), (2, 6)]
    assert c.assign(4, 5)  # starts where epoch 1 started: epoch 1 wrote nothing that stays
    assert pairs(c) == [(0, 0), (4, 5)]
    assert not c.assign(-1, 7)


def test_an_epoch_that_wrote_nothing_is_replaced_by_the_next() -> None:
    c = cache((0, 0), (3, 10))
    assert c.assign(4, 10)
    assert pairs(c) == [(0, 0), (4, 10)]


def test_truncate_from_end_and_start() -> None:
    c = cache((0, 0), (2, 6), (4, 9))
    assert not c.truncate_from_end(10)
    assert c.truncate_from_end(9)
    assert pairs(c) == [(0, 0), (2, 6)]
    assert c.truncate_from_start(7)
    assert pairs(c) == [(2, 7)]
    assert not c.truncate_from_start(7)
    assert not c.truncate_from_start(3)
    c.clear()
    assert c.entries == () and c.latest_epoch == -1


def test_truncate_from_start_drops_whole_epochs_below() -> None:
    c = cache((0, 0), (2, 6), (4, 9))
    assert c.truncate_from_start(9)
    assert pairs(c) == [(4, 9)]


def test_epoch_lookups_by_offset() -> None:
    c = cache((1, 3), (2, 6))
    assert c.epoch_for_offset(2) == -1
    assert c.epoch_for_offset(3) == 1
    assert c.epoch_for_offset(7) == 2
    assert c.start_offset_of(2) == 6
    assert c.start_offset_of(0) is None


def test_entries_must_ascend() -> None:
    with pytest.raises(ValueError):
        cache((1, 0), (1, 5))
    with pytest.raises(ValueError):
        cache((1, 5), (2, 5))


def test_assign_from_batches_reads_the_partition_leader_epoch() -> None:
    def batch(epoch: int, base: int) -> bytes:
        return build_batch([(None, b"v", (), 0)], base_offset=base, partition_leader_epoch=epoch)

    c = cache((0, 0))
    data = batch(0, 3) + batch(2, 4) + batch(2, 5) + batch(-1, 6) + batch(5, 7)
    assert c.assign_from_batches(data)
    assert pairs(c) == [(0, 0), (2, 4), (5, 7)]
    assert not c.assign_from_batches(batch(5, 8))


def test_every_change_is_persisted_through_the_hook() -> None:
    seen: list[list[tuple[int, int]]] = []
    c = LeaderEpochCache(persist=lambda entries: seen.append([(e.epoch, e.start_offset) for e in entries]))
    c.assign(0, 0)
    c.assign(0, 3)  # no change, no write
    c.assign(1, 4)
    c.truncate_from_end(4)
    assert seen == [[(0, 0)], [(0, 0), (1, 4)], [(0, 0)]]


def test_checkpoint_text_format() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(2, 120), EpochEntry(5, 388)]
    assert format_checkpoint(entries) == b"0\n3\n0 0\n2 120\n5 388\n"
    assert parse_checkpoint(b"0\n3\n0 0\n2 120\n5 388\n") == entries
    assert parse_checkpoint(format_checkpoint([])) == []


@pytest.mark.parametrize(
    "text",
    [b"", b"1\n0\n", b"0\n2\n0 0\n", b"0\n1\n0 x\n", b"0\n2\n3 5\n1 9\n", b"0\n1\n0 0 0\n"],
)
def test_malformed_checkpoints_are_named_errors(text: bytes) -> None:
    with pytest.raises(MqError) as info:
        parse_checkpoint(text)
    assert info.value.code.name == "CORRUPT_MESSAGE"


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000)), max_size=20))
def test_checkpoint_round_trip(assignments: list[tuple[int, int]]) -> None:
    c = LeaderEpochCache()
    for epoch, offset in assignments:
        c.assign(epoch, offset)
    assert parse_checkpoint(format_checkpoint(c.entries)) == list(c.entries)


def test_checkpoint_file_survives_a_crash_only_once_written() -> None:
    fs = MemoryFileIO()
    fs.makedirs("/data/p-0")
    file = LeaderEpochCheckpointFile(fs, "/data/p-0")
    assert file.read() is None
    c = LeaderEpochCache(persist=file.write)
    c.assign(0, 0)
    c.assign(3, 17)
    fs.crash()
    assert file.read() == [EpochEntry(0, 0), EpochEntry(3, 17)]
    restored = LeaderEpochCache(file.read() or [], persist=file.write)
    assert restored.end_offset_for(0, 20) == EpochEndOffset(0, 17)
