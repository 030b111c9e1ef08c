"""JoinGroup, Heartbeat and LeaveGroup: who is in a group, and when it rebalances.

Kafka's ``GroupCoordinator.handleJoinGroup``/``handleHeartbeat``/``handleLeaveGroup``
(classic protocol), with the assignment computed by the coordinator and static
membership (KIP-345): a member rejoining with a known ``group_instance_id`` and no
member id takes over the old member's place and assignment without a rebalance, and
the old member id is fenced (FENCED_INSTANCE_ID).

KIP-394: a dynamic member joining without a member id is not admitted at once. It
gets MEMBER_ID_REQUIRED with a freshly allocated id, which the coordinator keeps as a
*pending member* (not in the group, no rebalance) until the member rejoins with it
or its session timeout passes. So every member that ends up parked in a rebalance
knows its id, and can send LeaveGroup if it exits before the rebalance completes.
Static members (``group_instance_id``) skip this, as in Kafka.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mq.coordinator.assignors import ASSIGNORS
from mq.coordinator.config import GroupConfig
from mq.coordinator.group import Group, GroupState, Member, assignment_from_wire
from mq.coordinator.records import group_metadata_record
from mq.core.errors import ErrorCode
from mq.protocol import group_messages as gm

if TYPE_CHECKING:
    from mq.coordinator.coordinator import Call, GroupCoordinator

MAX_GROUP_ID_LENGTH = 255


def check_group_id(group_id: str) -> tuple[ErrorCode, str] | None:
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, "the group id is empty"
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        return ErrorCode.INVALID_GROUP_ID, f"the group id is longer than {MAX_GROUP_ID_LENGTH} characters"
    return None


def check_join(config: GroupConfig, req: gm.JoinGroupRequest) -> tuple[ErrorCode, str] | None:
    """Checks that need no group state."""
    bad = check_group_id(req.group_id)
    if bad is not None:
        return bad
    low, high = config.min_session_timeout_ms, config.max_session_timeout_ms
    if not low <= req.session_timeout_ms <= high:
        return ErrorCode.INVALID_SESSION_TIMEOUT, (
            f"session timeout {req.session_timeout_ms} ms is outside [{low}, {high}] ms")
    if req.group_instance_id == "":
        return ErrorCode.INVALID_REQUEST, "group_instance_id is empty (use None for a dynamic member)"
    if not req.protocol_type:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "protocol_type is empty"
    if not req.assignors:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "the member lists no assignor"
    unknown = [a for a in req.assignors if a not in ASSIGNORS]
    if unknown:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, (
            f"unknown assignor {unknown[0]!r}; known: {', '.join(ASSIGNORS)}")
    if req.pattern is not None:
        try:
            re.compile(req.pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            return ErrorCode.INVALID_REQUEST, f"invalid subscription pattern {req.pattern!r}: {exc}"
    return None


def _check_against_group(group: Group, req: gm.JoinGroupRequest) -> tuple[ErrorCode, str] | None:
    others = [m for m in group.members.values()
              if m.member_id != req.member_id and (m.group_instance_id is None or m.group_instance_id != req.group_instance_id)]
    if not others:
        return None
    if group.protocol_type and req.protocol_type != group.protocol_type:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, (
            f"protocol type {req.protocol_type!r} differs from the group's {group.protocol_type!r}")
    common = set(req.assignors)
    for member in others:
        common &= set(member.assignors)
    if not common:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "no assignor is supported by every member of the group"
    return None


def join(c: GroupCoordinator, call: Call, req: gm.JoinGroupRequest) -> None:
    def refuse(code: ErrorCode, message: str, member_id: str = req.member_id) -> None:
        call.respond(gm.JoinGroupResponse(code, member_id=member_id, error_message=message))

    bad = check_join(c.config, req)
    group = c.groups.get(req.group_id)
    if bad is None and group is not None:
        bad = _check_against_group(group, req)
    if bad is not None:
        return refuse(*bad)
    if req.member_id:
        if req.group_instance_id is None and c.take_pending(req.group_id, req.member_id):
            if group is not None and len(group.members) >= c.config.max_size:
                return refuse(ErrorCode.GROUP_MAX_SIZE_REACHED, f"the group has {c.config.max_size} members")
            return _add(c, call, group, req, req.member_id)
        if group is None:
            return refuse(ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} does not exist")
        if group.fenced(req.member_id, req.group_instance_id):
            return refuse(ErrorCode.FENCED_INSTANCE_ID, "another member joined with this group.instance.id")
        member = group.members.get(req.member_id)
        if member is None:
            return refuse(ErrorCode.UNKNOWN_MEMBER_ID, "the member is not in the group")
        return _rejoin(c, call, group, member, req)
    if group is not None and req.group_instance_id is not None and req.group_instance_id in group.instances:
        return _static_restart(c, call, group, req)
    if group is not None and len(group.members) >= c.config.max_size:
        return refuse(ErrorCode.GROUP_MAX_SIZE_REACHED, f"the group has {c.config.max_size} members")
    member_id = c.new_member_id(call.client_id)
    if req.group_instance_id is None:  # KIP-394: a pending member until it rejoins with its id
        c.add_pending(req.group_id, member_id, call.now_ms + req.session_timeout_ms)
        return refuse(ErrorCode.MEMBER_ID_REQUIRED, "rejoin with the member id of this response", member_id)
    _add(c, call, group, req, member_id)


def _add(c: GroupCoordinator, call: Call, group: Group | None, req: gm.JoinGroupRequest, member_id: str) -> None:
    """A new member (a dynamic one back with its pending id, or a new static one)
    enters the group, and the group rebalances."""
    if group is None:
        group = c.groups[req.group_id] = Group(req.group_id)
    member = Member(member_id, req.group_instance_id, call.client_id, call.client_host,
                    req.session_timeout_ms, _rebalance_timeout(req), tuple(req.topics), req.pattern,
                    tuple(req.assignors), owned=assignment_from_wire(req.owned), last_heartbeat_ms=call.now_ms)
    if not group.members:
        group.protocol_type = req.protocol_type
    group.add(member)
    if not group.leader:
        group.leader = member.member_id
    _park(call, member)
    if group.state == GroupState.PREPARING_REBALANCE:
        c.extend_initial_delay(group, call.now_ms)
    else:
        c.prepare_rebalance(group, call.now_ms)
    c.maybe_complete(call, group)


def _rebalance_timeout(req: gm.JoinGroupRequest) -> int:
    return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms


def _park(call: Call, member: Member) -> None:
    if member.join_request_id is not None:  # a retried JoinGroup replaces the older one
        call.respond(gm.JoinGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id,
                                          error_message="superseded by a newer JoinGroup"),
                     member.join_request_id)
    member.join_request_id = call.request_id


def _rejoin(c: GroupCoordinator, call: Call, group: Group, member: Member, req: gm.JoinGroupRequest) -> None:
    subscription = (tuple(req.topics), req.pattern, tuple(req.assignors))
    unchanged = member.same_subscription(*subscription)
    member.topics, member.pattern, member.assignors = subscription
    member.session_timeout_ms, member.rebalance_timeout_ms = req.session_timeout_ms, _rebalance_timeout(req)
    member.owned = assignment_from_wire(req.owned)
    member.last_heartbeat_ms = call.now_ms
    if group.state == GroupState.STABLE and unchanged:
        # A retry (its response was lost) or a member that only wants its assignment.
        call.respond(c.join_response(group, member))
        return
    _park(call, member)
    c.prepare_rebalance(group, call.now_ms)
    c.maybe_complete(call, group)


def _static_restart(c: GroupCoordinator, call: Call, group: Group, req: gm.JoinGroupRequest) -> None:
    """KIP-345: a static member came back (a new process, no member id)."""
    assert req.group_instance_id is not None
    old = group.members[group.instances[req.group_instance_id]]
    if old.join_request_id is not None:
        call.respond(gm.JoinGroupResponse(ErrorCode.FENCED_INSTANCE_ID, member_id=old.member_id,
                                          error_message="a newer member joined with this group.instance.id"),
                     old.join_request_id)
    unchanged = old.same_subscription(tuple(req.topics), req.pattern, tuple(req.assignors))
    member = Member(c.new_member_id(call.client_id), req.group_instance_id, call.client_id, call.client_host,
                    req.session_timeout_ms, _rebalance_timeout(req), tuple(req.topics), req.pattern,
                    tuple(req.assignors), old.assignment, owned=assignment_from_wire(req.owned),
                    last_heartbeat_ms=call.now_ms)
    group.replace_member(old.member_id, member)
    if group.state == GroupState.STABLE and unchanged:
        c.emit(call, group_metadata_record(group.group_id, group.metadata_value(call.now_ms)))
        call.respond(c.join_response(group, member))
        return
    _park(call, member)
    c.prepare_rebalance(group, call.now_ms)
    c.maybe_complete(call, group)


def heartbeat(c: GroupCoordinator, call: Call, req: gm.HeartbeatRequest) -> None:
    call.respond(gm.HeartbeatResponse(*_heartbeat(c, call, req)))


def _heartbeat(c: GroupCoordinator, call: Call, req: gm.HeartbeatRequest) -> tuple[ErrorCode, str]:
    bad = check_group_id(req.group_id)
    if bad is not None:
        return bad
    group = c.groups.get(req.group_id)
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} does not exist"
    if group.fenced(req.member_id, req.group_instance_id):
        return ErrorCode.FENCED_INSTANCE_ID, "another member joined with this group.instance.id"
    member = group.members.get(req.member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID, "the member is not in the group"
    member.last_heartbeat_ms = call.now_ms
    if group.state == GroupState.PREPARING_REBALANCE:
        return ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing: rejoin"
    if req.generation_id != group.generation:
        return ErrorCode.ILLEGAL_GENERATION, f"generation {req.generation_id} is not the current {group.generation}"
    return ErrorCode.NONE, ""


def leave(c: GroupCoordinator, call: Call, req: gm.LeaveGroupRequest) -> None:
    bad = check_group_id(req.group_id)
    group = c.groups.get(req.group_id)
    if bad is None and group is None and c.has_pending(req.group_id):
        group = Group(req.group_id)  # only pending members: a stand-in that knows nobody
    if bad is not None or group is None:
        code, message = bad or (ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} does not exist")
        call.respond(gm.LeaveGroupResponse(code, [
            gm.LeaveMemberResponse(m.member_id, m.group_instance_id, code) for m in req.members], message))
        return
    results = []
    removed = False
    for ident in req.members:
        if ident.member_id and ident.group_instance_id is None and c.take_pending(req.group_id, ident.member_id):
            results.append(gm.LeaveMemberResponse(ident.member_id, None, ErrorCode.NONE))  # KIP-394: forgotten
            continue
        member_id = ident.member_id
        if not member_id and ident.group_instance_id is not None:
            member_id = group.instances.get(ident.group_instance_id, "")
        if group.fenced(member_id, ident.group_instance_id):
            code = ErrorCode.FENCED_INSTANCE_ID
        elif member_id not in group.members:
            code = ErrorCode.UNKNOWN_MEMBER_ID
        else:
            code = ErrorCode.NONE
            c.remove_member(call, group, member_id, reason="left the group")
            removed = True
        results.append(gm.LeaveMemberResponse(ident.member_id or member_id, ident.group_instance_id, code))
    if removed:
        c.member_gone(call, group)
    call.respond(gm.LeaveGroupResponse(ErrorCode.NONE, results))
