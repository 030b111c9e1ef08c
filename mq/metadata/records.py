"""Metadata records: the only way cluster metadata changes.

The controller answers an admin request with a list of these records; the records
are appended to the metadata log (``__cluster_metadata-0``) and only replaying them
changes the ``MetadataImage``. This mirrors KRaft's record types (TopicRecord,
PartitionRecord, ConfigRecord, RemoveTopicRecord) so the next issue can replicate the
same log with Raft.

With Raft, one log entry's payload is ``encode_records(records)``: a msgpack list of
``[type name, fields]`` (the records one controller decision produced, applied atomically).

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


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """A broker (re)registered. ``broker_epoch`` is the metadata offset of this record,
    so a restarted broker (new ``incarnation_id``) always gets a higher one. A
    registered broker starts fenced."""

    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    """The broker (at this registration) leads nothing and joins no ISR until unfenced."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    broker_id: int
    broker_epoch: int


NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A partition's full new leader and ISR state (its replicas are unchanged)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int


MetadataRecord = (
    TopicRecord | PartitionRecord | ConfigRecord | RemoveTopicRecord | RegisterBrokerRecord
    | FenceBrokerRecord | UnfenceBrokerRecord | PartitionChangeRecord
)

_TYPES: dict[str, type] = {
    cls.__name__: cls for cls in (
        TopicRecord, PartitionRecord, ConfigRecord, RemoveTopicRecord, RegisterBrokerRecord,
        FenceBrokerRecord, UnfenceBrokerRecord, PartitionChangeRecord,
    )
}
# Field kinds, checked on decode so a corrupt record never builds a half-typed image.
_INT, _STR, _OPT_STR, _INTS = "int", "str", "str?", "ints"
_SCHEMAS: dict[str, dict[str, str]] = {
    "TopicRecord": {"name": _STR, "topic_id": _STR},
    "PartitionRecord": {"topic": _STR, "partition": _INT, "replicas": _INTS, "leader": _INT,
                        "leader_epoch": _INT, "isr": _INTS, "partition_epoch": _INT},
    "ConfigRecord": {"topic": _STR, "name": _STR, "value": _OPT_STR},
    "RemoveTopicRecord": {"name": _STR, "topic_id": _STR},
    "RegisterBrokerRecord": {"broker_id": _INT, "broker_epoch": _INT, "incarnation_id": _STR,
                             "host": _STR, "port": _INT, "rack": _OPT_STR},
    "FenceBrokerRecord": {"broker_id": _INT, "broker_epoch": _INT},
    "UnfenceBrokerRecord": {"broker_id": _INT, "broker_epoch": _INT},
    "PartitionChangeRecord": {"topic": _STR, "partition": _INT, "leader": _INT,
                              "leader_epoch": _INT, "isr": _INTS, "partition_epoch": _INT},
}
MAX_RECORDS_PER_ENTRY = 1_000_000


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_field(name: str, kind: str, value: object) -> object:
    if kind == _INT and _is_int(value):
        return value
    if kind == _STR and isinstance(value, str):
        return value
    if kind == _OPT_STR and (value is None or isinstance(value, str)):
        return value
    if kind == _INTS and isinstance(value, list | tuple) and all(_is_int(v) for v in value):
        return tuple(value)
    raise TypeError(f"field {name!r} has a {type(value).__name__}, expected {kind}")


def _build(type_name: str, fields_: object) -> MetadataRecord:
    """A record from its type name and field map; TypeError/KeyError when malformed."""
    cls = _TYPES[type_name]
    if not isinstance(fields_, dict):
        raise TypeError("fields are not a map")
    schema = _SCHEMAS[type_name]
    unknown = sorted(str(k) for k in fields_ if k not in schema)
    if unknown:
        raise TypeError(f"unknown fields {unknown}")
    checked = {k: _check_field(k, schema[k], v) for k, v in fields_.items()}
    record: MetadataRecord = cls(**checked)
    return record


def encode_record(record: MetadataRecord) -> tuple[bytes, bytes]:
    """(key, value) of one metadata record."""
    return type(record).__name__.encode("ascii"), pack_header(asdict(record))


def decode_record(key: bytes | None, value: bytes | None) -> MetadataRecord:
    """Inverse of ``encode_record``; a record that does not parse is a corrupt log."""
    try:
        return _build((key or b"").decode("ascii"), unpack_header(value or b""))
    except (KeyError, ValueError, TypeError, UnicodeDecodeError, ProtocolError) as exc:
        raise MqError(ErrorCode.CORRUPT_MESSAGE, f"unreadable metadata record {key!r}: {exc}") from None


def encode_records(records: Iterable[MetadataRecord]) -> bytes:
    """The payload of one Raft entry: a msgpack list of ``[type name, fields]``."""
    return pack_header([[type(r).__name__, asdict(r)] for r in records])


def decode_records(data: bytes | memoryview) -> list[MetadataRecord]:
    """Inverse of ``encode_records``; anything malformed → MqError(CORRUPT_MESSAGE)."""
    try:
        items = unpack_header(data)
        if not isinstance(items, list):
            raise TypeError("payload is not a list")
        if len(items) > MAX_RECORDS_PER_ENTRY:
            raise ValueError(f"{len(items)} records in one entry")
        out = []
        for item in items:
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
                raise TypeError("a record is not [type name, fields]")
            out.append(_build(item[0], item[1]))
        return out
    except (KeyError, ValueError, TypeError, ProtocolError) as exc:
        raise MqError(ErrorCode.CORRUPT_MESSAGE, f"unreadable metadata entry: {exc}") from None


def encode_batch(records: Iterable[MetadataRecord], *, now_ms: int) -> bytes:
    """One record batch holding ``records`` in order (appended atomically)."""
    return build_batch((*encode_record(r), (), now_ms) for r in records)


def decode_batches(buf: bytes | memoryview) -> list[MetadataRecord]:
    """Every metadata record in ``buf`` (whole batches, as read from the log)."""
    return [decode_record(r.key, r.value) for r in iter_records(buf)]
