"""The mirror API copy benchmark runs end to end at tiny size, so it cannot rot
between real runs (the figures come from `python -m loadtests.bench_mirror_api`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_copy_benchmark_runs_and_reports() -> None:
    result = subprocess.run([sys.executable, "-m", "loadtests.bench_mirror_api", "--records", "6000", "--runs", "1",
                             "--fetch-bytes", "16384"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    run, summary = lines
    assert run["records"] == 6000 and run["partitions"] == 6 and run["rec_per_s"] > 0
    assert run["source_produce_rec_per_s"] > 0
    assert summary["summary"] and summary["median_rec_per_s"] == run["rec_per_s"]
