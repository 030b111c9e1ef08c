"""Simulated regions: real BrokerNodes (Raft, controller, replication) on a seeded
network and MemoryFileIO disks, invariants checked after every event.

A failing seed prints ``MQ_SEED=<n> pytest <test>``, which replays it exactly."""

from __future__ import annotations

import pytest

from mq.replication.leader import PartitionState
from mq.sim import run_seeds, seeds
from mq.sim.region_scenarios import kip101_scenario, random_region_schedule, rapid_elections_scenario
from mq.sim.scheduler import InvariantViolation


def _report(name: str, results: list) -> None:
    acked = sum(r.acked for r in results)
    events = sum(r.events for r in results)
    faults = sum(r.faults for r in results)
    print(f"{name}: {len(results)} seeds, {faults} faults, {acked} acknowledged records checked, "
          f"invariants after each of {events} events")


def test_random_faults_keep_every_acknowledged_record_and_identical_replicas(request) -> None:
    results = run_seeds(random_region_schedule, seeds(60), test_id=request.node.nodeid)
    _report("region random schedule", results)
    assert sum(r.acked for r in results) > 50 * len(results) or len(results) == 1


def test_r10_a_restarted_follower_keeps_what_it_acknowledged(request) -> None:
    results = run_seeds(kip101_scenario, seeds(100, first=1_000), test_id=request.node.nodeid)
    _report("R10 (KIP-101)", results)
    assert all(r.acked == 2 for r in results)


def test_r11_three_elections_within_one_fetch_interval(request) -> None:
    results = run_seeds(rapid_elections_scenario, seeds(200, first=2_000), test_id=request.node.nodeid)
    _report("R11 (three elections per fetch interval)", results)


def test_the_checks_catch_a_leader_that_commits_without_its_followers(monkeypatch) -> None:
    """Mutation check: a high watermark that ignores the followers acknowledges acks=all
    records only the leader has; some seed must then lose one or see replicas differ."""
    def leader_only(self: PartitionState) -> bool:
        end = self.log.log_end_offset
        if end > self._high_watermark:
            self._high_watermark = end
            return True
        return False
    monkeypatch.setattr(PartitionState, "_maybe_increment_high_watermark", leader_only)
    for seed in range(40):
        try:
            random_region_schedule(seed)
        except InvariantViolation as caught:
            print(f"seed {seed} caught the mutant: {caught}")
            return
    pytest.fail("40 seeds of random faults did not notice a leader committing alone")


@pytest.mark.nightly
def test_random_faults_nightly(request) -> None:
    results = run_seeds(random_region_schedule, seeds(1_000, first=100_000), test_id=request.node.nodeid)
    _report("region random schedule (nightly)", results)
