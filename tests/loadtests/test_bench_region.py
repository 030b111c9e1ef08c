"""The region benchmarks (P3, P4, fail-over) run end to end at tiny size, so they cannot
rot between real runs; the heavy figures come from `mq bench --only P3,P4,failover`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench import _region_only
from loadtests.bench_region import parse_args

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str, timeout: float = 240) -> list[dict]:
    result = subprocess.run([sys.executable, "-m", "loadtests.bench", *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["--only", "P3", "--p3-configs", "1x1, 6x2,3", "--flush-policies", "always"])
    assert args.configs == [(1, 1), (6, 2), (3, 1)] and args.policies == ["always"]
    args = parse_args(["--broker-config", "replica.fetch.backoff.ms=100", "--batch-size", "1000000"])
    assert args.broker_configs == {"replica.fetch.backoff.ms": "100"} and args.batch_size == 1_000_000
    for bad in (["--only", "P3,P9"], ["--flush-policies", "sometimes"], ["--p3-configs", "6y2"],
                ["--broker-config", "novalue"]):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(bad)
        assert exit_info.value.code == 2
    assert "P9" in capsys.readouterr().err
    assert _region_only(["--only", "P3,failover", "--rate", "5"])
    assert _region_only(["--only=P4"])
    assert not _region_only(["--only", "P1,P3"]) and not _region_only([])


def test_tiny_p3_and_p4_with_both_flush_policies() -> None:
    lines = run_bench("--only", "P3,P4", "--runs", "1", "--records", "3000", "--chunk-records", "500",
                      "--p3-configs", "1x1,2x2", "--rate", "2000", "--p4-seconds", "0.5",
                      "--p4-warmup-s", "0.2")
    runs = [x for x in lines if "rec_per_s" in x]
    p3 = {(x["settings"]["flush_policy"], x["settings"]["partitions"], x["settings"]["producers"]): x
          for x in runs if x["workload"] == "P3"}
    assert set(p3) == {(p, 1, 1) for p in ("replicated", "always")} | {(p, 2, 2) for p in ("replicated", "always")}
    for line in p3.values():
        assert line["records"] == 3000 and line["rec_per_s"] > 0 and line["broker_rss_mb"] > 0
        assert line["settings"]["acks"] == "all" and line["settings"]["replication_factor"] == 3
        assert 0 < line["latency"]["p50_ms"] <= line["latency"]["max_ms"]
    p4 = {x["settings"]["flush_policy"]: x for x in runs if x["workload"] == "P4"}
    assert set(p4) == {"replicated", "always"}
    for line in p4.values():
        assert line["records"] == 1000 and line["latency"]["samples"] == 1000
        latency = line["latency"]
        assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["p999_ms"] <= latency["max_ms"]
        assert line["settings"]["send_to_ack"]["samples"] > 0
    summaries = [x for x in lines if x.get("summary")]
    assert {x["flush_policy"] for x in summaries if "best_config" in x} == {"replicated", "always"}
    assert {x["flush_policy"] for x in summaries if x["workload"] == "P4"} == {"replicated", "always"}


def test_tiny_failover_kills_the_leader_and_times_the_first_ack() -> None:
    lines = run_bench("--only", "failover", "--kills", "1", "--failover-rate", "200")
    [kill] = [x for x in lines if x.get("workload") == "failover" and not x.get("summary")]
    assert kill["new_leader"] not in (-1, kill["killed"])
    assert 0 < kill["kill_to_first_ack_s"] < 60 and kill["records_failed_total"] == 0
    [summary] = [x for x in lines if x.get("summary")]
    assert summary["kills"] == summary["recovered"] == 1
