"""Group requests as the broker routes them: which group each names, the error a
broker answers when it cannot hand a request to a coordinator (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE), and the merge of requests
that name groups of several offsets-topic partitions (DescribeGroups, DeleteGroups,
ListGroups: each shard answers its part, the broker sends one response).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mq.core.errors import ErrorCode
from mq.protocol.group_messages import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopicResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from mq.protocol.messages import ApiKey, Request, Response

GROUP_APIS = frozenset({
    ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH, ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS,
})
"""Requests the broker's ``GroupService`` serves."""

SINGLE_GROUP = (JoinGroupRequest, HeartbeatRequest, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest)
"""Requests about one group (``group_id``): served whole by that group's shard."""
MULTI_GROUP = (DescribeGroupsRequest, DeleteGroupsRequest)
"""Requests naming several groups (``groups``): split by shard, answers merged."""


def error_response(request: Request, code: ErrorCode, message: str) -> Response:
    """The answer to a group request this broker cannot serve, ``code`` everywhere."""
    if isinstance(request, JoinGroupRequest):
        return JoinGroupResponse(code, member_id=request.member_id, error_message=message)
    if isinstance(request, HeartbeatRequest):
        return HeartbeatResponse(code, message)
    if isinstance(request, LeaveGroupRequest):
        return LeaveGroupResponse(code, error_message=message)
    if isinstance(request, OffsetCommitRequest):
        return OffsetCommitResponse([
            OffsetCommitTopicResponse(t.name, [OffsetCommitPartitionResponse(p.partition, code) for p in t.partitions])
            for t in request.topics], message)
    if isinstance(request, OffsetFetchRequest):
        return OffsetFetchResponse(code, error_message=message)
    if isinstance(request, DescribeGroupsRequest):
        return DescribeGroupsResponse([DescribedGroup(g, code) for g in request.groups])
    if isinstance(request, DeleteGroupsRequest):
        return DeleteGroupsResponse([DeletableGroupResult(g, code) for g in request.groups])
    if isinstance(request, ListGroupsRequest):
        return ListGroupsResponse(code)
    raise TypeError(f"{type(request).__name__} is not a group request")


def part_of(request: DescribeGroupsRequest | DeleteGroupsRequest, groups: list[str]) -> Request:
    """The same request restricted to ``groups`` (one shard's share)."""
    return replace(request, groups=groups)


@dataclass(slots=True)
class Fanout:
    """A request split over shards: the parts answered so far, merged when all are in."""

    op_id: int
    request: Request
    waiting: set[int]  # request ids of the parts still unanswered
    parts: list[Response] = field(default_factory=list)
    load_in_progress: bool = False  # ListGroups: a shard is loading (its groups are missing)

    def add(self, sub_id: int, response: Response) -> Response | None:
        """Record one part's answer; the merged response once every part is in."""
        self.waiting.discard(sub_id)
        self.parts.append(response)
        return self.merged() if not self.waiting else None

    def merged(self) -> Response:
        request = self.request
        if isinstance(request, DescribeGroupsRequest):
            described = {g.group_id: g for p in self.parts for g in p.groups}  # type: ignore[attr-defined]
            return DescribeGroupsResponse([described.get(g, DescribedGroup(g, ErrorCode.NOT_COORDINATOR))
                                           for g in request.groups])
        if isinstance(request, DeleteGroupsRequest):
            deleted = {r.group_id: r for p in self.parts for r in p.results}  # type: ignore[attr-defined]
            return DeleteGroupsResponse([deleted.get(g, DeletableGroupResult(g, ErrorCode.NOT_COORDINATOR))
                                         for g in request.groups])
        assert isinstance(request, ListGroupsRequest)
        listed: dict[str, ListedGroup] = {}
        code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.load_in_progress else ErrorCode.NONE
        for part in self.parts:
            assert isinstance(part, ListGroupsResponse)
            if part.error_code != ErrorCode.NONE:
                code = ErrorCode(part.error_code)
            for group in part.groups:
                listed[group.group_id] = group
        return ListGroupsResponse(code, [listed[g] for g in sorted(listed)])
