"""R16: Raft figure 8 with an unreliable network, 1,000 seeds in CI, 0 applied-index
mismatches; and proof that the simulation is not vacuous: deliberately broken rules
are caught on some seed."""

from __future__ import annotations

import pytest

from mq.raft import election, replication
from mq.raft.log import ReplicatedLog
from mq.raft.messages import VoteRequest
from mq.raft.states import Leader
from mq.sim import SimulationFailure, run_seeds, seeds
from mq.sim.raft_scenarios import ScenarioResult, figure8_unreliable, scripted_figure8


def test_r16_figure8_unreliable_1000_seeds(request: pytest.FixtureRequest) -> None:
    results = run_seeds(figure8_unreliable, seeds(1000), test_id=request.node.nodeid)
    applied = sum(r.applied for r in results)  # type: ignore[union-attr]
    elections = sum(r.highest_epoch for r in results)  # type: ignore[union-attr]
    print(f"R16: {len(results)} seeds, {elections} epochs, {applied} applied entries checked, "
          f"0 mismatches")
    assert len(results) == len(seeds(1000))
    if len(results) >= 100:  # not when replaying one seed
        assert elections >= 5 * len(results)  # leaders really do change, many times per seed
        assert applied > 50 * len(results)


def test_scripted_figure8(request: pytest.FixtureRequest) -> None:
    results = run_seeds(scripted_figure8, seeds(100), test_id=request.node.nodeid)
    assert all(isinstance(r, ScenarioResult) and r.highest_epoch >= 4 for r in results)


@pytest.mark.nightly
def test_r16_nightly(request: pytest.FixtureRequest) -> None:
    run_seeds(figure8_unreliable, seeds(50_000, first=1_000_000), test_id=request.node.nodeid)


def _commit_by_counting(leader: Leader, leader_end_offset: int, majority: int) -> int | None:
    """Mutant: commit whatever a majority stores, whatever its epoch (Raft forbids it)."""
    ends = sorted([leader_end_offset] + [r.end_offset for r in leader.replicas.values()],
                  reverse=True)
    return ends[majority - 1]


def _any_log_is_up_to_date(request: VoteRequest, log: ReplicatedLog) -> bool:
    """Mutant: vote for any candidate, however short its log."""
    return True


def test_mutant_commit_rule_is_caught_by_figure8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replication, "majority_high_watermark", _commit_by_counting)
    with pytest.raises(SimulationFailure) as failure:
        run_seeds(scripted_figure8, range(20), test_id="tests/sim/test_sim_raft_r16.py")
    assert "applied-index mismatch" in str(failure.value) or "below hw" in str(failure.value)
    assert "MQ_SEED=" in str(failure.value)


def test_mutant_vote_rule_is_caught_by_r16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(election, "log_is_up_to_date", _any_log_is_up_to_date)
    with pytest.raises(SimulationFailure) as failure:
        run_seeds(figure8_unreliable, range(300), test_id="tests/sim/test_sim_raft_r16.py")
    assert "MQ_SEED=" in str(failure.value)


def test_mutant_that_votes_twice_per_epoch_is_caught_as_two_leaders(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(election, "_may_vote_for", lambda node, candidate_id: True)
    with pytest.raises(SimulationFailure) as failure:
        run_seeds(figure8_unreliable, range(300), test_id="tests/sim/test_sim_raft_r16.py")
    assert "two leaders in epoch" in str(failure.value)
