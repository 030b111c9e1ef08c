"""Consumer group requests: finding the coordinator, membership, offsets, group admin.

The coordinator computes assignments itself (as in KIP-848), so the classic protocol's
SyncGroup round is gone: JoinGroup's response carries the member's assignment for the
new generation. Everything else keeps Kafka's names and API keys. A consumer's
subscription travels in JoinGroup as topic names or one regular expression, which the
coordinator matches against the topics it knows (new matching topics start a rebalance).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.protocol.messages import ApiKey, Request, Response


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic: str
    partitions: list[int]


# ---------------------------------------------------------------- FindCoordinator


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse(Response):
    API_KEY = ApiKey.FIND_COORDINATOR
    error_code: int
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest(Request):
    """``key`` is the group id. The coordinator is the leader of partition
    ``group_partition(key)`` of ``__consumer_offsets`` (created on first use)."""

    API_KEY = ApiKey.FIND_COORDINATOR
    RESPONSE = FindCoordinatorResponse
    key: str
    key_type: int = 0  # 0: consumer group


# ---------------------------------------------------------------- JoinGroup


@dataclass(frozen=True, slots=True)
class JoinGroupResponse(Response):
    """The member's place in the new generation, or an error.

    MEMBER_ID_REQUIRED (KIP-394) answers a dynamic member's first JoinGroup at once:
    ``member_id`` is the id allocated to it; the member rejoins with it straight away.
    Error answers echo the request's member id (UNKNOWN_MEMBER_ID: that id is not, or
    no longer, a member — join again without one)."""

    API_KEY = ApiKey.JOIN_GROUP
    error_code: int
    generation_id: int = -1
    assignor: str = ""  # the assignor the coordinator chose (the first all members support)
    member_id: str = ""  # the member's id; with MEMBER_ID_REQUIRED the one allocated to it
    leader: str = ""  # Kafka's group leader: the member that joined first (informational here)
    assignment: list[TopicPartitions] = field(default_factory=list)
    members: int = 0  # members in this generation
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroupRequest(Request):
    """Join (``member_id=""``: a new member) or rejoin the group.

    ``assignors`` in order of preference; ``cooperative-sticky`` makes the member
    cooperative (KIP-429): it keeps consuming ``owned`` while the group rebalances, and
    the coordinator never hands a partition to a member while another still owns it.
    ``topics`` or ``pattern`` (a Python regular expression, fully matched) is the
    subscription. The response comes when the rebalance completes.

    KIP-394: a dynamic member (no ``group_instance_id``) joining with ``member_id=""``
    is answered at once with MEMBER_ID_REQUIRED and an allocated member id, which the
    coordinator keeps as *pending* (not a member, no rebalance) until the member
    rejoins with it, or for ``session_timeout_ms``. So a member whose JoinGroup is
    parked always knows its id and can send LeaveGroup when it exits; the coordinator
    then answers the parked JoinGroup UNKNOWN_MEMBER_ID and the rebalance goes on
    without it. LeaveGroup of a pending id forgets it. Static members join directly."""

    API_KEY = ApiKey.JOIN_GROUP
    RESPONSE = JoinGroupResponse
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str = ""
    group_instance_id: str | None = None
    protocol_type: str = "consumer"
    assignors: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    pattern: str | None = None
    owned: list[TopicPartitions] = field(default_factory=list)
    reason: str = ""


# ---------------------------------------------------------------- Heartbeat


@dataclass(frozen=True, slots=True)
class HeartbeatResponse(Response):
    API_KEY = ApiKey.HEARTBEAT
    error_code: int  # REBALANCE_IN_PROGRESS: rejoin (keep consuming if cooperative)
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest(Request):
    API_KEY = ApiKey.HEARTBEAT
    RESPONSE = HeartbeatResponse
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


# ---------------------------------------------------------------- LeaveGroup


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse(Response):
    API_KEY = ApiKey.LEAVE_GROUP
    error_code: int
    members: list[LeaveMemberResponse] = field(default_factory=list)
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest(Request):
    """A static member leaving by ``group_instance_id`` (with ``member_id=""``) is
    removed at once, as ``kafka-consumer-groups --remove-members`` does."""

    API_KEY = ApiKey.LEAVE_GROUP
    RESPONSE = LeaveGroupResponse
    group_id: str
    members: list[MemberIdentity]


# ---------------------------------------------------------------- OffsetCommit


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    partition: int
    offset: int  # the next record to read (Kafka's convention)
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitTopic:
    name: str
    partitions: list[OffsetCommitPartition]


@dataclass(frozen=True, slots=True)
class OffsetCommitPartitionResponse:
    partition: int
    error_code: int


@dataclass(frozen=True, slots=True)
class OffsetCommitTopicResponse:
    name: str
    partitions: list[OffsetCommitPartitionResponse]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse(Response):
    API_KEY = ApiKey.OFFSET_COMMIT
    topics: list[OffsetCommitTopicResponse]
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest(Request):
    """From a member: ``generation_id``/``member_id`` must be current (a zombie's
    commit gets ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID). From an
    admin (``generation_id=-1``, ``member_id=""``): accepted only while the group has
    no members."""

    API_KEY = ApiKey.OFFSET_COMMIT
    RESPONSE = OffsetCommitResponse
    group_id: str
    topics: list[OffsetCommitTopic]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


# ---------------------------------------------------------------- OffsetFetch


@dataclass(frozen=True, slots=True)
class OffsetFetchTopic:
    name: str
    partitions: list[int]


@dataclass(frozen=True, slots=True)
class OffsetFetchPartitionResponse:
    partition: int
    offset: int = -1  # -1: nothing committed
    leader_epoch: int = -1
    metadata: str = ""
    error_code: int = 0
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class OffsetFetchTopicResponse:
    name: str
    partitions: list[OffsetFetchPartitionResponse]


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse(Response):
    API_KEY = ApiKey.OFFSET_FETCH
    error_code: int
    topics: list[OffsetFetchTopicResponse] = field(default_factory=list)
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest(Request):
    """``topics=None``: every partition the group has committed."""

    API_KEY = ApiKey.OFFSET_FETCH
    RESPONSE = OffsetFetchResponse
    group_id: str
    topics: list[OffsetFetchTopic] | None = None


# ---------------------------------------------------------------- group admin


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead


@dataclass(frozen=True, slots=True)
class ListGroupsResponse(Response):
    API_KEY = ApiKey.LIST_GROUPS
    error_code: int
    groups: list[ListedGroup] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ListGroupsRequest(Request):
    """Lists the groups this broker coordinates: an admin asks every broker."""

    API_KEY = ApiKey.LIST_GROUPS
    RESPONSE = ListGroupsResponse
    states_filter: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[TopicPartitions]
    subscription: list[str] = field(default_factory=list)  # topics the member's subscription matches
    pattern: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error_code: int
    state: str = "Dead"
    protocol_type: str = ""
    assignor: str = ""
    generation_id: int = -1
    members: list[DescribedMember] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_GROUPS
    groups: list[DescribedGroup]


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest(Request):
    API_KEY = ApiKey.DESCRIBE_GROUPS
    RESPONSE = DescribeGroupsResponse
    groups: list[str]


@dataclass(frozen=True, slots=True)
class DeletableGroupResult:
    group_id: str
    error_code: int  # NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, NOT_COORDINATOR


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse(Response):
    API_KEY = ApiKey.DELETE_GROUPS
    results: list[DeletableGroupResult]


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest(Request):
    """Deletes empty groups and their committed offsets (tombstones on the offsets topic)."""

    API_KEY = ApiKey.DELETE_GROUPS
    RESPONSE = DeleteGroupsResponse
    groups: list[str]


GROUP_REQUESTS: tuple[type[Request], ...] = (
    FindCoordinatorRequest, JoinGroupRequest, HeartbeatRequest, LeaveGroupRequest, OffsetCommitRequest,
    OffsetFetchRequest, ListGroupsRequest, DescribeGroupsRequest, DeleteGroupsRequest,
)
