"""The consumer group benchmarks (rebalance pause, group throughput, coordinator fail-over)
run end to end at tiny size, so they cannot rot between real runs; the real figures come
from `mq bench --only rebalance,group-throughput,coordinator-failover`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench import _groups_only, _region_only
from loadtests.bench_groups import parse_args

ROOT = Path(__file__).resolve().parents[2]


def test_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["--only", "rebalance", "--partitions", "12", "--consumers", "3",
                       "--broker-config", "group.min.session.timeout.ms=1000"])
    assert args.only == ["rebalance"] and args.partitions == 12
    assert args.broker_configs["group.min.session.timeout.ms"] == "1000"
    assert args.broker_configs["group.initial.rebalance.delay.ms"] == "0"
    for bad in (["--only", "rebalance,P9"], ["--partitions", "3", "--consumers", "3"],
                ["--broker-config", "novalue"], ["--kills", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(bad)
        assert exit_info.value.code == 2
    assert "P9" in capsys.readouterr().err
    assert _groups_only(["--only", "rebalance,coordinator-failover"])
    assert not _groups_only(["--only", "rebalance,P3"]) and not _groups_only([])
    assert not _region_only(["--only", "group-throughput"])


def test_tiny_group_benchmarks() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.bench", "--only", "rebalance,group-throughput,coordinator-failover",
         "--runs", "1", "--partitions", "6", "--consumers", "2", "--rate", "300", "--steady-s", "0.3",
         "--tail-s", "0.2", "--tp-records", "3000", "--tp-partitions", "4", "--tp-consumers", "2",
         "--tp-runs", "1", "--kills", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    joins = {x["protocol"]: x for x in lines if x.get("workload") == "rebalance" and "protocol" in x
             and not x.get("summary")}
    assert set(joins) == {"eager", "cooperative"}
    for line in joins.values():
        assert line["partitions"] == 6 and 0 <= line["kept_consuming_fraction"] <= 1
        assert 0 < line["max_gap_s"] < 60 and line["settle_s"] > 0
    # eager revokes everything before rejoining; cooperative keeps what does not move
    assert joins["eager"]["kept_assigned_fraction"] == 0
    assert joins["cooperative"]["kept_assigned_fraction"] > 0
    throughput = {(x["system"], x["consumers"]): x for x in lines
                  if x.get("workload") == "group-throughput" and "rec_per_s" in x}
    assert {("mq", 1), ("mq", 2)} <= set(throughput)
    for (system, consumers), line in throughput.items():
        assert line["records"] == 3000 and line["rec_per_s"] > 0
        assert len(line["per_consumer"]) == consumers
    [kill] = [x for x in lines if x.get("workload") == "coordinator-failover" and not x.get("summary")]
    assert kill["new_coordinator"] not in (-1, kill["killed"])
    assert 0 < kill["kill_to_commit_s"] < 60
    summaries = {x["workload"] for x in lines if x.get("summary")}
    assert summaries == {"rebalance", "group-throughput", "coordinator-failover"}
