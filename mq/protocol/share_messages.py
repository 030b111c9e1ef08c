"""Share group requests (KIP-932): membership, fetching with acquisition locks, acks, admin.

A share group's coordinator is the leader of the group's partition of
``__share_group_state`` (FindCoordinator with ``key_type`` 2). It holds the members,
assigns partitions to them (several members may share one) and keeps each
share-partition's in-flight records. ShareFetch goes to the coordinator: it applies the
acknowledgements it carries, locks records for the member and returns their batches
(whole stored batches, in the raw tail) with the acquired offset runs; the member keeps
only the records inside those runs. Acknowledgement types are Kafka's: 0 gap (the
offset holds no record), 1 accept, 2 release, 3 reject.

ListShareGroups and DeleteShareGroups are mq's own (Kafka uses ListGroups with a type
filter and DeleteGroups); the other keys are Kafka's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.protocol.messages import ApiKey, Records, Request, Response

SHARE_KEY_TYPE = 2
"""FindCoordinator ``key_type`` of a share group (the key is the group id)."""


@dataclass(frozen=True, slots=True)
class ShareTopicPartitions:
    topic: str
    partitions: list[int]


# ---------------------------------------------------------------- ShareGroupHeartbeat


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResponse(Response):
    API_KEY = ApiKey.SHARE_GROUP_HEARTBEAT
    error_code: int
    error_message: str = ""
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: list[ShareTopicPartitions] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatRequest(Request):
    """Join (``member_epoch=0``, ``member_id=""``: the coordinator names the member),
    stay (the current epoch) or leave (``member_epoch=-1``). ``topics`` is the
    subscription. ``auto_offset_reset`` (``earliest``/``latest``, "" for the broker's
    ``share.auto.offset.reset``) is taken when the group is created: where its share
    partitions start (mq's stand-in for Kafka's group config)."""

    API_KEY = ApiKey.SHARE_GROUP_HEARTBEAT
    RESPONSE = ShareGroupHeartbeatResponse
    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    topics: list[str] = field(default_factory=list)
    auto_offset_reset: str = ""


# ---------------------------------------------------------------- acknowledgements


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    first_offset: int
    last_offset: int
    ack_type: int  # 0 gap, 1 accept, 2 release, 3 reject


@dataclass(frozen=True, slots=True)
class PartitionAcknowledgements:
    topic: str
    partition: int
    batches: list[AcknowledgementBatch]


@dataclass(frozen=True, slots=True)
class AcknowledgeResult:
    topic: str
    partition: int
    error_code: int
    error_message: str = ""


# ---------------------------------------------------------------- ShareFetch


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    first_offset: int
    last_offset: int
    delivery_count: int
    dead_letter_reason: str = ""  # set: write these to the dead-letter topic, then accept them


@dataclass(frozen=True, slots=True)
class ShareFetchPartitionResponse:
    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""
    acquired: list[AcquiredRecords] = field(default_factory=list)
    records: Records = b""


@dataclass(frozen=True, slots=True)
class ShareFetchResponse(Response):
    API_KEY = ApiKey.SHARE_FETCH
    error_code: int
    error_message: str = ""
    partitions: list[ShareFetchPartitionResponse] = field(default_factory=list)
    acknowledgements: list[AcknowledgeResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShareFetchRequest(Request):
    """Acknowledge, then acquire up to ``max_records`` records of the member's
    assigned partitions (``max_records=0``: acknowledge only). With ``max_wait_ms`` the
    answer waits, when there is nothing to acquire, until there is or the time is up."""

    API_KEY = ApiKey.SHARE_FETCH
    RESPONSE = ShareFetchResponse
    group_id: str
    member_id: str
    max_records: int = 500
    max_bytes: int = 8 * 1024 * 1024
    acknowledgements: list[PartitionAcknowledgements] = field(default_factory=list)
    max_wait_ms: int = 0  # > 0: when nothing can be acquired, wait up to this long (at most 5 s) for records


# ---------------------------------------------------------------- ShareAcknowledge


@dataclass(frozen=True, slots=True)
class ShareAcknowledgeResponse(Response):
    API_KEY = ApiKey.SHARE_ACKNOWLEDGE
    error_code: int
    error_message: str = ""
    acknowledgements: list[AcknowledgeResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShareAcknowledgeRequest(Request):
    API_KEY = ApiKey.SHARE_ACKNOWLEDGE
    RESPONSE = ShareAcknowledgeResponse
    group_id: str
    member_id: str
    acknowledgements: list[PartitionAcknowledgements] = field(default_factory=list)


# ---------------------------------------------------------------- ShareGroupDescribe


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    topics: list[str]
    assignment: list[ShareTopicPartitions]
    acquired: int = 0  # records this member holds locked now


@dataclass(frozen=True, slots=True)
class SharePartitionDescription:
    topic: str
    partition: int
    start_offset: int  # the SPSO
    end_offset: int  # the next offset never handed out
    available: int
    acquired: int
    acknowledged: int
    archived: int
    dead_letters: int  # records waiting to be written to the dead-letter topic
    high_watermark: int = -1


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    group_id: str
    error_code: int
    error_message: str = ""
    state: str = ""  # Empty, Stable or Dead
    group_epoch: int = 0
    members: list[ShareMemberDescription] = field(default_factory=list)
    partitions: list[SharePartitionDescription] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeResponse(Response):
    API_KEY = ApiKey.SHARE_GROUP_DESCRIBE
    groups: list[DescribedShareGroup]


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeRequest(Request):
    API_KEY = ApiKey.SHARE_GROUP_DESCRIBE
    RESPONSE = ShareGroupDescribeResponse
    groups: list[str]


# ---------------------------------------------------------------- ListShareGroups / DeleteShareGroups


@dataclass(frozen=True, slots=True)
class ListedShareGroup:
    group_id: str
    state: str
    members: int


@dataclass(frozen=True, slots=True)
class ListShareGroupsResponse(Response):
    API_KEY = ApiKey.LIST_SHARE_GROUPS
    error_code: int
    groups: list[ListedShareGroup] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ListShareGroupsRequest(Request):
    """Every share group of every coordinator shard this broker leads (ask each broker)."""

    API_KEY = ApiKey.LIST_SHARE_GROUPS
    RESPONSE = ListShareGroupsResponse


@dataclass(frozen=True, slots=True)
class DeleteShareGroupsResponse(Response):
    API_KEY = ApiKey.DELETE_SHARE_GROUPS
    error_code: int
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class DeleteShareGroupsRequest(Request):
    """Delete one group with no members: its share-partition state is forgotten (a new
    group of the same name starts from ``share.auto.offset.reset``). NON_EMPTY_GROUP
    while members remain."""

    API_KEY = ApiKey.DELETE_SHARE_GROUPS
    RESPONSE = DeleteShareGroupsResponse
    group_id: str


SHARE_REQUESTS: tuple[type[Request], ...] = (
    ShareGroupHeartbeatRequest, ShareGroupDescribeRequest, ShareFetchRequest, ShareAcknowledgeRequest,
    ListShareGroupsRequest, DeleteShareGroupsRequest,
)
