"""The lag job on a deterministic synthetic snapshot stream: exactly the breach windows, the
partitions behind them, the percentiles (numpy's linear rule) and the end-to-end latency."""

from __future__ import annotations

import numpy as np
import pytest

from mq.analytics.lag_job import SNAPSHOT_SCHEMA, analyse, rows, with_names

ROUNDS = 20
THRESHOLD_S = 10.0


def lag_seconds(partition: int, r: int) -> float:
    if partition == 0:
        return round(0.1 * r, 3)
    if partition == 1:
        return 12.0 if 3 <= r <= 8 else 5.0 if r == 9 else 20.0 if r >= 15 else 1.0
    return 11.0 if r in (5, 6) else round(2 + 0.05 * r, 3)


def lag(partition: int, r: int) -> int:
    if partition == 0:
        return 0
    if partition == 1:
        return 100 if lag_seconds(1, r) > THRESHOLD_S else 10
    return 50 if r in (5, 6) else 20


def synthetic() -> list[dict]:
    out = []
    for r in range(ROUNDS):
        for p in range(3):
            out.append({"v": 1, "ts_ms": r * 1000, "kind": "group", "region": "east", "topic": "orders",
                        "partition": p, "group": "billing", "flow": None, "committed": 10 * r if p == 1 else 0,
                        "log_end": 10 * r + lag(p, r), "lag": lag(p, r), "lag_seconds": lag_seconds(p, r),
                        "members": 2, "member_id": "m", "state": "Stable", "latency_p50_ms": None,
                        "latency_p99_ms": None})
        out.append({"v": 1, "ts_ms": r * 1000 + 7, "kind": "mirror", "region": "west", "topic": "orders",
                    "partition": 0, "group": None, "flow": "east-to-west", "committed": 5 * r, "log_end": 5 * r + r,
                    "lag": r, "lag_seconds": r / 10, "members": None, "member_id": None, "state": "running",
                    "latency_p50_ms": 40.0, "latency_p99_ms": 50.0 + r})
    return out


@pytest.fixture(scope="module")
def analysis(spark):
    snapshots = with_names(spark.createDataFrame(synthetic(), SNAPSHOT_SCHEMA).drop("v"))
    records = spark.createDataFrame(
        [("east", "orders", 1, o, o * 100 - 500) for o in range(200)],
        "region string, topic string, partition int, offset long, ms long").selectExpr(
        "region", "topic", "partition", "offset", "timestamp_millis(ms) AS timestamp")
    return analyse(snapshots, threshold_s=THRESHOLD_S, min_duration_s=4.0, records=records)


def test_breach_windows_exactly(analysis):
    found = [(b["name"], b["start_ms"], b["end_ms"], b["duration_s"], b["open"], b["peak_lag_seconds"], b["rounds"])
             for b in rows(analysis.breaches)]
    assert found == [("billing", 3000, 9000, 6.0, False, 12.0, 6),  # closed by round 9 (5 s)
                     ("billing", 15000, 19000, 4.0, True, 20.0, 5)]  # still above at the last round


def test_short_windows_are_dropped(spark, analysis):
    from mq.analytics.lag_job import breach_windows

    longer = rows(breach_windows(analysis.consumers, THRESHOLD_S, 5.0))
    assert [(b["start_ms"], b["end_ms"]) for b in longer] == [(3000, 9000)]


def test_the_partitions_behind_each_breach(analysis):
    skew = [(s["start_ms"], s["partition"], s["max_lag_seconds"], s["max_lag"], round(s["share"], 6))
            for s in rows(analysis.skew)]
    # window 1, rounds 3..8: partition 1 lags 100 x 6, partition 2 lags 20 x 4 + 50 x 2, partition 0 nothing
    assert skew == [(3000, 1, 12.0, 100, round(600 / 780, 6)), (3000, 2, 11.0, 50, round(180 / 780, 6)),
                    (15000, 1, 20.0, 100, round(500 / (500 + 5 * 20), 6))]


def test_percentiles_are_exact(analysis):
    group_lag = [max(lag_seconds(p, r) for p in range(3)) for r in range(ROUNDS)]
    [billing] = [p for p in rows(analysis.percentiles) if p["name"] == "billing"]
    for q in (50, 90, 99):
        assert billing[f"lag_seconds_p{q}"] == pytest.approx(float(np.percentile(group_lag, q)), abs=1e-9)
    assert billing["lag_seconds_max"] == 20.0 and billing["rounds"] == ROUNDS
    assert billing["lag_max"] == max(sum(lag(p, r) for p in range(3)) for r in range(ROUNDS))
    consumers = rows(analysis.consumers.where("name = 'billing'").orderBy("ts_ms"))
    assert [c["lag_seconds"] for c in consumers] == group_lag and {c["partitions"] for c in consumers} == {3}


def test_partition_share_over_the_whole_period(analysis):
    shares = {s["partition"]: s["share"] for s in rows(analysis.partition_share) if s["name"] == "billing"}
    totals = {p: sum(lag(p, r) for r in range(ROUNDS)) for p in range(3)}
    assert shares == pytest.approx({p: totals[p] / sum(totals.values()) for p in range(3)})


def test_mirror_lag_per_flow(analysis):
    [flow] = rows(analysis.mirror)
    assert (flow["region"], flow["flow"], flow["lag_max"], flow["rounds"]) == ("west", "east-to-west", 19, ROUNDS)
    assert flow["replication_latency_p99_ms_max"] == 69.0
    assert flow["lag_seconds_p99"] == pytest.approx(float(np.percentile([r / 10 for r in range(ROUNDS)], 99)))


def test_end_to_end_latency_from_produce_timestamps(analysis):
    # offset o is committed by round floor(o / 10) + 1 (committed = 10 r); offsets 190..199 never were
    latencies = [(o // 10 + 1) * 1000 - (o * 100 - 500) for o in range(190)]
    [e2e] = rows(analysis.e2e)
    assert (e2e["region"], e2e["name"], e2e["records"], e2e["latency_ms_max"]) == \
        ("east", "billing", 190, max(latencies))
    for q in (50, 90, 99):
        assert e2e[f"latency_ms_p{q}"] == pytest.approx(float(np.percentile(latencies, q)))
