"""read_committed in the consumer's Fetcher: interleaved transactions of several
producers read from a real log; the aborted ones and every control record are
dropped, committed and plain records are returned in offset order, and the position
moves past everything (markers included)."""

from __future__ import annotations

import pytest

from mq.client.internals.fetcher import Fetcher
from mq.client.internals.subscription import SubscriptionState
from mq.core.errors import MqError
from mq.core.types import TopicPartition
from mq.protocol.control_batch import ControlType, build_marker
from mq.protocol.messages import (
    AbortedTransaction,
    FetchPartitionResponse,
    FetchResponse,
    FetchTopicResponse,
)
from mq.protocol.record_batch import build_batch
from tests.unit.storage.storage_helpers import NOW, open_log

TP = TopicPartition("t", 0)


def _txn(pid: int, seq: int, tag: str) -> bytes:
    return build_batch([(None, f"{tag}{i}".encode(), (), NOW) for i in range(2)], producer_id=pid,
                       producer_epoch=0, base_sequence=seq, is_transactional=True)


def _marker(pid: int, kind: ControlType) -> bytes:
    return build_marker(pid, 0, kind, coordinator_epoch=0, timestamp_ms=NOW)


def _interleaved_log():
    log = open_log()
    log.append_as_leader(_txn(1, 0, "abort-a"), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(_txn(2, 0, "commit-a"), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(build_batch([(None, b"plain", (), NOW)]), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(_txn(1, 2, "abort-b"), leader_epoch=0, now_ms=NOW)
    log.append_markers_as_leader(_marker(1, ControlType.ABORT), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(_txn(2, 2, "commit-b"), leader_epoch=0, now_ms=NOW)
    log.append_markers_as_leader(_marker(2, ControlType.COMMIT), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(_txn(1, 4, "later"), leader_epoch=0, now_ms=NOW)  # producer 1 again, committed
    log.append_markers_as_leader(_marker(1, ControlType.COMMIT), leader_epoch=0, now_ms=NOW)
    return log


def _poll(isolation: str, start: int = 0) -> tuple[list[bytes], int | None]:
    log = _interleaved_log()
    end = log.log_end_offset
    upper = log.last_stable_offset(end) if isolation == "read_committed" else end
    data = log.read(start, max_bytes=1 << 20, max_offset=upper).records
    aborted = [AbortedTransaction(t.producer_id, t.first_offset) for t in log.aborted_transactions(start, upper)]
    subs = SubscriptionState("earliest")
    subs.assign([TP])
    subs.seek(TP, start)
    fetcher = Fetcher(subs, isolation_level=isolation)
    [(node, request, sent)] = fetcher.prepare_fetches(lambda tp: 1, lambda tp: 0)
    assert request.isolation_level == (1 if isolation == "read_committed" else 0)
    fetcher.on_response(node, sent, FetchResponse([FetchTopicResponse("t", [FetchPartitionResponse(
        0, 0, end, upper, 0, data,
        aborted_transactions=aborted if isolation == "read_committed" else None)])]))
    return [r.value for r in fetcher.fetch_records(100)], subs.position(TP)


def test_read_committed_drops_aborted_transactions_and_markers() -> None:
    values, position = _poll("read_committed")
    assert values == [b"commit-a0", b"commit-a1", b"plain", b"commit-b0", b"commit-b1", b"later0", b"later1"]
    assert position == 14


def test_read_committed_from_the_middle_of_an_aborted_transaction() -> None:
    values, _ = _poll("read_committed", start=5)  # offset 5 holds abort-b
    assert values == [b"commit-b0", b"commit-b1", b"later0", b"later1"]


def test_read_uncommitted_returns_everything_but_control_records() -> None:
    values, position = _poll("read_uncommitted")
    assert len(values) == 11 and b"abort-a0" in values and position == 14


def test_read_committed_stops_at_an_open_transaction() -> None:
    log = open_log()
    log.append_as_leader(build_batch([(None, b"before", (), NOW)]), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(_txn(3, 0, "open"), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(build_batch([(None, b"after", (), NOW)]), leader_epoch=0, now_ms=NOW)
    assert log.last_stable_offset(log.log_end_offset) == 1
    assert log.read(1, max_bytes=1 << 20, max_offset=1).records == b""


def test_an_unknown_isolation_level_is_a_named_error() -> None:
    with pytest.raises(MqError, match="isolation_level"):
        Fetcher(SubscriptionState("earliest"), isolation_level="serializable")
