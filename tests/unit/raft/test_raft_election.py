"""Elections: pre-vote, votes, persistence of the vote, check quorum (Raft §5.2, §5.4.1,
§9.6; KIP-996)."""

from __future__ import annotations

import pytest
from raft_harness import CONFIG, Harness, between

from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.raft import (
    BeginQuorumEpochRequest,
    ElectionState,
    LogEntry,
    MemoryReplicatedLog,
    RaftMessage,
    RaftNode,
    VoteRequest,
    VoteResponse,
)


def test_single_voter_elects_itself_at_its_first_deadline() -> None:
    h = Harness(1)
    ready = h.fire(1)
    assert h.nodes[1].is_leader and h.nodes[1].epoch == 1
    assert ready.persist is not None and ready.persist.election_state == ElectionState(1, 1)
    assert [e.control for e in ready.committed] == [True]  # its leader-change entry


def test_three_voters_elect_one_leader_and_everyone_follows() -> None:
    h = Harness(3)
    h.elect(2)
    assert [n.role for n in h.nodes.values()] == ["Follower", "Leader", "Follower"]
    assert {n.epoch for n in h.nodes.values()} == {1}
    assert all(n.leader_id == 2 for n in h.nodes.values())
    assert h.persisted[1] == ElectionState(1, 2) and h.persisted[2] == ElectionState(1, 2)


def test_prevote_does_not_change_anyones_epoch() -> None:
    h = Harness(3)
    h.fire(1)
    pre_votes = [m for m in h.inflight if isinstance(m, VoteRequest)]
    assert pre_votes and all(m.pre_vote and m.epoch == 1 for m in pre_votes)
    assert h.nodes[1].role == "Prospective" and h.nodes[1].epoch == 0
    h.deliver(allow=lambda m: isinstance(m, VoteRequest) and m.pre_vote)
    assert all(n.epoch == 0 for n in h.nodes.values())
    assert all(h.persisted[v] is None for v in (2, 3))


def test_partitioned_voter_rejoining_does_not_disrupt_the_leader() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    # Voter 3 is cut off: it times out again and again but never wins a pre-vote,
    # so it never bumps its epoch.
    for _ in range(20):
        h.advance(CONFIG.fetch_max_wait_ms)
        h.deliver(allow=between(1, 2))
    assert h.nodes[3].epoch == 1 and h.nodes[3].role == "Prospective"
    assert h.persisted[3] == ElectionState(1, 1)
    # Healed: its next pre-vote is refused by both (1 leads, 2 hears from 1), and the
    # refusals tell it who leads. It follows at the same epoch; nobody was disrupted.
    h.fire(3)
    h.deliver()
    assert h.nodes[1].is_leader and h.nodes[1].epoch == 1
    assert h.nodes[3].role == "Follower" and h.nodes[3].leader_id == 1
    assert h.nodes[3].log.end_offset == h.nodes[1].log.end_offset


def test_prevote_refused_while_the_follower_hears_from_its_leader() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    ask = VoteRequest(3, 2, epoch=2, last_epoch=1, end_offset=h.logs[1].end_offset, pre_vote=True)
    ready = h.nodes[2].step(ask, h.now_ms)
    assert ready.messages == (VoteResponse(2, 3, 1, False, True, leader_id=1),)
    h.now_ms += CONFIG.fetch_timeout_ms  # the leader went quiet
    ready = h.nodes[2].step(ask, h.now_ms)
    assert ready.messages == (VoteResponse(2, 3, 1, True, True, leader_id=None),)


def test_one_vote_per_epoch_even_across_a_restart() -> None:
    h = Harness(3)
    ask_2 = VoteRequest(2, 1, epoch=1, last_epoch=0, end_offset=0)
    ask_3 = VoteRequest(3, 1, epoch=1, last_epoch=0, end_offset=0)
    assert h.absorb(1, h.nodes[1].step(ask_2, 0)).messages[0].vote_granted
    assert h.persisted[1] == ElectionState(1, 2)
    h.restart(1)  # the vote was persisted before the response left
    assert not h.nodes[1].step(ask_3, 0).messages[0].vote_granted
    assert h.nodes[1].step(ask_2, 0).messages[0].vote_granted  # a retry is answered the same


# (candidate last epoch, candidate end offset) vs a voter whose log is [epoch 1, epoch 2]
@pytest.mark.parametrize(("last_epoch", "end_offset", "granted"), [
    (2, 2, True),  # same log
    (2, 3, True),  # longer, same last epoch
    (3, 1, True),  # shorter but a newer last epoch
    (2, 1, False),  # shorter, same last epoch
    (1, 5, False),  # longer but an older last epoch
])
def test_vote_only_for_an_up_to_date_log(last_epoch: int, end_offset: int, granted: bool) -> None:
    log = MemoryReplicatedLog()
    log.append([LogEntry(0, 1, b""), LogEntry(1, 2, b"")])
    node = RaftNode(1, (1, 2, 3), log, ElectionState(2), Rng(1), CONFIG)
    for pre_vote in (True, False):
        ask = VoteRequest(2, 1, epoch=3, last_epoch=last_epoch, end_offset=end_offset,
                          pre_vote=pre_vote)
        assert node.step(ask, 0).messages[0].vote_granted is granted


def test_real_vote_at_a_higher_epoch_makes_a_leader_step_down() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    ready = h.nodes[1].step(VoteRequest(2, 1, epoch=5, last_epoch=0, end_offset=0), h.now_ms)
    assert h.nodes[1].role == "Unattached" and h.nodes[1].epoch == 5
    assert not ready.messages[0].vote_granted  # its log is behind
    with pytest.raises(MqError) as error:
        h.nodes[1].propose([b"x"], h.now_ms)
    assert error.value.code == ErrorCode.NOT_LEADER


def test_leader_resigns_when_a_majority_stops_fetching() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    last_fetch_ms = h.now_ms
    while h.nodes[1].is_leader:  # followers' fetches are all lost from here on
        h.fire(1)
        h.drop_all()
    assert h.now_ms == last_fetch_ms + CONFIG.fetch_timeout_ms
    assert h.nodes[1].role == "Resigned" and h.nodes[1].epoch == 1
    with pytest.raises(MqError):
        h.nodes[1].propose([b"x"], h.now_ms)
    h.fire(1)
    assert h.nodes[1].role == "Prospective"


def test_leader_with_one_fetching_follower_keeps_its_quorum() -> None:
    h = Harness(3)
    h.elect(1)
    for _ in range(10):
        h.advance(CONFIG.fetch_max_wait_ms)
        h.deliver(allow=between(1, 2))
    assert h.nodes[1].is_leader
    assert h.now_ms > CONFIG.fetch_timeout_ms


def test_stale_leader_is_fenced_by_the_answer_to_begin_quorum_epoch() -> None:
    h = Harness(3)
    h.fire(1)
    held: list[RaftMessage] = []
    h.deliver(allow=lambda m: isinstance(m, (VoteRequest, VoteResponse)) or held.append(m))
    assert h.nodes[1].is_leader
    begin = [m for m in held if isinstance(m, BeginQuorumEpochRequest)]
    assert len(begin) == 2
    # Meanwhile voter 3 moved on to epoch 4 (a real vote request reached it).
    h.absorb(3, h.nodes[3].step(VoteRequest(2, 3, epoch=4, last_epoch=0, end_offset=0), h.now_ms))
    h.drop_all()
    h.inflight.extend(begin)
    h.deliver()
    assert h.nodes[1].role == "Unattached" and h.nodes[1].epoch == 4
