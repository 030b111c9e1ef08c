"""The group coordinator of one ``__consumer_offsets`` partition (a "shard").

Sans-IO, in the shape of Kafka's ``GroupMetadataManager`` on the coordinator runtime:
``handle`` and ``poll`` return a ``CoordinatorResult(records, responses)``; the broker
appends ``records`` to the shard's partition in one batch and sends ``responses`` once
the high watermark passes them. Persisted state changes only by replaying records —
a coordinator loading the shard replays the partition from the start; a running one
replays its own records: group metadata and tombstones as it emits them
(speculatively; ``fail`` rebalances a generation that could not be written), offset
commits only once they are committed (``confirm``).

Offset commits (Kafka's ``pendingOffsetCommits``): an OffsetCommit's records wait in
``pending_offsets`` (per group and partition, in the order written) until the broker
reports them committed; only then do OffsetFetch, ``group_offsets``, expiry and
DeleteGroups see them. So nobody reads an offset that a fail-over could still lose.
Confirming a write drops the older pending writes of that partition (the log
supersedes them); ``fail`` drops the write alone; a tombstone (DeleteGroups, expiry)
drops every pending write of what it deletes, and the deletion tombstones every
partition with a committed *or pending* offset so a reload (which replays the pending
write and then the tombstone) ends the same. A write that timed out but still
commits is visible after the next reload only, as in Kafka.

Rebalance (classic generations, assignments computed here, no SyncGroup):

- A trigger (a new member, a member leaving or timing out, a changed subscription,
  topic changes, a cooperative hand-off) moves the group to PreparingRebalance;
  heartbeats answer REBALANCE_IN_PROGRESS and JoinGroup requests park.
- It completes when every member has rejoined, or at the rebalance timeout (members
  that did not rejoin are removed). An Empty group first waits
  ``initial_rebalance_delay_ms`` (extended by each join, capped at the rebalance
  timeout) so a group starting up does not rebalance once per member.
- Completion writes ONE GroupMetadata record with generation + 1 and the assignment
  and releases the parked joins with it. With ``cooperative-sticky``, partitions still
  owned by another member are withheld and the next rebalance starts at once.

KIP-394 pending members (``membership.join``): ids handed out with MEMBER_ID_REQUIRED
and not yet used to rejoin. Transient (a new coordinator forgets them: the rejoin gets
UNKNOWN_MEMBER_ID and the member starts over); each expires after the session timeout
its JoinGroup asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from mq.coordinator import admin, membership, offsets
from mq.coordinator.config import GroupConfig
from mq.coordinator.group import Group, GroupState, Member, assignment_to_wire
from mq.coordinator.pending_offsets import PendingOffsets
from mq.coordinator.rebalance import compute_assignment, needs_rebalance, select_assignor
from mq.coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    decode,
    group_metadata_record,
)
from mq.coordinator.result import CoordinatorResult, PendingOffset, RedoRebalance
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol import group_messages as gm
from mq.protocol.messages import Request, Response


@dataclass(slots=True)
class Call:
    """One handle/poll call: its context and what it produced so far."""

    request_id: int
    client_id: str
    client_host: str
    topics: Mapping[str, int]
    now_ms: int
    records: list[CoordinatorRecord] = field(default_factory=list)
    responses: list[tuple[int, Response]] = field(default_factory=list)
    undo: list[RedoRebalance] = field(default_factory=list)
    offsets: list[PendingOffset] = field(default_factory=list)

    def respond(self, response: Response, request_id: int | None = None) -> None:
        self.responses.append((self.request_id if request_id is None else request_id, response))

    def result(self) -> CoordinatorResult:
        return CoordinatorResult(self.records, self.responses, tuple(self.undo), tuple(self.offsets))


class GroupCoordinator:
    """The groups of one ``__consumer_offsets`` partition."""

    def __init__(self, partition: int, config: GroupConfig, *, rng: Rng) -> None:
        self.partition = partition
        self.config = config
        self.rng = rng
        self.groups: dict[str, Group] = {}
        self.last_offset = -1  # of the last record replayed from the log
        self._unclocked: dict[str, None] = {}  # groups with sessions/deadlines to start at the next call
        self._recheck: dict[str, None] = {}  # loaded groups whose subscriptions poll must check
        self._last_topics: dict[str, int] | None = None
        self._next_expiry_check_ms: int | None = None
        self.pending_members: dict[str, dict[str, int]] = {}  # group -> pending member id -> expiry (ms)
        self.pending_offsets = PendingOffsets()  # offset commits written, not yet committed

    # ------------------------------------------------------------ state changes

    def replay(self, record: CoordinatorRecord, *, offset: int) -> None:
        """Apply one record of the shard's partition (loading, in offset order)."""
        self.last_offset = max(self.last_offset, offset)
        group_id = self._apply(record)
        if group_id is not None and group_id in self.groups:
            self._recheck[group_id] = None

    def _apply(self, record: CoordinatorRecord) -> str | None:
        decoded = decode(record)
        if decoded is None:
            return None
        key, value = decoded
        group = self.groups.get(key.group_id)
        if isinstance(key, OffsetCommitKey):
            if value is not None:
                self._group(key.group_id).offsets[key.tp] = value  # type: ignore[assignment]
            else:
                self.pending_offsets.drop(key.group_id, key.tp)  # the tombstone follows them in the log
                if group is not None:
                    group.offsets.pop(key.tp, None)
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                self.pending_offsets.drop(key.group_id)
                if group is not None:
                    self._reset_deleted(group)
            else:
                assert isinstance(value, GroupMetadataValue)
                self._group(key.group_id).apply_metadata(value)
                self._unclocked[key.group_id] = None
        return key.group_id

    def _reset_deleted(self, group: Group) -> None:
        """A group tombstone: the group goes; offsets without their own tombstone stay."""
        if group.offsets:
            offsets_kept = group.offsets
            self.groups[group.group_id] = Group(group.group_id, offsets=offsets_kept)
        else:
            del self.groups[group.group_id]

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def emit(self, call: Call, record: CoordinatorRecord) -> None:
        """Produce a record and apply it (the same path as ``replay``)."""
        call.records.append(record)
        self._apply(record)

    def emit_offset(self, call: Call, group_id: str, tp: TopicPartition, record: CoordinatorRecord) -> None:
        """Produce an offset commit record, applied by ``confirm`` once it is committed."""
        call.records.append(record)
        pending = PendingOffset(group_id, tp, record)
        call.offsets.append(pending)
        self.pending_offsets.add(pending)


    # ------------------------------------------------------------ the API

    def handle(self, request: Request, *, request_id: int, client_id: str, client_host: str,
               topics: Mapping[str, int], now_ms: int) -> CoordinatorResult:
        """Answer one group request. A JoinGroup usually parks: its response comes in
        the result of a later call, when the rebalance completes."""
        call = Call(request_id, client_id, client_host, topics, now_ms)
        self._start_clocks(now_ms)
        handler = _HANDLERS.get(type(request))
        if handler is None:
            raise MqError(ErrorCode.INVALID_REQUEST, f"{type(request).__name__} is not a group coordinator request")
        handler(self, call, request)
        self._start_clocks(now_ms)
        return call.result()

    def poll(self, *, topics: Mapping[str, int], now_ms: int) -> CoordinatorResult:
        """Run timers (session and rebalance timeouts, the initial delay, offset
        expiry) and notice topic changes that alter a group's subscriptions."""
        call = Call(-1, "", "", topics, now_ms)
        self._start_clocks(now_ms)
        self._expire_pending(now_ms)
        for group_id in list(self.groups):
            group = self.groups.get(group_id)
            if group is not None:
                self._expire_sessions(call, group)
                self._run_rebalance_timers(call, group)
        self._check_subscriptions(call)
        if self._next_expiry_check_ms is not None and now_ms >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
            offsets.expire(self, call)
        self._start_clocks(now_ms)
        return call.result()

    def next_deadline_ms(self) -> int | None:
        """When ``poll`` next has something to do (None: nothing is pending)."""
        if self._unclocked or self._recheck:
            return 0
        deadlines = []
        for group in self.groups.values():
            if group.state == GroupState.PREPARING_REBALANCE:
                deadlines.extend(d for d in (group.rebalance_deadline_ms, group.initial_delay_until_ms)
                                 if d is not None)
            deadlines.extend(d for m in group.members.values() if (d := m.session_deadline_ms()) is not None)
        deadlines.extend(d for pending in self.pending_members.values() for d in pending.values())
        if self.groups and self._next_expiry_check_ms is not None:
            deadlines.append(self._next_expiry_check_ms)
        return min(deadlines, default=None)

    def confirm(self, result: CoordinatorResult) -> None:
        """``result``'s records are committed (the high watermark passed them; the
        shell calls this right before sending its responses): its offset commits
        become the group's committed offsets, by replaying their records. A write no
        longer pending (a newer one was confirmed first, or a tombstone came after it)
        is skipped: the log already supersedes it."""
        for pending in result.offsets:
            if self.pending_offsets.take(pending, with_older=True):
                self._apply(pending.record)

    def fail(self, result: CoordinatorResult, code: ErrorCode) -> list[tuple[int, Response]]:
        """``result``'s records could not be appended or committed: drop its pending
        offset commits (they never became visible), rebalance a generation it wrote if
        that is still current, and return the error versions of its responses."""
        for pending in result.offsets:
            self.pending_offsets.take(pending, with_older=False)
        for undo in result.undo:
            group = self.groups.get(undo.group_id)
            if group is not None and group.generation == undo.generation and group.state == GroupState.STABLE:
                self.prepare_rebalance(group, None)
        return [(rid, error_response(resp, code)) for rid, resp in result.responses]

    def unload(self) -> list[tuple[int, Response]]:
        """This broker no longer leads the shard: parked joins get NOT_COORDINATOR (the
        members find the new coordinator and rejoin); all state is dropped."""
        out: list[tuple[int, Response]] = []
        for group in self.groups.values():
            for member in group.members.values():
                if member.join_request_id is not None:
                    out.append((member.join_request_id, gm.JoinGroupResponse(
                        ErrorCode.NOT_COORDINATOR, member_id=member.member_id,
                        error_message="the coordinator moved")))
                    member.join_request_id = None
        self.groups = {}
        self.pending_members = {}
        self.pending_offsets = PendingOffsets()
        self._unclocked, self._recheck = {}, {}
        return out

    def group_offsets(self) -> dict[str, dict[TopicPartition, int]]:
        return {gid: {tp: v.offset for tp, v in sorted(g.offsets.items())} for gid, g in sorted(self.groups.items())}

    def group_states(self) -> dict[str, str]:
        return {gid: g.state.value for gid, g in sorted(self.groups.items())}

    # ------------------------------------------------------------ rebalancing

    def new_member_id(self, client_id: str) -> str:
        return f"{client_id}-{self.rng.randbytes(8).hex()}"

    def add_pending(self, group_id: str, member_id: str, expires_ms: int) -> None:
        """KIP-394: ``member_id`` was handed out with MEMBER_ID_REQUIRED."""
        self.pending_members.setdefault(group_id, {})[member_id] = expires_ms

    def has_pending(self, group_id: str) -> bool:
        return bool(self.pending_members.get(group_id))

    def take_pending(self, group_id: str, member_id: str) -> bool:
        """Forget a pending member id; whether it was pending."""
        pending = self.pending_members.get(group_id)
        if pending is None or pending.pop(member_id, None) is None:
            return False
        if not pending:
            del self.pending_members[group_id]
        return True

    def _expire_pending(self, now_ms: int) -> None:
        for group_id in list(self.pending_members):
            pending = self.pending_members[group_id]
            for member_id in [m for m, expires_ms in pending.items() if now_ms >= expires_ms]:
                del pending[member_id]
            if not pending:
                del self.pending_members[group_id]

    def prepare_rebalance(self, group: Group, now_ms: int | None) -> None:
        """Move to PreparingRebalance (``now_ms`` None: the deadlines start at the next call)."""
        if group.state == GroupState.PREPARING_REBALANCE:
            return
        was_empty = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        if now_ms is None:
            group.rebalance_deadline_ms = None
            self._unclocked[group.group_id] = None
            return
        timeout_ms = group.max_rebalance_timeout_ms()
        group.rebalance_deadline_ms = now_ms + timeout_ms
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            group.initial_delay_cap_ms = now_ms + timeout_ms
            group.initial_delay_until_ms = min(now_ms + self.config.initial_rebalance_delay_ms, now_ms + timeout_ms)

    def extend_initial_delay(self, group: Group, now_ms: int) -> None:
        """A new member joined while an Empty group waits: wait a little longer."""
        if group.initial_delay_until_ms is not None and group.initial_delay_cap_ms is not None:
            group.initial_delay_until_ms = min(now_ms + self.config.initial_rebalance_delay_ms,
                                               group.initial_delay_cap_ms)

    def maybe_complete(self, call: Call, group: Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or group.rebalance_deadline_ms is None:
            return
        if group.initial_delay_until_ms is not None and call.now_ms < group.initial_delay_until_ms:
            return
        if group.all_joined():
            self.complete_rebalance(call, group)

    def complete_rebalance(self, call: Call, group: Group) -> None:
        """Write the next generation and release the parked joins."""
        parked = {m.member_id: m.join_request_id for m in group.members.values()}
        for member in group.members.values():
            member.join_request_id = None
            member.last_heartbeat_ms = call.now_ms
        generation = group.generation + 1
        if not group.members:
            self.emit(call, group_metadata_record(group.group_id, GroupMetadataValue(
                group.protocol_type, generation, "", "", call.now_ms, ())))
            return
        assignor = select_assignor(group.members.values()) or next(iter(group.members.values())).assignors[0]
        assignment, withheld = compute_assignment(group, assignor, call.topics)
        leader = group.leader if group.leader in group.members else next(iter(group.members))
        members = tuple(replace(m.to_metadata(), assignment=assignment[m.member_id]) for m in group.members.values())
        self.emit(call, group_metadata_record(group.group_id, GroupMetadataValue(
            group.protocol_type, generation, assignor, leader, call.now_ms, members)))
        call.undo.append(RedoRebalance(group.group_id, generation))
        for member in group.members.values():
            member.owned = ()
            request_id = parked.get(member.member_id)
            if request_id is not None:
                call.respond(self.join_response(group, member), request_id)
        if withheld:
            self.prepare_rebalance(group, call.now_ms)

    def join_response(self, group: Group, member: Member) -> gm.JoinGroupResponse:
        return gm.JoinGroupResponse(
            ErrorCode.NONE, generation_id=group.generation, assignor=group.assignor, member_id=member.member_id,
            leader=group.leader, assignment=assignment_to_wire(member.assignment), members=len(group.members))

    def remove_member(self, call: Call, group: Group, member_id: str, *, reason: str) -> None:
        member = group.remove(member_id)
        if member is not None and member.join_request_id is not None:
            call.respond(gm.JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id,
                                              error_message=reason), member.join_request_id)

    def member_gone(self, call: Call, group: Group) -> None:
        """After members were removed: a stable group rebalances; a rebalancing one may
        now have everyone it waits for."""
        if group.state == GroupState.STABLE:
            self.prepare_rebalance(group, call.now_ms)
        self.maybe_complete(call, group)

    # ------------------------------------------------------------ timers

    def _start_clocks(self, now_ms: int) -> None:
        if self._next_expiry_check_ms is None:
            self._next_expiry_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
        for group_id in list(self._unclocked):
            group = self.groups.get(group_id)
            if group is None:
                continue
            for member in group.members.values():
                if member.last_heartbeat_ms is None:
                    member.last_heartbeat_ms = now_ms
            if group.state == GroupState.PREPARING_REBALANCE and group.rebalance_deadline_ms is None:
                group.rebalance_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
        self._unclocked = {}

    def _expire_sessions(self, call: Call, group: Group) -> None:
        expired = [m.member_id for m in group.members.values()
                   if (d := m.session_deadline_ms()) is not None and call.now_ms >= d]
        for member_id in expired:
            self.remove_member(call, group, member_id, reason="session timed out")
        if expired:
            self.member_gone(call, group)

    def _run_rebalance_timers(self, call: Call, group: Group) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or group.rebalance_deadline_ms is None:
            return
        if call.now_ms >= group.rebalance_deadline_ms:
            for member_id in [m.member_id for m in group.members.values() if m.join_request_id is None]:
                self.remove_member(call, group, member_id, reason="did not rejoin within the rebalance timeout")
            self.complete_rebalance(call, group)
        else:
            self.maybe_complete(call, group)

    def _check_subscriptions(self, call: Call) -> None:
        topics = dict(call.topics)
        if topics != self._last_topics:
            self._last_topics = topics
            candidates = list(self.groups)
        else:
            candidates = list(self._recheck)
        self._recheck = {}
        for group_id in candidates:
            group = self.groups.get(group_id)
            if group is not None and group.state == GroupState.STABLE and needs_rebalance(group, topics):
                self.prepare_rebalance(group, call.now_ms)


def error_response(response: Response, code: ErrorCode) -> Response:
    """The same answer, failed with ``code`` (the records it depended on were not written)."""
    message = f"the offsets topic write failed: {code.name}"
    if isinstance(response, gm.JoinGroupResponse):
        return gm.JoinGroupResponse(code, member_id=response.member_id, error_message=message)
    if isinstance(response, gm.OffsetCommitResponse):
        return gm.OffsetCommitResponse([
            gm.OffsetCommitTopicResponse(t.name, [
                gm.OffsetCommitPartitionResponse(p.partition, code if p.error_code == ErrorCode.NONE else p.error_code)
                for p in t.partitions])
            for t in response.topics], error_message=message)
    if isinstance(response, gm.DeleteGroupsResponse):
        return gm.DeleteGroupsResponse([
            gm.DeletableGroupResult(r.group_id, code if r.error_code == ErrorCode.NONE else r.error_code)
            for r in response.results])
    if isinstance(response, gm.LeaveGroupResponse):
        return gm.LeaveGroupResponse(code, [
            gm.LeaveMemberResponse(m.member_id, m.group_instance_id, code) for m in response.members], message)
    if hasattr(response, "error_code"):
        return replace(response, error_code=code)  # type: ignore[type-var]
    return response


_HANDLERS: dict[type, Callable[[GroupCoordinator, Call, object], None]] = {
    gm.JoinGroupRequest: membership.join,  # type: ignore[dict-item]
    gm.HeartbeatRequest: membership.heartbeat,  # type: ignore[dict-item]
    gm.LeaveGroupRequest: membership.leave,  # type: ignore[dict-item]
    gm.OffsetCommitRequest: offsets.commit,  # type: ignore[dict-item]
    gm.OffsetFetchRequest: offsets.fetch,  # type: ignore[dict-item]
    gm.DeleteGroupsRequest: offsets.delete_groups,  # type: ignore[dict-item]
    gm.DescribeGroupsRequest: admin.describe,  # type: ignore[dict-item]
    gm.ListGroupsRequest: admin.list_groups,  # type: ignore[dict-item]
}
