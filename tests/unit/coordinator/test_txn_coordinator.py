"""The transaction coordinator's state machine: init/fence, add partitions/offsets,
EndTxn with the KIP-890 epoch bump (a late EndTxn cannot end the next transaction),
markers then Complete*, timeouts, fail-over by replay, and bad input as named errors."""

from __future__ import annotations

from itertools import count

import pytest

from mq.coordinator.records import CoordinatorRecord
from mq.coordinator.txn_coordinator import TransactionCoordinator, TxnResult
from mq.coordinator.txn_state import (
    VALID_PREVIOUS,
    TransactionMetadata,
    TxnState,
    decode_txn_record,
    transaction_partition,
    txn_record,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

T0, T1 = TopicPartition("out", 0), TopicPartition("out", 1)


class Shell:
    """Appends each result's records to a list (the partition) and replays them."""

    def __init__(self) -> None:
        self.log: list[CoordinatorRecord] = []
        self.coord = TransactionCoordinator(0)
        self.ids = count(1000)

    def do(self, result: TxnResult) -> TxnResult:
        self.log.extend(result.records)
        self.coord.replay_all(result.records)
        return result

    def init(self, tid: str = "tx", timeout_ms: int = 1000, now_ms: int = 0) -> TxnResult:
        return self.do(self.coord.init_producer_id(tid, timeout_ms, now_ms=now_ms, new_producer_id=lambda: next(self.ids)))

    def complete_markers(self, now_ms: int = 0) -> None:
        for job in self.coord.pending_markers():
            self.do(self.coord.markers_written(job.transactional_id, job.producer_epoch, now_ms=now_ms))

    def state(self, tid: str = "tx") -> TransactionMetadata:
        meta = self.coord.describe(tid)
        assert meta is not None
        return meta


def test_a_transaction_commits_with_the_epoch_bumped_and_markers_at_the_new_epoch() -> None:
    s = Shell()
    init = s.init()
    assert (init.error, init.producer_id, init.producer_epoch) == (ErrorCode.NONE, 1000, 0)
    assert s.do(s.coord.add_partitions("tx", 1000, 0, [T1, T0], now_ms=5)).error == ErrorCode.NONE
    assert s.state().state == TxnState.ONGOING and s.state().partitions == (T0, T1)
    assert s.coord.add_partitions("tx", 1000, 0, [T0], now_ms=6).records == []  # already in
    end = s.do(s.coord.end_txn("tx", 1000, 0, True, now_ms=7))
    assert (end.error, end.producer_epoch) == (ErrorCode.NONE, 1)
    [job] = s.coord.pending_markers()
    assert (job.commit, job.producer_epoch, job.partitions) == (True, 1, (T0, T1))
    s.complete_markers()
    assert s.state().state == TxnState.COMPLETE_COMMIT and s.state().partitions == ()
    # the next transaction runs at epoch 1
    assert s.do(s.coord.add_partitions("tx", 1000, 1, [T0], now_ms=8)).error == ErrorCode.NONE


def test_r20_a_late_end_txn_of_transaction_n_cannot_end_transaction_n_plus_1() -> None:
    s = Shell()
    s.init()
    s.do(s.coord.add_partitions("tx", 1000, 0, [T0], now_ms=1))
    s.do(s.coord.end_txn("tx", 1000, 0, False, now_ms=2))  # N aborted, epoch -> 1
    s.complete_markers()
    s.do(s.coord.add_partitions("tx", 1000, 1, [T1], now_ms=3))  # N+1 open at epoch 1
    late = s.coord.end_txn("tx", 1000, 0, True, now_ms=4)  # EndTxn(N, commit) delayed in the network
    assert late.error == ErrorCode.PRODUCER_FENCED and late.records == []
    assert s.state().state == TxnState.ONGOING and s.state().partitions == (T1,)


def test_a_retried_end_txn_is_answered_and_the_opposite_outcome_refused() -> None:
    s = Shell()
    s.init()
    s.do(s.coord.add_partitions("tx", 1000, 0, [T0], now_ms=1))
    s.do(s.coord.end_txn("tx", 1000, 0, True, now_ms=2))
    retry = s.coord.end_txn("tx", 1000, 0, True, now_ms=3)
    assert (retry.error, retry.producer_epoch, retry.records) == (ErrorCode.NONE, 1, [])
    assert s.coord.end_txn("tx", 1000, 0, False, now_ms=3).error == ErrorCode.INVALID_TXN_STATE
    s.complete_markers()
    assert s.coord.end_txn("tx", 1000, 0, True, now_ms=3).error == ErrorCode.NONE
    assert s.coord.end_txn("tx", 1000, 1, True, now_ms=3).error == ErrorCode.INVALID_TXN_STATE  # nothing open


def test_init_fences_the_old_instance_and_aborts_its_open_transaction() -> None:
    s = Shell()
    s.init()
    s.do(s.coord.add_partitions("tx", 1000, 0, [T0, T1], now_ms=1))
    again = s.init(now_ms=2)  # a new instance with the same transactional id
    assert again.error == ErrorCode.CONCURRENT_TRANSACTIONS
    [job] = s.coord.pending_markers()
    assert (job.commit, job.producer_epoch) == (False, 1)  # abort markers fence epoch 0 on the partitions
    assert s.init(now_ms=3).error == ErrorCode.CONCURRENT_TRANSACTIONS  # markers still owed
    s.complete_markers()
    ready = s.init(now_ms=4)
    assert (ready.error, ready.producer_id, ready.producer_epoch) == (ErrorCode.NONE, 1000, 2)
    zombie = s.coord.add_partitions("tx", 1000, 0, [T0], now_ms=5)
    assert zombie.error == ErrorCode.PRODUCER_FENCED
    assert s.coord.end_txn("tx", 1000, 0, True, now_ms=5).error == ErrorCode.PRODUCER_FENCED


def test_a_hanging_transaction_is_aborted_by_its_timeout() -> None:
    s = Shell()
    s.init(timeout_ms=100)
    s.do(s.coord.add_partitions("tx", 1000, 0, [T0], now_ms=10))
    assert s.coord.next_deadline_ms() == 111
    assert s.coord.expire(now_ms=110) == []
    [result] = s.coord.expire(now_ms=111)
    s.do(result)
    assert s.state().state == TxnState.PREPARE_ABORT and s.state().producer_epoch == 1
    s.complete_markers()
    assert s.state().state == TxnState.COMPLETE_ABORT
    assert s.coord.end_txn("tx", 1000, 0, True, now_ms=200).error == ErrorCode.INVALID_TXN_STATE


def test_failover_mid_commit_finishes_the_commit_from_the_log() -> None:
    s = Shell()
    s.init()
    s.do(s.coord.add_partitions("tx", 1000, 0, [T0, T1], now_ms=1))
    s.do(s.coord.end_txn("tx", 1000, 0, True, now_ms=2))
    successor = TransactionCoordinator(0, coordinator_epoch=7)
    successor.replay_all(s.log)  # the old coordinator died before any marker
    [job] = successor.pending_markers()
    assert (job.commit, job.partitions, job.coordinator_epoch) == (True, (T0, T1), 7)


def test_concurrent_writes_of_one_id_are_refused_until_replayed_or_failed() -> None:
    s = Shell()
    s.init()
    first = s.coord.add_partitions("tx", 1000, 0, [T0], now_ms=1)  # not yet written
    assert s.coord.add_partitions("tx", 1000, 0, [T1], now_ms=1).error == ErrorCode.CONCURRENT_TRANSACTIONS
    s.coord.fail("tx")
    assert first.records and s.do(s.coord.add_partitions("tx", 1000, 0, [T1], now_ms=1)).error == ErrorCode.NONE


@pytest.mark.parametrize(("call", "code"), [
    (lambda c: c.add_partitions("nobody", 1, 0, [T0], now_ms=0), ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
    (lambda c: c.end_txn("nobody", 1, 0, True, now_ms=0), ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
    (lambda c: c.add_partitions("tx", 999, 0, [T0], now_ms=0), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
    (lambda c: c.add_partitions("tx", 1000, 5, [T0], now_ms=0), ErrorCode.INVALID_PRODUCER_EPOCH),
    (lambda c: c.end_txn("tx", 1000, 0, True, now_ms=0), ErrorCode.INVALID_TXN_STATE),
    (lambda c: c.init_producer_id("tx2", 0, now_ms=0, new_producer_id=lambda: 1), ErrorCode.INVALID_TRANSACTION_TIMEOUT),
    (lambda c: c.check_offset_commit("tx", 1000, 0, "g"), ErrorCode.INVALID_TXN_STATE),
    (lambda c: c.add_offsets("tx", 1000, 0, "", now_ms=0), ErrorCode.INVALID_GROUP_ID),
], ids=["unknown-add", "unknown-end", "wrong-pid", "future-epoch", "end-nothing-open", "bad-timeout",
        "offsets-not-added", "empty-group"])
def test_bad_input_is_a_named_error_and_writes_nothing(call, code) -> None:
    s = Shell()
    s.init()
    before = s.state()
    result = call(s.coord)
    assert result.error == code and result.records == [] and result.message
    assert s.state() == before and s.coord.pending == {}


def test_offsets_join_the_transaction_through_the_groups_partition() -> None:
    s = Shell()
    s.init()
    s.do(s.coord.add_offsets("tx", 1000, 0, "copier", now_ms=1))
    assert s.coord.offsets_partition("copier") in s.state().partitions
    assert s.coord.check_offset_commit("tx", 1000, 0, "copier").error == ErrorCode.NONE
    assert s.coord.check_offset_commit("tx", 1000, 0, "other").error == ErrorCode.INVALID_TXN_STATE


def test_records_round_trip_and_the_transition_table_is_enforced() -> None:
    meta = TransactionMetadata("tx", 5, 3, 60_000, TxnState.ONGOING, (T0, T1), 10, 11, 2)
    assert decode_txn_record(txn_record(meta)) == ("tx", meta)
    assert decode_txn_record(CoordinatorRecord(txn_record(meta).key, None)) == ("tx", None)
    for target, allowed in VALID_PREVIOUS.items():
        for source in TxnState:
            m = TransactionMetadata("tx", 5, 3, 1, source)
            if source in allowed:
                assert m.transition(target).state == target
            else:
                with pytest.raises(MqError) as err:
                    m.transition(target)
                assert err.value.code == ErrorCode.INVALID_TXN_STATE
    with pytest.raises(MqError) as err:
        decode_txn_record(CoordinatorRecord(b"\x93\x09\x01\x02", b""))
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    assert 0 <= transaction_partition("payments-1", 50) < 50
