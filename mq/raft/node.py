"""``RaftNode``: one voter of a KRaft-style quorum as a sans-IO state machine.

Leader election is Raft's, with pre-vote and check quorum; replication is driven by
follower fetches (``replication.py``). "Epoch" is Raft's "term", as in KRaft.

The node does no I/O. The shell owns the network, the disk and the clock, and drives
it with three calls, each returning a ``Ready`` (etcd raft's shape):

- ``step(message, now_ms)`` for every message that arrives,
- ``tick(now_ms)`` when ``Ready.deadline_ms`` passes,
- ``propose(records, now_ms)`` to append records (leader only).

The shell handles a ``Ready`` in this order: persist ``persist.election_state`` and
flush the log (the node already wrote ``persist.appended``/``truncated_to`` into it),
*then* send ``messages``, install ``snapshot`` into the state machine if set, apply
``committed`` in order, and call ``tick`` at ``deadline_ms``. Persisting first is what
makes a vote or an acknowledged entry survive a crash.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import OffsetAndEpoch
from mq.raft import election, replication
from mq.raft.log import LogEntry, ReplicatedLog, Snapshot
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
from mq.raft.quorum import (
    DEFAULT_CONFIG,
    ElectionState,
    IllegalTransition,
    QuorumState,
    RaftConfig,
)
from mq.raft.states import (
    Candidate,
    Follower,
    Leader,
    Prospective,
    Resigned,
    Unattached,
)


@dataclass(frozen=True, slots=True)
class Persist:
    """What must be durable before ``Ready.messages`` leave the node."""

    election_state: ElectionState | None
    truncated_to: int | None
    appended: tuple[LogEntry, ...]


@dataclass(frozen=True, slots=True)
class Ready:
    messages: tuple[RaftMessage, ...]
    persist: Persist | None
    committed: tuple[LogEntry, ...]
    snapshot: Snapshot | None  # reset the state machine to this before applying
    deadline_ms: int


_HANDLERS = {
    VoteRequest: election.handle_vote_request,
    VoteResponse: election.handle_vote_response,
    FetchRequest: replication.handle_fetch_request,
    FetchResponse: replication.handle_fetch_response,
    FetchSnapshotRequest: replication.handle_fetch_snapshot_request,
    FetchSnapshotResponse: replication.handle_fetch_snapshot_response,
}


class RaftNode:
    def __init__(
        self, node_id: int, voters: Sequence[int], log: ReplicatedLog,
        state: ElectionState | None, rng: Rng, config: RaftConfig = DEFAULT_CONFIG,
        *, now_ms: int = 0,
    ) -> None:
        if node_id not in voters:
            raise ValueError(f"node {node_id} is not one of the voters {sorted(voters)}")
        self.node_id = node_id
        self.voters = tuple(sorted(voters))
        self.others = tuple(v for v in self.voters if v != node_id)
        self.log = log
        self.config = config
        self.quorum = QuorumState(node_id, self.voters, state or ElectionState(0), rng, config,
                                  now_ms=now_ms)
        # Everything below the snapshot is committed; the rest is learned from a leader.
        self.high_watermark = log.start_offset
        self._applied = log.start_offset
        self._snapshot = log.latest_snapshot()
        self._outbox: list[RaftMessage] = []
        self._appended: list[LogEntry] = []
        self._truncated_to: int | None = None

    # -- the three entry points ------------------------------------------------------

    def step(self, message: RaftMessage, now_ms: int) -> Ready:
        if message.destination_id == self.node_id and message.source_id in self.others:
            if isinstance(message, BeginQuorumEpochRequest):
                self._handle_begin_quorum_epoch(message, now_ms)
            elif isinstance(message, BeginQuorumEpochResponse):
                self.observe_epoch(message.epoch, message.leader_id, now_ms)
            else:
                _HANDLERS[type(message)](self, message, now_ms)  # type: ignore[operator]
        return self._ready()

    def tick(self, now_ms: int) -> Ready:
        state = self.quorum.state
        if isinstance(state, Leader):
            self._tick_leader(state, now_ms)
        elif isinstance(state, Follower):
            if now_ms >= state.leader_deadline_ms:
                election.start_prospective(self, now_ms)
            elif now_ms >= state.next_fetch_ms:
                self.send_fetch(now_ms)
        elif now_ms >= state.election_deadline_ms:
            election.start_prospective(self, now_ms)
        return self._ready()

    def propose(self, records: Sequence[bytes], now_ms: int) -> Ready:
        """Append ``records`` at the leader's epoch; raises NOT_LEADER elsewhere."""
        state = self.quorum.state
        if not isinstance(state, Leader):
            raise MqError(ErrorCode.NOT_LEADER, f"node {self.node_id} is not the leader "
                          f"(leader: {self.quorum.leader_id}, epoch {self.quorum.epoch})")
        start = self.log.end_offset
        self.append([LogEntry(start + i, state.epoch, bytes(r)) for i, r in enumerate(records)])
        replication.maybe_advance_high_watermark(self, now_ms)
        replication.release_parked(self, now_ms, only_expired=False)
        return self._ready()

    def campaign(self, now_ms: int) -> Ready:
        """Start an election now instead of at the election deadline: a lone voter has
        nobody to wait for, so a single-node quorum elects itself at start-up."""
        if not self.is_leader:
            election.start_prospective(self, now_ms)
        return self._ready()

    def create_snapshot(self, end_offset: int, data: bytes) -> Snapshot:
        """Compact the log below ``end_offset`` with the application's state at that point."""
        if not self.log.start_offset < end_offset <= self._applied:
            raise ValueError(f"snapshot at {end_offset}: must be in ({self.log.start_offset}, "
                             f"{self._applied}] (applied)")
        epoch = self.log.epoch_at(end_offset - 1)
        assert epoch is not None
        snapshot = Snapshot(OffsetAndEpoch(end_offset, epoch), data)
        self.log.compact(snapshot)
        return snapshot

    # -- what the role modules call --------------------------------------------------

    @property
    def role(self) -> str:
        return type(self.quorum.state).__name__

    @property
    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, Leader)

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self.quorum.leader_id

    def send(self, message: RaftMessage) -> None:
        self._outbox.append(message)

    def append(self, entries: Sequence[LogEntry]) -> None:
        self.log.append(entries)
        self._appended.extend(entries)

    def truncate(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self._appended = [e for e in self._appended if e.offset < offset]
        self._truncated_to = offset if self._truncated_to is None else min(self._truncated_to, offset)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self.log.install_snapshot(snapshot)
        self._appended.clear()
        self.high_watermark = max(self.high_watermark, snapshot.snapshot_id.offset)
        self._applied = snapshot.snapshot_id.offset
        self._snapshot = snapshot

    def advance_high_watermark(self, offset: int) -> None:
        self.high_watermark = max(self.high_watermark, offset)

    def send_fetch(self, now_ms: int) -> None:
        follower = self.quorum.state
        assert isinstance(follower, Follower)
        self.send(FetchRequest(self.node_id, follower.leader_id, follower.epoch,
                               self.log.end_offset, self.log.last_epoch, self.high_watermark))
        follower.next_fetch_ms = now_ms + self.config.request_timeout_ms

    def observe_epoch(self, epoch: int, leader_id: int | None, now_ms: int) -> None:
        """React to an epoch seen in a response: follow a known leader, or at least
        move up to the newer epoch."""
        quorum = self.quorum
        if epoch < quorum.epoch:
            return
        if epoch == quorum.epoch and (
                leader_id in (None, self.node_id)
                or not isinstance(quorum.state, (Unattached, Prospective, Candidate))):
            return
        if leader_id is not None and leader_id != self.node_id:
            quorum.to_follower(epoch, leader_id, now_ms)
            self.send_fetch(now_ms)
        else:
            quorum.to_unattached(epoch, now_ms)

    # -- internals -------------------------------------------------------------------

    def _handle_begin_quorum_epoch(self, request: BeginQuorumEpochRequest, now_ms: int) -> None:
        state = self.quorum.state
        if request.epoch < self.quorum.epoch:
            self.send(BeginQuorumEpochResponse(self.node_id, request.source_id, self.quorum.epoch,
                                               self.quorum.leader_id))
            return
        if isinstance(state, Follower) and state.epoch == request.epoch:
            if state.leader_id != request.source_id:
                raise IllegalTransition(f"two leaders in epoch {request.epoch}")
            state.heard_from_leader_ms = now_ms
            return
        self.quorum.to_follower(request.epoch, request.source_id, now_ms)
        follower = self.quorum.state
        assert isinstance(follower, Follower)
        follower.heard_from_leader_ms = now_ms
        self.send_fetch(now_ms)

    def _tick_leader(self, leader: Leader, now_ms: int) -> None:
        if now_ms >= self._quorum_deadline(leader):
            self.quorum.to_resigned(now_ms)  # check quorum: a majority stopped fetching
            return
        replication.release_parked(self, now_ms, only_expired=True)
        if now_ms >= leader.begin_epoch_retry_ms:
            replication.send_begin_quorum_epoch(self, now_ms)

    def _quorum_deadline(self, leader: Leader) -> int:
        """When the leader stops hearing from a majority unless more fetches arrive."""
        needed = self.quorum.majority - 1
        if needed == 0:
            return 2**62
        recent = sorted((r.last_fetch_ms for r in leader.replicas.values()), reverse=True)
        return recent[needed - 1] + self.config.fetch_timeout_ms

    def _deadline(self) -> int:
        state = self.quorum.state
        if isinstance(state, Leader):
            deadline = self._quorum_deadline(state)
            if any(not r.fetched_this_epoch for r in state.replicas.values()):
                deadline = min(deadline, state.begin_epoch_retry_ms)
            for parked in state.parked.values():
                deadline = min(deadline, parked.expires_ms)
            return deadline
        if isinstance(state, Follower):
            return min(state.leader_deadline_ms, state.next_fetch_ms)
        assert isinstance(state, (Unattached, Prospective, Candidate, Resigned))
        return state.election_deadline_ms

    def _ready(self) -> Ready:
        election_state = self.quorum.take_dirty()
        persist = None
        if election_state is not None or self._appended or self._truncated_to is not None:
            persist = Persist(election_state, self._truncated_to, tuple(self._appended))
        committed: tuple[LogEntry, ...] = ()
        if self._applied < self.high_watermark:
            committed = tuple(self.log.entries(self._applied, self.high_watermark - self._applied))
            self._applied += len(committed)
        ready = Ready(tuple(self._outbox), persist, committed, self._snapshot, self._deadline())
        self._outbox.clear()
        self._appended.clear()
        self._truncated_to = None
        self._snapshot = None
        return ready
