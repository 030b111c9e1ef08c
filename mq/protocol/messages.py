"""One frozen dataclass per request and response: the schema of the native protocol.

Bodies travel as msgpack maps keyed by field name. A field typed ``Records`` is not
put in the map: its bytes go to the frame's raw tail, and the map holds
``[tail_offset, length]`` instead, so record batches cross the broker unparsed.
``mq.protocol.codec`` turns these dataclasses into frames and back, checking every
field against its type hint; the reference page is generated from this module.
Kafka's API keys are kept so the names can be looked up in Kafka's protocol guide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, Union

Records = Union[bytes, memoryview]
"""Raw record batches (ARCHITECTURE.md "Record batch"), carried in the frame's tail."""


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    DELETE_GROUPS = 42
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    ALTER_PARTITION = 56
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    RAFT = 1000  # mq's own: one Raft message between metadata quorum voters
    MIRROR_APPEND = 1001  # mq's own: a mirror appends a source region's batches at their offsets
    MIRROR_TRUNCATE = 1002  # mq's own: cut a mirror topic's partition on every replica
    LIST_SHARE_GROUPS = 1300  # mq's own: Kafka lists share groups with ListGroups(types=[share])
    DELETE_SHARE_GROUPS = 1301  # mq's own: Kafka deletes them with DeleteGroups


class Message:
    """Base of every request and response."""

    API_KEY: ClassVar[ApiKey]
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0


class Request(Message):
    RESPONSE: ClassVar[type["Response"]]


class Response(Message):
    pass


# ---------------------------------------------------------------- ApiVersions


@dataclass(frozen=True, slots=True)
class ApiVersionRange:
    api_key: int
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class ApiVersionsResponse(Response):
    API_KEY = ApiKey.API_VERSIONS
    error_code: int = 0
    api_keys: list[ApiVersionRange] = field(default_factory=list)
    broker_software: str = ""


@dataclass(frozen=True, slots=True)
class ApiVersionsRequest(Request):
    API_KEY = ApiKey.API_VERSIONS
    RESPONSE = ApiVersionsResponse
    client_software: str = ""


# ---------------------------------------------------------------- Metadata


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False  # registered but not (or no longer) serving: leads nothing, in no ISR


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    error_code: int
    leader_id: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error_code: int
    partitions: list[PartitionMetadata]
    is_internal: bool = False
    topic_id: str = ""
    configs: dict[str, str] = field(default_factory=dict)  # the topic's conflict.* configs (producers and table views act on them)


@dataclass(frozen=True, slots=True)
class MetadataResponse(Response):
    API_KEY = ApiKey.METADATA
    brokers: list[BrokerInfo]
    controller_id: int
    topics: list[TopicMetadata]
    cluster_id: str = ""
    controller_epoch: int = -1  # the metadata quorum's epoch (Raft term) of controller_id
    region: str = ""  # the answering broker's region.name ("" when it has none)


@dataclass(frozen=True, slots=True)
class MetadataRequest(Request):
    """``topics=None`` asks for every topic; ``[]`` for brokers only."""

    API_KEY = ApiKey.METADATA
    RESPONSE = MetadataResponse
    topics: list[str] | None = None
    allow_auto_topic_creation: bool = False


# ---------------------------------------------------------------- CreateTopics / DeleteTopics


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatableTopicResult:
    name: str
    error_code: int
    error_message: str = ""
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse(Response):
    API_KEY = ApiKey.CREATE_TOPICS
    topics: list[CreatableTopicResult]


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest(Request):
    API_KEY = ApiKey.CREATE_TOPICS
    RESPONSE = CreateTopicsResponse
    topics: list[CreatableTopic]
    timeout_ms: int = 30_000
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class DeletableTopicResult:
    name: str
    error_code: int
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse(Response):
    API_KEY = ApiKey.DELETE_TOPICS
    topics: list[DeletableTopicResult]


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest(Request):
    API_KEY = ApiKey.DELETE_TOPICS
    RESPONSE = DeleteTopicsResponse
    topic_names: list[str]
    timeout_ms: int = 30_000


# ---------------------------------------------------------------- CreatePartitions


@dataclass(frozen=True, slots=True)
class CreatePartitionsAssignment:
    """The replicas of one new partition, leader first (Kafka's manual assignment)."""

    broker_ids: list[int]


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    name: str
    count: int  # the new total number of partitions, not the number added
    assignments: list[CreatePartitionsAssignment] | None = None  # None: the controller places them


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopicResult:
    name: str
    error_code: int
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse(Response):
    API_KEY = ApiKey.CREATE_PARTITIONS
    results: list[CreatePartitionsTopicResult]


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest(Request):
    """Grow topics to ``count`` partitions each; partitions are never removed."""

    API_KEY = ApiKey.CREATE_PARTITIONS
    RESPONSE = CreatePartitionsResponse
    topics: list[CreatePartitionsTopic]
    timeout_ms: int = 30_000
    validate_only: bool = False


# ---------------------------------------------------------------- DescribeConfigs / AlterConfigs


class ConfigResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


@dataclass(frozen=True, slots=True)
class ConfigResource:
    resource_type: int  # ConfigResourceType
    resource_name: str
    config_names: list[str] | None = None  # None: all


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    is_default: bool
    read_only: bool = False
    documentation: str = ""


@dataclass(frozen=True, slots=True)
class DescribeConfigsResult:
    resource_type: int
    resource_name: str
    error_code: int
    error_message: str = ""
    configs: list[ConfigEntry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_CONFIGS
    results: list[DescribeConfigsResult]


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest(Request):
    API_KEY = ApiKey.DESCRIBE_CONFIGS
    RESPONSE = DescribeConfigsResponse
    resources: list[ConfigResource]


class AlterConfigOp(IntEnum):
    SET = 0
    DELETE = 1  # back to the default


@dataclass(frozen=True, slots=True)
class AlterableConfig:
    name: str
    op: int  # AlterConfigOp
    value: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: int
    resource_name: str
    configs: list[AlterableConfig]


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource_type: int
    resource_name: str
    error_code: int
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class AlterConfigsResponse(Response):
    API_KEY = ApiKey.ALTER_CONFIGS
    results: list[AlterConfigsResult]


@dataclass(frozen=True, slots=True)
class AlterConfigsRequest(Request):
    """Incremental (Kafka's IncrementalAlterConfigs): only the named keys change."""

    API_KEY = ApiKey.ALTER_CONFIGS
    RESPONSE = AlterConfigsResponse
    resources: list[AlterConfigsResource]
    validate_only: bool = False


# ---------------------------------------------------------------- Produce


@dataclass(frozen=True, slots=True)
class ProducePartitionData:
    partition: int
    records: Records  # one or more record batches, concatenated


@dataclass(frozen=True, slots=True)
class ProduceTopicData:
    name: str
    partitions: list[ProducePartitionData]


@dataclass(frozen=True, slots=True)
class ProducePartitionResponse:
    partition: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class ProduceTopicResponse:
    name: str
    partitions: list[ProducePartitionResponse]


@dataclass(frozen=True, slots=True)
class ProduceResponse(Response):
    API_KEY = ApiKey.PRODUCE
    topics: list[ProduceTopicResponse]
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class ProduceRequest(Request):
    """acks: 0 (no response is sent), 1 (leader appended), -1 (all in-sync replicas)."""

    API_KEY = ApiKey.PRODUCE
    RESPONSE = ProduceResponse
    acks: int
    timeout_ms: int
    topics: list[ProduceTopicData]
    transactional_id: str | None = None


# ---------------------------------------------------------------- Fetch


class IsolationLevel(IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


@dataclass(frozen=True, slots=True)
class FetchPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1024 * 1024
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchTopic:
    name: str
    partitions: list[FetchPartition]


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """In a read_committed fetch answer: ``producer_id``'s transactional records from
    ``first_offset`` up to its ABORT marker are to be dropped."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    partition: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Records = b""
    error_message: str = ""
    diverging_epoch: int = -1  # set (with no records) when the follower's log diverged
    diverging_end_offset: int = -1  # end offset of diverging_epoch on the leader
    aborted_transactions: list[AbortedTransaction] | None = None  # read_committed only


@dataclass(frozen=True, slots=True)
class FetchTopicResponse:
    name: str
    partitions: list[FetchPartitionResponse]


@dataclass(frozen=True, slots=True)
class FetchResponse(Response):
    API_KEY = ApiKey.FETCH
    topics: list[FetchTopicResponse]
    error_code: int = 0
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class FetchRequest(Request):
    """Long-poll: the broker answers when ``min_bytes`` are available or after
    ``max_wait_ms``. ``replica_id`` is -1 for consumers, a broker id for followers;
    a follower also sends ``replica_epoch``, its broker epoch (KIP-903), so the leader
    never counts a restarted broker's old incarnation towards the ISR."""

    API_KEY = ApiKey.FETCH
    RESPONSE = FetchResponse
    topics: list[FetchTopic]
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 50 * 1024 * 1024
    isolation_level: int = 0
    replica_id: int = -1
    replica_epoch: int = -1  # the follower's broker epoch; -1 for consumers


# ---------------------------------------------------------------- ListOffsets


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    partition: int
    timestamp: int  # -1 latest, -2 earliest, else the first offset with timestamp >= this
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsTopic:
    name: str
    partitions: list[ListOffsetsPartition]


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResponse:
    partition: int
    error_code: int
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsTopicResponse:
    name: str
    partitions: list[ListOffsetsPartitionResponse]


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse(Response):
    API_KEY = ApiKey.LIST_OFFSETS
    topics: list[ListOffsetsTopicResponse]


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest(Request):
    API_KEY = ApiKey.LIST_OFFSETS
    RESPONSE = ListOffsetsResponse
    topics: list[ListOffsetsTopic]
    isolation_level: int = 0
    replica_id: int = -1


# ---------------------------------------------------------------- DeleteRecords


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartition:
    partition: int
    offset: int  # new log start offset; -1 means the high watermark


@dataclass(frozen=True, slots=True)
class DeleteRecordsTopic:
    name: str
    partitions: list[DeleteRecordsPartition]


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartitionResult:
    partition: int
    error_code: int
    low_watermark: int = -1


@dataclass(frozen=True, slots=True)
class DeleteRecordsTopicResult:
    name: str
    partitions: list[DeleteRecordsPartitionResult]


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse(Response):
    API_KEY = ApiKey.DELETE_RECORDS
    topics: list[DeleteRecordsTopicResult]


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest(Request):
    API_KEY = ApiKey.DELETE_RECORDS
    RESPONSE = DeleteRecordsResponse
    topics: list[DeleteRecordsTopic]
    timeout_ms: int = 30_000


# ---------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ErrorResponse(Response):
    """Sent instead of a response when the request could not be decoded or its API
    or version is unknown. Carries the correlation id when it could be read."""

    error_code: int
    error_message: str = ""
