"""mirror.translation_history: fail-over translation measured on simulated copy histories;
mq's translate against MirrorMaker 2's rule (lab 06's comparison)."""

from __future__ import annotations

from mirror.translation import OffsetSync
from mirror.translation_history import TP, measure, mm2_translate, simulate_history
from mq.core.rng import Rng


def test_mm2_rewinds_to_the_last_sync_plus_one() -> None:
    syncs = [OffsetSync(TP, 100, 500, 100), OffsetSync(TP, 200, 600, 99)]
    assert mm2_translate(50, syncs) is None
    assert mm2_translate(100, syncs) == 500
    assert [mm2_translate(c, syncs) for c in (101, 150, 199)] == [501, 501, 501]
    assert mm2_translate(200, syncs) == 600 and mm2_translate(999, syncs) == 601


def test_a_history_is_what_the_emitter_saw() -> None:
    h = simulate_history(Rng(1), seconds=2, rate_per_s=1_000, offset_lag_max=100, target_base=7)
    assert len(h.written) == 2_000 and h.written[0][:2] == (0, 7) and h.written[-1][:2] == (1_999, 2_006)
    assert [s.source_offset for _, s in h.syncs][:3] == [0, 100, 200]
    holes = simulate_history(Rng(1), seconds=2, rate_per_s=1_000, hole_ratio=0.5)
    assert 800 < len(holes.written) < 1_200 and holes.written[-1][0] > 1_900


def test_neither_rule_loses_and_mq_rereads_no_more_than_mm2() -> None:
    for lag in (10, 100, 1_000):
        for extra in ({}, {"hole_ratio": 0.3}, {"restart_every_ms": 3_000}, {"target_base": 5_000}):
            h = simulate_history(Rng(lag), seconds=8, offset_lag_max=lag, **extra)
            out = measure(h, Rng(lag + 1), samples=300)
            assert out["mq"].lost == 0 and out["mm2"].lost == 0, (lag, extra)
            assert out["mq"].mean <= out["mm2"].mean, (lag, extra, out["mq"].mean, out["mm2"].mean)
            assert out["preserved"].worst == 0
            assert len(out["preserved"].rereads) == len(out["mq"].rereads) + out["mq"].untranslated > 280


def test_a_one_for_one_copy_rereads_only_past_the_last_sync() -> None:
    h = simulate_history(Rng(3), seconds=8, offset_lag_max=100)
    out = measure(h, Rng(4), samples=400, consumer_lag_ms=1_000)  # deep enough to be inside runs
    assert out["mq"].median == 0 < out["mm2"].median
    assert out["mq"].worst < 100 and out["mm2"].worst < 100  # bounded by the sync density
