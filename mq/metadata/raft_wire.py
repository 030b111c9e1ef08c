"""Raft messages on the wire: the payload of an ``inter_broker.RaftRequest``.

Each message is a msgpack list ``[tag, field, field, ...]`` in the dataclass's field
order (packed by ``mq.protocol.frame``, the only home of msgpack). Decoding is strict:
the tag, the number of fields and every field's type are checked, integers must fit in
a signed 64-bit, error codes must be known, and the whole payload is bounded, so a
malformed or hostile payload raises ``ProtocolError`` and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from mq.core.errors import ErrorCode
from mq.core.types import OffsetAndEpoch
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import pack_header, unpack_header
from mq.raft.log import LogEntry, Snapshot
from mq.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RaftMessage,
    VoteRequest,
    VoteResponse,
)

MAX_RAFT_MESSAGE_BYTES = 128 * 1024 * 1024
"""Above ``socket.request.max.bytes`` (100 MiB), so the frame limit binds first."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_TAGS: dict[type, int] = {
    VoteRequest: 1, VoteResponse: 2, BeginQuorumEpochRequest: 3, BeginQuorumEpochResponse: 4,
    FetchRequest: 5, FetchResponse: 6, FetchSnapshotRequest: 7, FetchSnapshotResponse: 8,
}
_BY_TAG = {tag: cls for cls, tag in _TAGS.items()}

Check = Callable[[object], object]


def _bad(what: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_REQUEST, f"malformed raft message: {what}")


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not INT64_MIN <= value <= INT64_MAX:
        raise _bad(f"expected an int64, got {type(value).__name__}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _bad(f"expected a bool, got {type(value).__name__}")
    return value


def _bytes(value: object) -> bytes:
    if not isinstance(value, bytes):
        raise _bad(f"expected bytes, got {type(value).__name__}")
    return value


def _optional(check: Check) -> Check:
    def inner(value: object) -> object:
        return None if value is None else check(value)
    return inner


def _list(value: object, size: int) -> list[object]:
    if not isinstance(value, list) or len(value) != size:
        raise _bad(f"expected a list of {size}")
    return value


def _error(value: object) -> ErrorCode:
    try:
        return ErrorCode(_int(value))
    except ValueError:
        raise _bad(f"unknown error code {value}") from None


def _offset_and_epoch(value: object) -> OffsetAndEpoch:
    offset, epoch = _list(value, 2)
    return OffsetAndEpoch(_int(offset), _int(epoch))


def _entry(value: object) -> LogEntry:
    offset, epoch, data, control = _list(value, 4)
    return LogEntry(_int(offset), _int(epoch), _bytes(data), _bool(control))


def _entries(value: object) -> tuple[LogEntry, ...]:
    if not isinstance(value, list):
        raise _bad("entries are not a list")
    return tuple(_entry(v) for v in value)


def _snapshot(value: object) -> Snapshot:
    snapshot_id, data = _list(value, 2)
    return Snapshot(_offset_and_epoch(snapshot_id), _bytes(data))


_OPT_INT = _optional(_int)
_SCHEMAS: dict[type, tuple[Check, ...]] = {
    VoteRequest: (_int, _int, _int, _int, _int, _bool),
    VoteResponse: (_int, _int, _int, _bool, _bool, _OPT_INT),
    BeginQuorumEpochRequest: (_int, _int, _int),
    BeginQuorumEpochResponse: (_int, _int, _int, _OPT_INT),
    FetchRequest: (_int, _int, _int, _int, _int, _int),
    FetchResponse: (_int, _int, _int, _OPT_INT, _error, _int, _int, _int, _entries,
                    _optional(_offset_and_epoch), _optional(_offset_and_epoch)),
    FetchSnapshotRequest: (_int, _int, _int, _offset_and_epoch),
    FetchSnapshotResponse: (_int, _int, _int, _OPT_INT, _error, _optional(_snapshot)),
}
_FIELDS: dict[type, tuple[str, ...]] = {cls: tuple(f.name for f in fields(cls)) for cls in _TAGS}
assert all(len(_SCHEMAS[cls]) == len(_FIELDS[cls]) for cls in _TAGS)


def _wire(value: object) -> object:
    """Nested values as msgpack-native lists and ints."""
    if isinstance(value, LogEntry):
        return [value.offset, value.epoch, value.data, value.control]
    if isinstance(value, OffsetAndEpoch):
        return [value.offset, value.leader_epoch]
    if isinstance(value, Snapshot):
        return [_wire(value.snapshot_id), value.data]
    if isinstance(value, tuple):
        return [_wire(v) for v in value]
    if isinstance(value, ErrorCode):
        return int(value)
    return value


def encode_raft_message(msg: RaftMessage) -> bytes:
    tag = _TAGS.get(type(msg))
    if tag is None:
        raise TypeError(f"not a raft message: {type(msg).__name__}")
    return pack_header([tag, *(_wire(getattr(msg, name)) for name in _FIELDS[type(msg)])])


def decode_raft_message(data: bytes | memoryview, *, max_bytes: int = MAX_RAFT_MESSAGE_BYTES) -> RaftMessage:
    """Inverse of ``encode_raft_message``; any malformation raises ProtocolError."""
    if len(data) > max_bytes:
        raise _bad(f"{len(data)} bytes exceeds {max_bytes}")
    items = unpack_header(data)
    if not isinstance(items, list) or not items:
        raise _bad("not a non-empty list")
    cls = _BY_TAG.get(items[0]) if isinstance(items[0], int) and not isinstance(items[0], bool) else None
    if cls is None:
        raise _bad(f"unknown tag {items[0]!r}")
    schema = _SCHEMAS[cls]
    if len(items) != len(schema) + 1:
        raise _bad(f"{cls.__name__} has {len(schema)} fields, got {len(items) - 1}")
    message: RaftMessage = cls(*(check(v) for check, v in zip(schema, items[1:], strict=True)))
    return message
