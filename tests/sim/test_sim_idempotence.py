"""R17 in the simulation: an idempotent producer's batches, duplicated by the network,
resent after lost answers and crashes, are each appended exactly once, in order.

A failing seed prints ``MQ_SEED=<n> pytest <test>``, which replays it exactly."""

from __future__ import annotations

from mq.sim import run_seeds, seeds
from mq.sim.idempotence_scenario import idempotence_scenario


def test_resent_and_duplicated_batches_are_appended_once(request) -> None:
    results = run_seeds(idempotence_scenario, seeds(12, first=3_000), test_id=request.node.nodeid)
    acked = sum(r.acked for r in results)
    resends = sum(r.resends for r in results)
    duplicates = sum(r.duplicates_answered for r in results)
    print(f"idempotence: {len(results)} seeds, {sum(r.faults for r in results)} faults, {resends} resends, "
          f"{duplicates} duplicate batches answered by the leaders, {acked} records acknowledged and found "
          f"exactly once, invariants after each of {sum(r.events for r in results)} events")
    assert all(r.acked == 2 * 100 * 3 for r in results)
    assert resends > 0 and duplicates > 0  # the faults did make copies, and leaders recognised them
