"""The vocabulary shared by every layer: partitions, offsets, epochs."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

# ListOffsets special timestamps (Kafka's values).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """What a producer learns when a record is acknowledged."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class Acks(IntEnum):
    NONE = 0
    LEADER = 1
    ALL = -1


class CompressionType(IntEnum):
    """Codec ids stored in the low 3 bits of a batch's attributes (Kafka's ids)."""

    NONE = 0
    GZIP = 1
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: "str | int | CompressionType | None") -> "CompressionType":
        if name is None:
            return cls.NONE
        if isinstance(name, int):
            return cls(name)
        return cls[name.upper()]


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class CleanupPolicy(str, Enum):
    DELETE = "delete"
    COMPACT = "compact"
    COMPACT_DELETE = "compact,delete"


class FlushPolicy(str, Enum):
    """When a broker fsyncs: ``replicated`` leaves durability to replication (Kafka's
    default); ``always`` group-commits an fsync before acknowledging (Redpanda's)."""

    REPLICATED = "replicated"
    ALWAYS = "always"
