"""Where a voter moves from one role to another: every legal transition, in one place.

``QuorumState`` holds the current role (a type from ``states.py``) and the persisted
``ElectionState`` (epoch and vote, Raft's ``currentTerm`` and ``votedFor``). Each
``to_*`` method checks the move against ``LEGAL`` and the epoch rules, builds the new
role, and marks the election state dirty when it changed; the node hands that to the
shell to persist before any message is sent (a vote must survive a crash, or a voter
could vote twice in one epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.core.rng import Rng
from mq.raft.states import (
    Candidate,
    EpochState,
    Follower,
    Leader,
    Prospective,
    ReplicaState,
    Resigned,
    Unattached,
)


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timeouts in milliseconds (KRaft's ``controller.quorum.*`` settings)."""

    election_timeout_ms: int = 1000  # randomized per election in [t, 2t)
    fetch_timeout_ms: int = 2000  # follower without a fetch answer, leader without a quorum
    fetch_max_wait_ms: int = 500  # how long the leader holds a fetch with nothing new
    request_timeout_ms: int = 1000  # re-send an unanswered fetch / BeginQuorumEpoch
    max_fetch_entries: int = 64


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What a voter must persist: the highest epoch it has seen and its vote in it."""

    epoch: int
    voted_for: int | None = None


DEFAULT_CONFIG = RaftConfig()

# role -> roles it may move to. Same-role moves start a new round or a new epoch.
LEGAL: dict[type, tuple[type, ...]] = {
    Unattached: (Unattached, Follower, Prospective),
    Follower: (Unattached, Follower, Prospective),
    Prospective: (Unattached, Follower, Prospective, Candidate),
    Candidate: (Unattached, Follower, Prospective, Leader),
    Leader: (Unattached, Follower, Resigned),
    Resigned: (Unattached, Follower, Prospective),
}


class IllegalTransition(AssertionError):
    """A bug in the node: a move the protocol never makes."""


class QuorumState:
    def __init__(
        self, node_id: int, voters: tuple[int, ...], persisted: ElectionState,
        rng: Rng, config: RaftConfig, *, now_ms: int,
    ) -> None:
        self.node_id = node_id
        self.voters = voters
        self.rng = rng
        self.config = config
        self.election = persisted
        self.dirty = False
        self.state: EpochState = Unattached(
            persisted.epoch, persisted.voted_for, self.election_deadline(now_ms))

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def leader_id(self) -> int | None:
        if isinstance(self.state, Follower):
            return self.state.leader_id
        if isinstance(self.state, Leader):
            return self.node_id
        return None

    def election_deadline(self, now_ms: int) -> int:
        timeout = self.config.election_timeout_ms
        return now_ms + timeout + self.rng.randint(0, timeout - 1)

    def to_unattached(self, epoch: int, now_ms: int, *, voted_for: int | None = None) -> None:
        if epoch < self.epoch or (epoch == self.epoch and voted_for is None):
            raise IllegalTransition(f"unattached at {epoch} from {self.state}")
        self._move(Unattached(epoch, voted_for, self.election_deadline(now_ms)), voted_for)

    def to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        if epoch < self.epoch or leader_id == self.node_id:
            raise IllegalTransition(f"follow {leader_id} at {epoch} from {self.state}")
        state = self.state
        if epoch == self.epoch and (isinstance(state, (Leader, Resigned)) or (
                isinstance(state, Follower) and state.leader_id != leader_id)):
            raise IllegalTransition(f"two leaders in epoch {epoch}")
        voted = self.election.voted_for if epoch == self.election.epoch else None
        self._move(Follower(epoch, leader_id, voted, now_ms + self.config.fetch_timeout_ms,
                            next_fetch_ms=now_ms), voted)

    def to_prospective(self, now_ms: int) -> None:
        voted = self.election.voted_for
        self._move(Prospective(self.epoch, voted, self.election_deadline(now_ms),
                               granted={self.node_id}), voted)

    def to_candidate(self, now_ms: int) -> None:
        self._move(Candidate(self.epoch + 1, self.election_deadline(now_ms),
                             granted={self.node_id}), self.node_id)

    def to_leader(self, epoch_start_offset: int, now_ms: int) -> None:
        state = self.state
        if not isinstance(state, Candidate) or len(state.granted) < self.majority:
            raise IllegalTransition(f"leader without a majority: {state}")
        replicas = {v: ReplicaState(last_fetch_ms=now_ms) for v in self.voters if v != self.node_id}
        self._move(Leader(self.epoch, epoch_start_offset, replicas,
                          begin_epoch_retry_ms=now_ms), self.node_id)

    def to_resigned(self, now_ms: int) -> None:
        self._move(Resigned(self.epoch, self.election_deadline(now_ms)), self.node_id)

    def _move(self, new: EpochState, voted_for: int | None) -> None:
        if type(new) not in LEGAL[type(self.state)]:
            raise IllegalTransition(f"{type(self.state).__name__} -> {type(new).__name__}")
        if new.epoch < self.epoch:
            raise IllegalTransition(f"epoch {self.epoch} -> {new.epoch}")
        self.state = new
        election = ElectionState(new.epoch, voted_for)
        if election != self.election:
            self.election = election
            self.dirty = True

    def take_dirty(self) -> ElectionState | None:
        """The election state to persist, once per change."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.election
