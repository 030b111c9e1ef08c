"""Transactions in the log: control batches end transactions, ABORT markers fill the
segment's .txnindex, the last stable offset stops at the oldest open or unreplicated
transaction, and all of it survives a restart, a truncation and compaction."""

from __future__ import annotations

import pytest

from mq.core.errors import ErrorCode, MqError
from mq.protocol.control_batch import ControlType, build_marker, marker_of
from mq.protocol.record_batch import build_batch, read_header
from mq.storage import MemoryFileIO
from mq.storage.txn_index import AbortedTxn, TransactionIndex, decode_entries
from tests.unit.storage.storage_helpers import DIR, NOW, open_log


def tbatch(pid: int, seq: int, count: int = 2, *, epoch: int = 0) -> bytes:
    return build_batch([(b"k", f"{pid}-{seq + i}".encode(), (), NOW) for i in range(count)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def marker(pid: int, kind: ControlType, *, epoch: int = 0) -> bytes:
    return build_marker(pid, epoch, kind, coordinator_epoch=1, timestamp_ms=NOW)


def test_a_marker_round_trips_with_kafkas_control_record_layout() -> None:
    data = marker(9, ControlType.ABORT, epoch=4)
    header = read_header(data)
    assert header.is_control and header.is_transactional and header.base_sequence == -1
    assert marker_of(data) == (ControlType.ABORT, 1)


def test_lso_stops_at_the_oldest_open_transaction_and_moves_when_markers_replicate() -> None:
    log = open_log()
    log.append_as_leader(build_batch([(None, b"plain", (), NOW)]), leader_epoch=0, now_ms=NOW)  # 0
    log.append_as_leader(tbatch(1, 0), leader_epoch=0, now_ms=NOW)  # 1-2
    log.append_as_leader(tbatch(2, 0), leader_epoch=0, now_ms=NOW)  # 3-4
    assert log.last_stable_offset(5) == 1
    assert log.last_stable_offset(1) == 1  # never above the high watermark
    log.append_markers_as_leader(marker(1, ControlType.ABORT), leader_epoch=0, now_ms=NOW)  # 5
    assert log.last_stable_offset(5) == 1  # the marker is not below the high watermark yet
    assert log.last_stable_offset(6) == 3  # producer 2 is still open
    log.append_markers_as_leader(marker(2, ControlType.COMMIT), leader_epoch=0, now_ms=NOW)  # 6
    assert log.last_stable_offset(7) == 7
    assert log.aborted_transactions(0, 7) == [AbortedTxn(1, 1, 5, 3)]
    assert log.aborted_transactions(6, 7) == []  # wholly before the fetch offset


def test_txnindex_survives_restart_and_truncation_drops_markers_above_the_cut() -> None:
    fs = MemoryFileIO()
    log = open_log(fs)
    log.append_as_leader(tbatch(1, 0), leader_epoch=0, now_ms=NOW)  # 0-1
    log.append_markers_as_leader(marker(1, ControlType.ABORT), leader_epoch=0, now_ms=NOW)  # 2
    log.roll(NOW)
    log.append_as_leader(tbatch(1, 2), leader_epoch=0, now_ms=NOW)  # 3-4
    log.append_markers_as_leader(marker(1, ControlType.ABORT), leader_epoch=0, now_ms=NOW)  # 5
    log.close()
    on_disk = decode_entries(fs.files[f"{DIR}/00000000000000000000.txnindex"].data)
    assert on_disk == [AbortedTxn(1, 0, 2, 3)]
    log = open_log(fs)
    assert log.aborted_transactions(0, 6) == [AbortedTxn(1, 0, 2, 3), AbortedTxn(1, 3, 5, 6)]
    assert log.last_stable_offset(6) == 6
    log.truncate_to(5)  # the second marker is gone: its transaction is open again
    assert log.aborted_transactions(0, 6) == [AbortedTxn(1, 0, 2, 3)]
    assert log.last_stable_offset(5) == 3
    log.close()
    assert open_log(fs).last_stable_offset(5) == 3


def test_a_stale_marker_and_a_client_control_batch_are_refused() -> None:
    log = open_log()
    log.append_as_leader(tbatch(1, 0, epoch=3), leader_epoch=0, now_ms=NOW)
    with pytest.raises(MqError) as err:
        log.append_markers_as_leader(marker(1, ControlType.COMMIT, epoch=2), leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(MqError) as err:
        log.append_as_leader(marker(1, ControlType.COMMIT, epoch=3), leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(MqError) as err:
        log.append_markers_as_leader(tbatch(1, 2, epoch=3), leader_epoch=0, now_ms=NOW)
    assert err.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 2 and log.last_stable_offset(2) == 0


def test_followers_build_the_same_index() -> None:
    leader, follower = open_log(), open_log(MemoryFileIO())
    leader.append_as_leader(tbatch(4, 0), leader_epoch=0, now_ms=NOW)
    leader.append_markers_as_leader(marker(4, ControlType.ABORT), leader_epoch=0, now_ms=NOW)
    data = leader.read(0, max_bytes=1 << 20).records
    follower.append_as_follower(data, now_ms=NOW)
    assert follower.aborted_transactions(0, 3) == leader.aborted_transactions(0, 3) == [AbortedTxn(4, 0, 2, 3)]


def test_a_torn_txnindex_entry_is_ignored_and_cut() -> None:
    fs = MemoryFileIO()
    fs.makedirs(DIR)
    index = TransactionIndex(fs, f"{DIR}/x.txnindex")
    index.append(AbortedTxn(1, 0, 2, 3))
    fs.open(f"{DIR}/x.txnindex").append(b"\x00\x01\x02")
    again = TransactionIndex(fs, f"{DIR}/x.txnindex")
    assert again.entries == [AbortedTxn(1, 0, 2, 3)]
    assert again.append(AbortedTxn(1, 0, 2, 3)) is False  # replayed: not twice
    assert again.append(AbortedTxn(2, 3, 4, 5)) is True
    assert len(fs.files[f"{DIR}/x.txnindex"].data) == 68
