"""Records of ``__share_group_state``: the only way share group state changes.

A compacted topic (the key says *what*, the latest value per key wins, a tombstone
deletes it), both sides msgpack. Each write of a share-partition is a whole snapshot
of its in-flight window, run-length encoded, so loading is "keep the last value of
each key" (Kafka writes ShareSnapshot and ShareUpdate records; one kind is enough
while the window stays bounded by ``share.partition.max.record.locks``)::

    ShareGroup      key [1, group]
                    value {epoch, auto_offset_reset, members: [
                           {member_id, client_id, client_host, topics}]}
    SharePartition  key [2, group, topic, partition]
                    value {start_offset, end_offset,
                           runs: [[first, last, state, delivery_count, dead_letter_reason], ...]}

Kafka keeps share group membership in ``__consumer_offsets`` and the share-partition
state in ``__share_group_state``; mq keeps both in the latter, so one coordinator
serves a group whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.coordinator.records import CoordinatorRecord
from mq.coordinator.share_partition import RecordState, SharePartitionState, StateRun
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import pack_header, unpack_header

SHARE_STATE_TOPIC = "__share_group_state"
SHARE_GROUP_KEY = 1
SHARE_PARTITION_KEY = 2


@dataclass(frozen=True, slots=True)
class ShareMemberValue:
    member_id: str
    client_id: str
    client_host: str
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupValue:
    epoch: int
    auto_offset_reset: str
    members: tuple[ShareMemberValue, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    group_id: str
    tp: TopicPartition


def share_group_record(group_id: str, value: ShareGroupValue | None) -> CoordinatorRecord:
    key = pack_header([SHARE_GROUP_KEY, group_id])
    if value is None:
        return CoordinatorRecord(key, None)
    return CoordinatorRecord(key, pack_header({
        "epoch": value.epoch, "auto_offset_reset": value.auto_offset_reset,
        "members": [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                     "topics": list(m.topics)} for m in value.members],
    }))


def share_partition_record(group_id: str, tp: TopicPartition, value: SharePartitionState | None
                           ) -> CoordinatorRecord:
    key = pack_header([SHARE_PARTITION_KEY, group_id, tp.topic, tp.partition])
    if value is None:
        return CoordinatorRecord(key, None)
    return CoordinatorRecord(key, pack_header({
        "start_offset": value.start_offset, "end_offset": value.end_offset,
        "runs": [[r.first_offset, r.last_offset, int(r.state), r.delivery_count, r.dead_letter_reason]
                 for r in value.runs],
    }))


def _int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"expected an int, got {type(value).__name__}")


def _str(value: object) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"expected a string, got {type(value).__name__}")


def _list(value: object) -> list:
    if not isinstance(value, list):
        raise TypeError("expected a list")
    return value


def _map(value: object) -> dict:
    if not isinstance(value, dict):
        raise TypeError("expected a map")
    return value


def _run(value: object) -> StateRun:
    item = _list(value)
    if len(item) != 5:
        raise TypeError("a run is [first, last, state, delivery_count, reason]")
    return StateRun(_int(item[0]), _int(item[1]), RecordState(_int(item[2])), _int(item[3]), _str(item[4]))


DecodedShareRecord = (tuple[ShareGroupKey, ShareGroupValue | None]
                      | tuple[SharePartitionKey, SharePartitionState | None])


def decode_share_key(record: CoordinatorRecord) -> ShareGroupKey | SharePartitionKey | None:
    """The key alone (cheap: loading decodes a share-partition's value only for its last
    snapshot); ``None`` for a key type this version does not know."""
    try:
        key = _list(unpack_header(record.key))
        kind = _int(key[0])
        if kind == SHARE_GROUP_KEY:
            return ShareGroupKey(_str(key[1]))
        if kind == SHARE_PARTITION_KEY:
            return SharePartitionKey(_str(key[1]), TopicPartition(_str(key[2]), _int(key[3])))
        return None
    except (KeyError, IndexError, TypeError, ValueError, ProtocolError) as exc:
        raise MqError(ErrorCode.CORRUPT_MESSAGE, f"unreadable share coordinator record key: {exc}") from None


def decode_share_record(record: CoordinatorRecord) -> DecodedShareRecord | None:
    """``(key, value)``; ``None`` for a key type this version does not know;
    MqError(CORRUPT_MESSAGE) when the record does not parse."""
    try:
        key = _list(unpack_header(record.key))
        kind = _int(key[0])
        if kind not in (SHARE_GROUP_KEY, SHARE_PARTITION_KEY):
            return None
        raw = None if record.value is None else _map(unpack_header(record.value))
        if kind == SHARE_GROUP_KEY:
            gk = ShareGroupKey(_str(key[1]))
            if raw is None:
                return gk, None
            members = tuple(ShareMemberValue(_str(m["member_id"]), _str(m["client_id"]), _str(m["client_host"]),
                                             tuple(_str(t) for t in _list(m["topics"])))
                            for m in map(_map, _list(raw["members"])))
            return gk, ShareGroupValue(_int(raw["epoch"]), _str(raw["auto_offset_reset"]), members)
        pk = SharePartitionKey(_str(key[1]), TopicPartition(_str(key[2]), _int(key[3])))
        if raw is None:
            return pk, None
        return pk, SharePartitionState(_int(raw["start_offset"]), _int(raw["end_offset"]),
                                       tuple(_run(r) for r in _list(raw["runs"])))
    except (KeyError, IndexError, TypeError, ValueError, ProtocolError) as exc:
        raise MqError(ErrorCode.CORRUPT_MESSAGE, f"unreadable share coordinator record: {exc}") from None
