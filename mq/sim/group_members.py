"""A model consumer for the group simulation: the client's rules, nothing else.

It follows what ``mq.client`` must do (Kafka's ``ConsumerCoordinator``):

- eager: before rejoining, commit and revoke *everything*; the new assignment is fresh.
- cooperative (the coordinator chose ``cooperative-sticky``): keep consuming while
  rejoining (reporting ``owned``); on the answer revoke what it drops (committing it
  first), take what it adds, and rejoin at once if something was revoked.
- MEMBER_ID_REQUIRED (KIP-394, a dynamic member's first join): rejoin at once with
  the member id of the answer; from then on a graceful leave can name the member even
  while its JoinGroup is parked.
- REBALANCE_IN_PROGRESS: rejoin. ILLEGAL_GENERATION: partitions are lost, rejoin with
  the same member id. UNKNOWN_MEMBER_ID: lost, rejoin as a new member.
  FENCED_INSTANCE_ID: another process took this static member's place; stop.
- Requests time out (lost messages) and are retried; answers to an older attempt are
  ignored. A member consumes the partitions it holds (its position moves on every
  tick) from the group's committed offset (read when they are assigned) and commits
  its positions; so only a zombie's commit could move a committed offset back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mq.coordinator.group import assignment_from_wire, assignment_to_wire
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol import group_messages as gm
from mq.protocol.messages import Request, Response

GROUP = "sim-group"
SESSION_MS = 1_000
REBALANCE_MS = 1_500
HEARTBEAT_MS = 150
REQUEST_TIMEOUT_MS = 600
JOIN_TIMEOUT_MS = REBALANCE_MS + 800


@dataclass(slots=True)
class Belief:
    """What a member process believes: its id, generation and the partitions it holds."""

    member_id: str = ""
    generation: int = -1
    held: frozenset[TopicPartition] = frozenset()
    cooperative: bool = False


@dataclass(slots=True)
class ModelMember:
    name: str  # also the client id
    instance_id: str | None
    assignors: tuple[str, ...]
    topics: tuple[str, ...]
    send: Callable[[ModelMember, int, Request], None]  # (member, seq, request)
    on_assigned: Callable[[ModelMember, int, frozenset[TopicPartition]], None]
    belief: Belief = field(default_factory=Belief)
    alive: bool = True
    paused_until_ms: int = 0
    needs_join: bool = True
    seq: int = 0
    in_flight: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (seq, sent_at_ms)
    last_heartbeat_ms: int = -1_000_000
    positions: dict[TopicPartition, int] = field(default_factory=dict)

    # ------------------------------------------------------------ driving

    def tick(self, now_ms: int, commit_now: bool, consumed: int) -> None:
        if not self.alive or now_ms < self.paused_until_ms:
            return
        for tp in self.belief.held:
            self.positions[tp] = self.positions.get(tp, 0) + consumed
        for kind, (_, sent_ms) in list(self.in_flight.items()):
            timeout_ms = JOIN_TIMEOUT_MS if kind == "join" else REQUEST_TIMEOUT_MS
            if now_ms - sent_ms >= timeout_ms:
                del self.in_flight[kind]  # lost: retry below
        if self.needs_join:
            if "join" not in self.in_flight:
                self._join(now_ms)
            return
        if "heartbeat" not in self.in_flight and now_ms - self.last_heartbeat_ms >= HEARTBEAT_MS:
            self.last_heartbeat_ms = now_ms
            self._send("heartbeat", now_ms, gm.HeartbeatRequest(
                GROUP, self.belief.generation, self.belief.member_id, self.instance_id))
        if commit_now and self.belief.held and "commit" not in self.in_flight:
            self._commit(self.belief.held, now_ms)

    def _send(self, kind: str, now_ms: int, request: Request) -> None:
        self.seq += 1
        self.in_flight[kind] = (self.seq, now_ms)
        self.send(self, self.seq, request)

    def _join(self, now_ms: int) -> None:
        b = self.belief
        if not b.cooperative and b.held:  # eager: commit and revoke everything first
            self._commit(b.held, now_ms)
            self.belief = Belief(b.member_id, b.generation, frozenset(), b.cooperative)
            self.positions.clear()
        owned = tuple(sorted(self.belief.held))
        self._send("join", now_ms, gm.JoinGroupRequest(
            GROUP, SESSION_MS, REBALANCE_MS, self.belief.member_id, self.instance_id, "consumer",
            list(self.assignors), list(self.topics), None, assignment_to_wire(owned)))

    def _commit(self, partitions: frozenset[TopicPartition], now_ms: int) -> None:
        by_topic: dict[str, list[gm.OffsetCommitPartition]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(gm.OffsetCommitPartition(tp.partition, self.positions.get(tp, 0)))
        self._send("commit", now_ms, gm.OffsetCommitRequest(
            GROUP, [gm.OffsetCommitTopic(t, parts) for t, parts in by_topic.items()],
            self.belief.generation, self.belief.member_id, self.instance_id))

    def crash(self) -> None:
        self.alive = False
        self.in_flight.clear()
        self.belief = Belief()
        self.positions.clear()

    # ------------------------------------------------------------ answers

    def receive(self, seq: int, request: Request, response: Response, now_ms: int) -> None:
        kind = {gm.JoinGroupRequest: "join", gm.HeartbeatRequest: "heartbeat",
                gm.OffsetCommitRequest: "commit"}.get(type(request), "other")
        current = self.in_flight.get(kind)
        if not self.alive or current is None or current[0] != seq:
            return  # an answer to an attempt already given up on
        del self.in_flight[kind]
        if isinstance(response, gm.JoinGroupResponse):
            self._on_join(response, now_ms)
        elif isinstance(response, gm.HeartbeatResponse):
            self._on_error(ErrorCode(response.error_code))

    def _on_join(self, response: gm.JoinGroupResponse, now_ms: int) -> None:
        code = ErrorCode(response.error_code)
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.belief.member_id = response.member_id
            self.needs_join = True
            if now_ms >= self.paused_until_ms:  # a paused process rejoins on its next tick
                self._join(now_ms)
            return
        if code != ErrorCode.NONE:
            if response.member_id and code not in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                self.belief.member_id = response.member_id  # allocated: rejoin with it
            self._on_error(code)
            return
        new = frozenset(assignment_from_wire(response.assignment))
        cooperative = response.assignor == "cooperative-sticky"
        revoked = self.belief.held - new if cooperative else frozenset()
        self.belief = Belief(response.member_id, response.generation_id, new, cooperative)
        if revoked:
            self._commit(revoked, now_ms)  # in the new generation, before the rejoin
        self.needs_join = bool(revoked)
        self.last_heartbeat_ms = now_ms
        self.on_assigned(self, response.generation_id, new)

    def _on_error(self, code: ErrorCode) -> None:
        b = self.belief
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.needs_join = True
        elif code == ErrorCode.ILLEGAL_GENERATION:
            self.belief = Belief(b.member_id, -1, frozenset(), b.cooperative)
            self.positions.clear()
            self.needs_join = True
        elif code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.belief = Belief("", -1, frozenset(), b.cooperative)
            self.positions.clear()
            self.needs_join = True
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            self.crash()  # a newer process has this instance id
        # NOT_COORDINATOR, REQUEST_TIMED_OUT, ...: retried on the next tick
