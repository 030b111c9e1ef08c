"""Group coordinator simulation: member crashes, slow members, lost messages, failed
appends and coordinator fail-over, with "≤ 1 owner per partition per generation",
"committed offsets never go back" and "an OffsetFetch answers only committed offsets"
checked after every event, and the group settling afterwards. A failing seed prints ``MQ_SEED=<n> pytest tests/sim/test_sim_groups.py``."""

from __future__ import annotations

import pytest

import mq.coordinator.offsets as coordinator_offsets
import mq.coordinator.rebalance as coordinator_rebalance
from mq.coordinator.coordinator import GroupCoordinator
from mq.sim import run_seeds, seeds
from mq.sim.groups import GroupSimRun, group_schedule
from mq.sim.scheduler import InvariantViolation


def _report(name: str, results: list[GroupSimRun]) -> None:
    print(f"{name}: {len(results)} seeds ({sum(r.cooperative for r in results)} cooperative), "
          f"{sum(r.faults for r in results)} faults, {sum(r.failovers for r in results)} fail-overs, "
          f"{sum(r.generations for r in results)} generations, {sum(r.commits for r in results)} commits, "
          f"invariants after each of {sum(r.events for r in results)} events")


def test_groups_keep_one_owner_and_monotonic_offsets_under_faults(request) -> None:
    results = run_seeds(group_schedule, seeds(50), test_id=request.node.nodeid)
    _report("group schedule", results)  # type: ignore[arg-type]
    assert all(r.generations >= 2 and r.commits > 0 for r in results)  # type: ignore[attr-defined]


def _caught(seed_count: int) -> str | None:
    for seed in range(seed_count):
        try:
            group_schedule(seed)
        except InvariantViolation as caught:
            return f"seed {seed}: {caught}"
    return None


def test_the_checks_catch_a_hand_off_without_the_two_phase_rule(monkeypatch) -> None:
    """Mutation check: cooperative-sticky without withholding owned partitions."""
    monkeypatch.setattr(coordinator_rebalance, "cooperative_withhold",
                        lambda target, owned: {m: list(parts) for m, parts in target.items()})
    caught = _caught(30)
    print(f"caught: {caught}")
    assert caught is not None, "30 seeds did not notice two owners of a partition"


def test_the_checks_catch_unfenced_commits(monkeypatch) -> None:
    """Mutation check: a coordinator that accepts zombie commits."""
    monkeypatch.setattr(coordinator_offsets, "_fence", lambda group, req: None)
    caught = _caught(30)
    print(f"caught: {caught}")
    assert caught is not None, "30 seeds did not notice a zombie moving an offset back"


def test_the_checks_catch_speculative_offsets(monkeypatch) -> None:
    """Mutation check: a coordinator that shows a commit before its record is committed."""
    emit_offset = GroupCoordinator.emit_offset

    def speculative(self, call, group_id, tp, record) -> None:  # type: ignore[no-untyped-def]
        emit_offset(self, call, group_id, tp, record)
        self._apply(record)

    monkeypatch.setattr(GroupCoordinator, "emit_offset", speculative)
    caught = _caught(30)
    print(f"caught: {caught}")
    assert caught is not None and "not in the committed log prefix" in caught


@pytest.mark.nightly
def test_groups_nightly(request) -> None:
    results = run_seeds(group_schedule, seeds(1_000, first=100_000), test_id=request.node.nodeid)
    _report("group schedule (nightly)", results)  # type: ignore[arg-type]
