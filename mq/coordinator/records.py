"""Records of ``__consumer_offsets``: the only way group state changes.

A coordinator handles a request by returning ``CoordinatorRecord``s (appended to its
partition of ``__consumer_offsets`` in one batch) and replays them; a coordinator that
loads a partition replays every record in offset order. Layout, as in Kafka (a
compacted topic: the key says *what*, the latest value per key wins, a tombstone
deletes it), both sides msgpack (packed by ``mq.protocol``)::

    OffsetCommit   key [1, group, topic, partition]
                   value {offset, leader_epoch, metadata, commit_timestamp_ms}
    GroupMetadata  key [2, group]
                   value {protocol_type, generation, assignor, leader, state_ts, members: [
                          {member_id, group_instance_id, client_id, client_host,
                           session_timeout_ms, rebalance_timeout_ms, topics, pattern,
                           assignors, assignment: [[topic, [partition, ...]], ...]}]}

A value of ``None`` is a tombstone: the offset (or the group) is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import pack_header, unpack_header

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_COMMIT_KEY = 1
GROUP_METADATA_KEY = 2


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit signed)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def group_partition(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's
    ``Utils.abs(groupId.hashCode) % n`` (``abs(MIN_VALUE)`` is 0 there)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    key: bytes
    value: bytes | None  # None: tombstone


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    pattern: str | None
    assignors: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    assignor: str
    leader: str
    state_ts: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    tp: TopicPartition


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


# ------------------------------------------------------------------ encoding


def offset_commit_record(group_id: str, tp: TopicPartition, value: OffsetCommitValue | None
                         ) -> CoordinatorRecord:
    key = pack_header([OFFSET_COMMIT_KEY, group_id, tp.topic, tp.partition])
    if value is None:
        return CoordinatorRecord(key, None)
    return CoordinatorRecord(key, pack_header({
        "offset": value.offset, "leader_epoch": value.leader_epoch, "metadata": value.metadata,
        "commit_timestamp_ms": value.commit_timestamp_ms,
    }))


def _assignment_to_wire(assignment: tuple[TopicPartition, ...]) -> list[list[object]]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(assignment):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [[topic, parts] for topic, parts in by_topic.items()]


def group_metadata_record(group_id: str, value: GroupMetadataValue | None) -> CoordinatorRecord:
    key = pack_header([GROUP_METADATA_KEY, group_id])
    if value is None:
        return CoordinatorRecord(key, None)
    members = [{
        "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
        "client_host": m.client_host, "session_timeout_ms": m.session_timeout_ms,
        "rebalance_timeout_ms": m.rebalance_timeout_ms, "topics": list(m.topics), "pattern": m.pattern,
        "assignors": list(m.assignors), "assignment": _assignment_to_wire(m.assignment),
    } for m in value.members]
    return CoordinatorRecord(key, pack_header({
        "protocol_type": value.protocol_type, "generation": value.generation, "assignor": value.assignor,
        "leader": value.leader, "state_ts": value.state_ts, "members": members,
    }))


# ------------------------------------------------------------------ decoding


def _int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"expected an int, got {type(value).__name__}")


def _str(value: object) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"expected a string, got {type(value).__name__}")


def _opt_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _strs(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError("expected a list of strings")
    return tuple(_str(v) for v in value)


def _map(value: object) -> dict:
    if not isinstance(value, dict):
        raise TypeError("expected a map")
    return value


def _assignment_from_wire(value: object) -> tuple[TopicPartition, ...]:
    if not isinstance(value, list):
        raise TypeError("assignment is not a list")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], list):
            raise TypeError("assignment entry is not [topic, [partitions]]")
        topic = _str(item[0])
        out.extend(TopicPartition(topic, _int(p)) for p in item[1])
    return tuple(sorted(out))


def _member(value: object) -> MemberMetadata:
    m = _map(value)
    return MemberMetadata(
        member_id=_str(m["member_id"]), group_instance_id=_opt_str(m["group_instance_id"]),
        client_id=_str(m["client_id"]), client_host=_str(m["client_host"]),
        session_timeout_ms=_int(m["session_timeout_ms"]), rebalance_timeout_ms=_int(m["rebalance_timeout_ms"]),
        topics=_strs(m["topics"]), pattern=_opt_str(m["pattern"]), assignors=_strs(m["assignors"]),
        assignment=_assignment_from_wire(m["assignment"]),
    )


DecodedRecord = (tuple[OffsetCommitKey, OffsetCommitValue | None]
                 | tuple[GroupMetadataKey, GroupMetadataValue | None])


def decode(record: CoordinatorRecord) -> DecodedRecord | None:
    """``(key, value)`` of a record; ``None`` for a key type this version does not know
    (a newer broker's record: skipped, as Kafka does); MqError(CORRUPT_MESSAGE) when
    the record does not parse."""
    try:
        key = unpack_header(record.key)
        if not isinstance(key, list) or not key:
            raise TypeError("key is not a non-empty list")
        kind = _int(key[0])
        if kind not in (OFFSET_COMMIT_KEY, GROUP_METADATA_KEY):
            return None
        raw = None if record.value is None else _map(unpack_header(record.value))
        if kind == OFFSET_COMMIT_KEY:
            ok = OffsetCommitKey(_str(key[1]), TopicPartition(_str(key[2]), _int(key[3])))
            if raw is None:
                return ok, None
            return ok, OffsetCommitValue(_int(raw["offset"]), _int(raw["leader_epoch"]), _str(raw["metadata"]),
                                         _int(raw["commit_timestamp_ms"]))
        gk = GroupMetadataKey(_str(key[1]))
        if raw is None:
            return gk, None
        members = raw["members"]
        if not isinstance(members, list):
            raise TypeError("members is not a list")
        return gk, GroupMetadataValue(
            _str(raw["protocol_type"]), _int(raw["generation"]), _str(raw["assignor"]), _str(raw["leader"]),
            _int(raw["state_ts"]), tuple(_member(m) for m in members))
    except (KeyError, IndexError, TypeError, ValueError, ProtocolError) as exc:
        raise MqError(ErrorCode.CORRUPT_MESSAGE, f"unreadable group coordinator record: {exc}") from None
