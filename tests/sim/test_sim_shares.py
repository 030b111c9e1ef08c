"""Share group simulation: member crashes, forgotten records (lock expiry), releases,
rejections, coordinator fail-over losing uncommitted writes; one holder per record,
acknowledged stays acknowledged and exact delivery counts after every event, every
record accepted or dead-lettered at the end. A failing seed prints
``MQ_SEED=<n> pytest tests/sim/test_sim_shares.py``."""

from __future__ import annotations

from mq.coordinator import share_partition
from mq.sim import run_seeds, seeds
from mq.sim.scheduler import InvariantViolation
from mq.sim.shares import ShareSimRun, share_schedule


def test_share_group_invariants_under_crashes_lock_expiry_and_failover(request) -> None:
    results: list[ShareSimRun] = run_seeds(share_schedule, seeds(20), test_id=request.node.nodeid)  # type: ignore[assignment]
    print(f"share schedule: {len(results)} seeds, {sum(r.deliveries for r in results)} deliveries "
          f"({sum(r.redeliveries for r in results)} redeliveries), {sum(r.dead_letters for r in results)} dead letters, "
          f"{sum(r.crashes for r in results)} crashes, {sum(r.failovers for r in results)} fail-overs, "
          f"invariants after each of {sum(r.events for r in results)} events")
    assert all(r.deliveries > 0 for r in results) and sum(r.failovers > 0 for r in results) >= len(results) // 2
    assert sum(r.redeliveries for r in results) > 0 and sum(r.dead_letters for r in results) > 0


def _caught(count: int) -> str | None:
    for seed in range(count):
        try:
            share_schedule(seed)
        except InvariantViolation as caught:
            return f"seed {seed}: {caught}"
    return None


def test_the_checks_catch_a_snapshot_that_keeps_no_delivery_count(monkeypatch) -> None:
    """Mutation check: persisting acquired records as never delivered."""
    original = share_partition.SharePartition.snapshot

    def forgetful(self):  # type: ignore[no-untyped-def]
        state = original(self)
        runs = tuple(share_partition.StateRun(r.first_offset, r.last_offset, r.state, 0, r.dead_letter_reason)
                     if r.state == share_partition.RecordState.AVAILABLE else r for r in state.runs)
        return share_partition.SharePartitionState(state.start_offset, state.end_offset, runs)

    monkeypatch.setattr(share_partition.SharePartition, "snapshot", forgetful)
    caught = _caught(10)
    print(f"caught: {caught}")
    assert caught is not None


def test_the_checks_catch_a_delivery_limit_not_applied(monkeypatch) -> None:
    """Mutation check: released records always come back, however often they failed."""
    def release(self, r):  # type: ignore[no-untyped-def]
        r.state = share_partition.RecordState.AVAILABLE
        r.owner = ""

    monkeypatch.setattr(share_partition.SharePartition, "_release", release)
    caught = _caught(10)
    print(f"caught: {caught}")
    assert caught is not None


def test_the_checks_catch_held_records_never_released(monkeypatch) -> None:
    """Mutation check: locks that neither expire nor go with their member: records stall."""
    monkeypatch.setattr(share_partition.SharePartition, "expire_locks", lambda self, now_ms: [])
    monkeypatch.setattr(share_partition.SharePartition, "release_member", lambda self, member_id: [])
    caught = _caught(3)
    print(f"caught: {caught}")
    assert caught is not None
