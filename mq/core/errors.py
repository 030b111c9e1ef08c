"""Named error codes, each marked retriable or not.

Codes keep Kafka's numbers where Kafka has the same error, so a reader can look
them up in Kafka's protocol guide; mq-only errors use numbers from 1000 up (those of
mirror topics, ``mq.broker.mirror``, from 1100; those of conflict policies, ``mq.core.conflict``,
from 1200; those of share groups, ``mq.coordinator.share_coordinator``, from 1300).
Errors are values: a response carries an ``ErrorCode``; a client turns a non-zero
code into an ``MqError`` with ``error.code.retriable`` telling it whether to retry.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    retriable: bool
    description: str

    def __new__(cls, value: int, retriable: bool = False, description: str = "") -> "ErrorCode":
        obj = int.__new__(cls, value)
        obj._value_ = value
        obj.retriable = retriable
        obj.description = description
        return obj

    UNKNOWN_SERVER_ERROR = (-1, False, "The server hit an unexpected condition; see its log.")
    NONE = (0, False, "No error.")
    OFFSET_OUT_OF_RANGE = (1, False, "The requested offset is outside the log's range.")
    CORRUPT_MESSAGE = (2, True, "A record batch failed its CRC or is malformed.")
    UNKNOWN_TOPIC = (3, True, "This server does not host this topic-partition.")
    INVALID_FETCH_SIZE = (4, False, "The requested fetch size is invalid.")
    LEADER_NOT_AVAILABLE = (5, True, "The partition has no leader right now (election in progress).")
    NOT_LEADER = (6, True, "This broker is not the leader of the partition; refresh metadata.")
    REQUEST_TIMED_OUT = (7, True, "The request timed out on the server.")
    BROKER_NOT_AVAILABLE = (8, True, "The broker is not available.")
    RECORD_TOO_LARGE = (10, False, "The batch is larger than max.message.bytes.")
    NETWORK_EXCEPTION = (13, True, "The connection was closed before a response arrived.")
    OFFSET_METADATA_TOO_LARGE = (12, False, "The commit's metadata string is longer than offset.metadata.max.bytes.")
    COORDINATOR_LOAD_IN_PROGRESS = (14, True, "The coordinator is loading the group's state; retry shortly.")
    COORDINATOR_NOT_AVAILABLE = (15, True, "The coordinator is not available.")
    NOT_COORDINATOR = (16, True, "This broker is not the coordinator for the group.")
    INVALID_TOPIC = (17, False, "The topic name is invalid.")
    RECORD_LIST_TOO_LARGE = (18, False, "The request's record batches exceed the size limit.")
    NOT_ENOUGH_REPLICAS = (19, True, "Fewer in-sync replicas than min.insync.replicas.")
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = (20, True, "Appended, but the ISR shrank below the minimum.")
    INVALID_REQUIRED_ACKS = (21, False, "acks must be 0, 1 or -1 (all).")
    ILLEGAL_GENERATION = (22, False, "The generation id is not current.")
    INCONSISTENT_GROUP_PROTOCOL = (23, False, "The member's protocol type or assignors match none of the group's.")
    INVALID_GROUP_ID = (24, False, "The group id is empty or too long.")
    UNKNOWN_MEMBER_ID = (25, False, "The member id is not known to the coordinator.")
    INVALID_SESSION_TIMEOUT = (26, False, "The session timeout is outside group.min/max.session.timeout.ms.")
    REBALANCE_IN_PROGRESS = (27, False, "The group is rebalancing; rejoin.")
    INVALID_COMMIT_OFFSET_SIZE = (28, False, "The committed offset is negative or the commit is too large.")
    UNAUTHORIZED = (29, False, "The principal is not authorized for this operation.")
    INVALID_TIMESTAMP = (32, False, "A record timestamp is out of the accepted range.")
    UNSUPPORTED_VERSION = (35, False, "The API version is not supported by this broker.")
    TOPIC_ALREADY_EXISTS = (36, False, "The topic already exists.")
    INVALID_PARTITIONS = (37, False, "The number of partitions is invalid.")
    INVALID_REPLICATION_FACTOR = (38, False, "The replication factor is invalid.")
    INVALID_REPLICA_ASSIGNMENT = (39, False, "The replica assignment is invalid.")
    INVALID_CONFIG = (40, False, "A configuration value is invalid.")
    NOT_CONTROLLER = (41, True, "This broker is not the active controller, or the quorum is electing one.")
    INVALID_REQUEST = (42, False, "The request is malformed.")
    POLICY_VIOLATION = (44, False, "The request violates a configured policy.")
    OUT_OF_ORDER_SEQUENCE_NUMBER = (45, False, "The batch's sequence does not continue the producer's last on this partition (a gap, or a new epoch not starting at 0).")
    INVALID_PRODUCER_EPOCH = (47, False, "The producer epoch is older than the partition's current epoch for this producer id: a newer instance exists.")
    INVALID_TXN_STATE = (48, False, "The request is not legal in the transaction's current state (e.g. EndTxn with no transaction open).")
    INVALID_PRODUCER_ID_MAPPING = (49, False, "The producer id is not the one the coordinator holds for this transactional id; call init_transactions.")
    INVALID_TRANSACTION_TIMEOUT = (50, False, "transaction.timeout.ms is not positive or exceeds transaction.max.timeout.ms.")
    CONCURRENT_TRANSACTIONS = (51, True, "The previous transaction of this transactional id is still completing; retry shortly.")
    TRANSACTION_COORDINATOR_FENCED = (52, False, "A newer transaction coordinator wrote this transaction's markers.")
    KAFKA_STORAGE_ERROR = (56, True, "The broker could not read or write its log directory.")
    UNKNOWN_PRODUCER_ID = (59, False, "The partition holds no state for this producer id (expired or never written) and the batch does not start at sequence 0.")
    NON_EMPTY_GROUP = (68, False, "The group has active members.")
    GROUP_ID_NOT_FOUND = (69, False, "The group does not exist.")
    FENCED_LEADER_EPOCH = (74, True, "The leader epoch in the request is older than the broker's.")
    UNKNOWN_LEADER_EPOCH = (75, True, "The leader epoch in the request is newer than the broker's.")
    UNSUPPORTED_COMPRESSION_TYPE = (76, False, "The compression codec is not supported.")
    STALE_BROKER_EPOCH = (77, False, "The broker epoch is not the broker's current registration.")
    MEMBER_ID_REQUIRED = (79, False, "The member must rejoin with the member id in this response (KIP-394).")
    GROUP_MAX_SIZE_REACHED = (81, False, "The group already has group.max.size members.")
    FENCED_INSTANCE_ID = (82, False, "Another member joined with this group.instance.id; this one is fenced.")
    UNSTABLE_OFFSET_COMMIT = (88, True, "A transaction that commits offsets of this group is completing; retry shortly.")
    INVALID_RECORD = (87, False, "A record failed validation.")
    INVALID_UPDATE_VERSION = (95, False, "The partition epoch in AlterPartition is not current.")
    PRODUCER_FENCED = (90, False, "A newer instance of this producer (same transactional id) has fenced this one.")
    FENCED_MEMBER_EPOCH = (110, False, "The member epoch is not the member's current one: heartbeat again (epoch 0 rejoins).")
    INVALID_RECORD_STATE = (121, False, "The acknowledged record is not acquired by this member (never handed out, already acknowledged, or its lock expired).")
    TRANSACTIONAL_ID_NOT_FOUND = (105, False, "The coordinator holds no transactional id of that name; call init_transactions first.")
    INELIGIBLE_REPLICA = (107, False, "The proposed ISR holds a fenced, shut-down or restarted broker.")
    THROTTLED = (1000, True, "A quota was exceeded; back off and retry.")
    UNSUPPORTED_API = (1001, False, "The API key is not known to this broker.")
    FRAME_TOO_LARGE = (1002, False, "The frame exceeds the size limit.")
    BUFFER_EXHAUSTED = (1003, True, "The producer buffer stayed full for max_block_ms.")
    DELIVERY_TIMEOUT = (1004, False, "A record was not acknowledged within delivery_timeout_ms.")
    NOT_MIRROR_TOPIC = (1100, False, "MirrorAppend and MirrorTruncate need a mirror topic (mirror.source.region set).")
    MIRROR_TOPIC_READ_ONLY = (1101, False, "The topic is a mirror of another region: produce there, or promote it.")
    MIRROR_DIVERGED = (1102, False, "The mirror topic holds a different batch at these offsets than the source.")
    MIRROR_OFFSET_GAP = (1103, False, "The batch (or the fetch offset) is past the mirror topic's log end; records in between are missing.")
    NOT_HOME_REGION = (1200, False, "The topic's conflict.policy is home-region and the record's key lives in another region: produce there.")
    INVALID_HLC = (1201, False, "The topic's conflict.policy is last-writer-wins and a keyed record's mq.hlc header is missing or malformed.")
    SHARE_PARTITION_NOT_HOSTED = (1300, True, "The share coordinator holds no replica of the partition, so it cannot hand out its records.")


class MqError(Exception):
    """An error with a code: raised by clients, carried as a value in responses."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = ErrorCode(code)
        self.message = message or self.code.description
        super().__init__(f"{self.code.name}: {self.message}")

    @property
    def retriable(self) -> bool:
        return self.code.retriable


def raise_for(code: int, message: str = "") -> None:
    """Raise ``MqError`` unless ``code`` is ``NONE``."""
    if code != ErrorCode.NONE:
        raise MqError(ErrorCode(code), message)
