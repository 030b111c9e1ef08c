"""The roles a voter can be in, one type each (KRaft's ``EpochState`` family).

A role holds only what that role needs: a follower knows its leader and when it last
heard from it, a candidate counts votes, a leader tracks each follower's log end
offset and last fetch. Only ``QuorumState`` (``quorum.py``) creates them, so every
legal transition is written in one place.

- ``Unattached``: knows the epoch but no leader (after a restart, or after seeing a
  higher epoch); may have voted in it.
- ``Follower``: fetches from the leader of the epoch.
- ``Prospective``: lost its leader (or never had one) and is asking for pre-votes;
  it does not change the epoch, so it cannot disrupt a leader it merely cannot reach.
- ``Candidate``: won the pre-vote, bumped the epoch, voted for itself, asks for votes.
- ``Leader``: won the election; serves fetches and advances the high watermark.
- ``Resigned``: was leader of this epoch but lost contact with a majority (check
  quorum); accepts no writes and waits for the next election.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Unattached:
    epoch: int
    voted_for: int | None
    election_deadline_ms: int


@dataclass(slots=True)
class Follower:
    epoch: int
    leader_id: int
    voted_for: int | None
    leader_deadline_ms: int  # no successful fetch by then: the leader is presumed gone
    next_fetch_ms: int  # when to send the next fetch (or re-send an unanswered one)
    # When the leader itself last answered. None while the leader is only hearsay
    # (learned from another voter), which must not stop this voter granting pre-votes:
    # else voters that each heard of a dead leader from the others keep it alive.
    heard_from_leader_ms: int | None = None


@dataclass(slots=True)
class Prospective:
    epoch: int
    voted_for: int | None
    election_deadline_ms: int
    granted: set[int] = field(default_factory=set)


@dataclass(slots=True)
class Candidate:
    epoch: int
    election_deadline_ms: int
    granted: set[int] = field(default_factory=set)


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ``LeaderState.ReplicaState``)."""

    end_offset: int = 0
    last_fetch_ms: int = 0
    fetched_this_epoch: bool = False


@dataclass(slots=True)
class ParkedFetch:
    """A fetch with nothing new to return, held until data or max wait (long poll)."""

    source_id: int
    fetch_offset: int
    last_fetched_epoch: int
    expires_ms: int


@dataclass(slots=True)
class Leader:
    epoch: int
    epoch_start_offset: int  # offset of this epoch's first entry (its leader-change entry)
    replicas: dict[int, ReplicaState]
    begin_epoch_retry_ms: int
    parked: dict[int, ParkedFetch] = field(default_factory=dict)


@dataclass(slots=True)
class Resigned:
    epoch: int
    election_deadline_ms: int


EpochState = Unattached | Follower | Prospective | Candidate | Leader | Resigned
