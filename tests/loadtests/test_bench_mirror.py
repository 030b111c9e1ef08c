"""The mirror service benchmark (P7) runs end to end at tiny size, so it cannot rot between
real runs (the figures come from `python -m loadtests.bench_mirror`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mirror_benchmark_runs_and_reports() -> None:
    result = subprocess.run([sys.executable, "-m", "loadtests.bench_mirror", "--records", "6000", "--runs", "1",
                             "--latency-ms", "5", "--steady-rate", "2000", "--steady-s", "2"],
                            cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    copy, steady, summary = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert copy["records"] == 6000 and copy["copy_rec_per_s"] > 0 and copy["source_produce_rec_per_s"] > 0
    assert steady["records"] >= 4000 and steady["latency_p50_ms"] is not None
    assert steady["latency_p99_ms_worst_partition"] >= steady["latency_p50_ms"] > 0
    assert summary["summary"] and summary["median_copy_rec_per_s"] == copy["copy_rec_per_s"]


def test_failover_benchmark_runs_and_reports() -> None:
    result = subprocess.run([sys.executable, "-m", "loadtests.bench_mirror_failover", "--rates", "1000",
                             "--write-s", "1", "--latency-ms", "5"],
                            cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    run, summary = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert run["rate"] == 1000 and run["records_written"] >= 900 and run["failover_s"] > 0
    assert 0 <= run["at_risk_reported"] <= run["at_risk_actual"]  # a lower bound when the source is lost
    assert summary["median_failover_s"] == run["failover_s"]
