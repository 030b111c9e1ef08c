"""Seeded simulation of one group coordinator shard and a group of model consumers.

A ``GroupCoordinator`` behind a small broker shell (a log whose high watermark lags
the appends; once the high watermark passes a result's records the shell calls
``confirm`` and releases its responses, as the broker does) serves ``ModelMember``s
over per-member FIFO links that lose messages.
Faults: member crashes and restarts (static members come back with their instance
id), slow members (paused past their session or rebalance timeout), graceful leaves,
new members, a topic growing, failed appends (``fail()``), and coordinator fail-over:
the coordinator is thrown away (pending answers fail NOT_COORDINATOR, parked joins
too) and a new one is built by replaying the committed log — the old leader's
uncommitted tail is partly lost, partly kept (committed by the new leader).

Checked after every event:

- one owner: the coordinator's assignments are disjoint; among the member processes
  the coordinator still counts as members, no partition is held by two whose belief
  is of the current generation or the one before it (cooperative: a partition is never
  handed over while its previous owner still holds it); the assignments delivered for
  one generation are disjoint.
- committed offsets never go back: the group's offsets in the committed log prefix
  only grow, and the coordinator never answers below a commit it acknowledged.
- an OffsetFetch sees only committed offsets: every answer (a member's, for the
  partitions it is assigned; an admin's, for all, after every write) is exactly the
  latest value in the committed log prefix (-1: none) — never an offset a fail-over
  could still lose, never a stale one.

After the faults, a quiet period: the group must settle (Stable, every live member in
the current generation, every partition held by exactly one of them, the group's
members exactly the live processes, no KIP-394 pending member id left over).
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.coordinator import (
    CoordinatorRecord,
    CoordinatorResult,
    GroupConfig,
    GroupCoordinator,
    GroupState,
)
from mq.coordinator.records import OffsetCommitKey, decode
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol import group_messages as gm
from mq.protocol.messages import Request, Response
from mq.sim.group_members import GROUP, ModelMember
from mq.sim.scheduler import EventScheduler, InvariantViolation

CONFIG = GroupConfig(min_session_timeout_ms=100, max_session_timeout_ms=10_000, initial_rebalance_delay_ms=100,
                     max_size=50, offsets_retention_ms=10**12, offsets_retention_check_interval_ms=5_000)
EAGER_ASSIGNORS = (("range",), ("round-robin",), ("sticky",), ("sticky", "range"))
COOPERATIVE_ASSIGNORS = (("cooperative-sticky",), ("cooperative-sticky", "range"))
TICK_MS = 100
POLL_INTERVAL_MS = 200


@dataclass(frozen=True, slots=True)
class GroupSimRun:
    seed: int
    events: int
    generations: int
    commits: int
    faults: int
    failovers: int
    cooperative: bool


class GroupSim:
    def __init__(self, seed: int, *, members: int = 4, loss: float = 0.05) -> None:
        root = Rng(seed)
        self.rng, self.net_rng = root.fork("faults"), root.fork("network")
        self._coordinator_rng = root.fork("coordinators")
        self.scheduler = EventScheduler()
        self.topics = {"orders": 8, "clicks": 4}
        self.loss = loss
        self.cooperative = self.rng.random() < 0.5
        self.assignors = self.rng.choice(COOPERATIVE_ASSIGNORS if self.cooperative else EAGER_ASSIGNORS)
        self.coordinator = GroupCoordinator(0, CONFIG, rng=self._coordinator_rng.fork(0))
        self.log: list[CoordinatorRecord] = []
        self.high_watermark = 0
        self.pending: list[tuple[int, CoordinatorResult]] = []
        self.available_at_ms = 0
        self.origins: dict[int, tuple[ModelMember, int, Request]] = {}
        self._next_request_id = 0
        self._link_free_ms: dict[tuple[str, str], int] = {}
        self.members: list[ModelMember] = []
        self.committed: dict[TopicPartition, int] = {}
        self.acked: dict[TopicPartition, int] = {}
        self.delivered: dict[int, dict[str, frozenset[TopicPartition]]] = {}
        self.faults = self.failovers = self.commits = 0
        self._poll_due: int | None = None
        for i in range(members):
            self.add_member(f"m{i}", static=self.rng.random() < 0.4)
        self.scheduler.invariants.append(self.check)

    @property
    def now_ms(self) -> int:
        return self.scheduler.now_ms

    # ------------------------------------------------------------ members and links

    def add_member(self, name: str, *, static: bool) -> ModelMember:
        member = ModelMember(name, f"{name}-instance" if static else None, self.assignors, ("orders", "clicks"),
                             self._from_member, self._on_assigned)
        self.members.append(member)
        self._tick(member)
        return member

    def _tick(self, member: ModelMember) -> None:
        if not member.alive:
            return
        member.tick(self.now_ms, commit_now=self.rng.random() < 0.1, consumed=self.rng.randint(0, 3))
        self.scheduler.schedule(self.now_ms + TICK_MS, lambda: self._tick(member))

    def _link(self, name: str, direction: str) -> int | None:
        """When a message sent now arrives (FIFO per link), or None if it is lost."""
        if self.net_rng.random() < self.loss:
            return None
        key = (name, direction)
        at = max(self._link_free_ms.get(key, 0), self.now_ms + self.net_rng.randint(1, 15))
        self._link_free_ms[key] = at
        return at

    def _from_member(self, member: ModelMember, seq: int, request: Request) -> None:
        at = self._link(member.name, "up")
        if at is not None:
            self.scheduler.schedule(at, lambda: self._arrive(member, seq, request))

    def _to_member(self, request_id: int, response: Response) -> None:
        member, seq, request = self.origins.pop(request_id)
        if isinstance(response, gm.OffsetCommitResponse) and isinstance(request, gm.OffsetCommitRequest):
            self._acknowledged(request, response)
        at = self._link(member.name, "down")
        if at is not None:
            self.scheduler.schedule(at, lambda: member.receive(seq, request, response, self.now_ms))

    def _acknowledged(self, request: gm.OffsetCommitRequest, response: gm.OffsetCommitResponse) -> None:
        """A commit answered NONE (so its record is committed): remember the offset."""
        for topic, answer in zip(request.topics, response.topics, strict=True):
            for part, result in zip(topic.partitions, answer.partitions, strict=True):
                if result.error_code == ErrorCode.NONE:
                    self.commits += 1
                    tp = TopicPartition(topic.name, part.partition)
                    self.acked[tp] = max(self.acked.get(tp, -1), part.offset)

    def _on_assigned(self, member: ModelMember, generation: int, assignment: frozenset[TopicPartition]) -> None:
        owner = member.instance_id or member.belief.member_id
        seen = self.delivered.setdefault(generation, {})
        for other, theirs in seen.items():
            if other != owner and assignment & theirs:
                raise InvariantViolation(f"generation {generation}: {sorted(assignment & theirs)} delivered "
                                         f"to both {owner} and {other}")
        seen[owner] = assignment
        # OffsetFetch: newly assigned partitions start at the group's committed offset
        fetched = self.offset_fetch(sorted(assignment - member.positions.keys()))
        for tp, offset in fetched.items():
            member.positions[tp] = max(offset, 0)
        for tp in sorted(member.positions.keys() - assignment):
            del member.positions[tp]

    def offset_fetch(self, tps: list[TopicPartition] | None) -> dict[TopicPartition, int]:
        """An OffsetFetch answered by the current coordinator (``tps`` None: all the
        group's partitions), checked against the committed log prefix."""
        if tps is None:
            request = gm.OffsetFetchRequest(GROUP)
        elif not tps:
            return {}
        else:
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            request = gm.OffsetFetchRequest(GROUP, [gm.OffsetFetchTopic(t, ps) for t, ps in by_topic.items()])
        self._next_request_id += 1
        result = self.coordinator.handle(request, request_id=self._next_request_id, client_id="admin",
                                         client_host="/sim", topics=self.topics, now_ms=self.now_ms)
        [(_, response)] = result.responses
        assert isinstance(response, gm.OffsetFetchResponse) and not result.records
        answer = {TopicPartition(t.name, p.partition): p.offset for t in response.topics for p in t.partitions}
        for tp, offset in sorted(answer.items()):
            committed = self.committed.get(tp, -1)
            if offset != committed:
                what = "is not in the committed log prefix" if offset > committed else "is stale"
                raise InvariantViolation(f"OffsetFetch answered {offset} for {tp}: {what} "
                                         f"(committed: {committed}, high watermark {self.high_watermark})")
        if tps is None:
            missing = sorted(tp for tp in self.committed if tp not in answer)
            if missing:
                raise InvariantViolation(f"OffsetFetch of all partitions misses committed {missing}")
        return answer

    # ------------------------------------------------------------ the broker shell

    def _arrive(self, member: ModelMember, seq: int, request: Request) -> None:
        self._next_request_id += 1
        rid = self._next_request_id
        self.origins[rid] = (member, seq, request)
        if self.now_ms < self.available_at_ms:
            self._to_member(rid, _unavailable(request))
            return
        self._take(self.coordinator.handle(request, request_id=rid, client_id=member.name, client_host="/sim",
                                           topics=self.topics, now_ms=self.now_ms))

    def _take(self, result: CoordinatorResult) -> None:
        if result.records and self.rng.random() < 0.02:  # the append failed
            for rid, response in self.coordinator.fail(result, ErrorCode.REQUEST_TIMED_OUT):
                self._to_member(rid, response)
        elif result.records:
            self.log.extend(result.records)
            self.pending.append((len(self.log), result))
            end = len(self.log)
            stall = 300 if self.rng.random() < 0.05 else 0
            self.scheduler.schedule(self.now_ms + stall + self.rng.randint(2, 40), lambda: self._replicate(end))
            self.offset_fetch(None)  # an admin looks while the write is pending
        else:
            for rid, response in result.responses:
                self._to_member(rid, response)
        self.check_offsets()
        self._schedule_poll()

    def _replicate(self, end: int) -> None:
        """The followers caught up to ``end``: the high watermark moves."""
        end = min(end, len(self.log))
        for record in self.log[self.high_watermark:end]:
            decoded = decode(record)
            if decoded is not None and isinstance(decoded[0], OffsetCommitKey) and decoded[1] is not None:
                tp, offset = decoded[0].tp, decoded[1].offset  # type: ignore[union-attr]
                if offset < self.committed.get(tp, -1):
                    raise InvariantViolation(f"committed offset of {tp} went back: {self.committed[tp]} -> {offset}")
                self.committed[tp] = offset
        self.high_watermark = max(self.high_watermark, end)
        released = [p for p in self.pending if p[0] <= self.high_watermark]
        self.pending = [p for p in self.pending if p[0] > self.high_watermark]
        for _, result in released:
            self.coordinator.confirm(result)
            for rid, response in result.responses:
                self._to_member(rid, response)
        self.check_offsets()

    def _schedule_poll(self) -> None:
        deadline = self.coordinator.next_deadline_ms()
        due = self.now_ms + POLL_INTERVAL_MS if deadline is None else min(deadline, self.now_ms + POLL_INTERVAL_MS)
        if self._poll_due is None or due < self._poll_due or self._poll_due < self.now_ms:
            self._poll_due = max(due, self.now_ms)
            self.scheduler.schedule(self._poll_due, self._poll)

    def _poll(self) -> None:
        if self._poll_due is not None and self.now_ms < self._poll_due:
            return
        self._poll_due = None
        if self.now_ms >= self.available_at_ms:  # else fail_over scheduled one for then
            self._take(self.coordinator.poll(topics=self.topics, now_ms=self.now_ms))

    def fail_over(self) -> None:
        """The coordinator's broker dies; a new leader replays the committed log."""
        self.failovers += 1
        old = self.coordinator
        for _, result in self.pending:
            for rid, response in old.fail(result, ErrorCode.NOT_COORDINATOR):
                self._to_member(rid, response)
        self.pending = []
        for rid, response in old.unload():
            self._to_member(rid, response)
        kept = self.rng.randint(0, len(self.log) - self.high_watermark)
        self.log = self.log[:self.high_watermark + kept]
        self.coordinator = GroupCoordinator(0, CONFIG, rng=self._coordinator_rng.fork(self.failovers))
        for offset, record in enumerate(self.log):
            self.coordinator.replay(record, offset=offset)
        self._replicate(len(self.log))  # the new leader commits what it has
        self.available_at_ms = self.now_ms + self.rng.randint(20, 500)
        self.scheduler.schedule(self.available_at_ms, self._schedule_poll)

    # ------------------------------------------------------------ invariants

    def check(self) -> None:
        """After every event: one owner per partition (see the module docstring)."""
        group = self.coordinator.groups.get(GROUP)
        if group is None:
            return
        owner: dict[tuple[str, int], str] = {}
        for member in group.members.values():
            for tp in member.assignment:
                key = (tp.topic, tp.partition)
                if key in owner:
                    raise InvariantViolation(f"{tp} assigned to {owner[key]} and {member.member_id}")
                owner[key] = member.member_id
        holder: dict[tuple[str, int], str] = {}
        current = (group.generation, group.generation - 1)
        for process in self.members:
            b = process.belief
            if not b.held or not process.alive or b.generation not in current or b.member_id not in group.members:
                continue
            for tp in b.held:
                key = (tp.topic, tp.partition)
                if key in holder:
                    raise InvariantViolation(
                        f"{tp} held by {holder[key]} and {process.name} (the group is at {group.generation})")
                holder[key] = f"{process.name} (generation {b.generation})"

    def check_offsets(self) -> None:
        """After each change of the coordinator: it never answers below an acknowledged commit."""
        group = self.coordinator.groups.get(GROUP)
        for tp, offset in self.acked.items():
            value = None if group is None else group.offsets.get(tp)
            if value is None or value.offset < offset:
                raise InvariantViolation(f"{tp}: acknowledged commit {offset}, the coordinator has {value}")

    def check_settled(self) -> None:
        group = self.coordinator.groups.get(GROUP)
        live = [m for m in self.members if m.alive]
        if group is None or group.state != GroupState.STABLE:
            raise InvariantViolation(f"the group did not settle: {None if group is None else group.state}")
        held: dict[TopicPartition, str] = {}
        for process in live:
            if process.belief.generation != group.generation or process.needs_join:
                raise InvariantViolation(f"{process.name} is at generation {process.belief.generation}, "
                                         f"the group at {group.generation}")
            for tp in process.belief.held:
                if tp in held:
                    raise InvariantViolation(f"{tp} held by {held[tp]} and {process.name} after settling")
                held[tp] = process.name
        members = sorted(group.members)
        if members != sorted(p.belief.member_id for p in live):
            raise InvariantViolation(f"the group's members {members} are not the live processes "
                                     f"{sorted(p.belief.member_id for p in live)} after settling")
        if self.coordinator.pending_members:
            raise InvariantViolation(f"pending members left after settling: {self.coordinator.pending_members}")
        wanted = {TopicPartition(t, p) for t, n in self.topics.items() for p in range(n)}
        if live and set(held) != wanted:
            raise InvariantViolation(f"unheld after settling: {sorted(wanted - set(held))}")

    # ------------------------------------------------------------ faults

    def inject_fault(self) -> None:
        alive = [m for m in self.members if m.alive]
        kind = self.rng.choice(["crash", "pause", "pause", "failover", "join", "leave", "grow"])
        self.faults += 1
        if kind == "crash" and len(alive) > 1:
            victim = self.rng.choice(alive)
            victim.crash()
            self.scheduler.schedule(self.now_ms + self.rng.randint(200, 2_000),
                                    lambda: self.add_member(victim.name, static=victim.instance_id is not None))
        elif kind == "pause" and alive:
            self.rng.choice(alive).paused_until_ms = self.now_ms + self.rng.randint(300, 2_500)
        elif kind == "failover":
            self.fail_over()
        elif kind == "join" and len(alive) < 7:
            self.add_member(f"m{len(self.members)}", static=self.rng.random() < 0.4)
        elif kind == "leave" and len(alive) > 1:
            victim = self.rng.choice(alive)
            if victim.instance_id is None and victim.belief.member_id:
                leave = gm.LeaveGroupRequest(GROUP, [gm.MemberIdentity(victim.belief.member_id)])
                victim.seq += 1
                victim.in_flight["leave"] = (victim.seq, self.now_ms)
                self._from_member(victim, victim.seq, leave)
            victim.crash()
        elif kind == "grow" and self.topics["clicks"] < 6:
            self.topics["clicks"] += 2

    def run(self, *, faults_ms: int = 12_000, quiet_ms: int = 8_000) -> None:
        at = 0
        while True:
            at += self.rng.randint(100, 1_500)
            if at >= faults_ms:
                break
            self.scheduler.schedule(at, self.inject_fault)
        self.scheduler.schedule(POLL_INTERVAL_MS, self._schedule_poll)
        self.scheduler.run_until(until_ms=faults_ms)
        self.loss = 0.0
        self.scheduler.run_until(until_ms=faults_ms + quiet_ms)
        self.check_settled()


def _unavailable(request: Request) -> Response:
    code = ErrorCode.NOT_COORDINATOR
    if isinstance(request, gm.JoinGroupRequest):
        return gm.JoinGroupResponse(code)
    if isinstance(request, gm.OffsetCommitRequest):
        return gm.OffsetCommitResponse([gm.OffsetCommitTopicResponse(
            t.name, [gm.OffsetCommitPartitionResponse(p.partition, code) for p in t.partitions]) for t in request.topics])
    if isinstance(request, gm.LeaveGroupRequest):
        return gm.LeaveGroupResponse(code)
    return gm.HeartbeatResponse(code)


def group_schedule(seed: int) -> GroupSimRun:
    """One seeded run; raises InvariantViolation when a check fails."""
    sim = GroupSim(seed)
    sim.run()
    return GroupSimRun(seed, sim.scheduler.events_run, max(sim.delivered, default=0), sim.commits, sim.faults,
                       sim.failovers, sim.cooperative)
