"""Bad input to the group coordinator (TESTING.md "Bad input"), against a real broker
process with raw requests: each case gets its named error code, exactly; nothing is
corrupted (the group's committed offsets, generation and member are unchanged
afterwards, also after a restart that replays ``__consumer_offsets``); another client
keeps being served; and the broker logs no stack trace.

One module broker hosts a group ``g`` with one member, ``clicks`` partitions 0 and 1
committed at 10 and 20; every test checks that this state survived it."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import pytest

from mq.core.errors import ErrorCode
from mq.protocol.codec import encode_request, encode_response
from mq.protocol.group_messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListGroupsRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
)
from mq.protocol.messages import ApiVersionsRequest, MetadataRequest
from tests.chaos.harness.region import Region

from ..conftest import BrokerProcess, free_port
from .raw import RawClient, until

GROUP = "g"
TOPIC = "clicks"
PARTITIONS = 4
COMMITTED = {0: 10, 1: 20}
SESSION_MS = 30_000
CONFIGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
           "group.max.session.timeout.ms": "60000", "offsets.topic.num.partitions": "3"}
RETRIABLE = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
OFFSET_FETCH_PARTITIONS = 10_000
OFFSET_FETCH_MAX_BYTES_PER_PARTITION = 128
"""An OffsetFetch answer grows with what was asked (about 100 bytes per partition
named), never with anything else."""
OFFSET_FETCH_MAX_SECONDS = 5.0


@dataclass
class Member:
    generation: int
    member_id: str


@dataclass
class GroupBroker:
    broker: BrokerProcess
    member: Member




def _connect(broker) -> RawClient:
    """A connection past the pre-auth frame limit (its first request was valid)."""
    client = RawClient.to(broker)
    assert client.request(ApiVersionsRequest()).error_code == 0
    return client


def _commit(topic: str, *parts: OffsetCommitPartition, group: str = GROUP, member: Member | None = None,
            generation: int | None = None, member_id: str | None = None) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group, [OffsetCommitTopic(topic, list(parts))],
        generation_id=generation if generation is not None else (member.generation if member else -1),
        member_id=member_id if member_id is not None else (member.member_id if member else ""))


def _codes(response) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions]


def _join(client: RawClient, group: str, **kwargs) -> JoinGroupResponse:
    fields = {"session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": 5000, "assignors": ["range"],
              "topics": [TOPIC], **kwargs}
    return client.request(JoinGroupRequest(group, **fields))


def _join_member(client: RawClient, group: str, **kwargs) -> JoinGroupResponse:
    """Join as a new member: KIP-394's MEMBER_ID_REQUIRED round first, then the join
    with the id it handed out (parks until the rebalance completes)."""
    first = _join(client, group, **kwargs)
    if first.error_code != ErrorCode.MEMBER_ID_REQUIRED:
        return first
    assert first.member_id, first
    return _join(client, group, **{**kwargs, "member_id": first.member_id})


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory) -> GroupBroker:
    broker = BrokerProcess(tmp_path_factory.mktemp("group-bad-input") / "data", free_port(), configs=CONFIGS)
    broker.start()
    try:
        with _connect(broker) as c:
            c.create_topic(TOPIC, PARTITIONS)
            until(lambda: c.request(FindCoordinatorRequest(GROUP)))
            joined = until(lambda: _join_member(c, GROUP), ok=lambda r: r.error_code not in RETRIABLE)
            assert joined.error_code == ErrorCode.NONE, joined
            member = Member(joined.generation_id, joined.member_id)
            committed = c.request(_commit(TOPIC, *(OffsetCommitPartition(p, o) for p, o in COMMITTED.items()),
                                          member=member))
            assert _codes(committed) == [ErrorCode.NONE] * len(COMMITTED)
        yield GroupBroker(broker, member)
    finally:
        broker.stop()


def _offsets(client: RawClient, group: str = GROUP) -> dict[int, int]:
    response = client.request(OffsetFetchRequest(group, [OffsetFetchTopic(TOPIC, list(range(PARTITIONS)))]))
    assert response.error_code == ErrorCode.NONE, response
    return {p.partition: p.offset for p in response.topics[0].partitions if p.offset >= 0}


def assert_intact(gb: GroupBroker, *, heartbeat: bool = True) -> None:
    """The group's offsets, generation and member are as the fixture left them; another
    client is served; no stack trace (nor ERROR line) in the broker's log."""
    with RawClient.to(gb.broker) as other:
        assert other.request(MetadataRequest([])).controller_id == 1
        assert _offsets(other) == COMMITTED
        described = other.request(DescribeGroupsRequest([GROUP])).groups[0]
        assert (described.error_code, described.state, described.generation_id) == (
            ErrorCode.NONE, "Stable", gb.member.generation), described
        assert [m.member_id for m in described.members] == [gb.member.member_id]
        if heartbeat:  # also keeps the member's session alive through the module
            beat = other.request(HeartbeatRequest(GROUP, gb.member.generation, gb.member.member_id))
            assert beat.error_code == ErrorCode.NONE, beat
    text = gb.broker.stderr_text()
    assert "Traceback" not in text and " ERROR " not in text, text


# ---------------------------------------------------------------- OffsetCommit


def test_commit_for_unknown_group_from_a_non_member(group_broker):
    with _connect(group_broker.broker) as c:
        response = c.request(_commit(TOPIC, OffsetCommitPartition(0, 5), group="nobody-here",
                                     generation=5, member_id="x"))
        assert _codes(response) == [ErrorCode.ILLEGAL_GENERATION]
        assert _offsets(c, "nobody-here") == {}
        assert "nobody-here" not in [g.group_id for g in c.request(ListGroupsRequest()).groups]
        # a non-member of the existing group
        response = c.request(_commit(TOPIC, OffsetCommitPartition(0, 5), generation=group_broker.member.generation,
                                     member_id="x"))
        assert _codes(response) == [ErrorCode.UNKNOWN_MEMBER_ID]
        # an admin commit while the group has members
        response = c.request(_commit(TOPIC, OffsetCommitPartition(0, 5)))
        assert _codes(response) == [ErrorCode.UNKNOWN_MEMBER_ID]
        assert "active members" in response.error_message
    assert_intact(group_broker)


def test_commit_to_unknown_topic_or_partition(group_broker):
    member = group_broker.member
    with _connect(group_broker.broker) as c:
        assert _codes(c.request(_commit("no-such-topic", OffsetCommitPartition(0, 5), member=member))) == [
            ErrorCode.UNKNOWN_TOPIC]
        bad = [OffsetCommitPartition(p, 5) for p in (PARTITIONS, 99, -1, 2**31 - 1)]
        assert _codes(c.request(_commit(TOPIC, *bad, member=member))) == [ErrorCode.UNKNOWN_TOPIC] * len(bad)
        # the internal topic is not a topic a group commits to
        assert _codes(c.request(_commit("__consumer_offsets", OffsetCommitPartition(0, 5), member=member))) == [
            ErrorCode.UNKNOWN_TOPIC]
        # 10,000 out-of-range partitions in one request: all refused, nothing written
        many = [OffsetCommitPartition(p, 1) for p in range(PARTITIONS, PARTITIONS + 10_000)]
        assert set(_codes(c.request(_commit(TOPIC, *many, member=member)))) == {ErrorCode.UNKNOWN_TOPIC}
    assert_intact(group_broker)


def test_negative_offset(group_broker):
    with _connect(group_broker.broker) as c:
        for offset in (-1, -2, -(2**63)):
            response = c.request(_commit(TOPIC, OffsetCommitPartition(0, offset), member=group_broker.member))
            assert _codes(response) == [ErrorCode.INVALID_COMMIT_OFFSET_SIZE], offset
    assert_intact(group_broker)


def test_generation_mismatch(group_broker):
    member = group_broker.member
    with _connect(group_broker.broker) as c:
        for generation in (member.generation + 1, member.generation - 1, 2**31 - 1):
            response = c.request(_commit(TOPIC, OffsetCommitPartition(0, 5), member=member, generation=generation))
            assert _codes(response) == [ErrorCode.ILLEGAL_GENERATION], generation
    assert_intact(group_broker)


def test_huge_metadata_string(group_broker):
    with _connect(group_broker.broker) as c:
        for metadata in ("m" * (1 << 20), "é" * 2049):  # 1 MB; 4098 bytes of UTF-8 in 2049 characters
            response = c.request(_commit(TOPIC, OffsetCommitPartition(0, 5, metadata=metadata),
                                         member=group_broker.member))
            assert _codes(response) == [ErrorCode.OFFSET_METADATA_TOO_LARGE]
    assert_intact(group_broker)


def test_commit_too_large_for_the_offsets_topic_changes_nothing(group_broker):
    """300 entries for one partition with 4,000-byte metadata: the batch is larger than
    the offsets topic accepts, every entry is refused, and the offset stays at 10."""
    group = "too-large-commit"
    with _connect(group_broker.broker) as c:
        assert _codes(c.request(_commit(TOPIC, OffsetCommitPartition(0, 10), group=group))) == [ErrorCode.NONE]
        entries = [OffsetCommitPartition(0, 1000 + i, metadata="m" * 4000) for i in range(300)]
        refused = c.request(_commit(TOPIC, *entries, group=group))
        assert set(_codes(refused)) == {ErrorCode.RECORD_TOO_LARGE}
        assert _offsets(c, group) == {0: 10}
    assert_intact(group_broker)


def test_empty_and_overlong_group_ids(group_broker):
    with _connect(group_broker.broker) as c:
        for group_id in ("", "g" * 256):
            commit = c.request(_commit(TOPIC, OffsetCommitPartition(0, 5), group=group_id, generation=1,
                                       member_id="x"))
            assert _codes(commit) == [ErrorCode.INVALID_GROUP_ID], group_id
            admin = c.request(_commit(TOPIC, OffsetCommitPartition(0, 5), group=group_id))
            assert _codes(admin) == [ErrorCode.INVALID_GROUP_ID], group_id
            fetched = c.request(OffsetFetchRequest(group_id, [OffsetFetchTopic(TOPIC, [0])]))
            assert fetched.error_code == ErrorCode.INVALID_GROUP_ID
            assert _join(c, group_id).error_code == ErrorCode.INVALID_GROUP_ID
            assert c.request(HeartbeatRequest(group_id, 1, "x")).error_code == ErrorCode.INVALID_GROUP_ID
            left = c.request(LeaveGroupRequest(group_id, [MemberIdentity("x")]))
            assert left.error_code == ErrorCode.INVALID_GROUP_ID
            deleted = c.request(DeleteGroupsRequest([group_id]))
            assert [r.error_code for r in deleted.results] == [ErrorCode.INVALID_GROUP_ID]
            described = c.request(DescribeGroupsRequest([group_id]))
            assert [d.error_code for d in described.groups] == [ErrorCode.INVALID_GROUP_ID]
        assert c.request(FindCoordinatorRequest("")).error_code == ErrorCode.INVALID_GROUP_ID
        assert c.request(FindCoordinatorRequest(GROUP, key_type=7)).error_code == ErrorCode.INVALID_REQUEST
    assert_intact(group_broker)


# ---------------------------------------------------------------- JoinGroup


def test_join_with_session_timeout_out_of_range(group_broker):
    with _connect(group_broker.broker) as c:
        for timeout_ms in (0, -1, 999, 60_001, 2**31 - 1):
            assert _join(c, GROUP, session_timeout_ms=timeout_ms).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
            # the member itself, rejoining with a bad timeout, is refused before any rebalance
            rejoin = _join(c, GROUP, session_timeout_ms=timeout_ms, member_id=group_broker.member.member_id)
            assert rejoin.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert_intact(group_broker)


def test_join_with_unknown_or_unshared_assignor(group_broker):
    with _connect(group_broker.broker) as c:
        assert _join(c, GROUP, assignors=["no-such-assignor"]).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert _join(c, GROUP, assignors=["range", "x" * 10_000]).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert _join(c, GROUP, assignors=[]).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        # a known assignor the group's member does not support
        assert _join(c, GROUP, assignors=["round-robin"]).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert _join(c, GROUP, protocol_type="connect").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert _join(c, GROUP, protocol_type="").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert_intact(group_broker)


def test_join_with_invalid_pattern(group_broker):
    with _connect(group_broker.broker) as c:
        for pattern in ("(", "[a-", "a{99999999999}", "(?P<x>a)(?P<x>b)", "*"):
            with pytest.raises((re.error, OverflowError)):
                re.compile(pattern)
            joined = _join(c, "pattern-group", topics=[], pattern=pattern)
            assert joined.error_code == ErrorCode.INVALID_REQUEST, (pattern, joined)
            assert "invalid subscription pattern" in joined.error_message
        assert _join(c, "pattern-group", group_instance_id="").error_code == ErrorCode.INVALID_REQUEST
        assert "pattern-group" not in [g.group_id for g in c.request(ListGroupsRequest()).groups]
    assert_intact(group_broker)


def test_join_whose_group_record_would_be_too_large(group_broker):
    """A subscription of 70,000 topic names makes the group's metadata record larger
    than the offsets topic accepts: the join fails with the append's error and the
    group rebalances again; the member whose join failed is dropped when it does not
    rejoin within its rebalance timeout (as in Kafka), and the group can be joined."""
    topics = [f"topic-{i:015d}" for i in range(70_000)]
    with _connect(group_broker.broker) as c:
        huge = _join_member(c, "huge-group", topics=topics, rebalance_timeout_ms=300)
        assert huge.error_code == ErrorCode.RECORD_TOO_LARGE, huge
        joined = _join_member(c, "huge-group")
        assert joined.error_code == ErrorCode.NONE, joined
        left = c.request(LeaveGroupRequest("huge-group", [MemberIdentity(joined.member_id)]))
        assert [m.error_code for m in left.members] == [ErrorCode.NONE]
        deleted = until(lambda: c.request(DeleteGroupsRequest(["huge-group"])),
                         ok=lambda r: r.results[0].error_code != ErrorCode.NON_EMPTY_GROUP)
        assert deleted.results[0].error_code == ErrorCode.NONE
    assert_intact(group_broker)


def test_a_pending_member_id_is_not_a_member(group_broker):
    """KIP-394: a new member's first JoinGroup only hands out an id; until it rejoins
    with it, the id is no member's (and the group does not rebalance). LeaveGroup
    forgets it."""
    member = group_broker.member
    with _connect(group_broker.broker) as c:
        first = _join(c, GROUP)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        pending = first.member_id
        assert c.request(HeartbeatRequest(GROUP, member.generation, pending)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        commit = c.request(_commit(TOPIC, OffsetCommitPartition(0, 5), member=member, member_id=pending))
        assert _codes(commit) == [ErrorCode.UNKNOWN_MEMBER_ID]
        left = c.request(LeaveGroupRequest(GROUP, [MemberIdentity(pending)]))
        assert [m.error_code for m in left.members] == [ErrorCode.NONE]  # the pending id is forgotten ...
        assert _join(c, GROUP, member_id=pending).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # ... for good
    assert_intact(group_broker)


def test_join_with_unknown_member_id(group_broker):
    with _connect(group_broker.broker) as c:
        assert _join(c, GROUP, member_id="x").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert _join(c, "nobody-here", member_id="x").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert_intact(group_broker)


# ---------------------------------------------------------------- Heartbeat, LeaveGroup, DeleteGroups


def test_heartbeat_and_leave_with_wrong_member_id(group_broker):
    member = group_broker.member
    with _connect(group_broker.broker) as c:
        assert c.request(HeartbeatRequest(GROUP, member.generation, "x")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert c.request(HeartbeatRequest(GROUP, member.generation, "")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert c.request(HeartbeatRequest("nobody-here", 1, "x")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        stale = c.request(HeartbeatRequest(GROUP, member.generation + 1, member.member_id))
        assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
        left = c.request(LeaveGroupRequest(GROUP, [MemberIdentity("x"), MemberIdentity("", "no-such-instance")]))
        assert left.error_code == ErrorCode.NONE
        assert [m.error_code for m in left.members] == [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID]
    assert_intact(group_broker)


def test_delete_group_with_members(group_broker):
    with _connect(group_broker.broker) as c:
        deleted = c.request(DeleteGroupsRequest([GROUP, "nobody-here", GROUP]))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (GROUP, ErrorCode.NON_EMPTY_GROUP), ("nobody-here", ErrorCode.GROUP_ID_NOT_FOUND),
            (GROUP, ErrorCode.NON_EMPTY_GROUP)]
    assert_intact(group_broker)


# ---------------------------------------------------------------- OffsetFetch


def test_offset_fetch_of_ten_thousand_partitions_is_answered_and_bounded(group_broker):
    wanted = list(range(OFFSET_FETCH_PARTITIONS))
    with _connect(group_broker.broker) as c:
        started = time.monotonic()
        response = c.request(OffsetFetchRequest(GROUP, [OffsetFetchTopic(TOPIC, wanted)]))
        elapsed = time.monotonic() - started
        size = len(encode_response(response, correlation_id=0))
        asked = len(encode_request(OffsetFetchRequest(GROUP, [OffsetFetchTopic(TOPIC, wanted)]),
                                   correlation_id=0, client_id="raw-test"))
        assert response.error_code == ErrorCode.NONE
        parts = response.topics[0].partitions
        assert [p.partition for p in parts] == wanted
        assert {p.partition: p.offset for p in parts if p.offset >= 0} == COMMITTED
        assert all(p.error_code == ErrorCode.NONE for p in parts)
        assert size <= OFFSET_FETCH_MAX_BYTES_PER_PARTITION * OFFSET_FETCH_PARTITIONS, size
        assert elapsed <= OFFSET_FETCH_MAX_SECONDS, elapsed
        print(f"OffsetFetch of {OFFSET_FETCH_PARTITIONS} partitions: {asked} request bytes, "
              f"{size} response bytes in {elapsed * 1000:.0f} ms")
        # 10,000 unknown topics of one partition each: every one named UNKNOWN_TOPIC
        unknown = [OffsetFetchTopic(f"missing-{i}", [0]) for i in range(OFFSET_FETCH_PARTITIONS)]
        response = c.request(OffsetFetchRequest(GROUP, unknown))
        assert len(response.topics) == OFFSET_FETCH_PARTITIONS
        assert {p.error_code for t in response.topics for p in t.partitions} == {ErrorCode.UNKNOWN_TOPIC}
        size = len(encode_response(response, correlation_id=0))
        assert size <= 2 * OFFSET_FETCH_MAX_BYTES_PER_PARTITION * OFFSET_FETCH_PARTITIONS, size
        print(f"OffsetFetch of {OFFSET_FETCH_PARTITIONS} unknown topics: {size} response bytes")
    assert_intact(group_broker)


# ---------------------------------------------------------------- last: the log holds nothing refused


def test_restart_replays_only_what_was_accepted(group_broker):
    """Runs last in the module: after every refusal above, a restart that replays
    ``__consumer_offsets`` rebuilds the same group (no refused record was written)."""
    broker = group_broker.broker
    broker.stop()
    broker.start()
    with _connect(broker) as c:
        until(lambda: c.request(OffsetFetchRequest(GROUP, [OffsetFetchTopic(TOPIC, [0])])))
        listed = sorted(g.group_id for g in c.request(ListGroupsRequest()).groups)
        assert listed == [GROUP, "too-large-commit"]  # its one accepted commit; nothing refused
        assert _offsets(c, "too-large-commit") == {0: 10}
    assert_intact(group_broker)


# ---------------------------------------------------------------- a region: the wrong broker


def test_group_requests_to_a_broker_that_is_not_the_coordinator(tmp_path):
    configs = {**CONFIGS, "offsets.topic.num.partitions": "1"}
    with Region(tmp_path / "region", configs=configs, proxy=False).start() as region:
        with RawClient.to(region.node(1)) as c:
            c.create_topic(TOPIC, PARTITIONS)
            found = until(lambda: c.request(FindCoordinatorRequest(GROUP)))
        coordinator = found.node_id
        with RawClient.to(region.node(coordinator)) as c:
            joined = until(lambda: _join_member(c, GROUP), ok=lambda r: r.error_code not in RETRIABLE)
            assert joined.error_code == ErrorCode.NONE, joined
            member = Member(joined.generation_id, joined.member_id)
            committed = until(lambda: c.request(_commit(TOPIC, OffsetCommitPartition(0, 10), member=member)),
                               ok=lambda r: _codes(r) != [ErrorCode.NOT_COORDINATOR])
            assert _codes(committed) == [ErrorCode.NONE]
        others = [n for n in region.ids if n != coordinator]
        assert len(others) == 2
        for n in others:
            with RawClient.to(region.node(n)) as c:
                found_here = c.request(FindCoordinatorRequest(GROUP))
                assert (found_here.error_code, found_here.node_id) == (ErrorCode.NONE, coordinator)
                assert _join(c, GROUP).error_code == ErrorCode.NOT_COORDINATOR
                assert _join(c, GROUP, member_id=member.member_id).error_code == ErrorCode.NOT_COORDINATOR
                beat = c.request(HeartbeatRequest(GROUP, member.generation, member.member_id))
                assert beat.error_code == ErrorCode.NOT_COORDINATOR
                commit = c.request(_commit(TOPIC, OffsetCommitPartition(0, 99), member=member))
                assert _codes(commit) == [ErrorCode.NOT_COORDINATOR]
                fetched = c.request(OffsetFetchRequest(GROUP, [OffsetFetchTopic(TOPIC, [0])]))
                assert fetched.error_code == ErrorCode.NOT_COORDINATOR
                left = c.request(LeaveGroupRequest(GROUP, [MemberIdentity(member.member_id)]))
                assert left.error_code == ErrorCode.NOT_COORDINATOR
                described = c.request(DescribeGroupsRequest([GROUP]))
                assert [d.error_code for d in described.groups] == [ErrorCode.NOT_COORDINATOR]
                deleted = c.request(DeleteGroupsRequest([GROUP]))
                assert [r.error_code for r in deleted.results] == [ErrorCode.NOT_COORDINATOR]
                assert c.request(ListGroupsRequest()).groups == []  # lists only the groups it coordinates
        with RawClient.to(region.node(coordinator)) as c:
            fetched = c.request(OffsetFetchRequest(GROUP, [OffsetFetchTopic(TOPIC, [0])]))
            assert [p.offset for p in fetched.topics[0].partitions] == [10]
            described = c.request(DescribeGroupsRequest([GROUP])).groups[0]
            assert (described.state, described.generation_id) == ("Stable", member.generation)
            assert [m.member_id for m in described.members] == [member.member_id]
        assert region.stderr_tracebacks() == {}
