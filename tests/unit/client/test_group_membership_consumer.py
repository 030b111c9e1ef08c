"""Consumer's group surface without a broker: configuration and API misuse, and the
asyncio shell (GroupClient) against a fake coordinator."""

from __future__ import annotations

import asyncio

import pytest

from mq.client import Consumer
from mq.client.internals.group_membership import MemberState
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.group_messages import (
    FindCoordinatorResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopicResponse,
    TopicPartitions,
)

TP = TopicPartition("t", 0)


def codes(fn) -> ErrorCode:
    with pytest.raises(MqError) as err:
        fn()
    return err.value.code


def test_assign_and_subscribe_are_mutually_exclusive() -> None:
    c = Consumer("localhost:1", group_id="g")
    c.assign([TP])
    assert codes(lambda: c.subscribe(["t"])) == ErrorCode.INVALID_CONFIG
    c.unsubscribe()
    assert c.assignment() == []
    c.subscribe(["t"])
    assert c.subscription() == ["t"]
    assert codes(lambda: c.assign([TP])) == ErrorCode.INVALID_CONFIG


def test_group_methods_need_a_group_id() -> None:
    c = Consumer("localhost:1")
    assert codes(lambda: c.subscribe(["t"])) == ErrorCode.INVALID_CONFIG
    assert codes(c.group_metadata) == ErrorCode.INVALID_CONFIG
    assert c.subscription() is None


def test_bad_group_configs() -> None:
    assert codes(lambda: Consumer("localhost:1", group_id="g", assignor="nope")) == ErrorCode.INVALID_CONFIG
    assert codes(lambda: Consumer("localhost:1", group_id="g", heartbeat_interval_ms=50_000)) == \
        ErrorCode.INVALID_CONFIG
    c = Consumer("localhost:1", group_id="g")
    assert codes(lambda: c.subscribe(pattern="(")) == ErrorCode.INVALID_CONFIG


def test_group_metadata_before_joining_and_pattern_subscription() -> None:
    c = Consumer("localhost:1", group_id="g", group_instance_id="i", assignor=["cooperative-sticky", "range"])
    md = c.group_metadata()
    assert (md.group_id, md.generation_id, md.member_id, md.group_instance_id) == ("g", -1, "", "i")
    c.subscribe(pattern=r"clicks\..*")
    assert c.subscription() == r"clicks\..*"
    assert c.metrics()["records_lag"] == {} and c.metrics()["member_state"] == "unjoined"


# ---------------------------------------------------------------- the asyncio shell, with a fake coordinator


class FakeCoordinator:
    """Stands in for GroupClient.send: commits answer ``commit_code``; JoinGroup parks."""

    def __init__(self) -> None:
        self.sent: list[object] = []
        self.commit_code = ErrorCode.NONE

    async def send(self, request, *, deadline_ms: int, lane: str = ""):
        self.sent.append(request)
        if isinstance(request, OffsetCommitRequest):
            return OffsetCommitResponse(topics=[OffsetCommitTopicResponse(t.name, [
                OffsetCommitPartitionResponse(p.partition, self.commit_code) for p in t.partitions])
                for t in request.topics])
        if isinstance(request, JoinGroupRequest):
            await asyncio.Event().wait()  # parked until the rebalance completes (never, here)
        return None

    def commits(self) -> list[OffsetCommitRequest]:
        return [r for r in self.sent if isinstance(r, OffsetCommitRequest)]


def rejoining(assignor: str) -> tuple[Consumer, FakeCoordinator]:
    """A member of generation 1 reading t-0 (position 5), told to rejoin."""
    c = Consumer("localhost:1", group_id="g", assignor=assignor, auto_commit_interval_ms=60_000)
    group = c._group
    assert group is not None
    fake = FakeCoordinator()
    group.send = fake.send  # type: ignore[method-assign]
    core = group.core
    now = group.now_ms()
    core.on_find_coordinator(FindCoordinatorResponse(0, node_id=1, host="h", port=1), now)
    c.subscribe(["t"])
    core.join_request(now)
    core.on_join_response(JoinGroupResponse(0, generation_id=1, assignor=assignor, member_id="m-1",
                                            assignment=[TopicPartitions("t", [0])]), now)
    c.subscriptions.assign([TP])
    c.subscriptions.seek(TP, 5)
    core.request_rejoin("test")
    return c, fake


@pytest.mark.parametrize(("assignor", "commits_during_join"), [("sticky", False), ("cooperative-sticky", True)])
async def test_auto_commit_while_the_join_is_in_flight_only_if_cooperative(assignor: str,
                                                                           commits_during_join: bool) -> None:
    c, fake = rejoining(assignor)
    group = c._group
    assert group is not None
    await group.maintain()  # starts the JoinGroup (eager: commits and revokes t-0 first)
    assert group.core.state == MemberState.REBALANCING
    before = len(fake.commits())
    assert before == (0 if commits_during_join else 1)
    if not commits_during_join:
        # eager: whatever position the member holds while its join is in flight is not committed
        c.subscriptions.assign([TP])
        c.subscriptions.seek(TP, 7)
    group.auto_commit.next_ms = 0  # due
    await group.maintain()
    for _ in range(5):
        await asyncio.sleep(0)
    assert (len(fake.commits()) > before) == commits_during_join
    await c.close()


async def test_cooperative_commit_fenced_by_the_generation_being_joined_keeps_the_partitions() -> None:
    c, fake = rejoining("cooperative-sticky")
    group = c._group
    assert group is not None
    await group.maintain()
    fake.commit_code = ErrorCode.ILLEGAL_GENERATION
    with pytest.raises(MqError) as err:
        await c.commit()
    assert err.value.code == ErrorCode.REBALANCE_IN_PROGRESS
    assert group.core.owned == [TP] and group.core.take_lost() == () and c.assignment() == [TP]
    fake.commit_code = ErrorCode.REBALANCE_IN_PROGRESS  # the join in flight is the rejoin asked for
    with pytest.raises(MqError):
        await c.commit()
    assert not group.core.rejoin_needed
    await c.close()


async def test_close_waits_for_its_cancelled_tasks() -> None:
    c, _ = rejoining("range")
    group = c._group
    assert group is not None
    await group.maintain()  # a JoinGroup parked, the heartbeat task running
    tasks = [group._join_task, group._heartbeat_task]
    assert all(t is not None and not t.done() for t in tasks)
    await c.close()
    assert all(t is not None and t.done() for t in tasks)  # not merely cancelling
