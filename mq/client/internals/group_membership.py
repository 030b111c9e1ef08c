"""ConsumerCoordinator: a consumer's membership in its group, as a sans-IO state machine
(Kafka's ``AbstractCoordinator`` + ``ConsumerCoordinator``, without the network).

The shell (``mq.client.group_consumer``) asks what to send next and hands back what
came in; time is always an argument (``now_ms``). States:

    UNJOINED ──join_request──▶ REBALANCING ──on_join_response(NONE)──▶ STABLE
       ▲                            │ (error: retry, or lose the partitions)  │
       └──── leave / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED ◀────────┘

The coordinator computes assignments (no SyncGroup): JoinGroup's response carries this
member's partitions for the new generation. Two rebalance protocols, chosen by the
assignor the coordinator picked:

- **eager**: before rejoining, the member revokes everything it owns
  (``prepare_join`` returns it; the shell commits, calls ``on_revoke``, clears it);
- **cooperative** (``cooperative-sticky``, KIP-429): the member rejoins with ``owned``
  and keeps consuming; the new assignment's missing partitions are revoked, the new
  ones assigned. After revoking some it rejoins at once (the hand-off ends in the next
  generation).

A member whose generation is gone (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID, or its own max.poll.interval expiring) has *lost* its partitions:
another member may own them already, so they are dropped without a commit
(``take_lost`` → ``on_lost``). A fenced static member also gets the error raised.

KIP-394: a dynamic member's first JoinGroup (no member id) is answered at once with
MEMBER_ID_REQUIRED and an allocated id; the member rejoins with it at once. So while
its JoinGroup is parked it knows its id and ``leave_group`` can name it.

Heartbeats run only while STABLE, every ``heartbeat_interval_ms``. Without any heartbeat
answer from the coordinator for ``session_timeout_ms`` (whatever its error code, except
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE: an answer proves it alive) the coordinator is
presumed gone and is looked up again (the coordinator will have removed the member by
then: the next heartbeat or join says so). REBALANCE_IN_PROGRESS asks a STABLE member of
the current generation to rejoin; an answer to a request sent before this member's
JoinGroup (older generation, or the join in flight) asks for nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from mq.client.internals.offset_commit import error_code
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.group_messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    TopicPartitions,
)

COOPERATIVE_STICKY = "cooperative-sticky"
ASSIGNORS: tuple[str, ...] = ("range", "round-robin", "sticky", COOPERATIVE_STICKY)

COORDINATOR_GONE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
"""The coordinator moved or is down: look it up again."""

GENERATION_GONE = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
                             ErrorCode.FENCED_INSTANCE_ID})
"""This member is no longer part of the generation: its partitions are lost."""


class MemberState(Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"  # a JoinGroup is in flight
    STABLE = "stable"


@dataclass(frozen=True, slots=True)
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class JoinOutcome:
    """What a JoinGroup answer means for the application (applied from poll)."""

    assigned: tuple[TopicPartition, ...] = ()  # new in this generation: on_assign
    revoked: tuple[TopicPartition, ...] = ()  # owned before, not any more: commit, on_revoke
    joined: bool = False
    error: MqError | None = None  # fatal: raise from poll
    rejoin_now: bool = False  # MEMBER_ID_REQUIRED (KIP-394): send the next JoinGroup at once


def group_partitions(tps: Iterable[TopicPartition]) -> list[TopicPartitions]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(tps)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [TopicPartitions(t, p) for t, p in by_topic.items()]


def flatten(assignment: Sequence[TopicPartitions]) -> list[TopicPartition]:
    return sorted({TopicPartition(t.topic, p) for t in assignment for p in t.partitions})


def normalize_assignors(assignor: str | Sequence[str]) -> tuple[str, ...]:
    names = (assignor,) if isinstance(assignor, str) else tuple(assignor)
    if not names:
        raise MqError(ErrorCode.INVALID_CONFIG, "assignor: name at least one partition assignor")
    for name in names:
        if name not in ASSIGNORS:
            raise MqError(ErrorCode.INVALID_CONFIG,
                          f"unknown assignor {name!r}; choose from {', '.join(ASSIGNORS)}")
    return tuple(dict.fromkeys(names))


class ConsumerCoordinator:
    def __init__(self, group_id: str, *, now_ms: int, group_instance_id: str | None = None,
                 assignors: str | Sequence[str] = ("range",), session_timeout_ms: int = 45_000,
                 rebalance_timeout_ms: int = 300_000, heartbeat_interval_ms: int = 3_000,
                 max_poll_interval_ms: int = 300_000, retry_backoff_ms: int = 100) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise MqError(ErrorCode.INVALID_CONFIG, "group_id must be a non-empty string")
        if group_instance_id is not None and not group_instance_id:
            raise MqError(ErrorCode.INVALID_CONFIG, "group_instance_id must be None or non-empty")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise MqError(ErrorCode.INVALID_CONFIG,
                          f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be lower than "
                          f"session_timeout_ms ({session_timeout_ms})")
        for name, value in (("session_timeout_ms", session_timeout_ms),
                            ("heartbeat_interval_ms", heartbeat_interval_ms),
                            ("max_poll_interval_ms", max_poll_interval_ms),
                            ("rebalance_timeout_ms", rebalance_timeout_ms)):
            if value <= 0:
                raise MqError(ErrorCode.INVALID_CONFIG, f"{name} must be positive, not {value}")
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.assignors = normalize_assignors(assignors)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.retry_backoff_ms = retry_backoff_ms

        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation_id = -1
        self.protocol: str | None = None  # the assignor the coordinator chose
        self.coordinator: Coordinator | None = None
        self._find_after_ms = 0
        # subscription
        self.topics: tuple[str, ...] = ()
        self.pattern: str | None = None
        self.subscribed = False
        self._subscription_version = 0
        self._joined_version = -1  # subscription version the last join carried
        # membership
        self.owned: list[TopicPartition] = []
        self.rejoin_needed = False
        self.rejoin_reason = ""
        self._join_after_ms = 0
        self._lost_pending = False
        self._fatal: MqError | None = None
        # timers
        self._heartbeat_next_ms = now_ms
        self._heartbeat_ok_ms = now_ms
        self.heartbeat_in_flight = False
        self.last_poll_ms = now_ms

    # ------------------------------------------------------------------ subscription

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_cooperative(self) -> bool:
        """Cooperative iff the chosen assignor (before the first join: the preferred one)
        is cooperative-sticky."""
        return (self.protocol or self.assignors[0]) == COOPERATIVE_STICKY

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None) -> bool:
        """Set the subscription; True if it changed (a rejoin is then needed)."""
        if (topics is None) == (pattern is None):
            raise MqError(ErrorCode.INVALID_CONFIG, "subscribe: give topics or pattern, not both")
        new_topics = tuple(sorted(set(topics))) if topics is not None else ()
        if topics is not None and (not new_topics or not all(isinstance(t, str) and t for t in new_topics)):
            raise MqError(ErrorCode.INVALID_CONFIG, "subscribe: topics must be non-empty names")
        changed = not self.subscribed or new_topics != self.topics or pattern != self.pattern
        self.topics, self.pattern, self.subscribed = new_topics, pattern, True
        if changed:
            self._subscription_version += 1
            self.request_rejoin("subscription changed")
        return changed

    def unsubscribe(self) -> None:
        self.topics, self.pattern, self.subscribed = (), None, False
        self.rejoin_needed = False
        self._subscription_version += 1

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            self.rejoin_needed = True
            self.rejoin_reason = reason

    # ------------------------------------------------------------------ coordinator discovery

    def coordinator_needed(self, now_ms: int) -> bool:
        """A FindCoordinator should be sent now."""
        return self.coordinator is None and now_ms >= self._find_after_ms

    def time_to_find_ms(self, now_ms: int) -> int:
        return max(0, self._find_after_ms - now_ms)

    def find_coordinator_request(self) -> FindCoordinatorRequest:
        return FindCoordinatorRequest(key=self.group_id)

    def on_find_coordinator(self, response: FindCoordinatorResponse, now_ms: int) -> MqError | None:
        """Learn the coordinator; a retriable error backs off; a fatal one is returned."""
        code = error_code(response.error_code)
        if code == ErrorCode.NONE and response.node_id >= 0:
            self.coordinator = Coordinator(response.node_id, response.host, response.port)
            self._heartbeat_ok_ms = now_ms  # a new coordinator gets a full session
            return None
        self._find_after_ms = now_ms + self.retry_backoff_ms
        if code == ErrorCode.NONE or code.retriable:
            return None
        return MqError(code, response.error_message or f"FindCoordinator for {self.group_id!r} failed")

    def on_find_coordinator_failed(self, now_ms: int) -> None:
        self._find_after_ms = now_ms + self.retry_backoff_ms

    def coordinator_unknown(self, now_ms: int, reason: str = "") -> None:
        """NOT_COORDINATOR, a lost connection, a silent session: look it up again."""
        if self.coordinator is not None:
            self.coordinator = None
            self._find_after_ms = now_ms  # the first lookup at once, later ones back off
        self.heartbeat_in_flight = False

    # ------------------------------------------------------------------ joining

    def need_rejoin(self, now_ms: int) -> bool:
        """A JoinGroup should be sent now (the coordinator must be known first)."""
        if not self.subscribed or self.state == MemberState.REBALANCING:
            return False
        if self.state == MemberState.UNJOINED or self.rejoin_needed:
            return now_ms >= self._join_after_ms
        return False

    def time_to_join_ms(self, now_ms: int) -> int:
        return max(0, self._join_after_ms - now_ms)

    def prepare_join(self) -> tuple[TopicPartition, ...]:
        """Before a JoinGroup: an eager member revokes everything it owns (returned: the
        caller commits them, calls on_revoke and stops fetching them). A cooperative
        member keeps them."""
        if self.is_cooperative or not self.owned:
            return ()
        revoked, self.owned = tuple(self.owned), []
        return revoked

    def join_request(self, now_ms: int, *, reason: str = "") -> JoinGroupRequest:
        self.state = MemberState.REBALANCING
        self._joined_version = self._subscription_version
        reason = reason or self.rejoin_reason or "joining"
        self.rejoin_needed = False
        self.rejoin_reason = ""
        self.heartbeat_in_flight = False
        return JoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.group_instance_id, assignors=list(self.assignors),
            topics=list(self.topics) if self.pattern is None else [], pattern=self.pattern,
            owned=group_partitions(self.owned) if self.is_cooperative else [], reason=reason)

    def on_join_response(self, response: JoinGroupResponse, now_ms: int) -> JoinOutcome:
        code = error_code(response.error_code)
        if code == ErrorCode.NONE:
            return self._joined(response, now_ms)
        self.state = MemberState.UNJOINED if self.generation_id < 0 else MemberState.STABLE
        self.rejoin_needed = True
        self.rejoin_reason = f"JoinGroup answered {code.name}"
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            if not response.member_id:  # a broken answer: retry after the backoff
                self._join_after_ms = now_ms + self.retry_backoff_ms
                return JoinOutcome()
            # KIP-394: the coordinator allocated an id; rejoin with it at once (no backoff).
            # From now on close() can send LeaveGroup even while the rejoin is parked.
            self.member_id = response.member_id
            self.rejoin_reason = "rejoining with the member id the coordinator allocated"
            self._join_after_ms = now_ms
            return JoinOutcome(rejoin_now=True)
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return JoinOutcome()
        if code in GENERATION_GONE:
            return JoinOutcome(error=self._generation_gone(code, now_ms, response.error_message))
        if code in COORDINATOR_GONE:
            self.coordinator_unknown(now_ms)
            return JoinOutcome()
        self._join_after_ms = now_ms + self.retry_backoff_ms
        if code.retriable or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return JoinOutcome()
        # INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED, ...
        return JoinOutcome(error=MqError(code, response.error_message or
                                         f"joining group {self.group_id!r} failed: {code.description}"))

    def _joined(self, response: JoinGroupResponse, now_ms: int) -> JoinOutcome:
        new = flatten(response.assignment)
        old = self.owned
        new_set, old_set = set(new), set(old)
        revoked = tuple(tp for tp in old if tp not in new_set)
        assigned = tuple(tp for tp in new if tp not in old_set)
        self.member_id = response.member_id or self.member_id
        self.generation_id = response.generation_id
        self.protocol = response.assignor or self.protocol
        self.owned = new
        self.state = MemberState.STABLE
        self._heartbeat_ok_ms = now_ms
        self._heartbeat_next_ms = now_ms + self.heartbeat_interval_ms
        if self._joined_version != self._subscription_version:
            self.request_rejoin("subscription changed during the rebalance")
        elif revoked and self.is_cooperative:
            self.request_rejoin("cooperative: partitions revoked")  # KIP-429's second round
        return JoinOutcome(assigned=assigned, revoked=revoked, joined=True)

    def on_join_failed(self, now_ms: int, error: MqError) -> None:
        """The JoinGroup got no answer (disconnect, timeout): find the coordinator, rejoin."""
        self.state = MemberState.UNJOINED if self.generation_id < 0 else MemberState.STABLE
        self.request_rejoin(f"JoinGroup failed: {error.code.name}")
        self.coordinator_unknown(now_ms)
        self._join_after_ms = now_ms + self.retry_backoff_ms

    # ------------------------------------------------------------------ heartbeats

    def heartbeat_due(self, now_ms: int) -> bool:
        return (self.state == MemberState.STABLE and self.coordinator is not None
                and not self.heartbeat_in_flight and now_ms >= self._heartbeat_next_ms)

    def heartbeat_request(self, now_ms: int) -> HeartbeatRequest:
        self.heartbeat_in_flight = True
        self._heartbeat_next_ms = now_ms + self.heartbeat_interval_ms
        return HeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id,
                                member_id=self.member_id, group_instance_id=self.group_instance_id)

    def on_heartbeat_response(self, response: HeartbeatResponse, now_ms: int,
                              *, generation_id: int) -> MqError | None:
        """Apply a heartbeat answer (for the generation it was sent in); a fenced member
        gets an error to raise from poll."""
        self.heartbeat_in_flight = False
        code = error_code(response.error_code)
        if code not in COORDINATOR_GONE:
            # Any answer proves the coordinator alive (REBALANCE_IN_PROGRESS too: an eager
            # member still committing before its rejoin must not give up on it).
            self._heartbeat_ok_ms = max(self._heartbeat_ok_ms, now_ms)
        if generation_id != self.generation_id:
            return None  # the member rejoined since: the answer is stale
        if code == ErrorCode.NONE:
            return None
        if self.state == MemberState.REBALANCING and code in (ErrorCode.REBALANCE_IN_PROGRESS,
                                                               ErrorCode.ILLEGAL_GENERATION):
            # Sent before this member's JoinGroup: that join is the rejoin the answer asks
            # for, and its answer decides what the member keeps (a rebalance after it shows
            # in the heartbeats of the new generation).
            return None
        return self.on_group_error(code, now_ms, response.error_message, generation_id=generation_id)

    def on_heartbeat_failed(self, now_ms: int) -> None:
        self.heartbeat_in_flight = False
        self.coordinator_unknown(now_ms)
        self._heartbeat_next_ms = now_ms + self.retry_backoff_ms

    def session_expired(self, now_ms: int) -> bool:
        """No heartbeat answered (by a coordinator that is still the coordinator) for the
        session timeout: the coordinator is presumed gone."""
        return (self.state == MemberState.STABLE
                and now_ms - self._heartbeat_ok_ms > self.session_timeout_ms)

    def on_group_error(self, code: ErrorCode, now_ms: int, message: str = "", *,
                       generation_id: int | None = None) -> MqError | None:
        """A group-level error from a heartbeat or a commit sent in ``generation_id``
        (None: the current one)."""
        if code in COORDINATOR_GONE:
            self.coordinator_unknown(now_ms)
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.on_rebalance_in_progress(generation_id if generation_id is not None
                                          else self.generation_id)
        elif code in GENERATION_GONE:
            return self._generation_gone(code, now_ms, message)
        elif code.retriable:
            self._heartbeat_next_ms = now_ms + self.retry_backoff_ms
        return None

    def on_rebalance_in_progress(self, generation_id: int, what: str = "a heartbeat") -> bool:
        """REBALANCE_IN_PROGRESS answered a request sent in ``generation_id``: rejoin, unless
        the answer is stale (sent in an older generation) or a JoinGroup is already in
        flight (it is the rejoin asked for; rejoining again after it would start one more
        rebalance for nothing). True if a rejoin was requested."""
        if self.state != MemberState.STABLE or generation_id != self.generation_id:
            return False
        self.request_rejoin(f"{what} found the group rebalancing")
        return True

    def _generation_gone(self, code: ErrorCode, now_ms: int, message: str) -> MqError | None:
        self._lost_pending = bool(self.owned)
        self.generation_id = -1
        if not self.is_static or code == ErrorCode.FENCED_INSTANCE_ID:
            self.member_id = ""
        self.state = MemberState.UNJOINED
        self.request_rejoin(f"{code.name}: the member left the generation")
        self._join_after_ms = now_ms
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self._fatal = MqError(code, message or
                                  f"another consumer joined group {self.group_id!r} with "
                                  f"group_instance_id {self.group_instance_id!r}; this one is fenced")
            return self._fatal
        return None

    # ------------------------------------------------------------------ poll and leave

    def on_poll(self, now_ms: int) -> None:
        self.last_poll_ms = now_ms

    def poll_timeout_expired(self, now_ms: int) -> bool:
        """max_poll_interval_ms passed without poll while in the group."""
        return (self.subscribed and self.generation_id >= 0
                and now_ms - self.last_poll_ms > self.max_poll_interval_ms)

    def next_timer_ms(self, now_ms: int) -> int:
        """When the heartbeat loop must look again (heartbeat, session, poll interval)."""
        deadlines = [now_ms + self.heartbeat_interval_ms]
        if self.subscribed and self.generation_id >= 0:
            deadlines.append(self.last_poll_ms + self.max_poll_interval_ms + 1)
        if self.state == MemberState.STABLE:
            deadlines.append(self._heartbeat_next_ms)
            deadlines.append(self._heartbeat_ok_ms + self.session_timeout_ms + 1)
        if self.coordinator is None and self.subscribed:
            deadlines.append(self._find_after_ms)
        return max(now_ms + 1, min(deadlines))

    def leave_group(self, now_ms: int, *, reason: str) -> LeaveGroupRequest | None:
        """Leave the generation: the LeaveGroup to send (None for a static member, which
        Kafka never makes leave: its session timeout or an admin removes it). Partitions
        still owned are lost (``take_lost``)."""
        request = None
        if not self.is_static and self.member_id and self.coordinator is not None:
            request = LeaveGroupRequest(group_id=self.group_id,
                                        members=[MemberIdentity(self.member_id, None, reason)])
        self._lost_pending = bool(self.owned)
        self.generation_id = -1
        self.member_id = ""
        self.state = MemberState.UNJOINED
        self.heartbeat_in_flight = False
        if self.subscribed:
            self.request_rejoin(reason)
        self._join_after_ms = now_ms
        return request

    def take_lost(self) -> tuple[TopicPartition, ...]:
        """Partitions lost with the generation (call on_lost, no commit)."""
        if not self._lost_pending:
            return ()
        self._lost_pending = False
        lost, self.owned = tuple(self.owned), []
        return lost

    def take_revoke_all(self) -> tuple[TopicPartition, ...]:
        """Everything owned, given up on purpose (close, unsubscribe): on_revoke."""
        owned, self.owned = tuple(self.owned), []
        return owned

    def take_fatal(self) -> MqError | None:
        error, self._fatal = self._fatal, None
        return error

    # ------------------------------------------------------------------ commits

    def commit_identity(self) -> tuple[int, str]:
        """(generation_id, member_id) for an OffsetCommit. A subscribed consumer outside
        any generation cannot commit (Kafka's CommitFailedException): its partitions may
        belong to another member already."""
        if not self.subscribed:
            return -1, ""  # manual assignment: commits as a "simple" consumer
        if self.generation_id < 0:
            raise MqError(ErrorCode.ILLEGAL_GENERATION,
                          f"commit failed: this consumer is not an active member of group "
                          f"{self.group_id!r} (it was removed from the group, e.g. its session "
                          f"or max_poll_interval_ms expired, and its partitions may belong to "
                          f"another member now); poll to rejoin")
        return self.generation_id, self.member_id
