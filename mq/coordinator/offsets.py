"""OffsetCommit, OffsetFetch, DeleteGroups and the expiry of old groups' offsets.

Kafka's convention: a committed offset is the next record to read. A member's commit
is fenced by generation and member id (and instance id), so a zombie — a member the
group has moved on from — cannot overwrite the new owner's progress. An admin commit
(``generation_id=-1``, ``member_id=""``) is accepted only while the group has no
members, as ``kafka-consumer-groups --reset-offsets`` requires.

A commit is visible (OffsetFetch, expiry, DeleteGroups) only once its record is
committed: until then it waits in the coordinator's ``pending_offsets`` (Kafka's
``pendingOffsetCommits``; see ``mq.coordinator.coordinator``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from mq.coordinator.group import Group, GroupState
from mq.coordinator.membership import check_group_id
from mq.coordinator.records import OffsetCommitValue, group_metadata_record, offset_commit_record
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol import group_messages as gm

if TYPE_CHECKING:
    from mq.coordinator.coordinator import Call, GroupCoordinator


def _fence(group: Group | None, req: gm.OffsetCommitRequest) -> tuple[ErrorCode, str] | None:
    """Whether this committer may commit for the group now (None: yes)."""
    admin = req.generation_id < 0 and not req.member_id and req.group_instance_id is None
    if admin:
        if group is not None and group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, "group has active members"
        return None
    if group is None:
        return ErrorCode.ILLEGAL_GENERATION, f"group {req.group_id!r} does not exist"
    if group.fenced(req.member_id, req.group_instance_id):
        return ErrorCode.FENCED_INSTANCE_ID, "another member joined with this group.instance.id"
    if req.member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID, "the member is not in the group"
    if req.generation_id != group.generation:
        return ErrorCode.ILLEGAL_GENERATION, (
            f"generation {req.generation_id} is not the current {group.generation}")
    return None


def _check_partition(c: GroupCoordinator, call: Call, topic: str, part: gm.OffsetCommitPartition) -> ErrorCode:
    if not 0 <= part.partition < call.topics.get(topic, 0):
        return ErrorCode.UNKNOWN_TOPIC
    if part.offset < 0:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if len(part.metadata.encode("utf-8", "surrogatepass")) > c.config.offset_metadata_max_bytes:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    return ErrorCode.NONE


def commit(c: GroupCoordinator, call: Call, req: gm.OffsetCommitRequest) -> None:
    group = c.groups.get(req.group_id)
    refused = check_group_id(req.group_id) or _fence(group, req)
    topics_out = []
    for topic in req.topics:
        parts_out = []
        for part in topic.partitions:
            code = refused[0] if refused is not None else _check_partition(c, call, topic.name, part)
            if code == ErrorCode.NONE:
                if group is None:
                    group = c.groups[req.group_id] = Group(req.group_id)
                tp = TopicPartition(topic.name, part.partition)
                value = OffsetCommitValue(part.offset, part.leader_epoch, part.metadata, call.now_ms)
                c.emit_offset(call, req.group_id, tp, offset_commit_record(req.group_id, tp, value))
            parts_out.append(gm.OffsetCommitPartitionResponse(part.partition, code))
        topics_out.append(gm.OffsetCommitTopicResponse(topic.name, parts_out))
    if refused is None and group is not None and req.member_id in group.members:
        group.members[req.member_id].last_heartbeat_ms = call.now_ms  # a commit is a sign of life
    call.respond(gm.OffsetCommitResponse(topics_out, refused[1] if refused is not None else ""))


def _fetched(group: Group | None, tp: TopicPartition, topics: Mapping[str, int]) -> gm.OffsetFetchPartitionResponse:
    value = None if group is None else group.offsets.get(tp)
    if value is not None:
        return gm.OffsetFetchPartitionResponse(tp.partition, value.offset, value.leader_epoch, value.metadata,
                                               commit_timestamp_ms=value.commit_timestamp_ms)
    if tp.topic not in topics:
        return gm.OffsetFetchPartitionResponse(tp.partition, error_code=ErrorCode.UNKNOWN_TOPIC)
    return gm.OffsetFetchPartitionResponse(tp.partition)


def fetch(c: GroupCoordinator, call: Call, req: gm.OffsetFetchRequest) -> None:
    """Unknown group or nothing committed: offset -1 (Kafka). ``topics=None``: every
    committed partition of the group."""
    bad = check_group_id(req.group_id)
    if bad is not None:
        call.respond(gm.OffsetFetchResponse(bad[0], error_message=bad[1]))
        return
    group = c.groups.get(req.group_id)
    if req.topics is None:
        wanted: dict[str, list[int]] = {}
        for tp in sorted(group.offsets if group is not None else ()):
            wanted.setdefault(tp.topic, []).append(tp.partition)
    else:
        wanted = {}
        for topic in req.topics:
            wanted.setdefault(topic.name, []).extend(topic.partitions)
    call.respond(gm.OffsetFetchResponse(ErrorCode.NONE, [
        gm.OffsetFetchTopicResponse(name, [_fetched(group, TopicPartition(name, p), call.topics) for p in parts])
        for name, parts in wanted.items()]))


def _tombstones(c: GroupCoordinator, call: Call, group: Group) -> None:
    """Delete a group and all its offsets, committed or pending (a pending commit is
    before the tombstone in the log, so a reload ends without it too): offset
    tombstones first, then the group's."""
    for tp in sorted({*group.offsets, *c.pending_offsets.partitions(group.group_id)}):
        c.emit(call, offset_commit_record(group.group_id, tp, None))
    c.emit(call, group_metadata_record(group.group_id, None))


def delete_groups(c: GroupCoordinator, call: Call, req: gm.DeleteGroupsRequest) -> None:
    results = []
    for group_id in req.groups:
        group = c.groups.get(group_id)
        bad = check_group_id(group_id)
        if bad is not None:
            code = bad[0]
        elif group is None:
            code = ErrorCode.GROUP_ID_NOT_FOUND
        elif group.members:
            code = ErrorCode.NON_EMPTY_GROUP
        else:
            code = ErrorCode.NONE
            _tombstones(c, call, group)
        results.append(gm.DeletableGroupResult(group_id, code))
    call.respond(gm.DeleteGroupsResponse(results))


def expire(c: GroupCoordinator, call: Call) -> None:
    """Groups empty for ``offsets_retention_ms`` lose their offsets and themselves. A
    group with a commit still pending is not expired (that commit is new activity:
    once confirmed its timestamp restarts the clock; Kafka skips such offsets too)."""
    retention_ms = c.config.offsets_retention_ms
    for group in list(c.groups.values()):
        if (group.state == GroupState.EMPTY and not group.members and not c.pending_offsets.partitions(group.group_id)
                and call.now_ms - group.empty_since_ms() >= retention_ms):
            _tombstones(c, call, group)
