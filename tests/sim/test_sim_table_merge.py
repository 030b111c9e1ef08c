"""The table-view merge under the three conflict policies, simulated (``mq.sim.conflicts``):
three regions write the same 1,000 keys concurrently with skewed clocks (up to ±500 ms per
producer) over 30/80/120 ms links with jitter, in delivery orders drawn from the seed.
``home-region`` and ``last-writer-wins`` must leave every region with the same table (equal
digests); ``none`` must not (the divergence the policies exist to remove). Replay one run
with ``MQ_SEED=<n>``."""

from __future__ import annotations

import time

from mq.core.conflict import ConflictPolicy
from mq.sim.conflicts import SimConfig, run
from mq.sim.seeds import run_seeds, seeds

TEST_ID = "tests/sim/test_sim_table_merge.py"


def test_last_writer_wins_converges_and_keeps_causal_order() -> None:
    def scenario(seed: int):
        result = run(seed, SimConfig(ConflictPolicy.LAST_WRITER_WINS))
        assert result.written == 3_000 and result.refused == 0
        assert result.converged, f"digests differ: {result.digests} ({result.diverged_keys} keys)"
        assert not result.causal_violations, result.causal_violations[:3]
        assert 900 <= len(result.tables["east"]) <= 1_000  # tombstones removed some keys
        return result
    run_seeds(scenario, seeds(8), test_id=f"{TEST_ID}::test_last_writer_wins_converges_and_keeps_causal_order")


def test_home_region_converges_by_construction() -> None:
    def scenario(seed: int):
        result = run(seed, SimConfig(ConflictPolicy.HOME_REGION, writes_per_key=2))
        assert (result.written, result.refused) == (2_000, 4_000)  # each key written only at home
        assert result.converged, f"digests differ: {result.digests}"
        return result
    run_seeds(scenario, seeds(8), test_id=f"{TEST_ID}::test_home_region_converges_by_construction")


def test_without_a_policy_the_regions_diverge() -> None:
    def scenario(seed: int):
        result = run(seed, SimConfig(ConflictPolicy.NONE))
        assert not result.converged and result.diverged_keys > 100, result.diverged_keys
        return result
    run_seeds(scenario, seeds(4), test_id=f"{TEST_ID}::test_without_a_policy_the_regions_diverge")


def test_a_seed_replays_exactly_and_runs_fast() -> None:
    started = time.monotonic()
    first = run(7, SimConfig(ConflictPolicy.LAST_WRITER_WINS))
    elapsed = time.monotonic() - started
    again = run(7, SimConfig(ConflictPolicy.LAST_WRITER_WINS))
    other = run(8, SimConfig(ConflictPolicy.LAST_WRITER_WINS))
    assert first.digests == again.digests and first.drained_at_ms == again.drained_at_ms
    assert first.digests["east"] != other.digests["east"]
    assert elapsed < 2.0, f"one run took {elapsed:.2f} s"


def test_skew_without_hybrid_clocks_would_lose_causal_writes() -> None:
    """The check has teeth: with the clocks' observe step removed (stamps from skewed wall
    clocks alone), some read-modify-writes are stamped below what they read."""
    import mq.sim.conflicts as sim

    class WallOnly(sim.HybridLogicalClock):
        def observe(self, remote, now_ms):  # forget what was read
            return self.last

    original = sim.HybridLogicalClock
    sim.HybridLogicalClock = WallOnly
    try:
        results = [run(seed, SimConfig(ConflictPolicy.LAST_WRITER_WINS)) for seed in (0, 1)]
    finally:
        sim.HybridLogicalClock = original
    for result in results:
        assert result.converged  # still the same table everywhere...
        assert sum("ends on" in v for v in result.causal_violations) > 20  # ...holding replaced values


def test_the_disagreement_timeline_drops_to_zero_only_under_a_policy() -> None:
    for policy in ConflictPolicy:
        sampled = run(5, SimConfig(policy, sample_every_ms=10))
        assert sampled.digests == run(5, SimConfig(policy)).digests  # sampling changes nothing
        times = [t for t, _ in sampled.timeline]
        assert times == sorted(times) and times[-1] >= sampled.drained_at_ms
        final = sampled.timeline[-1][1]
        assert final == sampled.diverged_keys and max(n for _, n in sampled.timeline) > 0
        assert (final == 0) is (policy is not ConflictPolicy.NONE), (policy, final)
        assert sampled.last_write_ms < sampled.drained_at_ms
