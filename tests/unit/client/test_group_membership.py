"""ConsumerCoordinator (sans-IO group membership): fake time, hand-made responses."""

from __future__ import annotations

import pytest

from mq.client.internals.group_membership import (
    ConsumerCoordinator,
    MemberState,
    group_partitions,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.group_messages import (
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    TopicPartitions,
)

T = "clicks"


def tps(*parts: int, topic: str = T) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in parts]


def make(**kw) -> ConsumerCoordinator:
    kw.setdefault("now_ms", 0)
    kw.setdefault("session_timeout_ms", 10_000)
    kw.setdefault("heartbeat_interval_ms", 1_000)
    kw.setdefault("max_poll_interval_ms", 30_000)
    return ConsumerCoordinator("g", **kw)


def found(c: ConsumerCoordinator, now: int = 0) -> None:
    assert c.on_find_coordinator(FindCoordinatorResponse(0, node_id=7, host="h", port=1), now) is None


def joined(c: ConsumerCoordinator, parts: list[int], *, generation: int = 1, now: int = 0,
           assignor: str | None = None, member: str = "m-1"):
    c.join_request(now)
    return c.on_join_response(JoinGroupResponse(
        0, generation_id=generation, assignor=assignor or c.assignors[0], member_id=member,
        assignment=[TopicPartitions(T, parts)] if parts else []), now)


def stable(parts: list[int], **kw) -> ConsumerCoordinator:
    c = make(**kw)
    found(c)
    c.subscribe([T])
    joined(c, parts)
    return c


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize("kw", [
    {"assignors": "bogus"}, {"assignors": []}, {"heartbeat_interval_ms": 10_000},
    {"session_timeout_ms": 0, "heartbeat_interval_ms": -1}, {"group_instance_id": ""},
])
def test_bad_configs_are_invalid_config(kw: dict) -> None:
    with pytest.raises(MqError) as err:
        make(**kw)
    assert err.value.code == ErrorCode.INVALID_CONFIG


def test_empty_group_id_is_invalid() -> None:
    with pytest.raises(MqError) as err:
        ConsumerCoordinator("", now_ms=0)
    assert err.value.code == ErrorCode.INVALID_CONFIG


def test_subscribe_needs_exactly_one_of_topics_or_pattern() -> None:
    c = make()
    for args, kw in (((), {}), ((["a"],), {"pattern": "a.*"}), (([],), {})):
        with pytest.raises(MqError):
            c.subscribe(*args, **kw)


# ---------------------------------------------------------------- coordinator discovery


def test_find_coordinator_retriable_error_backs_off_fatal_error_is_returned() -> None:
    c = make(retry_backoff_ms=100)
    assert c.coordinator_needed(0)
    assert c.on_find_coordinator(FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE), 0) is None
    assert not c.coordinator_needed(50) and c.time_to_find_ms(50) == 50
    assert c.coordinator_needed(100)
    err = c.on_find_coordinator(FindCoordinatorResponse(ErrorCode.INVALID_GROUP_ID), 100)
    assert err is not None and err.code == ErrorCode.INVALID_GROUP_ID
    found(c, 200)
    assert c.coordinator is not None and c.coordinator.node_id == 7 and not c.coordinator_needed(200)


def test_not_coordinator_from_heartbeat_rediscovers_at_once() -> None:
    c = stable([0])
    c.heartbeat_request(1_000)
    c.on_heartbeat_response(HeartbeatResponse(ErrorCode.NOT_COORDINATOR), 1_001, generation_id=1)
    assert c.coordinator is None and c.coordinator_needed(1_001)
    assert c.owned == tps(0)  # still a member: nothing lost


# ---------------------------------------------------------------- joining


def test_first_join_request_and_stable_assignment() -> None:
    c = make(assignors=["range", "sticky"])
    found(c)
    assert not c.need_rejoin(0)  # nothing subscribed
    assert c.subscribe(["b", "a", "a"])
    assert c.need_rejoin(0)
    req = c.join_request(0)
    assert c.state == MemberState.REBALANCING and not c.need_rejoin(0)
    assert (req.topics, req.pattern, req.member_id, req.assignors, req.owned) == \
        (["a", "b"], None, "", ["range", "sticky"], [])
    out = c.on_join_response(JoinGroupResponse(
        0, generation_id=3, assignor="range", member_id="m-1",
        assignment=[TopicPartitions("b", [1]), TopicPartitions("a", [2, 0])]), 5)
    assert out.joined and out.assigned == (TopicPartition("a", 0), TopicPartition("a", 2),
                                          TopicPartition("b", 1))
    assert out.revoked == ()
    assert (c.state, c.generation_id, c.member_id, c.protocol) == (MemberState.STABLE, 3, "m-1", "range")
    assert not c.need_rejoin(5)
    assert not c.heartbeat_due(5) and c.heartbeat_due(1_005)


def test_pattern_subscription_is_sent_instead_of_topics() -> None:
    c = make()
    c.subscribe(pattern=r"clicks\..*")
    req = c.join_request(0)
    assert req.topics == [] and req.pattern == r"clicks\..*"


def test_member_id_required_rejoins_at_once_with_the_allocated_id() -> None:
    c = make(retry_backoff_ms=5_000)
    found(c)
    c.subscribe([T])
    assert c.join_request(0).member_id == ""
    out = c.on_join_response(JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id="m-9"), 1)
    assert out.error is None and not out.joined and out.rejoin_now
    assert c.member_id == "m-9" and c.need_rejoin(1)  # no backoff
    assert c.join_request(1).member_id == "m-9" and c.state == MemberState.REBALANCING
    # closed while that JoinGroup is parked: the LeaveGroup names the member (KIP-394)
    leave = c.leave_group(2, reason="close")
    assert leave is not None and [m.member_id for m in leave.members] == ["m-9"]
    assert (c.member_id, c.state) == ("", MemberState.UNJOINED)


def test_member_id_required_without_an_id_retries_after_the_backoff() -> None:
    c = make(retry_backoff_ms=100)
    found(c)
    c.subscribe([T])
    c.join_request(0)
    out = c.on_join_response(JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED), 1)
    assert out.error is None and not out.rejoin_now and c.member_id == ""
    assert not c.need_rejoin(100) and c.need_rejoin(101)


def test_unknown_member_id_on_join_starts_over_without_a_member_id() -> None:
    """The coordinator echoes the refused id: the member must not rejoin with it."""
    c = make()
    found(c)
    c.subscribe([T])
    c.join_request(0)
    c.on_join_response(JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id="m-9"), 1)
    c.join_request(1)
    out = c.on_join_response(JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id="m-9"), 2)
    assert out.error is None and not out.rejoin_now
    assert (c.member_id, c.state) == ("", MemberState.UNJOINED) and c.need_rejoin(2)
    assert c.join_request(2).member_id == ""


def test_leave_while_the_first_join_is_in_flight_has_no_member_to_name() -> None:
    c = make()
    found(c)
    c.subscribe([T])
    c.join_request(0)
    assert c.leave_group(1, reason="close") is None  # the pending id expires at the coordinator


def test_fatal_join_error_is_returned_and_retried_after_backoff() -> None:
    c = make(retry_backoff_ms=100)
    found(c)
    c.subscribe([T])
    c.join_request(0)
    out = c.on_join_response(JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL), 10)
    assert out.error is not None and out.error.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert not c.need_rejoin(50) and c.need_rejoin(110)


def test_join_lost_connection_rediscovers_coordinator() -> None:
    c = make()
    found(c)
    c.subscribe([T])
    c.join_request(0)
    c.on_join_failed(5, MqError(ErrorCode.NETWORK_EXCEPTION, "x"))
    assert c.coordinator is None and c.state == MemberState.UNJOINED and c.rejoin_needed


def test_subscription_change_during_join_rejoins_after_it() -> None:
    c = make()
    found(c)
    c.subscribe([T])
    c.join_request(0)
    assert c.subscribe([T, "other"])
    out = c.on_join_response(JoinGroupResponse(0, generation_id=1, member_id="m",
                                               assignment=[TopicPartitions(T, [0])]), 1)
    assert out.joined and c.need_rejoin(1)


# ---------------------------------------------------------------- eager and cooperative


def test_eager_rebalance_revokes_everything_before_rejoining() -> None:
    c = stable([0, 1, 2])
    c.heartbeat_request(1_000)
    c.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 1_001, generation_id=1)
    assert c.need_rejoin(1_001) and c.state == MemberState.STABLE
    assert c.prepare_join() == tuple(tps(0, 1, 2))
    assert c.owned == [] and c.prepare_join() == ()
    req = c.join_request(1_001)
    assert req.owned == [] and req.member_id == "m-1"
    out = c.on_join_response(JoinGroupResponse(0, generation_id=2, assignor="range", member_id="m-1",
                                               assignment=[TopicPartitions(T, [1, 3])]), 1_002)
    assert out.assigned == tuple(tps(1, 3)) and out.revoked == ()
    assert not c.need_rejoin(1_002)


def test_cooperative_rebalance_keeps_owned_and_revokes_only_what_moved() -> None:
    c = stable([0, 1, 2, 3], assignors="cooperative-sticky")
    assert c.is_cooperative
    c.request_rejoin("test")
    assert c.prepare_join() == ()
    req = c.join_request(2_000)
    assert req.owned == [TopicPartitions(T, [0, 1, 2, 3])]
    assert c.owned == tps(0, 1, 2, 3)  # still consuming during the rebalance
    out = c.on_join_response(JoinGroupResponse(0, generation_id=2, assignor="cooperative-sticky",
                                               member_id="m-1",
                                               assignment=[TopicPartitions(T, [0, 1, 4])]), 2_001)
    assert out.revoked == tuple(tps(2, 3)) and out.assigned == tuple(tps(4))
    assert c.owned == tps(0, 1, 4)
    assert c.need_rejoin(2_001)  # the second round of the hand-off
    c.join_request(2_001)
    out = c.on_join_response(JoinGroupResponse(0, generation_id=3, assignor="cooperative-sticky",
                                               member_id="m-1",
                                               assignment=[TopicPartitions(T, [0, 1, 4])]), 2_002)
    assert out.revoked == out.assigned == () and not c.need_rejoin(2_002)


def test_eager_assignor_chosen_while_cooperative_revokes_what_is_not_reassigned() -> None:
    c = stable([0, 1], assignors=["cooperative-sticky", "range"])
    c.request_rejoin("x")
    c.join_request(10)
    out = c.on_join_response(JoinGroupResponse(0, generation_id=2, assignor="range", member_id="m-1",
                                               assignment=[TopicPartitions(T, [1])]), 11)
    assert out.revoked == tuple(tps(0)) and not c.is_cooperative


# ---------------------------------------------------------------- losing the generation


@pytest.mark.parametrize("code", [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID])
def test_zombie_heartbeat_loses_partitions_and_resets_member(code: ErrorCode) -> None:
    c = stable([0, 1])
    c.heartbeat_request(1_000)
    assert c.on_heartbeat_response(HeartbeatResponse(code), 1_001, generation_id=1) is None
    assert c.take_lost() == tuple(tps(0, 1)) and c.take_lost() == ()
    assert (c.generation_id, c.member_id, c.state) == (-1, "", MemberState.UNJOINED)
    assert c.need_rejoin(1_001)
    with pytest.raises(MqError) as err:
        c.commit_identity()
    assert err.value.code == ErrorCode.ILLEGAL_GENERATION


def test_static_member_keeps_member_id_unless_fenced() -> None:
    c = stable([0], group_instance_id="i-1")
    c.heartbeat_request(1_000)
    c.on_heartbeat_response(HeartbeatResponse(ErrorCode.ILLEGAL_GENERATION), 1_001, generation_id=1)
    assert c.member_id == "m-1" and c.take_lost() == tuple(tps(0))
    assert c.take_fatal() is None
    joined(c, [0], generation=2, now=1_002)
    c.heartbeat_request(2_002)
    err = c.on_heartbeat_response(HeartbeatResponse(ErrorCode.FENCED_INSTANCE_ID), 2_003, generation_id=2)
    assert err is not None and err.code == ErrorCode.FENCED_INSTANCE_ID
    assert c.member_id == "" and c.take_lost() == tuple(tps(0))
    fatal = c.take_fatal()
    assert fatal is not None and fatal.code == ErrorCode.FENCED_INSTANCE_ID and c.take_fatal() is None


def test_stale_heartbeat_answer_is_ignored() -> None:
    c = stable([0])
    c.heartbeat_request(1_000)
    joined(c, [0], generation=2, now=1_001)
    c.on_heartbeat_response(HeartbeatResponse(ErrorCode.ILLEGAL_GENERATION), 1_002, generation_id=1)
    assert c.generation_id == 2 and c.take_lost() == ()


def test_session_expiry_without_heartbeat_answers() -> None:
    c = stable([0])
    c.heartbeat_request(1_000)
    c.on_heartbeat_failed(1_100)
    assert c.coordinator is None
    assert not c.session_expired(9_000) and c.session_expired(10_001)


# ---------------------------------------------------------------- poll interval, leaving


def test_poll_timeout_leaves_and_loses_partitions_dynamic() -> None:
    c = stable([0, 1])
    c.on_poll(1_000)
    assert not c.poll_timeout_expired(31_000) and c.poll_timeout_expired(31_001)
    assert c.next_timer_ms(1_000) <= 31_001
    leave = c.leave_group(31_001, reason="poll timeout")
    assert leave is not None and leave.members[0].member_id == "m-1"
    assert c.take_lost() == tuple(tps(0, 1))
    assert c.need_rejoin(31_001) and not c.poll_timeout_expired(100_000)
    # the stale poll deadline no longer counts: the heartbeat loop must not spin
    assert c.next_timer_ms(100_000) > 100_000


def test_static_member_never_sends_leave() -> None:
    c = stable([0], group_instance_id="i-1")
    assert c.leave_group(5, reason="close") is None
    assert c.take_lost() == tuple(tps(0)) and c.take_revoke_all() == ()


def test_close_revokes_owned_then_leaves_without_loss() -> None:
    c = stable([0, 1])
    assert c.take_revoke_all() == tuple(tps(0, 1))
    assert c.leave_group(5, reason="close") is not None
    assert c.take_lost() == ()


def test_manual_assignment_commits_as_simple_consumer() -> None:
    c = make()
    assert c.commit_identity() == (-1, "")
    c2 = stable([0])
    assert c2.commit_identity() == (1, "m-1")


def test_group_partitions_sorted_and_grouped() -> None:
    assert group_partitions([TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("a", 0)]) == \
        [TopicPartitions("a", [0, 2]), TopicPartitions("b", [1])]


# ---------------------------------------------------------------- heartbeat answers during a rebalance


def test_any_coordinator_answer_keeps_the_session_alive() -> None:
    """An eager member still committing before its rejoin hears REBALANCE_IN_PROGRESS
    for longer than the session: the coordinator answered, so it is alive."""
    c = stable([0])
    for now in range(1_000, 25_000, 1_000):
        c.heartbeat_request(now)
        c.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), now + 1, generation_id=1)
        assert not c.session_expired(now + 1)
    assert c.coordinator is not None and c.rejoin_needed
    # a coordinator that moved does not count
    c.heartbeat_request(25_000)
    c.on_heartbeat_response(HeartbeatResponse(ErrorCode.NOT_COORDINATOR), 25_001, generation_id=1)
    assert c.coordinator is None


def test_rebalance_in_progress_for_the_join_in_flight_does_not_rejoin_again() -> None:
    c = stable([0, 1])
    c.heartbeat_request(1_000)  # sent in generation 1 ...
    c.request_rejoin("test")
    c.join_request(1_001)  # ... then the member rejoins before the answer arrives
    c.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 1_002, generation_id=1)
    assert not c.rejoin_needed
    out = c.on_join_response(JoinGroupResponse(0, generation_id=2, assignor="range", member_id="m-1",
                                               assignment=[TopicPartitions(T, [0, 1])]), 1_003)
    assert out.joined and not c.need_rejoin(1_003)  # no second join right after the first
    # a stale answer (sent in generation 1) arriving now asks for nothing either
    c.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 1_004, generation_id=1)
    assert not c.need_rejoin(1_004)
    # but the new generation's own heartbeat hearing of a rebalance rejoins
    c.heartbeat_request(2_003)
    c.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 2_004, generation_id=2)
    assert c.need_rejoin(2_004)


def test_illegal_generation_for_a_heartbeat_sent_before_the_join_keeps_the_partitions() -> None:
    """The group completed the generation this member's join is in: its answer decides."""
    c = stable([0, 1], assignors="cooperative-sticky")
    c.heartbeat_request(1_000)
    c.request_rejoin("test")
    c.join_request(1_001)
    assert c.on_heartbeat_response(HeartbeatResponse(ErrorCode.ILLEGAL_GENERATION), 1_002,
                                   generation_id=1) is None
    assert c.take_lost() == () and c.owned == tps(0, 1) and c.state == MemberState.REBALANCING


def test_rebalance_in_progress_from_a_commit_follows_the_same_rule() -> None:
    c = stable([0])
    c.join_request(1_000)
    assert not c.on_rebalance_in_progress(1, "a commit") and not c.rejoin_needed
    joined(c, [0], generation=2, now=1_001)
    assert not c.on_rebalance_in_progress(1, "a commit")  # sent in generation 1: stale
    assert c.on_rebalance_in_progress(2, "a commit") and c.need_rejoin(1_002)
