"""Transactions on the wire against one broker process: FindCoordinator key type 1,
InitProducerId with a transactional id, AddPartitionsToTxn, transactional produce,
EndTxn (commit and abort, epoch bumped each time), markers in the log, read_committed
fetches stopping at the LSO with the aborted transactions listed, and bad input
(unknown id, stale epoch, a client's control batch) answered with named errors."""

from __future__ import annotations

import pytest

from mq.core.errors import ErrorCode
from mq.protocol.control_batch import ControlType, build_marker
from mq.protocol.group_messages import FindCoordinatorRequest
from mq.protocol.messages import FetchPartition, FetchRequest, FetchTopic
from mq.protocol.producer_messages import InitProducerIdRequest
from mq.protocol.record_batch import iter_batches
from mq.protocol.txn_messages import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnTopic,
    WritableTxnMarker,
    WriteTxnMarkersRequest,
)

from ..conftest import BrokerProcess, free_port
from .raw import RawClient, batch, until, values_of
from .test_bad_input import assert_no_traceback, assert_still_serving


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", free_port(), configs={
        "transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"})
    proc.start()
    yield proc
    proc.stop()


def fetch(client: RawClient, topic: str, offset: int, *, committed: bool):
    request = FetchRequest([FetchTopic(topic, [FetchPartition(0, offset)])], max_wait_ms=0,
                           isolation_level=1 if committed else 0)
    return client.request(request).topics[0].partitions[0]


def start(client: RawClient, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    until(lambda: client.request(FindCoordinatorRequest(tid, key_type=1)))
    response = until(lambda: client.request(InitProducerIdRequest(tid, timeout_ms)))
    return response.producer_id, response.producer_epoch  # type: ignore[attr-defined]


def add(client: RawClient, tid: str, pid: int, epoch: int, topic: str):
    response = client.request(AddPartitionsToTxnRequest(tid, pid, epoch, [TxnTopic(topic, [0])]))
    return response.results[0].partitions[0].error_code


def data_values(records: bytes) -> list[bytes | None]:
    """Values of the data batches (a raw fetch returns control batches too)."""
    view = memoryview(records)
    return [v for pos, h in iter_batches(view) if not h.is_control for _, v in values_of(view[pos:pos + h.size])]


def tx_batch(values: list[bytes], pid: int, epoch: int, seq: int) -> bytes:
    return batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def test_commit_then_abort_under_read_committed(txn_broker):
    with RawClient.to(txn_broker) as client:
        client.create_topic("tx-out")
        pid, epoch = start(client, "copier-1")
        assert epoch == 0
        assert add(client, "copier-1", pid, epoch, "tx-out") == 0
        assert client.produce("tx-out", 0, tx_batch([b"a", b"b"], pid, epoch, 0), acks=-1).error_code == 0
        open_ = fetch(client, "tx-out", 0, committed=True)
        assert (open_.last_stable_offset, open_.records) == (0, b"")  # the open transaction holds the LSO
        assert len(values_of(fetch(client, "tx-out", 0, committed=False).records)) == 2
        end = client.request(EndTxnRequest("copier-1", pid, epoch, True))
        assert (end.error_code, end.producer_epoch) == (0, 1)
        done = until(lambda: fetch(client, "tx-out", 0, committed=True),
                     ok=lambda r: r.last_stable_offset == 3)  # data + the COMMIT marker
        assert data_values(done.records) == [b"a", b"b"]
        # transaction 2 at epoch 1 (sequences restart at 0), aborted
        epoch = end.producer_epoch
        assert add(client, "copier-1", pid, epoch, "tx-out") == 0
        assert client.produce("tx-out", 0, tx_batch([b"x"], pid, epoch, 0), acks=-1).error_code == 0
        assert client.request(EndTxnRequest("copier-1", pid, epoch, False)).error_code == 0
        after = until(lambda: fetch(client, "tx-out", 3, committed=True), ok=lambda r: r.last_stable_offset == 5)
        assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [(pid, 3)]
        headers = [h for _, h in iter_batches(fetch(client, "tx-out", 0, committed=False).records)]
        assert [h.is_control for h in headers] == [False, True, False, True]


def test_zombie_is_fenced_and_its_transaction_aborted(txn_broker):
    with RawClient.to(txn_broker) as client:
        client.create_topic("tx-zombie")
        pid, epoch = start(client, "zombie-1")
        assert add(client, "zombie-1", pid, epoch, "tx-zombie") == 0
        assert client.produce("tx-zombie", 0, tx_batch([b"z"], pid, epoch, 0), acks=-1).error_code == 0
        # a second instance: the first one's transaction is aborted, its epoch fenced
        pid2, epoch2 = start(client, "zombie-1")
        assert (pid2, epoch2) == (pid, 2)
        assert client.request(EndTxnRequest("zombie-1", pid, epoch, True)).error_code == ErrorCode.PRODUCER_FENCED
        stale = client.produce("tx-zombie", 0, tx_batch([b"late"], pid, epoch, 1), acks=-1)
        assert stale.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        after = until(lambda: fetch(client, "tx-zombie", 0, committed=True), ok=lambda r: r.last_stable_offset == 2)
        assert [t.producer_id for t in after.aborted_transactions] == [pid]
    assert_no_traceback(txn_broker)


def test_a_hanging_transaction_is_aborted_by_its_timeout(txn_broker):
    with RawClient.to(txn_broker) as client:
        client.create_topic("tx-hang")
        pid, epoch = start(client, "hang-1", timeout_ms=300)
        assert add(client, "hang-1", pid, epoch, "tx-hang") == 0
        assert client.produce("tx-hang", 0, tx_batch([b"h"], pid, epoch, 0), acks=-1).error_code == 0
        after = until(lambda: fetch(client, "tx-hang", 0, committed=True), ok=lambda r: r.last_stable_offset == 2)
        assert [t.producer_id for t in after.aborted_transactions] == [pid]
        assert client.request(EndTxnRequest("hang-1", pid, epoch, True)).error_code == ErrorCode.INVALID_TXN_STATE


def test_bad_transactional_input_is_named_and_harmless(txn_broker):
    with RawClient.to(txn_broker) as client:
        client.create_topic("tx-bad")
        pid, epoch = start(client, "bad-1")
        unknown = client.request(AddPartitionsToTxnRequest("never-initialised", pid, 0, [TxnTopic("tx-bad", [0])]))
        assert unknown.results[0].partitions[0].error_code in (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                                                               ErrorCode.NOT_COORDINATOR)
        assert add(client, "bad-1", pid, epoch + 5, "tx-bad") == ErrorCode.INVALID_PRODUCER_EPOCH
        assert add(client, "bad-1", pid + 1, epoch, "tx-bad") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert client.request(EndTxnRequest("bad-1", pid, epoch, True)).error_code == ErrorCode.INVALID_TXN_STATE
        forged = build_marker(pid, epoch, ControlType.COMMIT, coordinator_epoch=0, timestamp_ms=0)
        assert client.produce("tx-bad", 0, forged, acks=-1).error_code == ErrorCode.INVALID_RECORD
        assert fetch(client, "tx-bad", 0, committed=False).high_watermark == 0
    assert_still_serving(txn_broker)
    assert_no_traceback(txn_broker)


def test_r20_a_delayed_end_txn_of_n_cannot_commit_n_plus_1(txn_broker):
    """TESTING.md R20: EndTxn(commit) of transaction N is retried late, after N was
    aborted and N+1 began: it is refused (stale epoch), N+1 is untouched, and a
    marker of the stale epoch written by hand is refused by the partition too."""
    with RawClient.to(txn_broker) as client:
        client.create_topic("tx-r20")
        pid, epoch = start(client, "r20-1")
        assert add(client, "r20-1", pid, epoch, "tx-r20") == 0
        assert client.produce("tx-r20", 0, tx_batch([b"n"], pid, epoch, 0), acks=-1).error_code == 0
        aborted = client.request(EndTxnRequest("r20-1", pid, epoch, False))  # N aborted: epoch -> 1
        assert aborted.error_code == 0
        nxt = aborted.producer_epoch
        until(lambda: add(client, "r20-1", pid, nxt, "tx-r20"), ok=lambda code: code == 0)  # N+1 begins
        assert client.produce("tx-r20", 0, tx_batch([b"n+1"], pid, nxt, 0), acks=-1).error_code == 0
        late = client.request(EndTxnRequest("r20-1", pid, epoch, True))  # the delayed commit of N
        assert late.error_code == ErrorCode.PRODUCER_FENCED
        marker = WritableTxnMarker(pid, epoch, True, [TxnTopic("tx-r20", [0])], 0)  # a stale marker of N
        answer = client.request(WriteTxnMarkersRequest([marker]))
        assert answer.markers[0].topics[0].partitions[0].error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert client.request(EndTxnRequest("r20-1", pid, nxt, True)).error_code == 0  # N+1 commits whole
        done = until(lambda: fetch(client, "tx-r20", 0, committed=True), ok=lambda r: r.last_stable_offset == 4)
        # raw bytes: N's record (offset 0) is listed as aborted, for the consumer to drop; N+1's is committed
        assert data_values(done.records) == [b"n", b"n+1"]
        assert [(t.producer_id, t.first_offset) for t in done.aborted_transactions] == [(pid, 0)]
        kinds = [(h.base_offset, h.is_control) for _, h in iter_batches(done.records)]
        assert kinds == [(0, False), (1, True), (2, False), (3, True)]
    assert_no_traceback(txn_broker)
