"""Active-active through the real `mq` command in a scratch directory: `mq up` of two one-broker
regions with a flow each way in `mode: active-active`, produce in both regions (east all along)
while the east -> west mirror is SIGKILLed and restarted (by `mq up` again) five times, then read west's
`orders` and `east.orders` together with `mq consume --include`: every record once, with the
right provenance headers, partitions and timestamps; nothing looped back; the checkpoint of a
group translated into west is never ahead of the record it stands for."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from mq.deploy.process import is_alive
from tests.integration.cli.helpers import base_env, free_listens, run_mq
from tests.integration.cli.test_cli_geo import free_block
from tests.integration.mirror.harness import wait_for
from tests.integration.mirror.test_mirror_cut_link import valid

READY_S = 60
WEST_N = 2_000
KILLS = 5  # issue 11: the mirror SIGKILLed 5 times under load
INCLUDE = {"west": r"^(orders|east\.orders)$", "east": r"^(orders|west\.orders)$"}


def shell(script: str, env: dict, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    result = subprocess.run(["bash", "-o", "pipefail", "-c", script], check=False, capture_output=True,
                            env=env, timeout=timeout, cwd=cwd, text=True)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def consume(args: str, env: dict, cwd: Path) -> list[dict]:
    out = shell(f"mq consume {args} --from-beginning --format json --timeout-ms 1500", env, cwd)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def mirror_pid(cwd: Path, flow: str) -> int:
    state = json.loads((cwd / ".mq" / "cluster.json").read_text())
    return int(state["processes"][f"mirror/{flow}"]["pid"])


def copied(cwd: Path, flow: str, pid: int) -> int:
    """Records of ``orders`` the mirror process ``pid`` has copied (0 before its first status)."""
    try:
        doc = json.loads((cwd / ".mq" / f"mirror-{flow}" / "status.json").read_text())
    except (OSError, ValueError):
        return 0
    if doc.get("pid") != pid:
        return 0
    return sum(p.get("records_mirrored", 0) for p in doc.get("partitions", []) if p["topic"] == "orders")


def lines_until(prefix: str, stop: Path, per_s: int) -> str:
    """A shell command printing ``k<i % 50>:<prefix>-<i>`` for i = 1, 2, ... at about ``per_s``
    lines a second until the file ``stop`` exists (then it prints how many on stderr)."""
    code = (f"import os, sys, time\ni = 0\nwhile not os.path.exists({str(stop)!r}):\n"
            f"    for _ in range(100):\n        i += 1\n        print(f'k{{i % 50}}:{prefix}-{{i}}')\n"
            f"    sys.stdout.flush()\n    time.sleep({100 / per_s})\nprint(f'lines={{i}}', file=sys.stderr)\n")
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


@pytest.mark.slow
def test_active_active_both_ways_each_record_once_through_mirror_kills(tmp_path: Path) -> None:
    east, west = free_listens(2)
    (tmp_path / "aa.yaml").write_text(textwrap.dedent(f"""\
        data_dir: .mq
        link_port_base: {free_block(5)}
        regions:
          - name: east
            brokers: [{{id: 1, listen: '{east}'}}]
          - name: west
            brokers: [{{id: 1, listen: '{west}'}}]
        links:
          - {{source: east, target: west, latency_ms: 20}}
        mirrors:
          - {{name: east-to-west, source: east, target: west, mode: active-active, forward: false,
              refresh.topics.interval.ms: 300, sync.group.offsets.interval.ms: 300,
              configs: {{offset.lag.max: 50, offset.sync.interval.ms: 200}}}}
          - {{name: west-to-east, source: west, target: east, mode: active-active,
              refresh.topics.interval.ms: 300}}
        """))
    env = base_env()
    up = run_mq("up", "aa.yaml", "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    pids: set[int] = set()
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        for region in ("east", "west"):
            assert run_mq("topic", "create", "orders", "--region", region, "--partitions", "3",
                          env=env, cwd=tmp_path).returncode == 0
        west_produce = shell(f"seq 1 {WEST_N} | awk '{{print \"k\" $1 % 50 \":w-\" $1}}' | "
                             "mq produce orders --region west --key-separator : --acks all", env, tmp_path)
        assert west_produce.returncode == 0, west_produce.stderr
        stop = tmp_path / "stop-producing"
        east_produce = (f"{lines_until('e', stop, 1_000)} | "
                        "mq produce orders --region east --key-separator : --acks all")
        producer = subprocess.Popen(["bash", "-o", "pipefail", "-c", east_produce],
                                    env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for kill in range(KILLS):  # SIGKILL the mirror while it copies; `mq up` starts it again
                pid = mirror_pid(tmp_path, "east-to-west")
                pids.add(pid)
                wait_for(lambda pid=pid: copied(tmp_path, "east-to-west", pid) > 0, 30,
                         f"copying before kill {kill + 1}")
                assert producer.poll() is None, producer.communicate()[1]
                os.kill(pid, signal.SIGKILL)
                wait_for(lambda pid=pid: not is_alive(pid), 10, "the killed mirror to go")
                again = run_mq("up", "aa.yaml", "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S)
                assert again.returncode == 0, again.stderr
                assert mirror_pid(tmp_path, "east-to-west") != pid
            stop.touch()
            _, err = producer.communicate(timeout=60)
            assert producer.returncode == 0, err
        finally:
            if producer.poll() is None:
                producer.kill()
        east_n = int(re.search(r"lines=(\d+)", err).group(1))
        assert f"produced {east_n} records" in err, err
        pids.add(mirror_pid(tmp_path, "east-to-west"))
        pids.add(mirror_pid(tmp_path, "west-to-east"))

        group = shell("mq consume orders --region east --group billing --from-beginning --max-messages 5000 "
                      "> /dev/null", env, tmp_path)
        assert group.returncode == 0, group.stderr
        total = east_n + WEST_N
        records = wait_for(lambda: (r := consume(f"--region west --include '{INCLUDE['west']}'", env, tmp_path))
                           and len(r) >= total and r, 90, f"{total} records in west")

        # every record once, east's in east.orders with its partition, timestamp and provenance
        values = Counter(r["value"] for r in records)
        assert len(records) == total and max(values.values()) == 1, values.most_common(3)
        assert set(values) == {f"e-{i}" for i in range(1, east_n + 1)} | {f"w-{i}" for i in range(1, WEST_N + 1)}
        origin = {r["value"]: r for r in consume("orders --region east", env, tmp_path)}
        for r in records:
            headers = dict(r["headers"])
            if r["topic"] == "orders":
                assert r["value"].startswith("w-") and "mq.origin.region" not in headers
                continue
            source = origin[r["value"]]
            assert r["topic"] == "east.orders" and r["partition"] == source["partition"]
            assert r["timestamp"] == source["timestamp"] and r["key"] == source["key"]
            assert headers == {"mq.origin.region": "east", "mq.origin.partition": str(source["partition"]),
                               "mq.origin.offset": str(source["offset"]),
                               "mq.origin.timestamp": str(source["timestamp"]), "mq.hops": "1",
                               "mq.path": "east,west"}
        # the other way, and no loop: nothing came back, nothing was copied twice over
        back = consume(f"--region east --include '{INCLUDE['east']}'", env, tmp_path)
        assert Counter(r["topic"] for r in back) == {"orders": east_n, "west.orders": WEST_N}
        assert all(dict(r["headers"]).get("mq.path", "west,east") == "west,east" for r in back)
        for region in ("east", "west"):
            listed = run_mq("topic", "list", "--region", region, env=env, cwd=tmp_path).stdout.decode()
            assert "east.west." not in listed and "west.east." not in listed
            assert f"{region}.orders" not in listed

        # the group's committed offsets, translated into west: never ahead, exact here
        described = shell("mq group describe billing --region east", env, tmp_path).stdout
        committed = {int(line.split()[2]): int(line.split()[3]) for line in described.splitlines()
                     if " orders " in line}
        assert sum(committed.values()) == 5000

        def checkpoints() -> dict[int, dict]:
            out = {}
            for r in consume("east.checkpoints.internal --region west", env, tmp_path):
                key, value = json.loads(r["key"]), json.loads(r["value"])
                if key["group"] == "billing":
                    out[key["partition"]] = value
            return out if {p: c["upstream_offset"] for p, c in out.items()} == committed else {}

        cps = wait_for(checkpoints, 30, "billing's checkpoints in west")
        by_partition: dict[int, list[dict]] = {}
        for r in records:
            if r["topic"] == "east.orders":
                by_partition.setdefault(r["partition"], []).append(r)
        for p, cp in cps.items():
            remote = sorted(by_partition.get(p, []), key=lambda r: r["offset"])
            origin_at = {r["offset"]: int(dict(r["headers"])["mq.origin.offset"]) for r in remote}
            before = [o for off, o in origin_at.items() if off < cp["downstream_offset"]]
            assert all(o < cp["upstream_offset"] for o in before), f"partition {p}: checkpoint ahead: {cp}"
            if cp["downstream_offset"] in origin_at:
                assert origin_at[cp["downstream_offset"]] >= cp["upstream_offset"]
            rereads = sum(1 for off, o in origin_at.items()
                          if off >= cp["downstream_offset"] and o < cp["upstream_offset"])
            assert rereads <= 50, f"partition {p}: {rereads} re-reads, over offset.lag.max"
        status = json.loads(run_mq("mirror", "status", "--flow", "east-to-west", "--json", env=env,
                                   cwd=tmp_path).stdout)
        assert status["mode"] == "active-active" and status["groups"]["billing"]["checkpoints"] >= 1
        valid("mq mirror status", status)  # as documented in docs/reference/json-output.md
    finally:
        down = run_mq("down", env=env, cwd=tmp_path, timeout=60)
        assert down.returncode == 0, down.stderr
    for pid in pids:
        wait_for(lambda pid=pid: not is_alive(pid), 10, f"mirror pid {pid} to be stopped")


@pytest.mark.slow
def test_records_deleted_in_the_source_while_the_flow_is_down_are_a_gap_with_exact_offsets(tmp_path: Path) -> None:
    east, west = free_listens(2)
    (tmp_path / "aa.yaml").write_text(textwrap.dedent(f"""\
        data_dir: .mq
        link_port_base: {free_block(5)}
        regions:
          - {{name: east, brokers: [{{id: 1, listen: '{east}'}}]}}
          - {{name: west, brokers: [{{id: 1, listen: '{west}'}}]}}
        links:
          - {{source: east, target: west, latency_ms: 5}}
        mirrors:
          - {{name: east-to-west, source: east, target: west, mode: active-active, refresh.topics.interval.ms: 300}}
        """))
    env = base_env()
    up = run_mq("up", "aa.yaml", "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        assert run_mq("topic", "create", "orders", "--region", "east", env=env, cwd=tmp_path).returncode == 0
        assert shell("seq 1 100 | mq produce orders --region east --acks all", env, tmp_path).returncode == 0
        pid = mirror_pid(tmp_path, "east-to-west")
        wait_for(lambda: copied(tmp_path, "east-to-west", pid) == 100, 30, "the first 100 copied")
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not is_alive(pid), 10, "the mirror to stop")
        assert shell("seq 101 300 | mq produce orders --region east --acks all", env, tmp_path).returncode == 0
        deleted = run_mq("records", "delete", "orders", "--region", "east", "-p", "0", "--before-offset", "250",
                         env=env, cwd=tmp_path)
        assert deleted.returncode == 0, deleted.stderr
        assert run_mq("up", "aa.yaml", env=env, cwd=tmp_path, timeout=READY_S).returncode == 0
        new_pid = mirror_pid(tmp_path, "east-to-west")

        def gap() -> list:
            doc = json.loads((tmp_path / ".mq" / "mirror-east-to-west" / "status.json").read_text())
            part = next((p for p in doc.get("partitions", []) if p["topic"] == "orders"), None)
            return doc.get("pid") == new_pid and part and part["mirrored_end"] == 300 and part["gaps"]

        assert wait_for(gap, 30, "the gap in the status") == [[100, 250]]
        values = [r["value"] for r in consume("east.orders --region west", env, tmp_path)]
        assert values == [str(i) for i in [*range(1, 101), *range(251, 301)]]
        log = (tmp_path / ".mq" / "mirror-east-to-west" / "mirror.log").read_text()
        assert "event=gap flow=east-to-west topic=orders partition=0 from_offset=100 to_offset=250 records=150" in log
    finally:
        down = run_mq("down", env=env, cwd=tmp_path, timeout=60)
        assert down.returncode == 0, down.stderr
