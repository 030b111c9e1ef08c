"""The messages voters exchange, as frozen dataclasses (the wire binding comes later).

Every message names its sender (``source_id``), its receiver (``destination_id``) and
the sender's ``epoch`` (Raft's term), so a receiver can fence stale senders and learn a
newer epoch from any message. The five exchanges, as in KRaft's ``KafkaRaftClient``:

- ``VoteRequest``/``VoteResponse``: elections. With ``pre_vote=True`` a prospective
  candidate asks "would you vote for me?" without anyone changing epoch (KIP-996).
- ``BeginQuorumEpochRequest``: a new leader tells the voters it won. A voter's first
  fetch acknowledges it; a voter answers (``BeginQuorumEpochResponse``) only to fence a
  leader of an older epoch, which then steps down.
- ``FetchRequest``/``FetchResponse``: followers pull entries from the leader, sending
  their log end offset and last epoch; the leader answers with entries, with the
  point where the logs diverge, or with the id of a snapshot to fetch.
- ``FetchSnapshotRequest``/``FetchSnapshotResponse``: a follower whose fetch offset is
  below the leader's log start copies the leader's latest snapshot (whole; KRaft
  pages it by position).
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.core.errors import ErrorCode
from mq.core.types import OffsetAndEpoch
from mq.raft.log import LogEntry, Snapshot


@dataclass(frozen=True, slots=True)
class VoteRequest:
    source_id: int
    destination_id: int
    epoch: int  # the epoch the candidate runs for (for a pre-vote: the one it would run for)
    last_epoch: int
    end_offset: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    source_id: int
    destination_id: int
    epoch: int  # the voter's epoch after handling the request
    vote_granted: bool
    pre_vote: bool
    leader_id: int | None = None


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    source_id: int  # the new leader
    destination_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    source_id: int
    destination_id: int
    epoch: int  # newer than the request's: the sender is no longer leader
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class FetchRequest:
    source_id: int
    destination_id: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int  # the follower's, so the leader can hold a fetch that has nothing new


@dataclass(frozen=True, slots=True)
class FetchResponse:
    source_id: int
    destination_id: int
    epoch: int
    leader_id: int | None
    error: ErrorCode
    fetch_offset: int  # echoed, so a late or duplicated answer is recognised
    last_fetched_epoch: int
    high_watermark: int = 0
    entries: tuple[LogEntry, ...] = ()
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    source_id: int
    destination_id: int
    epoch: int
    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    source_id: int
    destination_id: int
    epoch: int
    leader_id: int | None
    error: ErrorCode
    snapshot: Snapshot | None = None


RaftMessage = (
    VoteRequest | VoteResponse | BeginQuorumEpochRequest | BeginQuorumEpochResponse | FetchRequest | FetchResponse
    | FetchSnapshotRequest | FetchSnapshotResponse
)
