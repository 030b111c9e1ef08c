"""Requests of transactional producers (KIP-98) and of the transaction coordinator.

A transactional producer finds its coordinator with FindCoordinator ``key_type`` 1
(the leader of partition ``abs(hash(transactional_id)) % n`` of
``__transaction_state``), gets its producer id and epoch with InitProducerId
(``transactional_id`` set), names each partition before writing to it
(AddPartitionsToTxn), names the group whose offsets it will commit
(AddOffsetsToTxn), commits those offsets through the group coordinator
(TxnOffsetCommit, with the consumer's generation and member id: KIP-447), and ends
the transaction with EndTxn. The coordinator then has each partition leader append
the marker (WriteTxnMarkers, broker to broker).
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.protocol.messages import ApiKey, Request, Response


@dataclass(frozen=True, slots=True)
class TxnTopic:
    name: str
    partitions: list[int]


@dataclass(frozen=True, slots=True)
class TxnPartitionResult:
    partition: int
    error_code: int


@dataclass(frozen=True, slots=True)
class TxnTopicResult:
    name: str
    partitions: list[TxnPartitionResult]


# ---------------------------------------------------------------- AddPartitionsToTxn


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnResponse(Response):
    API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
    results: list[TxnTopicResult]
    error_message: str = ""
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnRequest(Request):
    API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
    RESPONSE = AddPartitionsToTxnResponse
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: list[TxnTopic]


# ---------------------------------------------------------------- AddOffsetsToTxn


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnResponse(Response):
    API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
    error_code: int = 0
    error_message: str = ""
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnRequest(Request):
    API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
    RESPONSE = AddOffsetsToTxnResponse
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


# ---------------------------------------------------------------- EndTxn


@dataclass(frozen=True, slots=True)
class EndTxnResponse(Response):
    """``producer_epoch``: the epoch for the producer's next transaction (KIP-890)."""

    API_KEY = ApiKey.END_TXN
    error_code: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    error_message: str = ""
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class EndTxnRequest(Request):
    API_KEY = ApiKey.END_TXN
    RESPONSE = EndTxnResponse
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


# ---------------------------------------------------------------- TxnOffsetCommit


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitPartition:
    partition: int
    committed_offset: int
    committed_leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitTopic:
    name: str
    partitions: list[TxnOffsetCommitPartition]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResponse(Response):
    API_KEY = ApiKey.TXN_OFFSET_COMMIT
    results: list[TxnTopicResult]
    error_message: str = ""
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest(Request):
    """Offsets committed by a transaction, sent to the *group* coordinator; visible
    only once the transaction commits. ``generation_id``/``member_id`` (KIP-447) fence
    a producer whose consumer lost its partitions to a rebalance."""

    API_KEY = ApiKey.TXN_OFFSET_COMMIT
    RESPONSE = TxnOffsetCommitResponse
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: list[TxnOffsetCommitTopic]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


# ---------------------------------------------------------------- WriteTxnMarkers


@dataclass(frozen=True, slots=True)
class WritableTxnMarker:
    producer_id: int
    producer_epoch: int
    committed: bool
    topics: list[TxnTopic]
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class TxnMarkerResult:
    producer_id: int
    topics: list[TxnTopicResult]


@dataclass(frozen=True, slots=True)
class WriteTxnMarkersResponse(Response):
    API_KEY = ApiKey.WRITE_TXN_MARKERS
    markers: list[TxnMarkerResult]


@dataclass(frozen=True, slots=True)
class WriteTxnMarkersRequest(Request):
    """Coordinator to partition leader: append each marker (a control batch) to each
    partition it names, answered once replicated (acks=all)."""

    API_KEY = ApiKey.WRITE_TXN_MARKERS
    RESPONSE = WriteTxnMarkersResponse
    markers: list[WritableTxnMarker]


TXN_CLIENT_REQUESTS: tuple[type[Request], ...] = (
    AddPartitionsToTxnRequest, AddOffsetsToTxnRequest, EndTxnRequest, TxnOffsetCommitRequest,
)
TXN_INTER_BROKER_REQUESTS: tuple[type[Request], ...] = (WriteTxnMarkersRequest,)
