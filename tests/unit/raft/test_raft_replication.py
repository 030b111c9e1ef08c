"""Fetch-based replication: commit by majority, divergence, figure 8, snapshots."""

from __future__ import annotations

from dataclasses import replace

import pytest
from raft_harness import CONFIG, Harness, between, data

from mq.core.errors import ErrorCode, MqError
from mq.raft import (
    FetchResponse,
    FetchSnapshotRequest,
    RaftMessage,
    VoteRequest,
    VoteResponse,
    replication,
)
from mq.raft.states import Leader


def test_entries_commit_on_every_voter_in_order() -> None:
    h = Harness(3)
    h.elect(1)
    h.propose(1, b"a", b"b")
    h.propose(1, b"c")
    h.deliver()
    for voter in (1, 2, 3):
        assert data(h.applied[voter]) == [b"a", b"b", b"c"]
        assert h.nodes[voter].high_watermark == h.logs[1].end_offset == 4


def test_followers_never_send_entries_the_leader_pulls_nothing() -> None:
    h = Harness(3)
    h.elect(1)
    h.propose(1, b"a")
    h.deliver()
    kinds = {type(m).__name__ for m in h.delivered if m.source_id != 1}
    assert "FetchResponse" not in kinds and "FetchRequest" in kinds


def test_a_majority_commits_a_minority_does_not() -> None:
    h = Harness(5)
    h.elect(1)
    h.deliver()
    h.propose(1, b"two-of-five")
    h.deliver(allow=between(1, 2))
    assert h.nodes[1].high_watermark == 1 and not data(h.applied[1])
    h.propose(1, b"three-of-five")
    h.advance(CONFIG.request_timeout_ms)  # 3 re-sends the fetch whose answer was lost
    h.deliver(allow=between(1, 2, 3))
    assert data(h.applied[1]) == [b"two-of-five", b"three-of-five"]


def test_follower_high_watermark_is_capped_by_what_it_has_validated() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    ready = h.propose(1, b"a")
    to_2 = next(m for m in ready.messages if isinstance(m, FetchResponse) and m.destination_id == 2)
    inflated = replace(to_2, high_watermark=99)
    h.drop_all()
    h.absorb(2, h.nodes[2].step(inflated, h.now_ms))
    assert h.nodes[2].high_watermark == h.logs[2].end_offset == 2


def test_late_and_duplicated_fetch_responses_are_ignored() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    ready = h.propose(1, b"a")
    to_2 = next(m for m in ready.messages if isinstance(m, FetchResponse) and m.destination_id == 2)
    h.deliver()
    end = h.logs[2].end_offset
    h.absorb(2, h.nodes[2].step(to_2, h.now_ms))  # once more, long after
    assert h.logs[2].end_offset == end
    assert data(h.applied[2]) == [b"a"]


def test_propose_on_a_follower_is_refused() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    with pytest.raises(MqError) as error:
        h.nodes[2].propose([b"x"], h.now_ms)
    assert error.value.code == ErrorCode.NOT_LEADER and error.value.code.retriable


def test_divergent_tail_is_truncated_by_epoch_not_by_high_watermark() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    # The leader appends three entries nobody else gets, then is cut off.
    h.propose(1, b"lost-1", b"lost-2", b"lost-3")
    h.drop_all()
    h.now_ms += CONFIG.fetch_timeout_ms
    h.fire(2)
    h.deliver(allow=between(2, 3))
    assert h.nodes[2].is_leader and h.nodes[2].epoch == 2
    h.propose(2, b"kept")
    h.deliver(allow=between(2, 3))
    # The old leader comes back: it resigns (no quorum), learns epoch 2 from the
    # refusals of its pre-vote, and fetches from 2.
    while h.nodes[1].role != "Follower":
        h.fire(1)
        h.deliver()
    diverging = [m for m in h.delivered if isinstance(m, FetchResponse) and m.destination_id == 1
                 and m.diverging_epoch is not None]
    assert diverging and diverging[0].diverging_epoch.leader_epoch == 1
    assert [e.data for e in h.logs[1].entries(0, 10)] == [e.data for e in h.logs[2].entries(0, 10)]
    assert b"lost-1" not in data(h.logs[1].entries(0, 10))
    assert data(h.applied[1]) == [b"kept"]


def test_divergence_walks_back_one_epoch_per_round_trip() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    # Voter 1 leads epochs 1 and 3, voter 2 leads epoch 2; each writes entries that
    # only it gets, so 1's log ends with epochs 1, 3 and 2's with 1, 2.
    h.propose(1, b"e1-a", b"e1-b")
    h.drop_all()
    while h.nodes[1].is_leader:
        h.fire(1)
        h.drop_all()
    h.fire(2)
    h.deliver(allow=lambda m: isinstance(m, VoteRequest | VoteResponse) and 1 not in (
        m.source_id, m.destination_id))
    h.propose(2, b"e2-a")
    h.drop_all()
    while h.nodes[2].role != "Prospective":
        h.fire(2)
        h.drop_all()
    while not h.nodes[1].is_leader:
        h.fire(1)
        h.deliver(allow=lambda m: isinstance(m, VoteRequest | VoteResponse) and 2 not in (
            m.source_id, m.destination_id))
    assert h.nodes[1].epoch == 3
    h.propose(1, b"e3-a")
    for _ in range(3):  # 1 re-sends BeginQuorumEpoch; 2 fetches with last epoch 2, is told
        h.advance(CONFIG.request_timeout_ms)  # where epoch 1 ends, truncates, catches up
        h.deliver()
    walk = [m.diverging_epoch for m in h.delivered
            if isinstance(m, FetchResponse) and m.destination_id == 2 and m.diverging_epoch]
    assert walk and walk[0].leader_epoch == 1
    logs = [[(e.offset, e.epoch) for e in h.logs[v].entries(0, 100)] for v in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2]
    assert data(h.applied[2]) == [b"e1-a", b"e1-b", b"e3-a"]


def _mutant_commit_rule(leader: Leader, leader_end_offset: int, majority: int) -> int | None:
    """The rule Raft §5.4.2 forbids: commit whatever a majority stores, of any epoch."""
    ends = sorted([leader_end_offset] + [r.end_offset for r in leader.replicas.values()],
                  reverse=True)
    return ends[majority - 1]


def _figure8(h: Harness) -> None:
    """Raft's figure 8 on five voters, one entry per fetch response."""
    def not_own_epoch_entries(m: RaftMessage) -> bool:
        return not (isinstance(m, FetchResponse) and any(e.epoch == 3 for e in m.entries))

    h.elect(1)
    h.deliver()
    h.propose(1, b"X")                          # (a) X at offset 1, epoch 1, only on 1 and 2
    h.deliver(allow=between(1, 2))
    h.now_ms += CONFIG.fetch_timeout_ms         # (b) 5 wins epoch 2 with 3 and 4, writes at 1
    h.fire(5)
    h.deliver(allow=lambda m: between(3, 4, 5)(m) and isinstance(m, VoteRequest | VoteResponse))
    assert h.nodes[5].is_leader and h.nodes[5].epoch == 2
    while h.nodes[1].is_leader or h.nodes[1].role == "Resigned":
        h.fire(1)
        h.drop_all()
    for _ in range(3):                          # (c) 1 wins epoch 3 with 2, 3 and 4 ...
        h.fire(1)
        h.deliver(allow=lambda m: between(1, 2, 3, 4)(m) and not_own_epoch_entries(m))
        if h.nodes[1].is_leader:
            break
    assert h.nodes[1].is_leader and h.nodes[1].epoch == 3
    # ... and X reaches 3 while 1's own epoch-3 entry reaches no one.
    h.now_ms += 1
    h.deliver(allow=lambda m: between(1, 2, 3, 4)(m) and not_own_epoch_entries(m))
    x_holders = [v for v in (2, 3, 4) if h.logs[v].epoch_at(1) == 1]
    assert len(x_holders) >= 2, h.describe()
    h.now_ms += CONFIG.fetch_timeout_ms         # (d) 1 is cut off; 5 wins epoch 4
    h.drop_all()
    for _ in range(6):
        h.fire(5)
        h.deliver(allow=lambda m: 1 not in (m.source_id, m.destination_id))
        if h.nodes[5].is_leader and h.nodes[5].epoch >= 4:
            break
    assert h.nodes[5].is_leader and h.nodes[5].epoch >= 4, h.describe()
    h.propose(5, b"after")
    h.deliver(allow=lambda m: 1 not in (m.source_id, m.destination_id))


def test_figure8_entry_of_an_older_epoch_is_not_committed_by_counting() -> None:
    h = Harness(5, config=replace(CONFIG, max_fetch_entries=1))
    _figure8(h)
    # X was on a majority (1, 2, 3) in epoch 3, yet never committed: 5 overwrote it.
    assert b"X" not in data(h.applied[1])
    assert all(h.logs[v].epoch_at(1) == 2 for v in (2, 3, 4, 5))
    assert all(b"X" not in data(h.applied[v]) for v in h.voters)


def test_figure8_mutant_commit_rule_loses_a_committed_entry(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(replication, "majority_high_watermark", _mutant_commit_rule)
    h = Harness(5, config=replace(CONFIG, max_fetch_entries=1))
    _figure8(h)
    # The mutant applied X at offset 1 on the epoch-3 leader; epoch 4 applied another entry.
    assert [e.data for e in h.applied[1] if e.offset == 1] == [b"X"]
    assert [e.epoch for e in h.applied[5] if e.offset == 1] == [2]


def test_snapshot_install_for_a_follower_behind_the_log_start() -> None:
    h = Harness(3)
    h.elect(1)
    h.deliver()
    for i in range(10):
        h.propose(1, b"%d" % i)
        h.deliver(allow=between(1, 2))
    snapshot = h.nodes[1].create_snapshot(8, b"state@8")
    assert h.logs[1].start_offset == 8 and snapshot.snapshot_id.leader_epoch == 1
    with pytest.raises(ValueError):
        h.nodes[1].create_snapshot(20, b"beyond what was applied")
    for _ in range(3):  # 3 re-sends its lost fetch; the leader points it at the snapshot
        h.advance(CONFIG.request_timeout_ms)
        h.deliver()
    assert any(isinstance(m, FetchSnapshotRequest) for m in h.delivered)
    assert h.snapshots[3] == [8]
    assert h.logs[3].start_offset == 8 and h.logs[3].end_offset == h.logs[1].end_offset
    assert h.nodes[3].high_watermark == h.nodes[1].high_watermark
    assert [e.offset for e in h.applied[3]] == list(range(8, h.logs[1].end_offset))


def test_restart_hands_the_snapshot_to_the_application_first() -> None:
    h = Harness(1)
    h.elect(1)
    h.propose(1, b"a", b"b", b"c")
    h.nodes[1].create_snapshot(3, b"s")
    h.restart(1)
    assert h.snapshots[1] == [3]
    assert h.nodes[1].high_watermark == 3 and h.logs[1].start_offset == 3
