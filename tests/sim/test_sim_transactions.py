"""R19 in the simulation: a transactional copier killed at random points (with zombies,
coordinator fail-overs, late markers and timeouts) copies its input exactly once as
read_committed sees it, and the LSO never passes an open transaction (checked after
every event). 200 seeds; a failing seed prints ``MQ_SEED=<n> pytest <test>``."""

from __future__ import annotations

from mq.sim import run_seeds, seeds
from mq.sim.txn_copier_scenario import txn_copier_scenario


def test_transactional_copier_is_exactly_once_over_200_seeds(request) -> None:
    results = run_seeds(txn_copier_scenario, seeds(200, first=14_000), test_id=request.node.nodeid)
    totals = {name: sum(getattr(r, name) for r in results)
              for name in ("kills", "zombies", "failovers", "timeouts", "transactions", "fenced_writes", "events")}
    print(f"transactions: {len(results)} seeds, {totals}")
    assert all(r.copied == 60 for r in results)
    # the faults happened: kills, zombies fenced, fail-overs, timeouts
    assert totals["kills"] > 200 and totals["zombies"] > 20 and totals["fenced_writes"] > 0
    assert totals["failovers"] > 100 and totals["timeouts"] > 0
