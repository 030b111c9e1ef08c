"""Offset-commit helpers and group positions in SubscriptionState (sans-IO)."""

from __future__ import annotations

import pytest

from mq.client.internals.offset_commit import (
    AutoCommitTimer,
    OffsetAndMetadata,
    commit_errors,
    commit_request,
    fetch_request,
    fetch_result,
    to_offset_and_metadata,
)
from mq.client.internals.subscription import SubscriptionState
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, TopicPartition
from mq.protocol.group_messages import (
    OffsetCommitPartitionResponse,
    OffsetCommitResponse,
    OffsetCommitTopicResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchResponse,
    OffsetFetchTopicResponse,
)

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_commit_request_is_sorted_and_carries_identity() -> None:
    req = commit_request("g", {B0: OffsetAndMetadata(5), A1: OffsetAndMetadata(7, "m", 3),
                               A0: OffsetAndMetadata(0)},
                         generation_id=4, member_id="m-1", group_instance_id=None)
    assert [t.name for t in req.topics] == ["a", "b"]
    assert [(p.partition, p.offset, p.metadata, p.leader_epoch) for p in req.topics[0].partitions] == \
        [(0, 0, "", -1), (1, 7, "m", 3)]
    assert (req.generation_id, req.member_id) == (4, "m-1")


def test_commit_errors_only_failed_partitions() -> None:
    resp = OffsetCommitResponse(topics=[OffsetCommitTopicResponse("a", [
        OffsetCommitPartitionResponse(0, 0), OffsetCommitPartitionResponse(1, ErrorCode.ILLEGAL_GENERATION)])])
    assert commit_errors(resp) == {A1: ErrorCode.ILLEGAL_GENERATION}


def test_fetch_request_and_result() -> None:
    assert fetch_request("g", None).topics is None
    req = fetch_request("g", [A1, B0, A0, A0])
    assert [(t.name, t.partitions) for t in req.topics] == [("a", [0, 1]), ("b", [0])]
    resp = OffsetFetchResponse(0, topics=[OffsetFetchTopicResponse("a", [
        OffsetFetchPartitionResponse(0, offset=12, metadata="x"),
        OffsetFetchPartitionResponse(1, offset=-1),
        OffsetFetchPartitionResponse(2, error_code=ErrorCode.UNKNOWN_TOPIC)])])
    found, errors = fetch_result(resp)
    assert found == {A0: OffsetAndMetadata(12, "x"), A1: None}
    assert errors == {TopicPartition("a", 2): ErrorCode.UNKNOWN_TOPIC}
    with pytest.raises(MqError) as err:
        fetch_result(OffsetFetchResponse(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
    assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and err.value.code.retriable


def test_to_offset_and_metadata() -> None:
    assert to_offset_and_metadata(5) == OffsetAndMetadata(5)
    with pytest.raises(MqError):
        to_offset_and_metadata("5")  # type: ignore[arg-type]
    with pytest.raises(MqError):
        to_offset_and_metadata(True)


def test_auto_commit_timer() -> None:
    t = AutoCommitTimer(100, now_ms=0)
    assert not t.due(99) and t.due(100) and t.time_to_next_ms(40) == 60
    t.reset(100)
    assert not t.due(150) and t.due(200)
    off = AutoCommitTimer(100, now_ms=0, enabled=False)
    assert not off.due(10_000) and off.time_to_next_ms(0) is None


# ---------------------------------------------------------------- SubscriptionState


def test_group_assignment_waits_for_committed_offset() -> None:
    s = SubscriptionState("earliest")
    s.assign([A0, A1], awaiting_committed=True)
    assert not s.is_fetchable(A0) and s.pending_lookups() == []
    waiting = dict(s.awaiting_committed())
    s.committed_done(A0, 42, waiting[A0])
    s.committed_done(A1, None, waiting[A1])
    assert s.position(A0) == 42 and s.is_fetchable(A0)
    assert [(tp, ts) for tp, ts, _ in s.pending_lookups()] == [(A1, EARLIEST_TIMESTAMP)]
    assert s.awaiting_committed() == []


def test_no_committed_offset_with_reset_none_is_an_error() -> None:
    s = SubscriptionState("none")
    s.assign([A0], awaiting_committed=True)
    (tp, epoch), = s.awaiting_committed()
    s.committed_done(tp, None, epoch)
    err = s.take_error()
    assert err is not None and err.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_seek_wins_over_a_late_committed_offset() -> None:
    s = SubscriptionState("earliest")
    s.assign([A0], awaiting_committed=True)
    (_, epoch), = s.awaiting_committed()
    s.seek(A0, 7)
    s.committed_done(A0, 42, epoch)
    assert s.position(A0) == 7 and s.awaiting_committed() == []


def test_reassigned_partition_starts_at_a_newer_seek_epoch() -> None:
    s = SubscriptionState("earliest")
    s.assign([A0], awaiting_committed=True)
    s.seek(A0, 3)
    s.seek(A0, 4)
    old_epoch = s.state(A0).seek_epoch
    s.assign([])
    s.assign([A0], awaiting_committed=True)
    assert s.state(A0).seek_epoch > old_epoch and s.position(A0) is None
