"""Seeded simulation of a share coordinator and the members of one share group.

A real ``ShareCoordinator`` behind a small broker shell: its results' records go to
an in-memory ``__share_group_state`` partition and are committed after a delay (the
high watermark); responses are released at commit, as the broker does. One data
partition grows while members work (with control-batch offsets the coordinator must
skip). ``ModelMember``s heartbeat, fetch with piggybacked acknowledgements and decide
per record: accept, release, reject (a dead letter), or forget it (its lock expires);
dead letters they are handed they "write" to a dead-letter list and accept.

Faults: member crashes (no leave: locks wait for expiry or the session timeout), new
members, and coordinator fail-over: the coordinator is thrown away with its
uncommitted writes (their answers fail NOT_COORDINATOR) and a new one is built by
replaying the committed records, as ``mq.broker.shares`` does.

Checked after every event (``InvariantViolation`` names it):

- **one holder**: within one coordinator incarnation, no offset is held, with an
  unexpired lock, by two members;
- **acknowledged stays acknowledged**: an offset whose accept was confirmed (the
  answer came back) is never handed out again, for processing or as a dead letter;
- **exact delivery counts**: every record handed out for processing carries a
  delivery count of one more than the times it was handed out before, and never more
  than ``share.delivery.attempt.limit``; a dead letter carries the count it died with.

Then a quiet period with one healthy member: every offset of the partition must end
accepted or dead-lettered (and dead-lettered only when rejected or out of attempts),
and the share-partition start offset reach the log end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.coordinator.records import CoordinatorRecord
from mq.coordinator.share_coordinator import ShareCoordinator
from mq.coordinator.share_group import ShareConfig
from mq.coordinator.share_partition import REASON_EXHAUSTED, REASON_REJECTED, SharePartitionConfig
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol import share_messages as s
from mq.sim.scheduler import EventScheduler, InvariantViolation

TOPIC = "jobs"
TP = TopicPartition(TOPIC, 0)
GROUP = "workers"
LOCK_MS = 400
LIMIT = 3


@dataclass
class SimLog:
    """The data partition: offsets below ``end``; ``gaps`` hold control batches."""

    end: int = 0
    gaps: set[int] = field(default_factory=set)

    def bounds(self, tp: TopicPartition) -> tuple[int, int] | None:
        return (0, self.end) if tp == TP else None

    def scan(self, tp: TopicPartition, from_offset: int, max_bytes: int) -> tuple[list[tuple[int, int]], int]:
        batches: list[tuple[int, int]] = []
        to = min(self.end, from_offset + 25)
        for o in range(from_offset, to):
            if o in self.gaps:
                continue
            if batches and batches[-1][1] == o - 1:
                batches[-1] = (batches[-1][0], o)
            else:
                batches.append((o, o))
        return batches, to

    def read(self, tp: TopicPartition, first_offset: int, last_offset: int) -> bytes:
        return b""  # the model members know every offset's content: its offset


@dataclass
class Member:
    name: str
    member_id: str = ""
    epoch: int = 0
    alive: bool = True
    held: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> (incarnation, lock deadline)
    acks: list[s.AcknowledgementBatch] = field(default_factory=list)
    in_flight: bool = False


@dataclass
class ShareSimRun:
    seed: int
    events: int = 0
    deliveries: int = 0
    redeliveries: int = 0
    dead_letters: int = 0
    failovers: int = 0
    crashes: int = 0


class ShareSim:
    def __init__(self, seed: int) -> None:
        self.rng = Rng(seed)
        self.sched = EventScheduler()
        self.config = ShareConfig(SharePartitionConfig(LOCK_MS, LIMIT, 40), session_timeout_ms=1500,
                                  heartbeat_interval_ms=100, auto_offset_reset="earliest")
        self.log = SimLog()
        self.committed: list[CoordinatorRecord] = []
        self.pending: list[tuple[int, list[CoordinatorRecord], list[tuple[int, object]]]] = []  # (id, records, answers)
        self.incarnation = 0
        self.coordinator = self._new_coordinator()
        self.members: list[Member] = []
        self.waiting: dict[int, tuple[Member, object, int, int]] = {}  # id -> (member, request, sent, incarnation)
        self.quiet = False  # the end: no faults, members accept everything
        self.next_id = 0
        self.accepted: set[int] = set()  # offsets whose accept was confirmed
        self.dead: dict[int, tuple[str, int]] = {}  # offset -> (reason, delivery count) written to the DLQ
        self.rejected: set[int] = set()
        self.handed: dict[int, int] = {}  # offset -> deliveries for processing
        self.run = ShareSimRun(seed)
        self.sched.invariants.append(self._one_holder)

    def _new_coordinator(self) -> ShareCoordinator:
        self.incarnation += 1
        c = ShareCoordinator(0, self.config, rng=self.rng.fork("coordinator", self.incarnation))
        for record in self.committed:
            c.replay(record)
        return c

    # ------------------------------------------------------------ the shell

    def _call(self, member: Member, request: object) -> None:
        self.next_id += 1
        rid = self.next_id
        self.waiting[rid] = (member, request, self.sched.now_ms, self.incarnation)
        result = self.coordinator.handle(request, request_id=rid, client_id=member.name,  # type: ignore[arg-type]
                                         client_host="sim", topics={TOPIC: 1}, log=self.log, now_ms=self.sched.now_ms)
        self._write(result.records, result.responses)

    def _write(self, records: list[CoordinatorRecord], answers: list) -> None:
        if not records:
            for rid, response in answers:
                self._deliver(rid, response)
            return
        entry = (self.incarnation, records, answers)
        self.pending.append(entry)  # type: ignore[arg-type]
        self.sched.schedule(self.sched.now_ms + self.rng.randint(1, 30), lambda: self._commit(entry))

    def _commit(self, entry: tuple) -> None:
        """The high watermark passed ``entry``: it and every write before it commit."""
        if entry not in self.pending:
            return  # lost in a fail-over, or committed with a later one
        upto = self.pending.index(entry) + 1
        done, self.pending = self.pending[:upto], self.pending[upto:]
        for _, records, answers in done:
            self.committed.extend(records)
            for rid, response in answers:
                self._deliver(rid, response)

    def _failover(self) -> None:
        self.run.failovers += 1
        lost, self.pending = self.pending, []
        if lost and self.rng.random() < 0.5:  # the new leader had some of the tail
            kept = lost[: self.rng.randint(0, len(lost))]
            for entry in kept:
                self.committed.extend(entry[1])
                for rid, response in entry[2]:
                    self._deliver(rid, response)
            lost = lost[len(kept):]
        for entry in lost:
            for rid, _ in entry[2]:
                self.waiting.pop(rid)[0].in_flight = False
        self.coordinator = self._new_coordinator()

    def _poll_coordinator(self) -> None:
        result = self.coordinator.poll(now_ms=self.sched.now_ms)
        self._write(result.records, result.responses)
        self.sched.schedule(self.sched.now_ms + 50, self._poll_coordinator)

    # ------------------------------------------------------------ members

    def _deliver(self, rid: int, response: object) -> None:
        member, request, sent_ms, incarnation = self.waiting.pop(rid)
        member.in_flight = False
        if isinstance(response, (s.ShareAcknowledgeResponse, s.ShareFetchResponse)):
            sent = request.acknowledgements  # type: ignore[attr-defined]
            for part, result in zip(sent, response.acknowledgements, strict=False):
                if result.error_code == ErrorCode.NONE:  # accepted even if the member died since
                    for b in part.batches:
                        if b.ack_type == 1:
                            self.accepted.update(range(b.first_offset, b.last_offset + 1))
        if isinstance(response, s.ShareFetchResponse):
            for part in response.partitions:
                for a in part.acquired:
                    self._count(a)  # handed out, whether or not the member still lives to see it
        if not member.alive:
            return
        if isinstance(response, s.ShareGroupHeartbeatResponse):
            if response.error_code == ErrorCode.NONE:
                member.member_id, member.epoch = response.member_id, response.member_epoch
            elif response.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self._rejoin(member)
            return
        if isinstance(response, (s.ShareAcknowledgeResponse, s.ShareFetchResponse)) \
                and response.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._rejoin(member)
            return
        if isinstance(response, s.ShareFetchResponse):
            for part in response.partitions:
                for a in part.acquired:
                    self._received(member, a, sent_ms, incarnation)

    def _count(self, a: s.AcquiredRecords) -> None:
        now = self.sched.now_ms
        for o in range(a.first_offset, a.last_offset + 1):
            if o in self.accepted:
                raise InvariantViolation(f"t={now}: offset {o} handed out again after its accept was confirmed")
            if a.dead_letter_reason:
                expected = LIMIT if a.dead_letter_reason == REASON_EXHAUSTED else a.delivery_count
                if a.delivery_count != expected or a.delivery_count != self.handed.get(o, 0):
                    raise InvariantViolation(f"t={now}: dead letter {o} count {a.delivery_count}, "
                                             f"handed out {self.handed.get(o, 0)} times ({a.dead_letter_reason})")
            else:
                self.handed[o] = self.handed.get(o, 0) + 1
                self.run.deliveries += 1
                self.run.redeliveries += self.handed[o] > 1
                if a.delivery_count != self.handed[o] or a.delivery_count > LIMIT:
                    raise InvariantViolation(f"t={now}: offset {o} delivery count {a.delivery_count}, "
                                             f"handed out {self.handed[o]} times")

    def _received(self, member: Member, a: s.AcquiredRecords, sent_ms: int, incarnation: int) -> None:
        """The lock started no earlier than the request was sent, under the coordinator
        incarnation that answered it."""
        for o in range(a.first_offset, a.last_offset + 1):
            member.held[o] = (incarnation, sent_ms + LOCK_MS)
            self._decide(member, o, a.dead_letter_reason, a.delivery_count)

    def _decide(self, member: Member, o: int, reason: str, count: int) -> None:
        if reason:
            self.dead.setdefault(o, (reason, count))
            self.run.dead_letters += 1
            member.acks.append(s.AcknowledgementBatch(o, o, 1))
            return
        roll = 1.0 if self.quiet else self.rng.random()
        if roll < 0.05:
            self.rejected.add(o)
            member.acks.append(s.AcknowledgementBatch(o, o, 3))
        elif roll < 0.17:
            member.acks.append(s.AcknowledgementBatch(o, o, 2))
        elif roll < 0.25:
            pass  # forgotten: the lock expires
        else:
            member.acks.append(s.AcknowledgementBatch(o, o, 1))
        if not 0.17 <= roll < 0.25:
            member.held.pop(o, None)

    def _rejoin(self, member: Member) -> None:
        member.member_id, member.epoch = "", 0
        member.held.clear()
        member.acks.clear()

    def _tick(self, member: Member) -> None:
        if not member.alive:
            return
        if not member.in_flight:
            member.in_flight = True
            if not member.member_id or self.rng.random() < 0.1:
                self._call(member, s.ShareGroupHeartbeatRequest(GROUP, member.member_id, member.epoch, [TOPIC]))
            else:
                acks = [s.PartitionAcknowledgements(TOPIC, 0, [b]) for b in member.acks]  # one result each
                member.acks = []
                if self.rng.random() < 0.2 and acks:
                    self._call(member, s.ShareAcknowledgeRequest(GROUP, member.member_id, acks))
                else:
                    self._call(member, s.ShareFetchRequest(GROUP, member.member_id, self.rng.randint(1, 12),
                                                           acknowledgements=acks))
        self.sched.schedule(self.sched.now_ms + self.rng.randint(5, 60), lambda: self._tick(member))

    def _add_member(self) -> None:
        member = Member(f"m{len(self.members)}")
        self.members.append(member)
        self._tick(member)

    def _chaos(self) -> None:
        if self.quiet:
            return
        roll = self.rng.random()
        live = [m for m in self.members if m.alive]
        if roll < 0.3 and len(live) > 1:
            victim = self.rng.choice(live)
            victim.alive = False  # a crash: no leave, its locks wait for expiry
            self.run.crashes += 1
        elif roll < 0.55:
            self._failover()
        elif roll < 0.8:
            self._add_member()
        self.sched.schedule(self.sched.now_ms + self.rng.randint(200, 700), self._chaos)

    def _produce(self) -> None:
        for _ in range(self.rng.randint(1, 8)):
            if self.rng.random() < 0.05:
                self.log.gaps.add(self.log.end)  # a control batch: never handed out
            self.log.end += 1
        if self.sched.now_ms < 6000:
            self.sched.schedule(self.sched.now_ms + self.rng.randint(10, 80), self._produce)

    # ------------------------------------------------------------ invariants

    def _one_holder(self) -> None:
        now = self.sched.now_ms
        holders: dict[int, str] = {}
        for m in self.members:
            if not m.alive:
                continue
            for o, (incarnation, deadline) in m.held.items():
                if incarnation == self.incarnation and deadline > now:
                    if o in holders:
                        raise InvariantViolation(f"t={now}: offset {o} held by {holders[o]} and {m.name}")
                    holders[o] = m.name

    def finish(self) -> None:
        group = self.coordinator.groups.get(GROUP)
        sp = None if group is None else group.partitions.get(TP)
        data = [o for o in range(self.log.end) if o not in self.log.gaps]
        if sp is None or sp.start_offset != self.log.end:
            raise InvariantViolation(f"the share-partition start offset {None if sp is None else sp.start_offset} "
                                     f"never reached the log end {self.log.end}")
        for o in data:
            if o not in self.accepted and o not in self.dead:
                raise InvariantViolation(f"offset {o} neither accepted nor dead-lettered: lost")
        for o, (reason, count) in self.dead.items():
            if reason == REASON_REJECTED and o not in self.rejected:
                raise InvariantViolation(f"offset {o} dead-lettered as rejected but never rejected")
            if reason == REASON_EXHAUSTED and count != LIMIT:
                raise InvariantViolation(f"offset {o} exhausted after {count} deliveries, limit {LIMIT}")


def share_schedule(seed: int) -> ShareSimRun:
    sim = ShareSim(seed)
    for _ in range(3):
        sim._add_member()
    sim.sched.schedule(0, sim._produce)
    sim.sched.schedule(0, sim._poll_coordinator)
    sim.sched.schedule(300, sim._chaos)
    sim.sched.run_until(until_ms=6000)
    # Quiet: no more faults; every member stops and a fresh one that accepts everything joins.
    sim.quiet = True
    for m in sim.members:
        m.alive = False
    healthy = Member("healthy")
    sim.members.append(healthy)
    sim._tick(healthy)
    sim.sched.run_until(lambda: _drained(sim), until_ms=60_000)
    sim.finish()
    sim.run.events = sim.sched.events_run
    return sim.run


def _drained(sim: ShareSim) -> bool:
    group = sim.coordinator.groups.get(GROUP)
    sp = None if group is None else group.partitions.get(TP)
    return sp is not None and sp.start_offset == sim.log.end and not sim.pending
