"""The geo benchmarks (P7 mirror throughput, P7 replication latency, fail-over) run end to
end at tiny size — one broker per region (``--brokers 1``; three by default) — so they
cannot rot between real runs; the real figures come from `mq bench --only
P7,P7-latency,geo-failover`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench import _geo_only, _groups_only, _region_only
from loadtests.bench_geo import parse_args

ROOT = Path(__file__).resolve().parents[2]


def test_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["--only", "P7", "--p7-modes", "live", "--failover-rates", "10000, 50000", "--rate", "25000,50000",
                       "--failover-modes", "disaster", "--broker-config", "replica.fetch.max.bytes=2097152",
                       "--mirror-config", "fetches.per.leader=1"])
    assert args.only == ["P7"] and args.p7_modes == ["live"] and args.failover_rates == [10_000, 50_000]
    assert args.rates == [25_000, 50_000]
    assert args.failover_modes == ["disaster"] and args.broker_configs == {"replica.fetch.max.bytes": "2097152"}
    assert args.mirror_configs == {"fetches.per.leader": "1"}
    for bad in (["--only", "P7,P9"], ["--p7-modes", "sideways"], ["--failover-modes", "maybe"],
                ["--failover-rates", "fast"], ["--broker-config", "novalue"], ["--brokers", "0"],
                ["--mirror-config", "novalue"]):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(bad)
        assert exit_info.value.code == 2
    assert "P9" in capsys.readouterr().err
    assert _geo_only(["--only", "P7,geo-failover", "--rate", "5"]) and _geo_only(["--only=P7-latency"])
    assert not _geo_only(["--only", "P7,P3"]) and not _geo_only([])
    assert not _region_only(["--only", "P7"]) and not _groups_only(["--only", "geo-failover"])


def test_tiny_geo_benchmarks() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.bench", "--only", "P7,P7-latency,geo-failover", "--brokers", "1",
         "--runs", "1", "--records", "20000", "--producers", "1", "--chunk-records", "2000",
         "--rate", "2000", "--latency-seconds", "1", "--warmup-s", "0.5",
         "--failover-rates", "1000", "--failover-runs", "1", "--steady-s", "1",
         "--mirror-config", "max.partition.fetch.bytes=65536", "--mirror-config", "buffer.max.bytes=1048576"],
        cwd=ROOT, capture_output=True, text=True, timeout=420, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert any(x.get("peer") == "mirrormaker2" and x["available"] is False for x in lines)
    runs = [x for x in lines if not x.get("summary")]
    p7 = {x["mode"]: x for x in runs if x.get("workload") == "P7"}
    assert set(p7) == {"backlog", "live"}
    for line in [*runs]:
        if line.get("workload") in ("P7", "P7-latency", "geo-failover"):
            assert line["broker_rss_mb"] > 0 and line["versions"]["mq"]
            if line["workload"] != "geo-failover":  # fail-over stops the mirror: none to measure
                assert line["mirror_rss_mb"] > 0
            # the flow settings reached the mirror process (as its status file says)
            fetch = line["settings"]["mirror_fetch"]
            assert fetch["max.partition.fetch.bytes"] == 65536 and fetch["buffer.max.bytes"] == 1 << 20
            assert fetch["fetches.per.leader"] == 2 and fetch["buffer_used_bytes"] >= 0
    for line in p7.values():
        assert line["records"] >= 20_000 and line["rec_per_s"] > 0 and line["source_produce_rec_per_s"] > 0
        assert line["bytes"] == line["records"] * 100
        assert line["link_bytes"] >= 20_000 * 100  # every record crossed the link
        assert set(line["cpu_s"]) == {"east_brokers", "west_brokers", "link", "mirror"}
        assert line["cpu_s"]["mirror"] > 0 and line["cpu_s"]["link"] > 0
    assert p7["live"]["source_rec_per_s"] > 0
    [latency] = [x for x in runs if x.get("workload") == "P7-latency"]
    assert latency["records"] == 2000 and latency["latency"]["samples"] == 2000
    # a mirrored record cannot arrive before it crossed the 50 ms link one way
    assert 50 <= latency["latency"]["p50_ms"] <= latency["latency"]["p99_ms"] <= latency["latency"]["max_ms"]
    assert 0 < latency["send_to_ack"]["p50_ms"] < latency["latency"]["p50_ms"]
    batch = latency["mirror_batch_latency_ms"]  # as the mirror measures it: from the batch's timestamp
    assert 0 < batch["p50"] <= batch["p99"]
    failovers = {x["mode"]: x for x in runs if x.get("workload") == "geo-failover"}
    assert set(failovers) == {"planned", "disaster"}
    planned, disaster = failovers["planned"], failovers["disaster"]
    for line in failovers.values():
        assert 0 < line["failover_s"] < 60 and line["command_s"] > 0 and line["records_acked_by_t0"] > 0
    # the source answered: the records at risk are exact
    assert planned["records_at_risk_basis"] == ["source"]
    assert planned["records_at_risk_reported"] == planned["records_at_risk_true"]
    assert planned["records_lost_acked_by_t0"] <= planned["records_at_risk_true"]
    # fail-back saved exactly the source's records past the promotion point
    assert planned["diverged_records"] == planned["records_at_risk_true"] and planned["failback_s"] > 0
    assert disaster["records_at_risk_basis"] != ["source"]  # the link was cut: last known figures
    summaries = {x["workload"] for x in lines if x.get("summary")}
    assert summaries == {"P7", "P7-latency", "geo-failover"}


def test_tiny_active_active_benchmarks() -> None:
    """AA (both flows loaded, and east only; live and backlog), AA-latency and AA-transform
    at tiny size, one broker per region."""
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.bench_geo", "--only", "AA,AA-latency,AA-transform", "--brokers", "1",
         "--runs", "1", "--records", "5000", "--producers", "1", "--chunk-records", "1000", "--partitions", "2",
         "--aa-modes", "live,backlog", "--aa-rate", "500", "--latency-seconds", "1", "--warmup-s", "0.5",
         "--transform-batches", "2", "--link-latency-ms", "20"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    runs = [x for x in lines if not x.get("summary")]
    aa = {(x["mode"], x["loaded"]): x for x in runs if x.get("workload") == "AA"}
    assert set(aa) == {("live", "both"), ("live", "east only"), ("backlog", "both"), ("backlog", "east only")}
    for (_, loaded), line in aa.items():
        assert set(line["directions"]) == ({"east->west", "west->east"} if loaded == "both" else {"east->west"})
        assert all(d["rec_per_s"] > 0 and d["source_produce_rec_per_s"] > 0 for d in line["directions"].values())
        assert line["min_direction_rec_per_s"] == min(d["rec_per_s"] for d in line["directions"].values())
        assert all(cpu > 0 for cpu in line["cpu_s"]["mirrors"].values())
        assert all(rss > 0 for rss in line["mirror_rss_mb"].values())
    [latency] = [x for x in runs if x.get("workload") == "AA-latency"]
    for direction in latency["directions"].values():
        assert direction["latency"]["samples"] == 500 and direction["records_failed"] == 0
        # a copied record cannot arrive before it crossed the 20 ms link one way
        assert 20 <= direction["latency"]["p50_ms"] <= direction["latency"]["p99_ms"]
    transform = {x["path"]: x for x in runs if x.get("workload") == "AA-transform"}
    assert set(transform) == {"per-record", "batch"} and all(x["rec_per_s"] > 0 for x in transform.values())
    assert transform["batch"]["records"] == 2_000
    summaries = {(x["workload"], x.get("mode"), x.get("loaded")) for x in lines if x.get("summary")}
    assert ("AA", "live", "both") in summaries and ("AA-latency", None, None) in summaries


def test_active_active_options_are_checked() -> None:
    args = parse_args(["--only", "AA,AA-transform", "--aa-modes", "backlog", "--aa-loaded", "one"])
    assert args.only == ["AA", "AA-transform"] and args.aa_modes == ["backlog"] and args.aa_loaded == ["one"]
    for bad in (["--aa-modes", "sideways"], ["--aa-loaded", "three"], ["--aa-rate", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(bad)
        assert exit_info.value.code == 2
