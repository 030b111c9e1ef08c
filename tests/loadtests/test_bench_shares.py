"""The share group benchmark runs end to end at tiny size, so it cannot rot between real
runs; the real figures come from `python -m loadtests.bench_shares`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench_shares import parse_args

ROOT = Path(__file__).resolve().parents[2]


def test_options_are_checked() -> None:
    args = parse_args(["--records", "10", "--consumers", "2"])
    assert (args.records, args.consumers, args.runs, args.max_poll_records) == (10, 2, 3, 500)
    with pytest.raises(SystemExit):
        parse_args(["--consumers", "0"])


def test_tiny_share_benchmark() -> None:
    result = subprocess.run([sys.executable, "-m", "loadtests.bench_shares", "--records", "3000", "--runs", "1",
                             "--brokers", "1", "--max-poll-records", "100"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    runs = [x for x in lines if x.get("workload") == "share-throughput" and "run" in x]
    mq_runs = {x["consumers"]: x for x in runs if x["system"] == "mq"}
    assert set(mq_runs) == {1, 4}
    for run in mq_runs.values():
        assert run["records"] == 3000 and run["rec_per_s"] > 0 and run["delivered"] >= 3000
        assert run["seconds"] > 0 and run["versions"]["mq"] and "load_avg_1m" in run
    assert sum(1 for n in mq_runs[4]["per_consumer"] if n) >= 2, "several consumers shared the partition"
    summaries = [x for x in lines if x.get("summary")]
    assert {(x["system"], x["consumers"]) for x in summaries} >= {("mq", 1), ("mq", 4)}
    if shutil.which("redis-server"):
        assert {x["consumers"] for x in runs if x["system"] == "redis-streams"} == {1, 4}
    else:
        print("redis-server is not installed: the benchmark skipped its peer; no ratio checked")
