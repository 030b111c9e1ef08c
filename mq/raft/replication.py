"""Fetch-based log replication and commit, KRaft's way.

The leader never pushes entries. Each follower sends ``FetchRequest(fetch_offset,
last_fetched_epoch)``: its log end offset and the epoch of its last entry. The leader
checks that pair against its own log (``end_offset_for_epoch``, as KIP-101's
OffsetsForLeaderEpoch does):

- it matches: the follower's log equals the leader's below ``fetch_offset``; the
  leader records that end offset for the follower and answers with the entries from
  there (or holds the fetch until there is something new: a long poll);
- it does not: the leader answers with ``diverging_epoch`` = (the largest epoch it
  has that is ≤ the follower's, and where that epoch ends in the leader's log); the
  follower truncates there and fetches again, walking back one epoch per round trip;
- ``fetch_offset`` is below the leader's log start (compacted): the leader answers
  with its snapshot id, and the follower fetches the snapshot.

The high watermark is the largest offset a majority of voters (leader included) hold.
A leader advances it only past an entry of its own epoch (Raft §5.4.2, figure 8): an
entry of an older epoch stored on a majority can still be overwritten by a leader
elected without it, so it is committed only indirectly, together with the first entry
of the current epoch. That is why a new leader appends a control entry at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mq.core.errors import ErrorCode
from mq.core.types import OffsetAndEpoch
from mq.raft.log import UNKNOWN, LogEntry, ReplicatedLog
from mq.raft.messages import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from mq.raft.states import Follower, Leader, ParkedFetch

if TYPE_CHECKING:
    from mq.raft.node import RaftNode


class TruncationBelowHighWatermark(AssertionError):
    """A follower was told to drop a committed entry: a safety bug, never a fault."""


def majority_high_watermark(leader: Leader, leader_end_offset: int, majority: int) -> int | None:
    """The offset a majority holds, if the leader may commit up to it, else None."""
    ends = sorted([leader_end_offset] + [r.end_offset for r in leader.replicas.values()],
                  reverse=True)
    offset = ends[majority - 1]
    return offset if offset > leader.epoch_start_offset else None


def become_leader(node: RaftNode, now_ms: int) -> None:
    start = node.log.end_offset
    node.quorum.to_leader(start, now_ms)
    node.append([LogEntry(start, node.quorum.epoch, b"", control=True)])
    send_begin_quorum_epoch(node, now_ms)
    maybe_advance_high_watermark(node, now_ms)


def send_begin_quorum_epoch(node: RaftNode, now_ms: int) -> None:
    leader = node.quorum.state
    assert isinstance(leader, Leader)
    for voter, replica in leader.replicas.items():
        if not replica.fetched_this_epoch:
            node.send(BeginQuorumEpochRequest(node.node_id, voter, leader.epoch))
    leader.begin_epoch_retry_ms = now_ms + node.config.request_timeout_ms


def maybe_advance_high_watermark(node: RaftNode, now_ms: int) -> None:
    leader = node.quorum.state
    assert isinstance(leader, Leader)
    offset = majority_high_watermark(leader, node.log.end_offset, node.quorum.majority)
    if offset is not None and offset > node.high_watermark:
        node.high_watermark = offset
        release_parked(node, now_ms, only_expired=False)


def release_parked(node: RaftNode, now_ms: int, *, only_expired: bool) -> None:
    leader = node.quorum.state
    assert isinstance(leader, Leader)
    for voter in sorted(leader.parked):
        parked = leader.parked[voter]
        if not only_expired or parked.expires_ms <= now_ms:
            del leader.parked[voter]
            _answer(node, voter, parked.fetch_offset, parked.last_fetched_epoch)


def handle_fetch_request(node: RaftNode, request: FetchRequest, now_ms: int) -> None:
    quorum, log = node.quorum, node.log
    if request.epoch > quorum.epoch:
        quorum.to_unattached(request.epoch, now_ms)  # a leader elected without us; no answer
        return
    leader = quorum.state
    if request.epoch < quorum.epoch or not isinstance(leader, Leader):
        error = ErrorCode.FENCED_LEADER_EPOCH if request.epoch < quorum.epoch else ErrorCode.NOT_LEADER
        node.send(FetchResponse(node.node_id, request.source_id, quorum.epoch, quorum.leader_id,
                                error, request.fetch_offset, request.last_fetched_epoch))
        return
    replica = leader.replicas[request.source_id]
    replica.last_fetch_ms = now_ms
    replica.fetched_this_epoch = True
    divergence = None if request.fetch_offset < log.start_offset else find_divergence(
        log, request.fetch_offset, request.last_fetched_epoch)
    if request.fetch_offset < log.start_offset or divergence is not None:
        snapshot = log.latest_snapshot()
        needs_snapshot = divergence is None or divergence == UNKNOWN or (
            divergence.offset < log.start_offset)
        node.send(FetchResponse(
            node.node_id, request.source_id, leader.epoch, node.node_id, ErrorCode.NONE,
            request.fetch_offset, request.last_fetched_epoch, node.high_watermark,
            diverging_epoch=None if needs_snapshot else divergence,
            snapshot_id=snapshot.snapshot_id if needs_snapshot and snapshot else None))
        return
    replica.end_offset = request.fetch_offset
    maybe_advance_high_watermark(node, now_ms)
    if request.fetch_offset == log.end_offset and request.high_watermark >= node.high_watermark:
        leader.parked[request.source_id] = ParkedFetch(
            request.source_id, request.fetch_offset, request.last_fetched_epoch,
            now_ms + node.config.fetch_max_wait_ms)
        return
    leader.parked.pop(request.source_id, None)
    _answer(node, request.source_id, request.fetch_offset, request.last_fetched_epoch)


def find_divergence(log: ReplicatedLog, fetch_offset: int, last_fetched_epoch: int
                    ) -> OffsetAndEpoch | None:
    """None when the follower's log matches ours below ``fetch_offset``."""
    if fetch_offset == 0:
        return None
    end = log.end_offset_for_epoch(last_fetched_epoch)
    if end.leader_epoch == last_fetched_epoch and fetch_offset <= end.offset:
        return None
    return end


def _answer(node: RaftNode, voter: int, fetch_offset: int, last_fetched_epoch: int) -> None:
    entries = tuple(node.log.entries(fetch_offset, node.config.max_fetch_entries))
    node.send(FetchResponse(node.node_id, voter, node.quorum.epoch, node.node_id, ErrorCode.NONE,
                            fetch_offset, last_fetched_epoch, node.high_watermark, entries))


def handle_fetch_response(node: RaftNode, response: FetchResponse, now_ms: int) -> None:
    quorum, log = node.quorum, node.log
    if response.epoch != quorum.epoch or not isinstance(quorum.state, Follower):
        node.observe_epoch(response.epoch, response.leader_id, now_ms)
        return
    follower = quorum.state
    if response.source_id != follower.leader_id or response.error != ErrorCode.NONE:
        return
    if (response.fetch_offset, response.last_fetched_epoch) != (log.end_offset, log.last_epoch):
        return  # late or duplicated: answers a fetch from before our log last changed
    follower.leader_deadline_ms = now_ms + node.config.fetch_timeout_ms
    follower.heard_from_leader_ms = now_ms
    if response.snapshot_id is not None:
        node.send(FetchSnapshotRequest(node.node_id, follower.leader_id, follower.epoch,
                                       response.snapshot_id))
        follower.next_fetch_ms = now_ms + node.config.request_timeout_ms
        return
    if response.diverging_epoch is not None:
        truncate_to_divergence(node, response.diverging_epoch)
    elif response.entries:
        node.append(response.entries)
        node.advance_high_watermark(min(response.high_watermark, log.end_offset))
    else:
        node.advance_high_watermark(min(response.high_watermark, log.end_offset))
    node.send_fetch(now_ms)


def truncate_to_divergence(node: RaftNode, diverging: OffsetAndEpoch) -> None:
    log = node.log
    local = log.end_offset_for_epoch(diverging.leader_epoch)
    target = min(diverging.offset, local.offset if local != UNKNOWN else log.start_offset)
    target = max(target, log.start_offset)
    if target < node.high_watermark:
        raise TruncationBelowHighWatermark(
            f"node {node.node_id} told to truncate to {target} below hw {node.high_watermark}")
    node.truncate(target)


def handle_fetch_snapshot_request(node: RaftNode, request: FetchSnapshotRequest,
                                  now_ms: int) -> None:
    quorum = node.quorum
    leader = quorum.state
    if request.epoch != quorum.epoch or not isinstance(leader, Leader):
        if request.epoch > quorum.epoch:
            quorum.to_unattached(request.epoch, now_ms)
            return
        node.send(FetchSnapshotResponse(node.node_id, request.source_id, quorum.epoch,
                                        quorum.leader_id, ErrorCode.NOT_LEADER))
        return
    leader.replicas[request.source_id].last_fetch_ms = now_ms
    node.send(FetchSnapshotResponse(node.node_id, request.source_id, leader.epoch,
                                    node.node_id, ErrorCode.NONE, node.log.latest_snapshot()))


def handle_fetch_snapshot_response(node: RaftNode, response: FetchSnapshotResponse,
                                   now_ms: int) -> None:
    quorum = node.quorum
    if response.epoch != quorum.epoch or not isinstance(quorum.state, Follower):
        node.observe_epoch(response.epoch, response.leader_id, now_ms)
        return
    follower = quorum.state
    snapshot = response.snapshot
    if response.source_id != follower.leader_id or snapshot is None:
        return
    follower.leader_deadline_ms = now_ms + node.config.fetch_timeout_ms
    follower.heard_from_leader_ms = now_ms
    end = snapshot.snapshot_id
    # A late or duplicated answer may carry a snapshot we are already past.
    if end.offset > node.high_watermark and (
            end.offset > node.log.end_offset or node.log.epoch_at(end.offset - 1) != end.leader_epoch):
        node.install_snapshot(snapshot)
    node.send_fetch(now_ms)
