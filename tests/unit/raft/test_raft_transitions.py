"""QuorumState: the one place where roles change. Every legal move and a table of
illegal ones (states are types; a move the protocol never makes is a bug)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mq.core.rng import Rng
from mq.raft import (
    Candidate,
    ElectionState,
    Follower,
    IllegalTransition,
    Leader,
    Prospective,
    QuorumState,
    RaftConfig,
    Resigned,
    Unattached,
)

VOTERS = (1, 2, 3)


def quorum(epoch: int = 3, voted_for: int | None = None) -> QuorumState:
    return QuorumState(1, VOTERS, ElectionState(epoch, voted_for), Rng(7), RaftConfig(), now_ms=0)


def in_role(role: str) -> QuorumState:
    """A voter 1 of (1, 2, 3) at epoch 3 (4 once it ran), moved into ``role``."""
    q = quorum()
    if role == "follower":
        q.to_follower(3, 2, 0)
    if role in ("prospective", "candidate", "leader", "resigned"):
        q.to_prospective(0)
    if role in ("candidate", "leader", "resigned"):
        q.to_candidate(0)
    if role in ("leader", "resigned"):
        assert isinstance(q.state, Candidate)
        q.state.granted.add(2)
        q.to_leader(10, 0)
    if role == "resigned":
        q.to_resigned(0)
    return q


ROLES = ("unattached", "follower", "prospective", "candidate", "leader", "resigned")


def test_restart_comes_back_unattached_with_the_persisted_vote() -> None:
    q = quorum(5, voted_for=2)
    assert q.state == Unattached(5, 2, q.state.election_deadline_ms)
    assert 1000 <= q.state.election_deadline_ms < 2000  # randomized in [t, 2t)
    assert q.take_dirty() is None


def test_candidate_bumps_epoch_and_votes_for_itself_persistently() -> None:
    q = in_role("candidate")
    assert isinstance(q.state, Candidate) and q.epoch == 4
    assert q.take_dirty() == ElectionState(4, 1)
    assert q.take_dirty() is None  # handed out once


def test_prospective_changes_nothing_persisted() -> None:
    q = in_role("prospective")
    assert isinstance(q.state, Prospective) and q.epoch == 3
    assert q.take_dirty() is None


def test_leader_needs_a_majority() -> None:
    q = in_role("candidate")
    with pytest.raises(IllegalTransition):
        q.to_leader(0, 0)


# (from, move, legal?)
MOVES = [
    ("unattached", lambda q: q.to_follower(3, 2, 0), True),
    ("unattached", lambda q: q.to_unattached(3, 0, voted_for=2), True),
    ("unattached", lambda q: q.to_unattached(3, 0), False),  # same epoch, no vote: no-op move
    ("unattached", lambda q: q.to_unattached(2, 0), False),  # epochs never go back
    ("unattached", lambda q: q.to_candidate(0), False),  # only through pre-vote
    ("unattached", lambda q: q.to_resigned(0), False),
    ("follower", lambda q: q.to_follower(3, 3, 0), False),  # a second leader in epoch 3
    ("follower", lambda q: q.to_follower(4, 3, 0), True),
    ("follower", lambda q: q.to_prospective(0), True),
    ("follower", lambda q: q.to_candidate(0), False),
    ("prospective", lambda q: q.to_candidate(0), True),
    ("prospective", lambda q: q.to_follower(3, 2, 0), True),
    ("prospective", lambda q: q.to_resigned(0), False),
    ("candidate", lambda q: q.to_prospective(0), True),
    ("candidate", lambda q: q.to_follower(4, 2, 0), True),
    ("candidate", lambda q: q.to_candidate(0), False),
    ("leader", lambda q: q.to_resigned(0), True),
    ("leader", lambda q: q.to_follower(4, 2, 0), False),  # leader of epoch 4 is us
    ("leader", lambda q: q.to_follower(5, 2, 0), True),
    ("leader", lambda q: q.to_prospective(0), False),
    ("leader", lambda q: q.to_unattached(5, 0), True),
    ("resigned", lambda q: q.to_prospective(0), True),
    ("resigned", lambda q: q.to_follower(4, 2, 0), False),
    ("resigned", lambda q: q.to_candidate(0), False),
]


@pytest.mark.parametrize(("start", "move", "legal"), MOVES,
                         ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(MOVES)])
def test_transition_table(start: str, move: Callable[[QuorumState], None], legal: bool) -> None:
    q = in_role(start)
    if legal:
        move(q)
    else:
        with pytest.raises(IllegalTransition):
            move(q)


def test_roles_are_types() -> None:
    assert {type(in_role(name).state) for name in ROLES} == {
        Unattached, Follower, Prospective, Candidate, Leader, Resigned}
