"""MemoryReplicatedLog: offsets, epochs, the epoch cache, snapshots and durability."""

from __future__ import annotations

import pytest

from mq.core.types import OffsetAndEpoch
from mq.raft import LogEntry, MemoryReplicatedLog, Snapshot
from mq.raft.log import UNKNOWN


def log_with(*epochs: int) -> MemoryReplicatedLog:
    log = MemoryReplicatedLog()
    log.append([LogEntry(i, e, b"%d" % i) for i, e in enumerate(epochs)])
    return log


def test_empty_log() -> None:
    log = MemoryReplicatedLog()
    assert (log.start_offset, log.end_offset, log.last_epoch) == (0, 0, 0)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(0, 0)
    assert log.epoch_at(0) is None


# epochs of entries 0..6: 1 1 2 2 2 4 4
@pytest.mark.parametrize(("asked", "expected"), [
    (0, (0, 0)),  # an epoch before every entry: nothing of it, at offset 0
    (1, (2, 1)),
    (2, (5, 2)),
    (3, (5, 2)),  # no epoch 3: the largest below it is 2, which ends at 5
    (4, (7, 4)),
    (9, (7, 4)),
])
def test_end_offset_for_epoch(asked: int, expected: tuple[int, int]) -> None:
    log = log_with(1, 1, 2, 2, 2, 4, 4)
    assert log.end_offset_for_epoch(asked) == OffsetAndEpoch(*expected)


def test_append_rejects_gaps_and_older_epochs() -> None:
    log = log_with(2, 2)
    with pytest.raises(ValueError):
        log.append([LogEntry(3, 2, b"")])
    with pytest.raises(ValueError):
        log.append([LogEntry(2, 1, b"")])


def test_truncate_updates_epoch_cache() -> None:
    log = log_with(1, 1, 2, 2, 3)
    log.truncate_to(3)
    assert (log.end_offset, log.last_epoch) == (3, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(3, 2)
    log.truncate_to(2)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)
    assert [e.offset for e in log.entries(0, 10)] == [0, 1]


def test_compact_keeps_the_suffix_and_answers_at_the_boundary() -> None:
    log = log_with(1, 1, 2, 2, 3)
    log.compact(Snapshot(OffsetAndEpoch(3, 2), b"state"))
    assert (log.start_offset, log.end_offset) == (3, 5)
    assert log.epoch_at(2) == 2 and log.epoch_at(1) is None
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(4, 2)
    assert log.end_offset_for_epoch(1) == UNKNOWN  # below the snapshot
    assert [e.offset for e in log.entries(3, 10)] == [3, 4]
    with pytest.raises(ValueError):
        log.entries(2, 1)
    with pytest.raises(ValueError):
        log.compact(Snapshot(OffsetAndEpoch(4, 1), b""))  # wrong epoch at offset 3


def test_compact_everything_then_append() -> None:
    log = log_with(1, 2)
    log.compact(Snapshot(OffsetAndEpoch(2, 2), b"s"))
    assert (log.start_offset, log.end_offset, log.last_epoch) == (2, 2, 2)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 2)
    log.append([LogEntry(2, 3, b"x")])
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(3, 3)


def test_install_snapshot_replaces_the_log() -> None:
    log = log_with(1, 1, 1)
    log.install_snapshot(Snapshot(OffsetAndEpoch(10, 4), b"s"))
    assert (log.start_offset, log.end_offset, log.last_epoch) == (10, 10, 4)
    assert log.latest_snapshot() == Snapshot(OffsetAndEpoch(10, 4), b"s")
    log.crash()
    assert (log.start_offset, log.end_offset) == (10, 10)  # snapshots are durable at once


def test_crash_keeps_only_flushed_entries() -> None:
    log = log_with(1, 1)
    log.flush()
    log.append([LogEntry(2, 1, b"lost")])
    log.crash()
    assert log.end_offset == 2


def test_crash_restores_what_a_truncation_removed_before_flush() -> None:
    log = log_with(1, 1, 1)
    log.flush()
    log.truncate_to(1)
    log.append([LogEntry(1, 2, b"new")])
    log.crash()
    assert [(e.offset, e.epoch) for e in log.entries(0, 10)] == [(0, 1), (1, 1), (2, 1)]
    log.truncate_to(1)
    log.append([LogEntry(1, 2, b"new")])
    log.flush()
    log.crash()
    assert [(e.offset, e.epoch) for e in log.entries(0, 10)] == [(0, 1), (1, 2)]
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(1, 1)
