"""Elections: pre-vote, vote, and how a voter answers them (Raft §5.2, §5.4.1; KIP-996).

A voter that lost its leader first becomes *prospective* and asks for pre-votes at the
epoch it would run for, without changing its own epoch. A voter grants a pre-vote only
if it has no live leader itself (it is not a follower or the leader) and the
candidate's log is at least as up to date as its own. So a node that was partitioned
away and comes back cannot win a pre-vote while the others still hear from a leader,
and, having never bumped its epoch, it cannot make that leader step down. Only after
a majority of pre-votes does it become a *candidate*: bump the epoch, vote for itself,
persist that, and ask for real votes. A voter grants one real vote per epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mq.raft.log import ReplicatedLog
from mq.raft.messages import VoteRequest, VoteResponse
from mq.raft.replication import become_leader
from mq.raft.states import Candidate, Follower, Leader, Prospective, Unattached

if TYPE_CHECKING:
    from mq.raft.node import RaftNode


def start_prospective(node: RaftNode, now_ms: int) -> None:
    quorum = node.quorum
    quorum.to_prospective(now_ms)
    if quorum.majority == 1:
        start_candidate(node, now_ms)
        return
    for voter in node.others:
        node.send(VoteRequest(node.node_id, voter, quorum.epoch + 1, node.log.last_epoch,
                              node.log.end_offset, pre_vote=True))


def start_candidate(node: RaftNode, now_ms: int) -> None:
    quorum = node.quorum
    quorum.to_candidate(now_ms)
    if quorum.majority == 1:
        become_leader(node, now_ms)
        return
    for voter in node.others:
        node.send(VoteRequest(node.node_id, voter, quorum.epoch, node.log.last_epoch,
                              node.log.end_offset, pre_vote=False))


def handle_vote_request(node: RaftNode, request: VoteRequest, now_ms: int) -> None:
    quorum = node.quorum
    up_to_date = log_is_up_to_date(request, node.log)
    if request.pre_vote:
        granted = (request.epoch > quorum.epoch and up_to_date
                   and live_leader_id(node, now_ms) is None)
    else:
        if request.epoch > quorum.epoch:
            quorum.to_unattached(request.epoch, now_ms)
        granted = request.epoch == quorum.epoch and up_to_date and _may_vote_for(
            node, request.source_id)
        if granted and quorum.election.voted_for != request.source_id:
            quorum.to_unattached(quorum.epoch, now_ms, voted_for=request.source_id)
    node.send(VoteResponse(node.node_id, request.source_id, quorum.epoch, granted,
                           request.pre_vote, live_leader_id(node, now_ms)))


def log_is_up_to_date(request: VoteRequest, log: ReplicatedLog) -> bool:
    """Raft §5.4.1: the candidate's last epoch is newer, or equal with a log as long."""
    return (request.last_epoch, request.end_offset) >= (log.last_epoch, log.end_offset)


def live_leader_id(node: RaftNode, now_ms: int) -> int | None:
    """The leader this voter has itself heard from within the fetch timeout (or itself).
    A leader known only by hearsay does not count: voters that keep telling each other
    about a dead leader would otherwise keep it "alive" forever."""
    state = node.quorum.state
    if isinstance(state, Leader):
        return node.node_id
    if (isinstance(state, Follower) and state.heard_from_leader_ms is not None
            and now_ms - state.heard_from_leader_ms < node.config.fetch_timeout_ms):
        return state.leader_id
    return None


def _may_vote_for(node: RaftNode, candidate_id: int) -> bool:
    state = node.quorum.state
    if not isinstance(state, (Unattached, Prospective)):
        return False  # followers, candidates, leaders and resigned leaders are committed
    return state.voted_for is None or state.voted_for == candidate_id


def handle_vote_response(node: RaftNode, response: VoteResponse, now_ms: int) -> None:
    quorum = node.quorum
    if response.epoch > quorum.epoch:
        node.observe_epoch(response.epoch, response.leader_id, now_ms)
        return
    state = quorum.state
    if (response.epoch == quorum.epoch and not response.vote_granted
            and response.leader_id not in (None, node.node_id)
            and isinstance(state, (Unattached, Prospective, Candidate))):
        quorum.to_follower(quorum.epoch, response.leader_id, now_ms)  # type: ignore[arg-type]
        node.send_fetch(now_ms)
        return
    if not response.vote_granted:
        return
    if response.pre_vote and isinstance(state, Prospective):
        state.granted.add(response.source_id)
        if len(state.granted) >= quorum.majority:
            start_candidate(node, now_ms)
    elif not response.pre_vote and isinstance(state, Candidate) and response.epoch == state.epoch:
        state.granted.add(response.source_id)
        if len(state.granted) >= quorum.majority:
            become_leader(node, now_ms)
