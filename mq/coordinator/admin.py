"""DescribeGroups and ListGroups: read-only views of the shard's groups."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mq.coordinator.group import Group, assignment_to_wire
from mq.coordinator.membership import check_group_id
from mq.core.errors import ErrorCode
from mq.protocol import group_messages as gm

if TYPE_CHECKING:
    from mq.coordinator.coordinator import Call, GroupCoordinator


def _describe(group: Group, call: Call) -> gm.DescribedGroup:
    members = [
        gm.DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                           assignment_to_wire(m.assignment), list(m.resolved_topics(call.topics)), m.pattern)
        for m in group.members.values()
    ]
    return gm.DescribedGroup(group.group_id, ErrorCode.NONE, group.state.value, group.protocol_type,
                             group.assignor, group.generation, members)


def describe(c: GroupCoordinator, call: Call, req: gm.DescribeGroupsRequest) -> None:
    """An unknown group is described as Dead with no error (Kafka)."""
    out = []
    for group_id in req.groups:
        bad = check_group_id(group_id)
        group = c.groups.get(group_id)
        if bad is not None:
            out.append(gm.DescribedGroup(group_id, bad[0]))
        elif group is None:
            out.append(gm.DescribedGroup(group_id, ErrorCode.NONE))
        else:
            out.append(_describe(group, call))
    call.respond(gm.DescribeGroupsResponse(out))


def list_groups(c: GroupCoordinator, call: Call, req: gm.ListGroupsRequest) -> None:
    wanted = {s.lower() for s in req.states_filter}
    call.respond(gm.ListGroupsResponse(ErrorCode.NONE, [
        gm.ListedGroup(g.group_id, g.protocol_type, g.state.value)
        for _, g in sorted(c.groups.items()) if not wanted or g.state.value.lower() in wanted]))
