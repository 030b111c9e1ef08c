"""Issue 11's walkthrough through the real `mq` command, on the files in regions/ (rewritten
only for free ports, one broker per region and a fast topic refresh, as
test_mirror_topologies does), each from a fresh scratch directory:

    mq up regions/active-active.yaml          # east <-> west, a flow each way
    mq produce orders --region east ...  ;  mq produce orders --region west ...
    mq consume --region west --include '^(orders|east\\.orders)$' ...   # each record once
    mq up regions/three-regions.yaml          # east, west, south: a full mesh
    mq mirror status                          # every flow, lag and latency
    mq mirror failover --group billing --to west --translate
    mq table show accounts --region south     # the converged view of a keyed topic

(Each topology in its own directory: one topology per data dir, `mq up` refuses another.)
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.integration.cli.helpers import base_env, run_mq
from tests.integration.mirror.harness import wait_for
from tests.integration.mirror.test_mirror_active_active import consume, shell
from tests.integration.mirror.test_mirror_topologies import REGIONS_DIR, shrunk

READY_S = 90
N = 300
MESH = ("east", "west", "south")


def up(name: str, cwd: Path, env: dict) -> None:
    cwd.mkdir()
    (cwd / "regions").mkdir()
    doc = shrunk(yaml.safe_load((REGIONS_DIR / name).read_text()))
    doc["mirrors"] = [dict(f, **{"sync.group.offsets.interval.ms": 300}) for f in doc["mirrors"]]
    (cwd / "regions" / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    started = run_mq("up", f"regions/{name}", "--timeout", str(READY_S), env=env, cwd=cwd, timeout=READY_S + 60)
    assert started.returncode == 0, (started.stdout + started.stderr).decode(errors="replace")
    if "active-active" in name:  # the next steps mq up prints read the remote topic too
        assert "--include '^(orders|east\\.orders)$'" in started.stdout.decode(), started.stdout


def down(cwd: Path, env: dict) -> None:
    stopped = run_mq("down", env=env, cwd=cwd, timeout=90)
    assert stopped.returncode == 0, stopped.stderr


def produce(topic: str, region: str, prefix: str, env: dict, cwd: Path, extra: str = "") -> None:
    out = shell(f"seq 1 {N} | awk '{{print \"k\" $1 % 40 \":{prefix}-\" $1}}' | mq produce {topic} "
                f"--region {region} --key-separator : --acks all {extra}", env, cwd)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
def test_the_issue_11_walkthrough(tmp_path: Path) -> None:
    env = base_env()
    two = tmp_path / "two"
    up("active-active.yaml", two, env)
    try:
        for region in ("east", "west"):
            assert run_mq("topic", "create", "orders", "--region", region, "--partitions", "3",
                          env=env, cwd=two).returncode == 0
            produce("orders", region, region, env, two)
        both = wait_for(lambda: (r := consume("--region west --include '^(orders|east\\.orders)$'", env, two))
                        and len(r) >= 2 * N and r, 60, "east's and west's records in west")
        assert Counter(r["value"] for r in both) == Counter(f"{region}-{i}" for region in ("east", "west")
                                                            for i in range(1, N + 1))
        assert {r["topic"] for r in both} == {"orders", "east.orders"}
    finally:
        down(two, env)

    mesh = tmp_path / "mesh"
    up("three-regions.yaml", mesh, env)
    try:
        for region in MESH:
            assert run_mq("topic", "create", "orders", "--region", region, "--partitions", "3",
                          env=env, cwd=mesh).returncode == 0
            assert run_mq("topic", "create", "accounts", "--region", region, "--partitions", "3", "--config",
                          "conflict.policy=last-writer-wins", env=env, cwd=mesh).returncode == 0
        for region in MESH:
            produce("orders", region, region, env, mesh)
            produce("accounts", region, region, env, mesh)  # the same 40 keys written in every region
        read = shell("mq consume orders --region east --group billing --from-beginning --max-messages 200 "
                     "> /dev/null", env, mesh)
        assert read.returncode == 0, read.stderr

        # every flow, lag and latency
        flows = {f"{s}-to-{t}" for s in MESH for t in MESH if s != t}

        def drained() -> dict | None:
            docs = json.loads(run_mq("mirror", "status", "--json", env=env, cwd=mesh).stdout)
            by_flow = {d["flow"]: d for d in docs}
            ok = set(by_flow) == flows and all(
                d["state"] == "running" and d["lag_records"] == 0
                and sum(p["records_mirrored"] for p in d["partitions"] if p["topic"] == "accounts") == N
                for d in by_flow.values())
            return by_flow if ok else None

        wait_for(drained, 90, "every flow of the mesh to copy and drain")
        table = run_mq("mirror", "status", env=env, cwd=mesh).stdout.decode()
        assert all(f"flow {f}:" in table for f in flows), table
        assert "LAG" in table and "P99-MS" in table and "replication latency" in table, table

        # the group moves to west: east.orders there, translated offsets
        committed = {int(line.split()[2]): int(line.split()[3]) for line in
                     shell("mq group describe billing --region east", env, mesh).stdout.splitlines()
                     if " orders " in line}
        assert sum(committed.values()) == 200

        def checkpointed() -> bool:
            return sum(1 for r in consume("east.checkpoints.internal --region west", env, mesh)
                       if json.loads(r["key"])["group"] == "billing") >= len(committed)

        wait_for(checkpointed, 30, "billing's checkpoints in west")
        moved = run_mq("mirror", "failover", "--group", "billing", "--to", "west", "--translate",
                       env=env, cwd=mesh, timeout=90)
        assert moved.returncode == 0, moved.stderr
        text = moved.stdout.decode()
        assert "flow east-to-west" in text and "source east answered" in text, text
        rows = {int(cols[1]): cols for line in text.splitlines() if (cols := line.split())[:1] == ["east.orders"]}
        assert {p: int(cols[2]) for p, cols in rows.items()} == committed, text
        assert all(cols[-1] == "committed" for cols in rows.values()), text
        west_committed = {int(line.split()[2]): int(line.split()[3]) for line in
                          shell("mq group describe billing --region west", env, mesh).stdout.splitlines()
                          if " east.orders " in line}
        assert west_committed == {p: int(cols[3]) for p, cols in rows.items()}

        # the converged table view of a keyed topic, the same in every region
        shown = run_mq("table", "show", "accounts", "--region", "south", env=env, cwd=mesh)
        assert shown.returncode == 0, shown.stderr
        lines = [line.split() for line in shown.stdout.decode().splitlines() if line.strip().startswith("k")]
        assert len(lines) == 40 and {cols[0] for cols in lines} == {f"k{i}" for i in range(40)}, shown.stdout
        docs = {region: json.loads(run_mq("table", "show", "accounts", "--region", region, "--json",
                                          env=env, cwd=mesh).stdout) for region in MESH}
        assert len({json.dumps(d["entries"], sort_keys=True) for d in docs.values()}) == 1, docs
        assert all(d["rows"] == 40 for d in docs.values())
        assert len({d["digest"] for d in docs.values()}) == 1
    finally:
        down(mesh, env)
