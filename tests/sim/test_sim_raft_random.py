"""A randomized schedule over 200 seeds with every invariant: proposals, crashes that
lose unflushed data, restarts, partitions, an unreliable network and snapshots."""

from __future__ import annotations

import pytest

from mq.sim import run_seeds, seeds
from mq.sim.raft_scenarios import random_schedule


def test_random_schedule_200_seeds(request: pytest.FixtureRequest) -> None:
    results = run_seeds(random_schedule, seeds(200), test_id=request.node.nodeid)
    applied = sum(r.applied for r in results)  # type: ignore[union-attr]
    print(f"random schedule: {len(results)} seeds, {applied} applied entries checked")
    assert applied > 20 * len(results) or len(results) == 1


def test_random_schedule_three_voters(request: pytest.FixtureRequest) -> None:
    run_seeds(lambda s: random_schedule(s, voters=3), seeds(50, first=10_000),
              test_id=request.node.nodeid)


@pytest.mark.nightly
def test_random_schedule_nightly(request: pytest.FixtureRequest) -> None:
    run_seeds(random_schedule, seeds(20_000, first=1_000_000), test_id=request.node.nodeid)
