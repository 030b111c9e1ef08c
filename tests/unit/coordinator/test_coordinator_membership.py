"""JoinGroup / Heartbeat / LeaveGroup, session and rebalance timeouts, static members."""

from __future__ import annotations

from dataclasses import replace

from mq.coordinator import GroupCoordinator
from mq.core.errors import ErrorCode
from mq.protocol import group_messages as gm
from tests.unit.coordinator.harness import CONFIG, Shard, assigned, tps


def _stable_pair(shard: Shard) -> tuple[str, str]:
    """Two dynamic members A and B in generation 2 of group g (range over t)."""
    a = shard.answer(shard.join(client_id="a"))
    assert isinstance(a, gm.JoinGroupResponse) and a.generation_id == 1
    rb = shard.join(client_id="b")
    assert shard.heartbeat(a.member_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    ra = shard.join(member_id=a.member_id)
    resp_a, resp_b = shard.answer(ra), shard.answer(rb)
    assert resp_a.generation_id == resp_b.generation_id == 2  # type: ignore[union-attr]
    return a.member_id, resp_b.member_id  # type: ignore[union-attr]


def test_a_first_member_gets_an_id_a_generation_and_every_partition() -> None:
    shard = Shard()
    response = shard.answer(shard.join(client_id="app"))
    assert isinstance(response, gm.JoinGroupResponse)
    assert response.member_id.startswith("app-") and response.generation_id == 1
    assert response.assignor == "range" and response.leader == response.member_id and response.members == 1
    assert assigned(response) == tps("t", 0, 1, 2, 3, 4, 5)
    assert len(shard.log) == 1 and shard.coordinator.group_states() == {"g": "Stable"}
    assert shard.heartbeat(response.member_id, 1) == ErrorCode.NONE


def test_the_initial_delay_gathers_members_joining_an_empty_group() -> None:
    shard = Shard(replace(CONFIG, initial_rebalance_delay_ms=300))
    ra = shard.join(client_id="a")
    shard.advance(200)
    rb = shard.join(client_id="b")  # extends the delay to 500
    shard.advance(250)
    assert shard.answer(ra) is None and shard.answer(rb) is None
    assert shard.coordinator.next_deadline_ms() == 500
    shard.advance(50)
    a, b = assigned(shard.answer(ra)), assigned(shard.answer(rb))
    assert not set(a) & set(b) and len(a) + len(b) == 6 and len(shard.log) == 1


def test_a_new_member_makes_the_others_rejoin_and_they_split_the_partitions() -> None:
    shard = Shard()
    a, b = _stable_pair(shard)
    described = shard.call(gm.DescribeGroupsRequest(["g"])).groups[0]  # type: ignore[attr-defined]
    owners = [assignment for m in described.members for assignment in m.assignment]
    assert described.state == "Stable" and described.generation_id == 2 and len(owners) == 2
    assert shard.heartbeat(a, 2) == shard.heartbeat(b, 2) == ErrorCode.NONE


def test_a_member_that_does_not_rejoin_in_time_is_removed() -> None:
    shard = Shard()
    a, b = _stable_pair(shard)
    rc = shard.join(client_id="c")
    ra = shard.join(member_id=a)
    shard.advance(4_999)
    assert shard.answer(ra) is None
    shard.advance(1)  # the rebalance timeout (5 s)
    resp_a, resp_c = shard.answer(ra), shard.answer(rc)
    assert resp_a.generation_id == 3 and resp_a.members == 2  # type: ignore[union-attr]
    assert len(assigned(resp_a)) + len(assigned(resp_c)) == 6
    assert shard.heartbeat(b, 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_silent_member_is_removed_after_its_session_timeout() -> None:
    shard = Shard()
    a, b = _stable_pair(shard)
    for _ in range(3):
        shard.advance(3_000)
        assert shard.heartbeat(a, 2) == ErrorCode.NONE
    shard.advance(999)
    assert shard.coordinator.group_states() == {"g": "Stable"}
    shard.advance(1)  # b's session (10 s) ran out
    assert shard.coordinator.group_states() == {"g": "PreparingRebalance"}
    assert shard.heartbeat(a, 2) == ErrorCode.REBALANCE_IN_PROGRESS
    resp = shard.answer(shard.join(member_id=a))
    assert resp.generation_id == 3 and assigned(resp) == tps("t", 0, 1, 2, 3, 4, 5)  # type: ignore[union-attr]
    assert shard.heartbeat(b, 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_leaving_rebalances_and_the_last_one_out_empties_the_group() -> None:
    shard = Shard()
    a, b = _stable_pair(shard)
    response = shard.call(gm.LeaveGroupRequest("g", [gm.MemberIdentity(b)]))
    assert response.error_code == 0 and response.members[0].error_code == 0  # type: ignore[attr-defined]
    assert shard.answer(shard.join(member_id=a)).generation_id == 3  # type: ignore[union-attr]
    shard.call(gm.LeaveGroupRequest("g", [gm.MemberIdentity(a)]))
    assert shard.coordinator.group_states() == {"g": "Empty"}
    assert shard.coordinator.groups["g"].generation == 4
    unknown = shard.call(gm.LeaveGroupRequest("g", [gm.MemberIdentity("nobody")]))
    assert unknown.members[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[attr-defined]


def test_a_static_member_restarting_keeps_its_assignment_without_a_rebalance() -> None:
    shard = Shard()
    first = shard.answer(shard.join(instance="i1", client_id="a"))
    rb = shard.join(client_id="b")
    resp_a = shard.answer(shard.join(member_id=first.member_id, instance="i1"))  # type: ignore[union-attr]
    resp_b = shard.answer(rb)
    before = assigned(resp_a)
    restarted = shard.answer(shard.join(instance="i1", client_id="a2"))
    assert isinstance(restarted, gm.JoinGroupResponse) and restarted.member_id.startswith("a2-")
    assert restarted.generation_id == 2 and assigned(restarted) == before
    assert shard.coordinator.group_states() == {"g": "Stable"}
    assert shard.heartbeat(resp_b.member_id, 2) == ErrorCode.NONE  # type: ignore[union-attr]
    old = resp_a.member_id  # type: ignore[union-attr]
    assert shard.heartbeat(old, 2, instance="i1") == ErrorCode.FENCED_INSTANCE_ID
    refused = shard.commit({tps("t", 0)[0]: 5}, generation=2, member_id=old, instance="i1")
    assert set(refused.values()) == {ErrorCode.FENCED_INSTANCE_ID}
    # the restart survives a fail-over
    assert shard.reload().groups["g"].instances["i1"] == restarted.member_id


def test_a_retried_join_in_a_stable_group_returns_the_same_assignment() -> None:
    shard = Shard()
    a, _ = _stable_pair(shard)
    records = len(shard.log)
    again = shard.answer(shard.join(member_id=a))
    assert again.generation_id == 2 and len(shard.log) == records  # type: ignore[union-attr]


def test_join_validation_names_the_problem_and_changes_nothing() -> None:
    shard = Shard()
    _stable_pair(shard)
    before = (len(shard.log), shard.coordinator.group_states(), dict(shard.coordinator.groups["g"].members))
    cases = [
        ({"group": ""}, ErrorCode.INVALID_GROUP_ID),
        ({"session_ms": 50}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"session_ms": 60_001}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"assignors": ("magic",)}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"assignors": ()}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"assignors": ("round-robin",)}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),  # none in common with range
        ({"protocol_type": "connect"}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"pattern": "t(("}, ErrorCode.INVALID_REQUEST),
        ({"member_id": "who"}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"group": "other", "member_id": "who"}, ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    for kwargs, code in cases:
        response = shard.answer(shard.join(**kwargs))  # type: ignore[arg-type]
        assert isinstance(response, gm.JoinGroupResponse) and response.error_code == code, (kwargs, response)
        assert response.error_message
    after = (len(shard.log), shard.coordinator.group_states(), dict(shard.coordinator.groups["g"].members))
    assert after == before


def test_a_full_group_refuses_another_member() -> None:
    shard = Shard(replace(CONFIG, max_size=1))
    shard.join(client_id="a")
    response = shard.answer(shard.join(client_id="b"))
    assert response.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED  # type: ignore[union-attr]
    assert len(shard.coordinator.groups["g"].members) == 1


def test_heartbeat_errors_for_zombies() -> None:
    shard = Shard()
    a, _ = _stable_pair(shard)
    assert shard.heartbeat(a, 1) == ErrorCode.ILLEGAL_GENERATION
    assert shard.heartbeat("ghost", 2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert shard.heartbeat(a, 2, group="nope") == ErrorCode.UNKNOWN_MEMBER_ID
    assert shard.heartbeat(a, 2, group="") == ErrorCode.INVALID_GROUP_ID


def test_unload_answers_parked_joins_not_coordinator() -> None:
    shard = Shard()
    _a, _ = _stable_pair(shard)
    rc = shard.join(client_id="c")
    answers = dict(shard.coordinator.unload())
    assert answers[rc].error_code == ErrorCode.NOT_COORDINATOR  # type: ignore[attr-defined]
    assert shard.coordinator.groups == {}
    assert isinstance(shard.coordinator, GroupCoordinator)
