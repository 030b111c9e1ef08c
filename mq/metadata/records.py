"""Metadata records: the only way cluster metadata changes.

The controller answers an admin request with a list of these records; the records
are appended to the metadata log (``__cluster_metadata-0``) and only replaying them
changes the ``MetadataImage``. This mirrors KRaft's record types (TopicRecord,
PartitionRecord, ConfigRecord, RemoveTopicRecord) so the next issue can replicate the
same log with Raft.

On disk each record is one record of an ordinary record batch (ARCHITECTURE.md
"Record batch"): key = the record type's name (ASCII), value = a msgpack map of its
fields, packed by ``mq.protocol`` (the only home of msgpack). The type name in the key
keeps ``mq dump-log`` of the metadata log readable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from mq.core.errors import ErrorCode, MqError
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import pack_header, unpack_header
from mq.protocol.record_batch import build_batch, iter_records

METADATA_TOPIC = "__cluster_metadata"


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: str


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """A partition's assignment; a later record for the same partition replaces it
    (the next issue's PartitionChangeRecord moves leader and ISR)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """Sets (``value`` a string) or removes (``value`` None) one topic-level override."""

    topic: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    name: str
    topic_id: str = field(default="")


MetadataRecord = TopicRecord | PartitionRecord | ConfigRecord | RemoveTopicRecord

_TYPES: dict[str, type] = {
    cls.__name__: cls for cls in (TopicRecord, PartitionRecord, ConfigRecord, RemoveTopicRecord)
}
_TUPLE_FIELDS = {"replicas", "isr"}


def encode_record(record: MetadataRecord) -> tuple[bytes, bytes]:
    """(key, value) of one metadata record."""
    return type(record).__name__.encode("ascii"), pack_header(asdict(record))


def decode_record(key: bytes | None, value: bytes | None) -> MetadataRecord:
    """Inverse of ``encode_record``; a record that does not parse is a corrupt log."""
    try:
        cls = _TYPES[(key or b"").decode("ascii")]
        fields_ = unpack_header(value or b"")
        if not isinstance(fields_, dict):
            raise TypeError("value is not a map")
        for name in _TUPLE_FIELDS & fields_.keys():
            fields_[name] = tuple(fields_[name])
        return cls(**fields_)
    except (KeyError, ValueError, TypeError, UnicodeDecodeError, ProtocolError) as exc:
        raise MqError(ErrorCode.CORRUPT_MESSAGE, f"unreadable metadata record {key!r}: {exc}") from None


def encode_batch(records: Iterable[MetadataRecord], *, now_ms: int) -> bytes:
    """One record batch holding ``records`` in order (appended atomically)."""
    return build_batch((*encode_record(r), (), now_ms) for r in records)


def decode_batches(buf: bytes | memoryview) -> list[MetadataRecord]:
    """Every metadata record in ``buf`` (whole batches, as read from the log)."""
    return [decode_record(r.key, r.value) for r in iter_records(buf)]
