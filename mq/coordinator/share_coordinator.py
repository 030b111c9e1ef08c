"""The share coordinator: share groups of one ``__share_group_state`` partition, sans-IO.

As ``GroupCoordinator``: a request goes in with ``now_ms``, a ``CoordinatorResult``
comes out (records to append to the shard's partition, responses to send once they
are committed); a loading coordinator replays the partition with ``replay``. State
changes are applied as they are emitted (so two fetches in flight never acquire the
same record); if their records cannot be written the shell drops the shard and
loads it again from the log, the only truth. Every acquisition is written before the
records are handed out, so delivery counts survive a fail-over exactly; held locks do
not (``SharePartition.snapshot``): the new coordinator redelivers those records.

The records of a partition are read through ``ShareLog``, the shell's view of this
broker's replica of it (leader or follower, up to its high watermark).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from mq.coordinator.records import CoordinatorRecord
from mq.coordinator.result import CoordinatorResult
from mq.coordinator.share_group import ShareConfig, ShareGroup, ShareMember
from mq.coordinator.share_partition import AckType, SharePartition
from mq.coordinator.share_records import (
    SharePartitionKey,
    decode_share_key,
    decode_share_record,
    share_group_record,
    share_partition_record,
)
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol import share_messages as s
from mq.protocol.messages import Request, Response


class ShareLog(Protocol):
    def bounds(self, tp: TopicPartition) -> tuple[int, int] | None:
        """``(log_start_offset, high_watermark)`` of the local replica; None: not hosted."""

    def scan(self, tp: TopicPartition, from_offset: int, max_bytes: int) -> tuple[list[tuple[int, int]], int]:
        """``(first, last)`` offsets of the data batches from ``from_offset`` below the
        high watermark (at most about ``max_bytes``) and the offset after the last
        batch read (control batches included)."""

    def read(self, tp: TopicPartition, first_offset: int, last_offset: int) -> bytes:
        """The stored batches holding ``first_offset..last_offset``."""


class ShareCoordinator:
    def __init__(self, shard: int, config: ShareConfig, *, rng: Rng) -> None:
        self.shard = shard
        self.config = config
        self.rng = rng
        self._groups: dict[str, ShareGroup] = {}
        # Replayed share-partition snapshots not yet decoded: a log holds many snapshots
        # of each partition and only the last one counts, so loading keeps the latest
        # record and decodes and expands it once, on first use.
        self._replayed: dict[tuple[str, TopicPartition], CoordinatorRecord] = {}

    @property
    def groups(self) -> dict[str, ShareGroup]:
        if self._replayed:
            replayed, self._replayed = self._replayed, {}
            for (group_id, tp), record in replayed.items():
                group = self._groups.get(group_id)
                decoded = decode_share_record(record)
                if group is None or decoded is None:
                    continue  # the group was deleted after this snapshot
                state = decoded[1]
                if state is None:
                    group.partitions.pop(tp, None)
                else:
                    group.partitions[tp] = SharePartition.restore(state, self.config.partition)  # type: ignore[arg-type]
        return self._groups

    # ------------------------------------------------------------ loading

    def replay(self, record: CoordinatorRecord, *, offset: int | None = None) -> None:
        key = decode_share_key(record)
        if isinstance(key, SharePartitionKey):
            self._groups.setdefault(key.group_id, ShareGroup(key.group_id))
            self._replayed[(key.group_id, key.tp)] = record
            return
        if key is None:
            return
        decoded = decode_share_record(record)
        assert decoded is not None
        value = decoded[1]
        if value is None:
            self._groups.pop(key.group_id, None)
            for pending in [k for k in self._replayed if k[0] == key.group_id]:
                del self._replayed[pending]
            return
        group = self._groups.setdefault(key.group_id, ShareGroup(key.group_id))
        group.epoch = value.epoch  # type: ignore[union-attr]
        group.auto_offset_reset = value.auto_offset_reset  # type: ignore[union-attr]
        group.members = {m.member_id: ShareMember(m.member_id, m.client_id, m.client_host, m.topics)
                         for m in value.members}  # type: ignore[union-attr]

    # ------------------------------------------------------------ requests

    def handle(self, request: Request, *, request_id: int, client_id: str, client_host: str,
               topics: Mapping[str, int], log: ShareLog, now_ms: int) -> CoordinatorResult:
        records: list[CoordinatorRecord] = []
        if isinstance(request, s.ShareGroupHeartbeatRequest):
            response: Response = self._heartbeat(request, client_id, client_host, topics, records, now_ms)
        elif isinstance(request, s.ShareFetchRequest):
            response = self._fetch(request, topics, log, records, now_ms)
        elif isinstance(request, s.ShareAcknowledgeRequest):
            group, error = self._member_group(request.group_id, request.member_id)
            if group is None:
                response = s.ShareAcknowledgeResponse(error[0], error[1])
            else:
                dirty: dict[TopicPartition, None] = {}
                acks = self._acknowledge(group, request.member_id, request.acknowledgements, dirty)
                _persist(group, dirty, records)
                response = s.ShareAcknowledgeResponse(ErrorCode.NONE, acknowledgements=acks)
        elif isinstance(request, s.ShareGroupDescribeRequest):
            response = s.ShareGroupDescribeResponse([self._describe(g, topics, log) for g in request.groups])
        elif isinstance(request, s.ListShareGroupsRequest):
            response = s.ListShareGroupsResponse(ErrorCode.NONE, [
                s.ListedShareGroup(g.group_id, g.state, len(g.members)) for _, g in sorted(self.groups.items())])
        elif isinstance(request, s.DeleteShareGroupsRequest):
            response = self._delete(request.group_id, records)
        else:
            response = s.ListShareGroupsResponse(ErrorCode.INVALID_REQUEST)
        return CoordinatorResult(records, [(request_id, response)])

    def _member_group(self, group_id: str, member_id: str) -> tuple[ShareGroup | None, tuple[ErrorCode, str]]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return None, (ErrorCode.UNKNOWN_MEMBER_ID,
                          f"{member_id!r} is not a member of share group {group_id!r}: heartbeat with epoch 0 to join")
        return group, (ErrorCode.NONE, "")

    def _heartbeat(self, request: s.ShareGroupHeartbeatRequest, client_id: str, client_host: str,
                   topics: Mapping[str, int], records: list[CoordinatorRecord], now_ms: int
                   ) -> s.ShareGroupHeartbeatResponse:
        if not request.group_id:
            return s.ShareGroupHeartbeatResponse(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
        if request.auto_offset_reset not in ("", "earliest", "latest"):
            return s.ShareGroupHeartbeatResponse(ErrorCode.INVALID_CONFIG,
                                                 f"auto_offset_reset {request.auto_offset_reset!r}: earliest or latest")
        group = self.groups.get(request.group_id)
        member = None if group is None else group.members.get(request.member_id)
        if request.member_epoch == -1:
            if group is not None and member is not None:
                self._remove(group, [member.member_id], records)
            return s.ShareGroupHeartbeatResponse(ErrorCode.NONE, member_id=request.member_id, member_epoch=-1)
        if member is None and request.member_epoch != 0:
            return s.ShareGroupHeartbeatResponse(ErrorCode.UNKNOWN_MEMBER_ID,
                                                 f"{request.member_id!r} is not a member: join with epoch 0")
        if group is None:
            group = self.groups[request.group_id] = ShareGroup(
                request.group_id, auto_offset_reset=request.auto_offset_reset or self.config.auto_offset_reset)
        if request.member_epoch > group.epoch:
            return s.ShareGroupHeartbeatResponse(ErrorCode.FENCED_MEMBER_EPOCH,
                                                 f"epoch {request.member_epoch} is ahead of the group's {group.epoch}")
        topics_wanted = tuple(sorted(set(request.topics)))
        if member is None:
            member_id = request.member_id or f"{client_id}-{self.rng.randbytes(8).hex()}"
            member = group.members[member_id] = ShareMember(member_id, client_id, client_host, topics_wanted)
            self._changed(group, records)
        elif member.topics != topics_wanted:
            member.topics = topics_wanted
            self._changed(group, records)
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms
        assigned = group.assignment(topics).get(member.member_id, [])
        return s.ShareGroupHeartbeatResponse(
            ErrorCode.NONE, member_id=member.member_id, member_epoch=group.epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms, assignment=_by_topic(assigned))

    def _changed(self, group: ShareGroup, records: list[CoordinatorRecord]) -> None:
        group.epoch += 1
        records.append(share_group_record(group.group_id, group.value()))

    def _remove(self, group: ShareGroup, member_ids: Iterable[str], records: list[CoordinatorRecord]) -> None:
        for member_id in member_ids:
            group.members.pop(member_id, None)
            for tp, sp in sorted(group.partitions.items()):
                if sp.release_member(member_id):
                    records.append(share_partition_record(group.group_id, tp, sp.snapshot()))
        self._changed(group, records)

    # ------------------------------------------------------------ fetch and acknowledge

    def _acknowledge(self, group: ShareGroup, member_id: str, acks: list[s.PartitionAcknowledgements],
                     dirty: dict[TopicPartition, None]) -> list[s.AcknowledgeResult]:
        """Apply acknowledgements; the partitions changed go to ``dirty`` (one snapshot
        each is written per request, whatever the number of acks and acquisitions)."""
        out = []
        for part in acks:
            tp = TopicPartition(part.topic, part.partition)
            sp = group.partitions.get(tp)
            code, message = ErrorCode.NONE, ""
            if sp is None:
                code, message = ErrorCode.INVALID_RECORD_STATE, f"no records of {tp} were handed out in this group"
            else:
                for batch in part.batches:
                    try:
                        ack_type = AckType(batch.ack_type)
                    except ValueError:
                        code, message = ErrorCode.INVALID_REQUEST, f"ack type {batch.ack_type}: 0 to 3"
                        continue
                    result = sp.acknowledge(member_id, batch.first_offset, batch.last_offset, ack_type)
                    if result != ErrorCode.NONE:
                        code = result
                        message = (f"offsets {batch.first_offset}..{batch.last_offset} of {tp} are not all held by "
                                   f"{member_id} (not acquired, acknowledged already, or the lock expired)")
                dirty[tp] = None
            out.append(s.AcknowledgeResult(part.topic, part.partition, code, message))
        return out

    def _fetch(self, request: s.ShareFetchRequest, topics: Mapping[str, int], log: ShareLog,
               records: list[CoordinatorRecord], now_ms: int) -> s.ShareFetchResponse:
        group, error = self._member_group(request.group_id, request.member_id)
        if group is None:
            return s.ShareFetchResponse(error[0], error[1])
        dirty: dict[TopicPartition, None] = {}
        acks = self._acknowledge(group, request.member_id, request.acknowledgements, dirty)
        budget = max(0, request.max_records)
        parts: list[s.ShareFetchPartitionResponse] = []
        assigned = group.assignment(topics).get(request.member_id, [])
        for tp in assigned:
            if budget <= 0:
                break
            bounds = log.bounds(tp)
            if bounds is None:
                parts.append(s.ShareFetchPartitionResponse(
                    tp.topic, tp.partition, ErrorCode.SHARE_PARTITION_NOT_HOSTED,
                    f"broker holds no replica of {tp}; give the topic a replica on every broker of the region"))
                continue
            log_start, high_watermark = bounds
            sp = group.partition(tp, log_start=log_start, high_watermark=high_watermark, config=self.config.partition)
            sp.move_start_to(log_start)
            batches, scanned_to = ([], sp.end_offset)
            if sp.end_offset < high_watermark:
                batches, scanned_to = log.scan(tp, sp.end_offset, request.max_bytes)
            acquired = sp.acquire(request.member_id, max_records=budget, new_batches=batches,
                                  scanned_to=scanned_to, now_ms=now_ms)
            if not acquired:
                continue
            budget -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            dirty[tp] = None
            data = b"".join(log.read(tp, first, last) for first, last in _ranges(acquired))
            parts.append(s.ShareFetchPartitionResponse(tp.topic, tp.partition, acquired=[
                s.AcquiredRecords(a.first_offset, a.last_offset, a.delivery_count, a.dead_letter_reason)
                for a in acquired], records=data))
        _persist(group, dirty, records)
        return s.ShareFetchResponse(ErrorCode.NONE, partitions=parts, acknowledgements=acks)

    # ------------------------------------------------------------ admin

    def _describe(self, group_id: str, topics: Mapping[str, int], log: ShareLog) -> s.DescribedShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            return s.DescribedShareGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"no share group {group_id!r}",
                                         state="Dead")
        assignment = group.assignment(topics)
        held: dict[str, int] = {}
        for sp in group.partitions.values():
            for r in sp.records.values():
                if r.owner:
                    held[r.owner] = held.get(r.owner, 0) + 1
        members = [s.ShareMemberDescription(m.member_id, m.client_id, m.client_host, group.epoch, list(m.topics),
                                            _by_topic(assignment.get(m.member_id, [])), held.get(m.member_id, 0))
                   for m in sorted(group.members.values(), key=lambda m: m.member_id)]
        partitions = []
        for tp, sp in sorted(group.partitions.items()):
            counts = sp.counts()
            bounds = log.bounds(tp)
            partitions.append(s.SharePartitionDescription(
                tp.topic, tp.partition, sp.start_offset, sp.end_offset, counts["AVAILABLE"], counts["ACQUIRED"],
                counts["ACKNOWLEDGED"], counts["ARCHIVED"], counts["DEAD_LETTER"],
                -1 if bounds is None else bounds[1]))
        return s.DescribedShareGroup(group_id, ErrorCode.NONE, state=group.state, group_epoch=group.epoch,
                                     members=members, partitions=partitions)

    def _delete(self, group_id: str, records: list[CoordinatorRecord]) -> s.DeleteShareGroupsResponse:
        group = self.groups.get(group_id)
        if group is None:
            return s.DeleteShareGroupsResponse(ErrorCode.GROUP_ID_NOT_FOUND, f"no share group {group_id!r}")
        if group.members:
            return s.DeleteShareGroupsResponse(ErrorCode.NON_EMPTY_GROUP,
                                               f"share group {group_id!r} has {len(group.members)} members; stop them")
        for tp in sorted(group.partitions):
            records.append(share_partition_record(group_id, tp, None))
        records.append(share_group_record(group_id, None))
        del self.groups[group_id]
        return s.DeleteShareGroupsResponse(ErrorCode.NONE)

    # ------------------------------------------------------------ timers

    def poll(self, *, now_ms: int) -> CoordinatorResult:
        """Session timeouts (members removed, their locks released) and lock expiry."""
        records: list[CoordinatorRecord] = []
        for _, group in sorted(self.groups.items()):
            gone = []
            for member in group.members.values():
                if member.session_deadline_ms is None:
                    member.session_deadline_ms = now_ms + self.config.session_timeout_ms
                elif member.session_deadline_ms <= now_ms:
                    gone.append(member.member_id)
            if gone:
                self._remove(group, gone, records)
            for tp, sp in sorted(group.partitions.items()):
                if sp.expire_locks(now_ms):
                    records.append(share_partition_record(group.group_id, tp, sp.snapshot()))
        return CoordinatorResult(records, [])

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for group in self.groups.values():
            deadlines.extend(m.session_deadline_ms for m in group.members.values()
                             if m.session_deadline_ms is not None)
            for sp in group.partitions.values():
                lock = sp.next_deadline_ms()
                if lock is not None:
                    deadlines.append(lock)
        return min(deadlines) if deadlines else None


def error_response(request: Request, code: ErrorCode, message: str) -> Response:
    """The answer to a share request that could not be served (or written), ``code`` everywhere."""
    if isinstance(request, s.ShareGroupHeartbeatRequest):
        return s.ShareGroupHeartbeatResponse(code, message, member_id=request.member_id)
    if isinstance(request, s.ShareFetchRequest):
        return s.ShareFetchResponse(code, message)
    if isinstance(request, s.ShareAcknowledgeRequest):
        return s.ShareAcknowledgeResponse(code, message)
    if isinstance(request, s.ShareGroupDescribeRequest):
        return s.ShareGroupDescribeResponse([s.DescribedShareGroup(g, code, message) for g in request.groups])
    if isinstance(request, s.ListShareGroupsRequest):
        return s.ListShareGroupsResponse(code)
    if isinstance(request, s.DeleteShareGroupsRequest):
        return s.DeleteShareGroupsResponse(code, message)
    raise TypeError(f"{type(request).__name__} is not a share group request")


def _persist(group: ShareGroup, dirty: dict[TopicPartition, None], records: list[CoordinatorRecord]) -> None:
    for tp in dirty:
        sp = group.partitions.get(tp)
        if sp is not None:
            records.append(share_partition_record(group.group_id, tp, sp.snapshot()))


def _by_topic(tps: Iterable[TopicPartition]) -> list[s.ShareTopicPartitions]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [s.ShareTopicPartitions(t, ps) for t, ps in by_topic.items()]


def _ranges(acquired: Iterable[object]) -> list[tuple[int, int]]:
    """Adjacent acquired runs merged: the offset ranges to read."""
    out: list[tuple[int, int]] = []
    for a in sorted(acquired, key=lambda a: a.first_offset):  # type: ignore[attr-defined]
        first, last = a.first_offset, a.last_offset  # type: ignore[attr-defined]
        if out and out[-1][1] + 1 >= first:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out
