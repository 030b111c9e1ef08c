"""The share coordinator: membership and assignment, fetch with piggybacked acks,
fail-over by replay (acknowledged stays acknowledged, held records come back with
their delivery counts), bad input answered with named errors and nothing changed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mq.coordinator.records import CoordinatorRecord
from mq.coordinator.share_coordinator import ShareCoordinator
from mq.coordinator.share_group import ShareConfig, assign
from mq.coordinator.share_partition import (
    RecordState,
    SharePartitionConfig,
    SharePartitionState,
    StateRun,
)
from mq.coordinator.share_records import decode_share_record, share_partition_record
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol import share_messages as s

TP = TopicPartition("jobs", 0)
TOPICS = {"jobs": 1}


class Log:
    def __init__(self, end: int) -> None:
        self.end = end

    def bounds(self, tp):
        return (0, self.end) if tp.topic == "jobs" else None

    def scan(self, tp, from_offset, max_bytes):
        return ([(from_offset, self.end - 1)] if from_offset < self.end else []), self.end

    def read(self, tp, first, last):
        return b""


class Harness:
    def __init__(self, end: int = 10) -> None:
        self.config = ShareConfig(SharePartitionConfig(1000, 3, 100), session_timeout_ms=5000,
                                  auto_offset_reset="earliest")
        self.log = Log(end)
        self.records: list[CoordinatorRecord] = []
        self.c = ShareCoordinator(0, self.config, rng=Rng(1))
        self.now = 0

    def call(self, request):
        result = self.c.handle(request, request_id=1, client_id="cli", client_host="h", topics=TOPICS, log=self.log,
                               now_ms=self.now)
        self.records.extend(result.records)
        return result.responses[0][1]

    def join(self, name: str = "") -> str:
        response = self.call(s.ShareGroupHeartbeatRequest("g", "", 0, ["jobs"]))
        assert response.error_code == ErrorCode.NONE
        return response.member_id

    def fetch(self, member: str, n: int = 100, acks=()):
        return self.call(s.ShareFetchRequest("g", member, n, acknowledgements=[
            s.PartitionAcknowledgements("jobs", 0, [s.AcknowledgementBatch(a, b, t)]) for a, b, t in acks]))

    def failover(self) -> Harness:
        new = Harness(self.log.end)
        new.records = list(self.records)
        for record in self.records:
            new.c.replay(record)
        new.now = self.now
        return new


def runs(response) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count) for p in response.partitions for a in p.acquired]


def test_many_members_share_one_partition():
    h = Harness()
    a, b = h.join(), h.join()
    assert a != b
    beat = h.call(s.ShareGroupHeartbeatRequest("g", a, 2, ["jobs"]))
    assert [(t.topic, t.partitions) for t in beat.assignment] == [("jobs", [0])]
    assert runs(h.fetch(a, 4)) == [(0, 3, 1)]
    assert runs(h.fetch(b, 4)) == [(4, 7, 1)]


def test_failover_keeps_acks_and_releases_held_records_with_their_counts():
    h = Harness()
    a = h.join()
    h.fetch(a, 6)
    h.fetch(a, 0, acks=[(0, 2, 1)])  # accept 0..2, keep holding 3..5
    h2 = h.failover()
    sp = h2.c.groups["g"].partitions[TP]
    assert sp.start_offset == 3
    assert [sp.records[o].state for o in (3, 4, 5)] == [RecordState.AVAILABLE] * 3
    assert h2.fetch(a, 10).error_code == ErrorCode.NONE  # the member is in the replayed group
    h3 = Harness()
    for record in h2.records:
        h3.c.replay(record)
    sp3 = h3.c.groups["g"].partitions[TP]
    assert [(o, sp3.records[o].delivery_count) for o in sorted(sp3.records)] == [
        (3, 2), (4, 2), (5, 2), (6, 1), (7, 1), (8, 1), (9, 1)]


def test_ack_of_a_record_not_held_is_a_named_error_and_changes_nothing():
    h = Harness()
    a, b = h.join(), h.join()
    h.fetch(a, 3)
    before = h.c.groups["g"].partitions[TP].snapshot()
    response = h.call(s.ShareAcknowledgeRequest("g", b, [s.PartitionAcknowledgements(
        "jobs", 0, [s.AcknowledgementBatch(0, 0, 1)])]))
    assert response.error_code == ErrorCode.NONE
    assert response.acknowledgements[0].error_code == ErrorCode.INVALID_RECORD_STATE
    assert "not all held" in response.acknowledgements[0].error_message
    assert h.c.groups["g"].partitions[TP].snapshot() == before
    bad_type = h.call(s.ShareAcknowledgeRequest("g", a, [s.PartitionAcknowledgements(
        "jobs", 0, [s.AcknowledgementBatch(0, 0, 9)])]))
    assert bad_type.acknowledgements[0].error_code == ErrorCode.INVALID_REQUEST
    unknown = h.call(s.ShareAcknowledgeRequest("g", "nobody", []))
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    other = h.call(s.ShareAcknowledgeRequest("g", a, [s.PartitionAcknowledgements(
        "other", 0, [s.AcknowledgementBatch(0, 0, 1)])]))
    assert other.acknowledgements[0].error_code == ErrorCode.INVALID_RECORD_STATE
    assert h.c.groups["g"].partitions[TP].snapshot() == before


def test_session_timeout_releases_locks_and_leave_releases_at_once():
    h = Harness()
    a, b = h.join(), h.join()
    h.fetch(a, 2)
    h.fetch(b, 2)
    h.call(s.ShareGroupHeartbeatRequest("g", b, -1))
    sp = h.c.groups["g"].partitions[TP]
    assert sp.held_by(b) == [] and sp.records[2].state == RecordState.AVAILABLE
    h.now = 5000
    result = h.c.poll(now_ms=h.now)
    assert result.records and "g" in h.c.groups and a not in h.c.groups["g"].members
    assert sp.held_by(a) == []


def test_describe_list_delete():
    h = Harness()
    a = h.join()
    h.fetch(a, 3)
    d = h.call(s.ShareGroupDescribeRequest(["g", "nope"]))
    g, nope = d.groups
    assert (g.state, len(g.members), g.partitions[0].acquired, g.partitions[0].high_watermark) == ("Stable", 1, 3, 10)
    assert nope.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.call(s.DeleteShareGroupsRequest("g")).error_code == ErrorCode.NON_EMPTY_GROUP
    h.call(s.ShareGroupHeartbeatRequest("g", a, -1))
    assert [x.state for x in h.call(s.ListShareGroupsRequest()).groups] == ["Empty"]
    assert h.call(s.DeleteShareGroupsRequest("g")).error_code == ErrorCode.NONE
    assert h.failover().c.groups == {}


def test_bad_heartbeats():
    h = Harness()
    assert h.call(s.ShareGroupHeartbeatRequest("", "", 0)).error_code == ErrorCode.INVALID_GROUP_ID
    assert h.call(s.ShareGroupHeartbeatRequest("g", "x", 3)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.call(s.ShareGroupHeartbeatRequest("g", "", 0, auto_offset_reset="middle")).error_code == \
        ErrorCode.INVALID_CONFIG
    a = h.join()
    assert h.call(s.ShareGroupHeartbeatRequest("g", a, 99)).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.fetch("ghost").error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_not_hosted_partition_is_a_named_error():
    h = Harness()
    h.log.bounds = lambda tp: None  # type: ignore[method-assign]
    a = h.join()
    part = h.fetch(a).partitions[0]
    assert part.error_code == ErrorCode.SHARE_PARTITION_NOT_HOSTED


def test_assignment_shares_partitions_when_members_outnumber_them():
    got = assign({"a": ("t",), "b": ("t",), "c": ("t",)}, {"t": 2})
    assert got == {"a": [TopicPartition("t", 0)], "b": [TopicPartition("t", 1)], "c": [TopicPartition("t", 0)]}
    got = assign({"a": ("t",), "b": ("t",)}, {"t": 4})
    assert got == {"a": [TopicPartition("t", 0), TopicPartition("t", 2)],
                   "b": [TopicPartition("t", 1), TopicPartition("t", 3)]}


RUNS = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5), st.sampled_from(list(RecordState)),
                          st.integers(0, 9), st.sampled_from(["", "rejected"])), max_size=5)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**40), st.integers(0, 2**40), RUNS)
def test_share_partition_records_round_trip(start, end, raw):
    state = SharePartitionState(start, end, tuple(StateRun(f, f + n, st_, c, r) for f, n, st_, c, r in raw))
    key, value = decode_share_record(share_partition_record("g", TP, state))
    assert (key.group_id, key.tp, value) == ("g", TP, state)


def test_corrupt_record_is_corrupt_message():
    try:
        decode_share_record(CoordinatorRecord(b"\x93\x02", b"x"))
    except MqError as err:
        assert err.code == ErrorCode.CORRUPT_MESSAGE
    else:
        raise AssertionError("a corrupt record decoded")
    assert decode_share_record(CoordinatorRecord(b"\x91\x09", None)) is None  # a newer key type: skipped
