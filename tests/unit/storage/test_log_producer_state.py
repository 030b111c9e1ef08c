"""Idempotence in the log: duplicates answered with their original offsets, named
errors with nothing appended, snapshots at roll, state rebuilt on open and after a
truncation, and followers keeping the same state as the leader."""

from __future__ import annotations

import pytest

from mq.core.errors import ErrorCode, MqError
from mq.protocol.record_batch import build_batch
from mq.storage import MemoryFileIO
from mq.storage.producer_snapshot import snapshot_offsets
from tests.unit.storage.storage_helpers import DIR, NOW, config, open_log, read_all, values


def pbatch(pid: int, seq: int, count: int = 3, *, epoch: int = 0, tag: str = "v") -> bytes:
    return build_batch([(b"k", f"{tag}{seq + i}".encode(), (), NOW + i) for i in range(count)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_retry_of_an_appended_batch_is_answered_with_its_offsets_and_appends_nothing() -> None:
    log = open_log()
    first = log.append_as_leader(pbatch(7, 0), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(build_batch([(None, b"other", (), NOW)]), leader_epoch=0, now_ms=NOW)
    again = log.append_as_leader(pbatch(7, 0), leader_epoch=0, now_ms=NOW)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 4
    assert values(read_all(log)) == [b"v0", b"v1", b"v2", b"other"]


@pytest.mark.parametrize(("batch", "code"), [
    (pbatch(7, 5, epoch=3), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),  # a gap: 3 expected
    (pbatch(7, 3, epoch=2), ErrorCode.INVALID_PRODUCER_EPOCH),        # epoch 3 is current
    (pbatch(7, 3, epoch=4), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),  # a new epoch starts at 0
    (pbatch(8, 9), ErrorCode.UNKNOWN_PRODUCER_ID),                    # never seen, not at 0
], ids=["gap", "stale-epoch", "new-epoch-not-at-0", "unknown-producer"])
def test_bad_sequences_are_named_errors_and_append_nothing(batch: bytes, code: ErrorCode) -> None:
    log = open_log()
    log.append_as_leader(pbatch(7, 0, epoch=2), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(pbatch(7, 0, epoch=3), leader_epoch=0, now_ms=NOW)  # a bumped epoch starts at 0
    end = log.log_end_offset
    with pytest.raises(MqError) as err:
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert err.value.code == code
    assert log.log_end_offset == end and not log.is_offline
    assert log.append_as_leader(pbatch(7, 3, epoch=3), leader_epoch=0, now_ms=NOW).first_offset == end


def test_state_survives_a_restart_from_snapshots_and_the_log_after_them() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=400))
    seq = 0
    for _ in range(12):
        log.append_as_leader(pbatch(7, seq), leader_epoch=0, now_ms=NOW)
        seq += 3
    assert len(log.segments) > 2
    snaps = snapshot_offsets(fs, DIR)
    assert snaps and snaps[-1] == log.active_segment.base_offset
    entry = log.producer_state.entry(7)
    # A crash: nothing closed; the log after the last snapshot is replayed on open.
    reopened = open_log(fs, config(segment_bytes=400))
    assert reopened.producer_state.entry(7) == entry
    again = reopened.append_as_leader(pbatch(7, seq - 3), leader_epoch=0, now_ms=NOW)
    assert again.duplicate and again.last_offset == reopened.log_end_offset - 1
    # A clean close snapshots at the log end.
    reopened.close()
    assert snapshot_offsets(fs, DIR)[-1] == reopened.log_end_offset
    assert open_log(fs, config(segment_bytes=400)).producer_state.entry(7) == entry


def test_damaged_snapshot_falls_back_to_an_older_one_and_the_log() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=400))
    for i in range(10):
        log.append_as_leader(pbatch(3, i * 3), leader_epoch=0, now_ms=NOW)
    entry = log.producer_state.entry(3)
    newest = snapshot_offsets(fs, DIR)[-1]
    handle = fs.open(f"{DIR}/{newest:020d}.snapshot")
    handle.truncate(10)
    handle.close()
    assert open_log(fs, config(segment_bytes=400)).producer_state.entry(3) == entry


def test_follower_builds_the_same_state_and_dedupes_after_fail_over() -> None:
    leader, follower = open_log(), open_log(MemoryFileIO())
    for seq in (0, 3, 6):
        leader.append_as_leader(pbatch(5, seq), leader_epoch=1, now_ms=NOW)
    follower.append_as_follower(leader.read(0, max_bytes=100_000).records, now_ms=NOW)
    assert follower.producer_state.entries == leader.producer_state.entries
    # The follower becomes leader: the producer's retry of its last batch is a duplicate.
    again = follower.append_as_leader(pbatch(5, 6), leader_epoch=2, now_ms=NOW)
    assert again.duplicate and again.first_offset == 6
    assert follower.append_as_leader(pbatch(5, 9), leader_epoch=2, now_ms=NOW).first_offset == 9


def test_truncation_rewinds_the_producer_state() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=400))
    for i in range(10):
        log.append_as_leader(pbatch(4, i * 3), leader_epoch=0, now_ms=NOW)
    log.truncate_to(12)  # batches at 12.. are gone: the producer's next sequence is 12 again
    entry = log.producer_state.entry(4)
    assert entry is not None and entry.last_seq == 11
    assert all(o <= 12 for o in snapshot_offsets(fs, DIR))
    assert log.append_as_leader(pbatch(4, 12), leader_epoch=1, now_ms=NOW).first_offset == 12
    log.truncate_fully_and_start_at(100)
    assert log.producer_state.entry(4) is None and snapshot_offsets(fs, DIR) == []


def test_expired_producer_gets_unknown_producer_id() -> None:
    log = open_log()
    log.append_as_leader(pbatch(6, 0), leader_epoch=0, now_ms=NOW)
    assert log.remove_expired_producers(NOW + 10_000, 1_000) == [6]
    with pytest.raises(MqError) as err:
        log.append_as_leader(pbatch(6, 3), leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.UNKNOWN_PRODUCER_ID


def test_mirror_topic_keeps_no_producer_state() -> None:
    src = open_log()
    src.append_as_leader(pbatch(9, 0), leader_epoch=0, now_ms=NOW)
    mirror = open_log(MemoryFileIO(), config(mirror_source_region="east"))
    mirror.append_as_mirror(src.read(0, max_bytes=10_000).records, leader_epoch=0, now_ms=NOW)
    assert mirror.producer_state.entry(9) is None
    mirror.update_config(config())  # promoted: a local producer with the same id starts clean
    assert mirror.append_as_leader(pbatch(9, 0), leader_epoch=1, now_ms=NOW).first_offset == 3
