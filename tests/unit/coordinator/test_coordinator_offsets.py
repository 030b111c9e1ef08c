"""OffsetCommit / OffsetFetch / DeleteGroups / expiry (commits confirmed at once: see
test_coordinator_pending_offsets for commits not yet committed)."""

from __future__ import annotations

from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol import group_messages as gm
from tests.unit.coordinator.harness import Shard

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def _member(shard: Shard) -> tuple[str, int]:
    response = shard.answer(shard.join(client_id="a"))
    assert isinstance(response, gm.JoinGroupResponse)
    return response.member_id, response.generation_id


def test_commit_n_then_fetch_returns_n_also_after_a_fail_over() -> None:
    shard = Shard()
    member, generation = _member(shard)
    assert shard.commit({T0: 42, T1: 0}, generation=generation, member_id=member, metadata="m") == {T0: 0, T1: 0}
    assert shard.fetch([T0, T1, U0]) == {T0: 42, T1: 0, U0: -1}
    shard.reload()
    assert shard.fetch() == {T0: 42, T1: 0}
    assert shard.coordinator.group_offsets() == {"g": {T0: 42, T1: 0}}


def test_a_zombie_commit_is_refused_and_changes_nothing() -> None:
    shard = Shard()
    member, generation = _member(shard)
    shard.commit({T0: 10}, generation=generation, member_id=member)
    records = len(shard.log)
    assert shard.commit({T0: 5}, generation=generation - 1, member_id=member) == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert shard.commit({T0: 5}, generation=generation, member_id="ghost") == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
    assert shard.commit({T0: 5}, generation=3, member_id="ghost", group="nope") == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert shard.commit({T0: 5}) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}  # admin while the group has members
    assert shard.fetch([T0]) == {T0: 10} and len(shard.log) == records


def test_bad_commits_get_named_errors_per_partition() -> None:
    shard = Shard()
    member, generation = _member(shard)
    result = shard.commit({T0: -1, TopicPartition("t", 6): 1, TopicPartition("nope", 0): 1, T1: 3},
                          generation=generation, member_id=member)
    assert result == {T0: ErrorCode.INVALID_COMMIT_OFFSET_SIZE, TopicPartition("t", 6): ErrorCode.UNKNOWN_TOPIC,
                      TopicPartition("nope", 0): ErrorCode.UNKNOWN_TOPIC, T1: ErrorCode.NONE}
    huge = shard.commit({T0: 1}, generation=generation, member_id=member, metadata="x" * 65)
    assert huge == {T0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert shard.commit({T0: 1}, group="") == {T0: ErrorCode.INVALID_GROUP_ID}
    assert shard.fetch() == {T1: 3}


def test_fetching_an_unknown_group_creates_nothing() -> None:
    shard = Shard()
    assert shard.fetch([T0, TopicPartition("gone", 0)], group="unknown") == {T0: -1, TopicPartition("gone", 0): -1}
    assert shard.fetch(group="unknown") == {}
    response = shard.call(gm.OffsetFetchRequest("unknown", [gm.OffsetFetchTopic("gone", [0])]))
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC  # type: ignore[attr-defined]
    assert shard.call(gm.OffsetFetchRequest("")).error_code == ErrorCode.INVALID_GROUP_ID  # type: ignore[attr-defined]
    assert shard.coordinator.groups == {} and shard.log == []


def test_an_admin_commits_to_an_empty_group_only() -> None:
    shard = Shard()
    assert shard.commit({T0: 7}, group="offline") == {T0: 0}  # a group with offsets only
    assert shard.coordinator.group_states() == {"offline": "Empty"}
    member, _ = _member(shard)
    shard.call(gm.LeaveGroupRequest("g", [gm.MemberIdentity(member)]))
    assert shard.commit({T0: 3}) == {T0: 0} and shard.fetch([T0]) == {T0: 3}


def test_delete_groups_only_when_empty_and_with_all_offsets() -> None:
    shard = Shard()
    member, generation = _member(shard)
    shard.commit({T0: 4, U0: 2}, generation=generation, member_id=member)
    response = shard.call(gm.DeleteGroupsRequest(["g", "nope", ""]))
    assert [r.error_code for r in response.results] == [  # type: ignore[attr-defined]
        ErrorCode.NON_EMPTY_GROUP, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.INVALID_GROUP_ID]
    shard.call(gm.LeaveGroupRequest("g", [gm.MemberIdentity(member)]))
    records = len(shard.log)
    response = shard.call(gm.DeleteGroupsRequest(["g"]))
    assert response.results[0].error_code == ErrorCode.NONE  # type: ignore[attr-defined]
    assert [r.value for r in shard.log[records:]] == [None, None, None]  # two offsets and the group
    assert shard.coordinator.groups == {} and shard.fetch([T0]) == {T0: -1}
    assert shard.reload().groups == {}


def test_offsets_of_a_group_empty_for_the_retention_expire() -> None:
    shard = Shard()
    member, generation = _member(shard)
    shard.commit({T0: 4}, generation=generation, member_id=member)
    shard.advance(50_000)
    shard.call(gm.LeaveGroupRequest("g", [gm.MemberIdentity(member)]))  # empty since 50 s
    shard.advance(99_000)
    assert shard.fetch([T0]) == {T0: 4}
    shard.advance(2_000)  # retention (100 s) passed and a check (every 1 s) ran
    assert shard.coordinator.groups == {} and shard.fetch([T0]) == {T0: -1}
    assert shard.reload().groups == {}


def test_an_active_groups_offsets_never_expire() -> None:
    shard = Shard()
    member, generation = _member(shard)
    shard.commit({T0: 4}, generation=generation, member_id=member)
    for _ in range(30):
        shard.advance(5_000)
        assert shard.heartbeat(member, generation) == ErrorCode.NONE
    assert shard.fetch([T0]) == {T0: 4}


def test_describe_and_list_groups() -> None:
    shard = Shard()
    member, _ = _member(shard)
    shard.commit({T0: 1}, group="offline")
    listed = shard.call(gm.ListGroupsRequest())
    assert [(g.group_id, g.state) for g in listed.groups] == [("g", "Stable"), ("offline", "Empty")]  # type: ignore[attr-defined]
    only_empty = shard.call(gm.ListGroupsRequest(["empty"]))
    assert [g.group_id for g in only_empty.groups] == ["offline"]  # type: ignore[attr-defined]
    described = shard.call(gm.DescribeGroupsRequest(["g", "missing"])).groups  # type: ignore[attr-defined]
    assert described[0].members[0].member_id == member and described[0].members[0].subscription == ["t"]
    assert described[0].assignor == "range" and described[1].state == "Dead"
