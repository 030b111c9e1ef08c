"""The benchmark runs end to end at tiny size, so it cannot rot between real runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench import parse_args
from loadtests.stats import latency_summary, percentile

ROOT = Path(__file__).resolve().parents[2]
PEERS = (("nats-jetstream", "nats-server"), ("redis-streams", "redis-server"))


def test_percentile_is_nearest_rank() -> None:
    samples = list(range(1, 1001))
    assert percentile(samples, 50) == 500
    assert percentile(samples, 99) == 990
    assert percentile(samples, 99.9) == 999
    assert percentile(samples, 100) == 1000
    assert percentile([7], 99.9) == 7
    summary = latency_summary([2_000_000, 1_000_000, 3_000_000], of="x")
    assert (summary["p50_ms"], summary["max_ms"], summary["samples"]) == (2.0, 3.0, 3)


def test_unknown_workload_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--only", "P1,P42"])
    assert exit_info.value.code == 2
    assert "P42" in capsys.readouterr().err
    assert parse_args(["--only", "P1, P2"]).only == ["P1", "P2"]


def test_tiny_benchmark_prints_results_ratios_and_summaries() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.bench", "--records", "2000", "--runs", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    runs = {(x["workload"], x["system"], x["operation"]): x for x in lines if "rec_per_s" in x}
    for key in (("P1", "mq", "produce"), ("P1b", "mq", "produce"), ("P2", "mq", "consume")):
        line = runs[key]
        assert line["records"] == 2000 and line["bytes"] == 200_000
        assert line["seconds"] > 0 and line["rec_per_s"] > 0 and line["mb_per_s"] > 0
        assert line["broker_rss_mb"] > 0
        assert line["versions"]["mq"] and line["versions"]["python"]
    for key in (("P1", "mq", "produce"), ("P1b", "mq", "produce")):
        latency = runs[key]["latency"]
        assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["p999_ms"] <= latency["max_ms"]
    summaries = {(x["workload"], x["system"]) for x in lines if x.get("summary")}
    assert {("P1", "mq"), ("P1b", "mq"), ("P2", "mq")} <= summaries
    ratios = {x["ratio"]: x for x in lines if "ratio" in x}
    for system, binary in PEERS:
        if shutil.which(binary) is None:
            print(f"{binary} is not installed: the benchmark skipped {system}; no ratio checked")
            assert f"skipping peer {binary}" in result.stderr
            continue
        for operation in ("produce", "consume"):
            assert runs[("P5", system, operation)]["records"] == 2000
        for ratio in (f"mq P1b produce / {system} produce", f"mq P2 consume / {system} consume"):
            assert ratios[ratio]["median_ratio"] > 0 and len(ratios[ratio]["per_run"]) == 1


def test_tiny_idempotence_benchmark_compares_plain_and_idempotent() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.bench", "--only", "P1-idem,P1b-idem", "--records", "2000", "--runs", "2",
         "--chunk-records", "500"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    runs = [x for x in lines if "rec_per_s" in x]
    assert {(x["workload"], x["system"], x["settings"]["idempotent"]) for x in runs} == {
        ("P1-idem", "mq-plain", False), ("P1-idem", "mq-idempotent", True),
        ("P1b-idem", "mq-plain", False), ("P1b-idem", "mq-idempotent", True)}
    assert all(x["records"] == 2000 and x["settings"]["acks"] == "all" for x in runs)
    ratios = {x["workload"]: x for x in lines if x.get("ratio") == "idempotent / plain produce (acks=all)"}
    assert set(ratios) == {"P1-idem", "P1b-idem"}
    assert all(len(r["per_run"]) == 2 and r["median_ratio"] > 0 for r in ratios.values())


def test_tiny_transactional_benchmark_reports_both_modes_and_the_ratio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.bench_txn", "--records", "600", "--runs", "2", "--per-txn", "100"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    runs = [x for x in lines if "rec_per_s" in x]
    assert sorted((x["system"], x["run"]) for x in runs) == [
        ("mq-idempotent", 0), ("mq-idempotent", 1), ("mq-transactional", 0), ("mq-transactional", 1)]
    assert all(x["rec_per_s"] > 0 and x["records"] == 600 and x["per_txn"] == 100 for x in runs)
    [summary] = [x for x in lines if "median_ratio" in x]
    assert summary["median_ratio"] > 0 and len(summary["per_run"]) == 2
