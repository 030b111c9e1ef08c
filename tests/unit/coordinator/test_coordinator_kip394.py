"""KIP-394: a dynamic member's first JoinGroup gets MEMBER_ID_REQUIRED and a pending id."""

from __future__ import annotations

from dataclasses import replace

from mq.core.errors import ErrorCode
from mq.protocol import group_messages as gm
from tests.unit.coordinator.harness import CONFIG, Shard, assigned, tps

ALL_T = tps("t", 0, 1, 2, 3, 4, 5)


def _required(shard: Shard, **kw) -> str:
    """A first JoinGroup (no member id): the pending member id it was given."""
    response = shard.answer(shard.join(raw=True, **kw))
    assert isinstance(response, gm.JoinGroupResponse), response
    assert response.error_code == ErrorCode.MEMBER_ID_REQUIRED and response.member_id, response
    return response.member_id


def _leave(shard: Shard, member_id: str, group: str = "g") -> gm.LeaveGroupResponse:
    response = shard.call(gm.LeaveGroupRequest(group, [gm.MemberIdentity(member_id)]))
    assert isinstance(response, gm.LeaveGroupResponse)
    return response


def test_a_first_join_gets_a_pending_member_id_and_changes_nothing_else() -> None:
    shard = Shard()
    member_id = _required(shard, client_id="app")
    assert member_id.startswith("app-") and shard.log == []
    assert shard.coordinator.groups == {} and shard.coordinator.pending_members == {"g": {member_id: 10_000}}
    assert shard.coordinator.next_deadline_ms() == 10_000
    assert shard.heartbeat(member_id, -1) == ErrorCode.UNKNOWN_MEMBER_ID  # not a member yet


def test_rejoining_with_the_pending_id_joins_the_group() -> None:
    shard = Shard()
    member_id = _required(shard, client_id="app")
    response = shard.answer(shard.join(member_id=member_id, raw=True))
    assert isinstance(response, gm.JoinGroupResponse) and response.member_id == member_id
    assert response.generation_id == 1 and assigned(response) == ALL_T
    assert shard.coordinator.pending_members == {}
    assert shard.heartbeat(member_id, 1) == ErrorCode.NONE


def test_a_pending_member_does_not_rebalance_a_stable_group() -> None:
    shard = Shard()
    a = shard.answer(shard.join(client_id="a"))
    assert isinstance(a, gm.JoinGroupResponse) and a.generation_id == 1
    records = len(shard.log)
    _required(shard, client_id="b")
    assert shard.coordinator.group_states() == {"g": "Stable"} and len(shard.log) == records
    assert shard.heartbeat(a.member_id, 1) == ErrorCode.NONE


def test_a_pending_member_id_expires_after_the_session_timeout() -> None:
    shard = Shard()
    early, late = _required(shard, session_ms=1_000), _required(shard, session_ms=2_000)
    shard.advance(999)
    assert shard.coordinator.pending_members == {"g": {early: 1_000, late: 2_000}}
    shard.advance(1)
    assert shard.coordinator.pending_members == {"g": {late: 2_000}}
    assert shard.coordinator.next_deadline_ms() == 2_000
    refused = shard.answer(shard.join(member_id=early, raw=True))
    assert refused.error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    joined = shard.answer(shard.join(member_id=late, raw=True))
    assert joined.error_code == ErrorCode.NONE and joined.member_id == late  # type: ignore[union-attr]


def test_an_unknown_member_id_that_is_not_pending_is_refused() -> None:
    shard = Shard()
    _required(shard)
    for group in ("g", "other"):
        response = shard.answer(shard.join(group, member_id="c-forged", raw=True))
        assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    assert shard.coordinator.groups == {}


def test_leaving_with_a_pending_id_forgets_it() -> None:
    shard = Shard()
    member_id = _required(shard)
    response = _leave(shard, member_id)
    assert response.error_code == ErrorCode.NONE
    assert [(m.member_id, m.error_code) for m in response.members] == [(member_id, ErrorCode.NONE)]
    assert shard.coordinator.pending_members == {} and shard.coordinator.groups == {}
    assert _leave(shard, member_id).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # the group does not exist
    refused = shard.answer(shard.join(member_id=member_id, raw=True))
    assert refused.error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]


def test_leaving_while_parked_in_the_initial_delay_lets_the_next_member_take_everything() -> None:
    """The problem KIP-394 solves: a consumer closed while its first join is parked."""
    shard = Shard(replace(CONFIG, initial_rebalance_delay_ms=3_000))
    a_id = _required(shard, client_id="a")
    ra = shard.join(member_id=a_id, raw=True)
    assert shard.answer(ra) is None  # parked for the initial delay
    shard.advance(500)
    assert _leave(shard, a_id).members[0].error_code == ErrorCode.NONE
    cancelled = shard.answer(ra)
    assert isinstance(cancelled, gm.JoinGroupResponse) and cancelled.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    shard.advance(100)
    rb = shard.join(client_id="b")
    shard.advance(2_999)
    assert shard.answer(rb) is None
    shard.advance(1)  # the initial delay, restarted by b's join
    response = shard.answer(rb)
    assert assigned(response) == ALL_T and response.members == 1  # type: ignore[union-attr]
    described = shard.call(gm.DescribeGroupsRequest(["g"])).groups[0]  # type: ignore[attr-defined]
    assert [m.member_id for m in described.members] == [response.member_id]  # type: ignore[union-attr]


def test_a_parked_member_leaving_unblocks_the_rebalance() -> None:
    shard = Shard()
    a = shard.answer(shard.join(client_id="a"))
    b_first = shard.join(client_id="b")
    shard.join(member_id=a.member_id)  # type: ignore[union-attr]
    b = shard.answer(b_first).member_id  # type: ignore[union-attr]
    shard.responses.clear()
    c = _required(shard, client_id="c")
    rc = shard.join(member_id=c, raw=True)  # generation 2 is Stable; c starts a rebalance
    ra = shard.join(member_id=a.member_id)  # type: ignore[union-attr]
    assert shard.answer(ra) is None and shard.answer(rc) is None  # waiting for b
    response = _leave(shard, c)
    assert response.members[0].error_code == ErrorCode.NONE
    assert shard.answer(rc).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    assert shard.answer(ra) is None  # b still has to rejoin, within the rebalance timeout
    rb = shard.join(member_id=b)
    gen_a, gen_b = shard.answer(ra), shard.answer(rb)
    assert gen_a.generation_id == gen_b.generation_id == 3 and gen_a.members == 2  # type: ignore[union-attr]
    assert sorted(assigned(gen_a) + assigned(gen_b)) == list(ALL_T)


def test_static_members_skip_kip_394() -> None:
    shard = Shard()
    response = shard.answer(shard.join(instance="i1", raw=True))
    assert response.error_code == ErrorCode.NONE and response.generation_id == 1  # type: ignore[union-attr]
    assert shard.coordinator.pending_members == {}


def test_a_full_group_refuses_a_pending_member_rejoining() -> None:
    shard = Shard(replace(CONFIG, max_size=1))
    early = _required(shard, client_id="a")
    late = _required(shard, client_id="b")  # the group is still empty: both get an id
    shard.answer(shard.join(member_id=early, raw=True))
    refused = shard.answer(shard.join(member_id=late, raw=True))
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED  # type: ignore[union-attr]
    assert list(shard.coordinator.groups["g"].members) == [early]


def test_pending_members_are_forgotten_by_a_new_coordinator() -> None:
    shard = Shard()
    shard.answer(shard.join(client_id="a"))
    member_id = _required(shard, client_id="b")
    assert shard.coordinator.unload() == [] and shard.coordinator.pending_members == {}
    shard.reload()
    refused = shard.answer(shard.join(member_id=member_id, raw=True))
    assert refused.error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
