"""The storage benchmark runs at tiny size so it cannot rot (PERFORMANCE.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests import bench_storage


def test_bench_storage_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_storage.main(["--size-mb", "2", "--partitions", "5", "--dir", str(tmp_path)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    by_name = {line["workload"]: line for line in lines}
    assert {
        "storage_append_1mib_requests", "storage_recovery_warm",
        "storage_open_after_clean_shutdown", "storage_open_partitions",
    } <= set(by_name)
    assert by_name["storage_recovery_warm"]["segments_recovered"] == 1
    assert by_name["storage_open_after_clean_shutdown"]["segments_recovered"] == 0
    assert by_name["storage_open_partitions"]["partitions"] == 5
    for line in lines:
        if "skipped" not in line:
            assert line["bytes"] > 0 and line["seconds"] >= 0 and "versions" in line
    assert list(tmp_path.iterdir()) == []  # scratch space removed
