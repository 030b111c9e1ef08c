"""`mq mirror failover --to west --group G --translate` through the real `mq` command in a
scratch directory: two one-broker regions with an active-active flow each way; a group
consumes part of east's `orders` in east and commits; more records arrive; the group is
moved to west, where east's records are `east.orders` at other offsets. Then the group
consumes `east.orders` in west: every record at or after its committed position in east
is read (nothing committed is lost) and the records read again are at most the reported
re-read bound. Done twice: with the source answering (its commits asked directly), and
with the link cut (the mirror's checkpoints in west used instead). A group with an active
member in west is refused, nothing written."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from mq.lab.process import wait_until
from tests.integration.cli.helpers import base_env, free_listens, run_mq
from tests.integration.cli.test_cli_geo import free_block
from tests.integration.mirror.harness import wait_for
from tests.integration.mirror.test_mirror_active_active import READY_S, consume, shell

FIRST, MORE = 3_000, 1_000
LAG_MAX = 50  # offset.lag.max: a sync at least every 50 records of a partition


def write_region_file(directory: Path, east: str, west: str) -> None:
    """``aa.yaml``: one-broker regions east and west on ``east``/``west``, a 10 ms link, a
    flow each way in active-active mode (east's with offset syncs every ``LAG_MAX``)."""
    (directory / "aa.yaml").write_text(textwrap.dedent(f"""\
        data_dir: .mq
        link_port_base: {free_block(5)}
        configs: {{group.initial.rebalance.delay.ms: '0'}}
        regions:
          - {{name: east, brokers: [{{id: 1, listen: '{east}'}}]}}
          - {{name: west, brokers: [{{id: 1, listen: '{west}'}}]}}
        links:
          - {{source: east, target: west, latency_ms: 10}}
        mirrors:
          - {{name: east-to-west, source: east, target: west, mode: active-active,
              refresh.topics.interval.ms: 300, sync.group.offsets.interval.ms: 300,
              configs: {{offset.lag.max: {LAG_MAX}, offset.sync.interval.ms: 200}}}}
          - {{name: west-to-east, source: west, target: east, mode: active-active,
              refresh.topics.interval.ms: 300}}
        """))


def described(region: str, group: str, env: dict, cwd: Path) -> dict:
    out = shell(f"mq group describe {group} --region {region} --json", env, cwd)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def committed_in(region: str, group: str, topic: str, env: dict, cwd: Path) -> dict[int, int]:
    return {p["partition"]: p["current_offset"] for p in described(region, group, env, cwd)["partitions"]
            if p["topic"] == topic and p["current_offset"] is not None}


def checkpointed(group: str, env: dict, cwd: Path) -> dict[int, int]:
    out = {}
    for r in consume("east.checkpoints.internal --region west", env, cwd):
        key, value = json.loads(r["key"]), json.loads(r["value"])
        if key["group"] == group:
            out[key["partition"]] = value["upstream_offset"]
    return out


def check_resumed(group: str, committed: dict[int, int], bounds: dict[int, int], source_ends: dict[int, int],
                  env: dict, cwd: Path) -> int:
    """Consume east.orders in west as ``group``: every source offset from the commit on is
    read, re-reads within the bound. Returns the re-reads."""
    out = shell(f"mq consume east.orders --region west --group {group} --format json --timeout-ms 2000", env, cwd)
    assert out.returncode == 0, out.stderr
    origin: dict[int, list[int]] = {}
    for line in out.stdout.splitlines():
        r = json.loads(line)
        origin.setdefault(r["partition"], []).append(int(dict(r["headers"])["mq.origin.offset"]))
    rereads = 0
    for p, c in committed.items():
        read = origin.get(p, [])
        assert set(range(c, source_ends[p])) <= set(read), f"partition {p}: records after {c} lost"
        again = sum(1 for o in read if o < c)
        assert again <= bounds[p], f"partition {p}: {again} re-reads over the reported bound {bounds[p]}"
        rereads += again
    return rereads


@pytest.mark.slow
def test_a_group_moves_to_a_remote_topic_with_translated_offsets(tmp_path: Path) -> None:
    east, west = free_listens(2)
    write_region_file(tmp_path, east, west)
    env = base_env()
    up = run_mq("up", "aa.yaml", "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    busy = None
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        assert run_mq("topic", "create", "orders", "--region", "east", "--partitions", "3",
                      env=env, cwd=tmp_path).returncode == 0
        produce = f"seq 1 {FIRST} | awk '{{print \"k\" $1 % 97 \":e-\" $1}}' | mq produce orders --region east " \
                  "--key-separator : --acks all"
        assert shell(produce, env, tmp_path).returncode == 0
        for group, n in (("billing", 1_000), ("audit", 700)):
            read = shell(f"mq consume orders --region east --group {group} --from-beginning --max-messages {n} "
                         "> /dev/null", env, tmp_path)
            assert read.returncode == 0, read.stderr
        more = produce.replace(f"seq 1 {FIRST}", f"seq {FIRST + 1} {FIRST + MORE}")
        assert shell(more, env, tmp_path).returncode == 0
        billing = committed_in("east", "billing", "orders", env, tmp_path)
        audit = committed_in("east", "audit", "orders", env, tmp_path)
        assert sum(billing.values()) == 1_000 and sum(audit.values()) == 700
        source_ends = {p: sum(1 for r in consume("orders --region east", env, tmp_path) if r["partition"] == p)
                       for p in range(3)}
        wait_for(lambda: len(consume("east.orders --region west", env, tmp_path)) == FIRST + MORE, 60,
                 "east's records in west")
        wait_for(lambda: checkpointed("audit", env, tmp_path) == audit, 30, "audit's checkpoints in west")

        # a group with an active member in west is refused, and nothing is written
        busy = subprocess.Popen(["mq", "consume", "east.orders", "--region", "west", "--group", "busy",
                                 "--timeout-ms", "60000"], env=env, cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: described("west", "busy", env, tmp_path).get("members"), timeout_s=30,
                   what="the busy member in west")
        refused = run_mq("mirror", "failover", "--to", "west", "--group", "busy", "--translate",
                         env=env, cwd=tmp_path)
        assert refused.returncode == 1, refused.stdout
        assert b"NON_EMPTY_GROUP" in refused.stderr and b"active member" in refused.stderr, refused.stderr
        busy.kill()
        busy.wait()

        # the source answers: its commits, translated with the offset syncs in west
        moved = run_mq("mirror", "failover", "--to", "west", "--group", "billing", "--translate", "--json",
                       env=env, cwd=tmp_path)
        assert moved.returncode == 0, moved.stderr
        report = json.loads(moved.stdout)
        assert report["basis"] == "source" and report["group"] == "billing" and report["region"] == "west"
        rows = {p["partition"]: p for p in report["partitions"]}
        assert {p: r["committed"] for p, r in rows.items()} == billing
        assert all(r["action"] == "committed" and r["remote_topic"] == "east.orders" for r in rows.values())
        assert all(0 <= r["reread_bound"] < LAG_MAX for r in rows.values())
        assert committed_in("west", "billing", "east.orders", env, tmp_path) == {
            p: r["translated"] for p, r in rows.items()}
        rereads = check_resumed("billing", billing, {p: r["reread_bound"] for p, r in rows.items()},
                                source_ends, env, tmp_path)
        print(f"billing: re-reads {rereads}, bounds {[r['reread_bound'] for r in rows.values()]}")

        # the link is cut: the mirror's checkpoints in west stand for the source's commits
        assert run_mq("link", "cut", "east", "west", "--mode", "refuse", env=env, cwd=tmp_path).returncode == 0
        cut = run_mq("mirror", "failover", "--to", "west", "--group", "audit", "--translate",
                     env=env, cwd=tmp_path, timeout=90)
        assert cut.returncode == 0, cut.stderr
        text = cut.stdout.decode()
        assert "did not answer" in text and "from the checkpoint" in text and "RE-READ-BOUND" in text, text
        table = {int(line.split()[1]): line.split() for line in text.splitlines()
                 if line.startswith("east.orders ")}
        assert {p: int(cols[2]) for p, cols in table.items()} == audit
        assert committed_in("west", "audit", "east.orders", env, tmp_path) == {
            p: int(cols[3]) for p, cols in table.items()}
        check_resumed("audit", audit, {p: int(cols[4]) for p, cols in table.items()}, source_ends, env, tmp_path)
    finally:
        if busy is not None and busy.poll() is None:
            busy.kill()
            busy.wait()
        down = run_mq("down", env=env, cwd=tmp_path, timeout=60)
        assert down.returncode == 0, down.stderr
