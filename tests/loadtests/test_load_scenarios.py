"""`mq load run` smoke: every scenario for a few seconds against a broker from `mq up`,
through the real command; requests succeeded, the statistics and the report exist. And
`mq load list`, and the bad input: unknown scenario, unreachable region, too few users."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from loadtests.scenarios import SCENARIOS
from tests.integration.cli.helpers import LocalCluster, base_env, free_listen, free_port, run_mq

CONSUMING = {"steady", "spike", "fan-out", "slow-consumer"}


@pytest.fixture(scope="module")
def load_cluster(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("mq-load")
    listen = free_listen()
    env = base_env(MQ_BOOTSTRAP=listen)
    up = run_mq("up", "--data-dir", str(root / ".mq"), "--listen", listen, "--no-lag-export",
                "--config", "group.initial.rebalance.delay.ms=0", "--config", "offsets.topic.num.partitions=1",
                env=env)
    assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
    try:
        yield LocalCluster(data_dir=root / ".mq", listen=listen, env=env)
    finally:
        assert run_mq("down", "--data-dir", str(root / ".mq"), env=env).returncode == 0


def stats(path: Path) -> dict[tuple[str, str], dict]:
    with open(path, newline="") as f:
        return {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_runs_headless_and_keeps_its_results(load_cluster, tmp_path, name):
    out = tmp_path / name
    result = load_cluster.mq("load", "run", name, "--users", "4", "--duration", "4s", "--topic", f"load-{name}",
                             "--out", str(out), timeout=90)
    text = (result.stdout + result.stderr).decode(errors="replace")
    assert result.returncode == 0, text + (out / "locust.out").read_text()
    for produced in ("locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv", "report.html"):
        assert (out / produced).stat().st_size > 0, produced
    rows = stats(out / "locust_stats.csv")
    total = rows[("", "Aggregated")]
    assert int(total["Request Count"]) > 0 and int(total["Failure Count"]) == 0, text
    assert int(rows[("produce", f"load-{name}")]["Request Count"]) > 0
    consumed = sum(int(r["Request Count"]) for (kind, _), r in rows.items() if kind == "consume")
    assert (consumed > 0) == (name in CONSUMING), text
    doc = json.loads((out / "run.json").read_text())
    assert doc["scenario"] == name and doc["exit_code"] == 0 and doc["users"] == 4
    assert "produce" in text and "Aggregated" in text  # the summary table


def test_load_list_shows_scenarios_and_runs(load_cluster, tmp_path):
    ran = load_cluster.mq("load", "run", "steady", "--users", "2", "--duration", "2s", "--data-dir",
                          str(tmp_path / "data"))
    assert ran.returncode == 0, ran.stderr
    listed = load_cluster.mq("load", "list", "--data-dir", str(tmp_path / "data")).stdout.decode()
    for name in SCENARIOS:
        assert name in listed
    assert "steady-" in listed  # the run, under <data dir>/load/


def test_bad_input_is_one_clear_error(load_cluster):
    def error(result) -> str:
        lines = result.stderr.decode().strip().splitlines()
        assert result.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        return lines[0]

    assert "unknown scenario 'rush-hour' (known: steady, spike" in error(load_cluster.mq("load", "run", "rush-hour"))
    nowhere = f"127.0.0.1:{free_port()}"
    assert f"no broker at {nowhere}" in error(run_mq("load", "run", "steady", "--bootstrap", nowhere, env=base_env()))
    assert "no topology runs under" in error(run_mq("load", "run", "steady", "--region", "mars", env=base_env(),
                                                    cwd=load_cluster.data_dir.parent.parent))
    assert "fan-out needs at least 2" in error(load_cluster.mq("load", "run", "fan-out", "--users", "1"))
