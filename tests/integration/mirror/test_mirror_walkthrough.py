"""Issue 10's walkthrough through the real `mq` command in a scratch directory: `mq up` of two
one-broker regions with a link and a flow (the real mirror), produce in east, read the mirror
topic in west, a group, `mq mirror status`, a cut link, `mq mirror failover`, produce in west,
heal, `mq mirror failback`, both regions identical, `mq down` stops every mirror process."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from mq.deploy.process import is_alive
from tests.integration.cli.helpers import base_env, free_listens, run_mq
from tests.integration.cli.test_cli_geo import free_block
from tests.integration.mirror.harness import wait_for

READY_S = 60


def shell(script: str, env: dict, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    result = subprocess.run(["bash", "-o", "pipefail", "-c", script], check=False, capture_output=True,
                            env=env, timeout=timeout, cwd=cwd, text=True)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def mirror_status(env: dict, cwd: Path) -> dict:
    result = run_mq("mirror", "status", "--flow", "east-to-west", "--json", env=env, cwd=cwd)
    return json.loads(result.stdout) if result.returncode == 0 else {}


def sorted_records(region: str, env: dict, cwd: Path) -> list[str]:
    out = shell(f"mq consume orders --region {region} --from-beginning --format json --timeout-ms 2000",
                env, cwd).stdout
    return sorted(out.splitlines())


def committed_total(region: str, env: dict, cwd: Path) -> int:
    """The sum of group billing's committed offsets on orders, from `mq group describe`."""
    out = shell(f"mq group describe billing --region {region}", env, cwd).stdout
    return sum(int(line.split()[3]) for line in out.splitlines() if " orders " in line)


@pytest.mark.slow
def test_the_geo_walkthrough_through_mq(tmp_path: Path) -> None:
    east, west = free_listens(2)
    base = free_block(3)
    (tmp_path / "geo.yaml").write_text(textwrap.dedent(f"""\
        data_dir: .mq
        link_port_base: {base}
        regions:
          - name: east
            brokers: [{{id: 1, listen: '{east}'}}]
          - name: west
            brokers: [{{id: 1, listen: '{west}'}}]
        links:
          - {{source: east, target: west, latency_ms: 20}}
        mirrors:
          - name: east-to-west
            source: east
            target: west
            sync.group.offsets.interval.ms: 500
        """))
    env = base_env()
    up = run_mq("up", "geo.yaml", "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    mirror_pids: list[int] = []
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        assert run_mq("topic", "create", "orders", "--region", "east", "--partitions", "3",
                      env=env, cwd=tmp_path).returncode == 0
        produced = shell("seq 1 20000 | mq produce orders --region east --acks all", env, tmp_path)
        assert produced.returncode == 0, produced.stderr
        # As the walkthrough reads it: at once (the consumer waits --timeout-ms for the topic).
        west = shell("mq consume orders --region west --from-beginning --format json --timeout-ms 3000 | wc -l",
                     env, tmp_path)
        assert west.stdout.strip() == "20000", west.stderr
        doc = wait_for(lambda: (d := mirror_status(env, tmp_path)) and d.get("state") == "running"
                       and d.get("totals", {}).get("records_mirrored", 0) >= 20000 and d, 30, "the copy")
        mirror_pids.append(doc["pid"])
        assert sorted_records("west", env, tmp_path) == sorted_records("east", env, tmp_path)
        table = run_mq("mirror", "status", env=env, cwd=tmp_path).stdout.decode()
        assert "flow east-to-west: east -> west  state running" in table

        # The lag exporter `mq up` started measures the flow too, into west's __lag_snapshots.
        lag_status = tmp_path / ".mq" / "lag-exporter" / "status.json"
        wait_for(lambda: lag_status.exists() and
                 json.loads(lag_status.read_text())["regions"].get("west", {}).get("flows") == 1, 30,
                 "the lag exporter to report the flow")
        snapshots = shell("mq consume __lag_snapshots --region west --from-beginning --max-messages 3 --format json "
                          "--timeout-ms 15000", env, tmp_path)
        values = [json.loads(json.loads(line)["value"]) for line in snapshots.stdout.splitlines()]
        assert values and {(v["kind"], v["flow"], v["region"]) for v in values} == \
            {("mirror", "east-to-west", "west")}, snapshots.stdout + snapshots.stderr
        assert {v["topic"] for v in values} <= {"orders", "heartbeats"}  # the mirrored topics

        consumed = shell("mq consume orders --region east --group billing --max-messages 8000 > /dev/null", env, tmp_path)
        assert consumed.returncode == 0, consumed.stderr
        assert committed_total("east", env, tmp_path) == 8000
        wait_for(lambda: committed_total("west", env, tmp_path) == 8000, 20, "billing's offsets synced to west")

        assert run_mq("link", "cut", "east", "west", env=env, cwd=tmp_path).returncode == 0
        assert shell("seq 1 500 | mq produce orders --region east --acks all", env, tmp_path).returncode == 0
        wait_for(lambda: (d := mirror_status(env, tmp_path)).get("state") == "stalled" and d.get("source_unreachable"),
                 30, "the flow to stall, east unreachable")
        # What the operator sees: not "lag 0", but a lower bound as of the last answer, the
        # seconds since, and an estimate (issue 10, the cut-link status).
        status_doc = json.loads(run_mq("status", "--json", env=env, cwd=tmp_path).stdout)
        [flow] = status_doc["flows"]
        assert flow["mirror_status"]["source_unreachable"] and flow["mirror_status"]["lag_records_lower_bound"]
        status_text = run_mq("status", env=env, cwd=tmp_path).stdout.decode()
        flow_row = next(line for line in status_text.splitlines() if line.strip().startswith("east-to-west"))
        assert "stalled" in flow_row and ">=" in flow_row, status_text
        assert "east-to-west: source east not heard for" in status_text and "a lower bound" in status_text
        mirror_text = run_mq("mirror", "status", env=env, cwd=tmp_path).stdout.decode()
        assert "source east not heard for" in mirror_text and ">=" in mirror_text, mirror_text
        started = time.monotonic()
        failover = run_mq("mirror", "failover", "--to", "west", "--group", "billing", "--json",
                          env=env, cwd=tmp_path, timeout=60)
        assert failover.returncode == 0, failover.stderr.decode()
        produced_west = shell("seq 1 300 | mq produce orders --region west --acks all", env, tmp_path)
        assert produced_west.returncode == 0, produced_west.stderr
        failover_s = time.monotonic() - started
        report = json.loads(failover.stdout)
        assert all(p["basis"].startswith("last known") for p in report["partitions"])
        assert failover_s < 20, f"fail-over to the first produce in west took {failover_s:.1f} s"

        assert run_mq("link", "heal", "east", "west", env=env, cwd=tmp_path).returncode == 0
        failback = run_mq("mirror", "failback", "--to", "east", env=env, cwd=tmp_path, timeout=120)
        out = failback.stdout.decode()
        assert failback.returncode == 0, out + failback.stderr.decode()
        assert "copied to orders.diverged" in out and "10. flow east-to-west resumed" in out
        diverged = shell("mq consume orders.diverged --region east --from-beginning --timeout-ms 2000 | wc -l",
                         env, tmp_path).stdout
        assert int(diverged) == 500  # every record east took during the cut is saved
        assert sorted_records("west", env, tmp_path) == sorted_records("east", env, tmp_path)
        state = json.loads((tmp_path / ".mq" / "cluster.json").read_text())
        mirror_pids.append(state["processes"]["mirror/east-to-west"]["pid"])
        assert is_alive(mirror_pids[-1])
    finally:
        down = run_mq("down", env=env, cwd=tmp_path, timeout=60)
        assert down.returncode == 0, down.stderr
    for pid in mirror_pids:
        wait_for(lambda pid=pid: not is_alive(pid), 10, f"mirror pid {pid} to be stopped by mq down")
