"""The messages brokers and the metadata quorum exchange among themselves.

Replication (OffsetsForLeaderEpoch, AlterPartition), the broker life cycle of KRaft
(BrokerRegistration, BrokerHeartbeat) and mq's one-way ``RaftRequest`` envelope. They
travel on the same connections and frames as client requests (``mq.protocol.apis``
lists them all); clients never send them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.protocol.messages import ApiKey, Request, Response

# ---------------------------------------------------------------- OffsetsForLeaderEpoch


@dataclass(frozen=True, slots=True)
class OffsetForLeaderPartition:
    partition: int
    leader_epoch: int  # the epoch whose end offset is asked for
    current_leader_epoch: int = -1  # the sender's view of the leader's epoch (fencing)


@dataclass(frozen=True, slots=True)
class OffsetForLeaderTopic:
    name: str
    partitions: list[OffsetForLeaderPartition]


@dataclass(frozen=True, slots=True)
class EpochEndOffsetResult:
    partition: int
    error_code: int
    leader_epoch: int = -1  # the largest epoch <= the one asked for that the leader knows
    end_offset: int = -1  # the first offset after that epoch on the leader


@dataclass(frozen=True, slots=True)
class OffsetForLeaderTopicResult:
    name: str
    partitions: list[EpochEndOffsetResult]


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochResponse(Response):
    API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
    topics: list[OffsetForLeaderTopicResult]


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochRequest(Request):
    """Where does epoch E end on the leader? A replica (or a consumer after a leader
    change) truncates to the answer instead of trusting a high watermark (KIP-101,
    KIP-279). Fetch carries the same answer as ``diverging_epoch`` (KIP-320)."""

    API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
    RESPONSE = OffsetsForLeaderEpochResponse
    topics: list[OffsetForLeaderTopic]
    replica_id: int = -1  # a broker id for followers, -1 for consumers


# ---------------------------------------------------------------- AlterPartition


@dataclass(frozen=True, slots=True)
class BrokerState:
    broker_id: int
    broker_epoch: int = -1  # the epoch the broker fetched with (KIP-903)


@dataclass(frozen=True, slots=True)
class AlterPartitionPartition:
    partition_index: int
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int  # the state the proposal is based on; a stale one is refused
    new_isr_with_epochs: list[BrokerState] = field(default_factory=list)
    bump_leader_epoch: bool = False  # mq: a new leader epoch, same leader (MirrorTruncate cut the log)


@dataclass(frozen=True, slots=True)
class AlterPartitionTopic:
    name: str
    partitions: list[AlterPartitionPartition]


@dataclass(frozen=True, slots=True)
class AlterPartitionPartitionResult:
    partition_index: int
    error_code: int  # INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH, INELIGIBLE_REPLICA, ...
    leader_id: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AlterPartitionTopicResult:
    name: str
    partitions: list[AlterPartitionPartitionResult]


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse(Response):
    API_KEY = ApiKey.ALTER_PARTITION
    topics: list[AlterPartitionTopicResult]
    error_code: int = 0  # for the whole request: STALE_BROKER_EPOCH, NOT_CONTROLLER


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest(Request):
    """A partition leader asks the controller to shrink or expand the ISR. The
    controller applies it only if ``leader_epoch`` and ``partition_epoch`` match the
    committed state and the sender's ``broker_epoch`` is its current registration;
    the answer is the committed state either way, so the leader adopts it."""

    API_KEY = ApiKey.ALTER_PARTITION
    RESPONSE = AlterPartitionResponse
    broker_id: int
    broker_epoch: int
    topics: list[AlterPartitionTopic]


# ---------------------------------------------------------------- broker lifecycle (KRaft)


@dataclass(frozen=True, slots=True)
class BrokerListener:
    host: str
    port: int
    name: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResponse(Response):
    API_KEY = ApiKey.BROKER_REGISTRATION
    error_code: int
    broker_epoch: int = -1  # fences every request of an older incarnation


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest(Request):
    """A starting broker registers with the controller. A new ``incarnation_id`` (one
    per process start) gets a new ``broker_epoch``; the broker starts fenced and is
    unfenced once its heartbeats show it caught up with the metadata log."""

    API_KEY = ApiKey.BROKER_REGISTRATION
    RESPONSE = BrokerRegistrationResponse
    broker_id: int
    incarnation_id: str
    listeners: list[BrokerListener]
    rack: str | None = None
    cluster_id: str = ""


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse(Response):
    API_KEY = ApiKey.BROKER_HEARTBEAT
    error_code: int
    is_caught_up: bool = False  # the broker's metadata offset reached the controller's
    is_fenced: bool = True  # a fenced broker leads nothing and is in no ISR
    should_shutdown: bool = False  # controlled shutdown done: the broker may exit


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest(Request):
    """Sent every ``broker.heartbeat.interval.ms``; a broker silent for
    ``broker.session.timeout.ms`` is fenced. ``want_shutdown`` is KRaft's controlled
    shutdown (Kafka's old ControlledShutdown API): the controller moves leadership off
    the broker and answers ``should_shutdown`` once none is left."""

    API_KEY = ApiKey.BROKER_HEARTBEAT
    RESPONSE = BrokerHeartbeatResponse
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int = -1  # the broker's applied metadata log offset
    want_fence: bool = False
    want_shutdown: bool = False


# ---------------------------------------------------------------- Raft


@dataclass(frozen=True, slots=True)
class RaftResponse(Response):
    """Never sent: ``RaftRequest`` is one way. Declared so the codec's request/response
    pairing holds for every API."""

    API_KEY = ApiKey.RAFT
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class RaftRequest(Request):
    """One Raft message (vote, begin-epoch, fetch, snapshot, or their answers) between
    metadata quorum voters, encoded by ``mq.metadata.raft_wire``. One way: the receiver
    never answers the frame; Raft's reply is a ``RaftRequest`` in the other direction."""

    API_KEY = ApiKey.RAFT
    RESPONSE = RaftResponse
    payload: bytes

