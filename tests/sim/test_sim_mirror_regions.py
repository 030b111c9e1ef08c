"""The mirror in a seeded simulation (issue 10; R27 is its real-process sibling): two
simulated regions of real BrokerNodes on one virtual clock, the mirror's sans-IO cores
(``mirror.partition``, ``mirror.group_sync``) driven over the simulated networks, whose
filters cut, drop and slow the inter-region link while the mirror restarts and brokers
crash. Checked after every event: the mirrored prefix is identical to the source (same
offsets, bytes and timestamps), synced group offsets are never past the mirrored end;
at the end the target catches up with the source.

A failing seed prints ``MQ_SEED=<n> pytest tests/sim/test_sim_mirror_regions.py::<test>``,
which replays it exactly; ``MQ_SIM_ITERATIONS`` scales the seed counts.
"""

from __future__ import annotations

import dataclasses
import time

import mirror_model
import pytest
from mirror_model import SimMirror
from mirror_scenario import MirrorRun, mirror_schedule

import mirror.partition as mirror_partition
import mq.broker.mirror as broker_mirror
from mirror.partition import PartitionMirror
from mq.broker.mirror import MirrorRequests
from mq.broker.mirror_plan import MirrorPlan
from mq.broker.partition import Partition
from mq.core.errors import ErrorCode
from mq.core.types import LATEST_TIMESTAMP, TopicPartition
from mq.protocol import messages as m
from mq.protocol.batch_format import iter_batches
from mq.protocol.mirror_messages import MirrorAppendRequest
from mq.replication import FollowerPartition
from mq.replication import PartitionState as LeaderPartitionState
from mq.sim import run_seeds, seeds
from mq.sim.scheduler import InvariantViolation


def _report(name: str, results: list[MirrorRun]) -> None:
    count = len(results)
    print(f"\n{name}: {count} seeds, {sum(r.faults for r in results)} faults, "
          f"{sum(r.mirror_restarts for r in results)} mirror restarts, "
          f"{sum(r.acked_batches for r in results)} acknowledged batches, "
          f"{sum(r.records for r in results)} records mirrored, "
          f"{sum(r.duplicate_batches for r in results)} duplicate batches acknowledged, "
          f"{sum(r.append_errors for r in results)} append errors, "
          f"{sum(r.gap_records for r in results)} records in reported gaps (deleted in the source before they were mirrored), "
          f"invariants after each of {sum(r.events for r in results)} events; "
          f"{sum(r.seconds for r in results) / max(1, count):.2f} s per seed "
          f"(max {max((r.seconds for r in results), default=0):.2f} s)")


def test_mirror_keeps_the_prefix_identical_and_synced_offsets_behind_its_end(request) -> None:
    results = run_seeds(mirror_schedule, seeds(16), test_id=request.node.nodeid)
    _report("mirror random schedule", results)  # type: ignore[arg-type]
    assert all(r.records > 0 for r in results)  # type: ignore[attr-defined]


def test_a_seed_replays_exactly() -> None:
    """The same seed gives the same run, event for event (what makes MQ_SEED a replay)."""
    first, second = (dataclasses.replace(mirror_schedule(3), seconds=0.0) for _ in range(2))
    assert first == second and first.events > 1_000


@pytest.mark.nightly
def test_mirror_random_schedule_nightly(request) -> None:
    results = run_seeds(lambda seed: mirror_schedule(seed, duration_ms=8_000), seeds(500, first=100_000),
                        test_id=request.node.nodeid)
    _report("mirror random schedule (nightly)", results)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- mutation checks
# Each mutant runs seeds from 0 until one is caught, under the faults that matter to it.

LOST_ANSWERS = ("target_answers_cut", "target_answers_cut", "link_slow", "target_crash")
RESTARTS = ("mirror_restart", "mirror_restart", "link_slow", "target_answers_cut")


def _first_caught(seed_count: int, **kwargs: object) -> str | None:
    for seed in range(seed_count):
        started = time.perf_counter()
        try:
            mirror_schedule(seed, **kwargs)  # type: ignore[arg-type]
        except InvariantViolation as caught:
            return f"seed {seed} ({time.perf_counter() - started:.2f} s): {caught}"
    return None


def test_the_checks_catch_a_target_that_appends_without_the_duplicate_check(monkeypatch) -> None:
    """A MirrorAppend that is a plain append at the log end (Kafka's producer without
    idempotence, MirrorMaker 1's duplicates): a retried append whose first attempt was
    applied lands again at new offsets."""
    def plain_plan(partition: Partition, request: MirrorAppendRequest) -> MirrorPlan:
        return MirrorPlan(0, sum(1 for _ in iter_batches(request.records)), 0, None, -1)

    def plain_append(self: MirrorRequests, partition: Partition, request: MirrorAppendRequest,
                     plan: MirrorPlan, now_ms: int) -> None:
        state = partition.leader
        assert state is not None
        partition.log.append_as_leader(request.records, leader_epoch=state.leader_epoch, now_ms=now_ms)
        self._node.appended(partition, now_ms=now_ms)
    monkeypatch.setattr(broker_mirror, "_plan", plain_plan)
    monkeypatch.setattr(MirrorRequests, "_apply", plain_append)
    caught = _first_caught(8, faults=LOST_ANSWERS)
    print(f"\ncaught the target without the duplicate check: {caught}")
    assert caught is not None, "8 seeds did not notice appends that duplicate on retry"


def test_the_checks_catch_a_group_sync_without_the_clamp(monkeypatch) -> None:
    """Group offsets copied as the source has them, not clamped to the mirrored end."""
    original = mirror_model.plan_group_sync

    def unclamped(group, source_offsets, target_offsets, mirrored_ends, **kwargs):  # type: ignore[no-untyped-def]
        return original(group, source_offsets, target_offsets, {tp: 1 << 62 for tp in mirrored_ends}, **kwargs)
    monkeypatch.setattr(mirror_model, "plan_group_sync", unclamped)
    caught = _first_caught(6)
    print(f"\ncaught the unclamped group sync: {caught}")
    assert caught is not None, "6 seeds did not notice synced offsets past the mirrored end"


def test_the_checks_catch_a_mirror_that_blocks_on_a_log_start_inside_a_batch(monkeypatch) -> None:
    """The bug this simulation found (fixed in mirror.partition): after a gap, a source log
    start inside a batch (DeleteRecords at any offset) was taken for a batch straddling
    the mirrored end, and the partition blocked for good."""
    monkeypatch.setattr(mirror_partition, "batch_start", lambda data, offset: None)
    caught = _first_caught(8, faults=("source_delete_records",))
    print(f"\ncaught the mirror blocking on a log start inside a batch: {caught}")
    assert caught is not None and "straddles" in caught, caught


def test_the_checks_catch_a_follower_that_cannot_restart_inside_a_batch(monkeypatch) -> None:
    """The broker bug this simulation found (KAFKA-6975, fixed in mq.replication.follower):
    a source follower that restarts below a log start inside a batch refused that batch
    and stayed out of the ISR for good."""
    monkeypatch.setattr(FollowerPartition, "_restart_at_first_batch", lambda self, records, exc, now_ms: False)
    caught = _first_caught(8, faults=("source_delete_records", "source_crash", "link_slow"))
    print(f"\ncaught the follower stuck below a log start inside a batch: {caught}")
    assert caught is not None and "did not settle" in caught, caught


class RememberingMirror(SimMirror):
    """A mirror that trusts its own memory over the target: each life resumes where the
    previous one had *fetched* up to (a checkpoint of its fetch position), not at the
    target's high watermark. ``force_start``: and it tells the target to start there
    (``start_offset``, the retention-gap restart)."""

    force_start = False

    def start(self) -> None:
        self.remembered: dict[TopicPartition, int] = getattr(self, "remembered", {})
        self.resumed: set[TopicPartition] = set()
        super().start()

    def reset(self, pm: PartitionMirror, target_end: int) -> None:
        remembered = self.remembered.get(pm.tp)
        if pm.tp in self.resumed or remembered is None:
            pm.reset(target_end)
        else:
            pm.reset(remembered)
            if self.force_start and remembered > target_end:  # as if the source had deleted them
                pm.pending_start_offset = remembered
        self.resumed.add(pm.tp)

    def _fetched(self, fetch, response) -> None:  # type: ignore[no-untyped-def]
        super()._fetched(fetch, response)
        for tp, _, _ in fetch.partitions:
            pm = self.partitions[tp]
            if pm.fetch_offset is not None:
                self.remembered[tp] = pm.fetch_offset


class ForcingRememberingMirror(RememberingMirror):
    force_start = True


def test_the_checks_catch_a_mirror_that_resumes_from_its_own_remembered_offset() -> None:
    """It takes its remembered position for the mirrored end, so the group sync hands
    out offsets the target does not have yet (invariant 2)."""
    caught = _first_caught(8, mirror_class=RememberingMirror, faults=RESTARTS)
    print(f"\ncaught the mirror resuming from its remembered offset: {caught}")
    assert caught is not None, "8 seeds did not notice a mirror resuming past the target's end"


def test_the_checks_catch_a_mirror_that_makes_the_target_start_at_its_remembered_offset() -> None:
    """With ``start_offset`` the target restarts there: what was fetched but not appended
    before the restart is lost (invariant 1; the group sync is off to show it alone)."""
    caught = _first_caught(8, mirror_class=ForcingRememberingMirror, sync_groups=False, faults=RESTARTS)
    print(f"\ncaught the mirror forcing its remembered offset on the target: {caught}")
    assert caught is not None, "8 seeds did not notice a mirror skipping what it had fetched but not appended"
    assert "lost" in caught or "missing" in caught, caught


def test_the_targets_gap_refusal_keeps_the_data_of_a_mirror_resuming_from_a_remembered_offset(request) -> None:
    """Defence in depth: without ``start_offset`` the same wrong resume point is refused
    (MIRROR_OFFSET_GAP), the mirror re-reads the target's end, and no record is lost,
    duplicated or reordered (the group sync is off: the previous test shows its harm)."""
    def scenario(seed: int) -> MirrorRun:
        return mirror_schedule(seed, mirror_class=RememberingMirror, sync_groups=False, faults=RESTARTS)
    results = run_seeds(scenario, seeds(3, first=500), test_id=request.node.nodeid)
    _report("remembering mirror, refused by the target", results)  # type: ignore[arg-type]
    refused = sum(r.offset_gap_refusals for r in results)  # type: ignore[attr-defined]
    assert refused > 0 or len(results) == 1, "no resume point was ahead of the target: the refusal went untested"


class HighWatermarkGapMirror(SimMirror):
    """The mutant of commit 90c15fc: a suspected gap confirmed against ListOffsets (the
    target leader's high watermark, which lags the log its replicas hold after an election)."""

    def _probe_end(self, tp, pm) -> None:  # type: ignore[no-untyped-def]
        self.probing.add(tp)

        def answered(response: object) -> None:
            self.probing.discard(tp)
            if isinstance(response, m.ListOffsetsResponse):
                for p in (p for t in response.topics for p in t.partitions):
                    if p.error_code == ErrorCode.NONE and pm.needs_end_check():
                        pm.confirm_gap(p.offset, self.now_ms)
        request = m.ListOffsetsRequest([m.ListOffsetsTopic(tp.topic, [
            m.ListOffsetsPartition(tp.partition, LATEST_TIMESTAMP)])])
        self._send(self.target, self.target.leaders[tp], request, answered)


def test_a_gap_behind_a_lagging_target_high_watermark_names_only_what_was_deleted() -> None:
    """A new target leader's high watermark lags the log every replica holds (first found as
    seed 6213: 24 while all hold [0, 61)), the mirror restarts, and the source's log start
    has moved past the mirrored end. The end probe waits for the settled end and the gap
    holds only what was deleted; the mutant confirming against ListOffsets claims records
    the target held, and the checks name them. Seed 58 of these faults replays it under
    the flow's fetch plan."""
    faults = ("source_delete_records", "target_crash", "target_isolate")
    run = mirror_schedule(58, duration_ms=5_000, faults=faults)
    assert run.gap_records > 0
    with pytest.raises(InvariantViolation, match=r"claims \[34, 36\), which the target held"):
        mirror_schedule(58, duration_ms=5_000, mirror_class=HighWatermarkGapMirror, faults=faults)


def _restart_alone(self: MirrorRequests, partition: Partition, request: MirrorAppendRequest, now_ms: int,
                   deadline_ms: int) -> object:
    """The mutant of seed 6275 (before the fix): the leader restarts its log at once, with
    no new leader epoch from the controller (and raises its high watermark alone, below)."""
    return self._append(request, now_ms, deadline_ms=deadline_ms,
                        restart=broker_mirror._Restart(self._new_op_id(), partition.tp, request, -1, deadline_ms))


def _high_watermark_to_the_start(self: LeaderPartitionState, log_start_offset: int) -> bool:
    moved = log_start_offset > self._high_watermark
    self._high_watermark = max(self._high_watermark, log_start_offset)
    return moved


def test_seed_6275_an_isolated_target_leader_restarts_and_commits_nothing(monkeypatch) -> None:
    """Seed 6275 (5 s): a target partition leader cut off from its region (the mirror still
    reaches it) is asked to restart its log at the source's log start (a gap: retention
    removed records before they were mirrored). It used to restart at once and raise its
    high watermark to the new start alone (173 -> 205), which went back to 173 when the
    region elected a replica that never restarted. The restart now waits for a new
    leader epoch from the controller quorum, and only the ISR's fetches move the high
    watermark; the old behaviour is caught by the same seed."""
    run = mirror_schedule(6275, duration_ms=5_000)
    assert run.gap_records > 0 and run.records > 0
    monkeypatch.setattr(MirrorRequests, "_await_restart_epoch", _restart_alone)
    monkeypatch.setattr(LeaderPartitionState, "on_log_restarted", _high_watermark_to_the_start)
    with pytest.raises(InvariantViolation, match=r"orders-2 on broker 2: high watermark went back from 205 to 173"):
        mirror_schedule(6275, duration_ms=5_000)
