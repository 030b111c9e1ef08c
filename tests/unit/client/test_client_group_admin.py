"""GroupAdmin against a scripted cluster: coordinator look-up retries and answer parsing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mq.client.group_admin import GroupAdmin
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol import group_messages as g


class FakeCluster:
    """``request_any`` answers FindCoordinator from ``finds``; ``request`` pops ``answers``."""

    def __init__(self, finds: list, answers: list) -> None:
        self.finds = list(finds)
        self.answers = list(answers)
        self.sent: list[tuple[int, object]] = []
        self.added: dict[int, tuple[str, int]] = {}
        self.clock_ms = 0
        self.metadata = SimpleNamespace(retry_backoff_ms=0, node=lambda n: None if n == 9 else object(),
                                        brokers={1: None, 2: None})

    def now_ms(self) -> int:
        self.clock_ms += 10
        return self.clock_ms

    async def request_any(self, request):
        assert isinstance(request, g.FindCoordinatorRequest)
        answer = self.finds.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def request(self, node, request):
        self.sent.append((node, request))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def refresh_metadata(self) -> None:
        pass

    def add_node(self, node_id: int, host: str, port: int) -> None:
        self.added[node_id] = (host, port)


def found(node: int = 1) -> g.FindCoordinatorResponse:
    return g.FindCoordinatorResponse(0, node, "h", 9000 + node)


def not_yet(code: ErrorCode = ErrorCode.COORDINATOR_NOT_AVAILABLE) -> g.FindCoordinatorResponse:
    return g.FindCoordinatorResponse(int(code), error_message="offsets topic has no leader yet")


def described(state: str = "Stable", code: int = 0) -> g.DescribeGroupsResponse:
    members = [g.DescribedMember("m-2", None, "c", "/h", [g.TopicPartitions("t", [1, 0])]),
               g.DescribedMember("m-1", "i", "c", "/h", [])]
    return g.DescribeGroupsResponse([g.DescribedGroup("grp", code, state, "consumer", "range", 3, members)])


async def test_find_coordinator_retries_until_the_offsets_topic_has_a_leader():
    cluster = FakeCluster([not_yet(), MqError(ErrorCode.NETWORK_EXCEPTION, "reset"),
                           not_yet(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), found(9)], [])
    admin = GroupAdmin(cluster, request_timeout_ms=10_000)  # type: ignore[arg-type]
    assert await admin.find_coordinator("grp") == 9
    assert cluster.added == {9: ("h", 9009)}  # not yet in metadata: reachable by its address


async def test_find_coordinator_gives_up_at_the_deadline_with_the_cause():
    cluster = FakeCluster([not_yet()] * 100, [])
    admin = GroupAdmin(cluster, request_timeout_ms=50)  # type: ignore[arg-type]
    with pytest.raises(MqError) as err:
        await admin.find_coordinator("grp")
    assert err.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "no leader yet" in err.value.message


async def test_a_moved_coordinator_is_found_again():
    moved = g.DescribeGroupsResponse([g.DescribedGroup("grp", int(ErrorCode.NOT_COORDINATOR))])
    cluster = FakeCluster([found(1), found(2)], [moved, described()])
    admin = GroupAdmin(cluster, request_timeout_ms=10_000)  # type: ignore[arg-type]
    d = await admin.describe_group("grp")
    assert [n for n, _ in cluster.sent] == [1, 2]
    assert (d.state, d.assignor, d.generation_id, d.coordinator_id) == ("Stable", "range", 3, 2)
    assert [m.member_id for m in d.members] == ["m-1", "m-2"]
    assert d.members[1].assignment == [TopicPartition("t", 0), TopicPartition("t", 1)]


async def test_bad_group_id_is_raised_not_retried():
    cluster = FakeCluster([found()], [described(code=int(ErrorCode.INVALID_GROUP_ID))])
    with pytest.raises(MqError) as err:
        await GroupAdmin(cluster, request_timeout_ms=10_000).describe_group("")  # type: ignore[arg-type]
    assert err.value.code == ErrorCode.INVALID_GROUP_ID


async def test_offsets_commit_and_delete_answers():
    fetched = g.OffsetFetchResponse(0, [g.OffsetFetchTopicResponse("t", [
        g.OffsetFetchPartitionResponse(1, 7, 2, "meta"), g.OffsetFetchPartitionResponse(0, -1)])])
    refused = g.OffsetCommitResponse([g.OffsetCommitTopicResponse("t", [
        g.OffsetCommitPartitionResponse(0, int(ErrorCode.UNKNOWN_MEMBER_ID))])], "group has active members")
    deleted = g.DeleteGroupsResponse([g.DeletableGroupResult("grp", int(ErrorCode.NON_EMPTY_GROUP))])
    cluster = FakeCluster([found()] * 3, [fetched, refused, deleted])
    admin = GroupAdmin(cluster, request_timeout_ms=10_000)  # type: ignore[arg-type]
    committed = await admin.list_group_offsets("grp")
    assert list(committed) == [TopicPartition("t", 1)]
    assert (committed[TopicPartition("t", 1)].offset, committed[TopicPartition("t", 1)].metadata) == (7, "meta")
    with pytest.raises(MqError) as err:
        await admin.alter_group_offsets("grp", {TopicPartition("t", 0): 3})
    assert err.value.code == ErrorCode.UNKNOWN_MEMBER_ID and "active members" in err.value.message
    request = cluster.sent[1][1]
    assert (request.generation_id, request.member_id) == (-1, "")
    assert request.topics == [g.OffsetCommitTopic("t", [g.OffsetCommitPartition(0, 3)])]
    assert await admin.delete_groups(["grp", "grp"]) == {"grp": ErrorCode.NON_EMPTY_GROUP}


async def test_list_groups_asks_every_broker_and_merges():
    cluster = FakeCluster([], [
        g.ListGroupsResponse(0, [g.ListedGroup("b", "consumer", "Stable")]),
        g.ListGroupsResponse(int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)),
        g.ListGroupsResponse(0, [g.ListedGroup("a", "consumer", "Empty")])])
    listed = await GroupAdmin(cluster, request_timeout_ms=10_000).list_groups()  # type: ignore[arg-type]
    assert [(x.group_id, x.state, x.coordinator_id) for x in listed] == [("a", "Empty", 2), ("b", "Stable", 1)]
