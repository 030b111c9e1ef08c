"""Locust smoke run: the native locustfile loads a real broker for a few seconds.

Locust monkey-patches the standard library with gevent, so it runs in a subprocess,
never inside pytest's process.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from mq.lab import Cluster

ROOT = Path(__file__).resolve().parents[2]


def test_locust_headless_run_has_requests_and_no_failures(tmp_path: Path) -> None:
    prefix = tmp_path / "smoke"
    with Cluster.start() as cluster:
        result = subprocess.run(
            [str(Path(sys.executable).with_name("locust")), "-f", "loadtests/locustfile_native.py",
             "--headless", "-u", "4", "-r", "4", "-t", "5s", "--csv", str(prefix),
             "--only-summary"],
            cwd=ROOT, env=dict(os.environ, MQ_BOOTSTRAP=cluster.bootstrap),
            capture_output=True, text=True, timeout=90, check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
    total = rows[("", "Aggregated")]
    assert int(total["Request Count"]) > 0, output
    assert int(total["Failure Count"]) == 0, output
    for request_type in ("produce", "fetch"):
        row = rows[(request_type, "locust")]
        assert int(row["Request Count"]) > 0 and int(row["Failure Count"]) == 0, output
    assert float(rows[("produce", "locust")]["Average Content Size"]) == 100.0
