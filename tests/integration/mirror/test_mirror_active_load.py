"""Active-active under load, through the real `mq` command in a scratch directory (`mq up` of
two one-broker regions, a flow each way in `mode: active-active`, a 10 ms link):

1. **Translated fail-over under load.** Producers keep writing `orders` in east at a steady
   rate; group `billing` consumes in east with frequent commits and dies (SIGKILL, as with
   its region); `mq mirror failover --group billing --to west --translate` runs while the
   writes go on; a consumer of `billing` in west resumes from the translated offsets. An
   independent reader (no group) then checks, per partition: every record at or after
   billing's committed offset in east is read in west (nothing committed is lost), the
   records read again are at most the re-read bound the command printed, and that bound is
   below `offset.lag.max` (the sync density); every record east acknowledged is in west once.
2. **A cut link.** While east keeps writing, `mq link cut east west`: `mq mirror status`
   (table and JSON, the documented schema) and `mq status` say the source is not heard, the
   lag as a lower bound (`>=`, never above the true lag read from both regions) with the
   seconds since east's last answer and an estimate (`~`) from the last known produce rate;
   after `mq link heal` the flow is heard again and catches up (every record once in west).

The nightly variant runs the fail-over at a higher rate for longer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mirror.source_rate import RATE_WINDOW_MS
from mq.core.types import TopicPartition
from tests.integration.cli.helpers import base_env, free_listens, run_mq
from tests.integration.mirror.harness import high_watermarks, wait_for
from tests.integration.mirror.test_mirror_active_active import READY_S, consume, lines_until, shell
from tests.integration.mirror.test_mirror_cut_link import valid
from tests.integration.mirror.test_mirror_translated_failover import LAG_MAX, write_region_file

PARTITIONS = 3


@dataclass
class Deployment:
    cwd: Path
    env: dict
    east: str  # bootstrap addresses, for the independent reader (never through the link)
    west: str


@pytest.fixture
def active_active(tmp_path: Path) -> Iterator[Deployment]:
    east, west = free_listens(2)
    write_region_file(tmp_path, east, west)
    env = base_env()
    up = run_mq("up", "aa.yaml", "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        for region in ("east", "west"):
            made = run_mq("topic", "create", "orders", "--region", region, "--partitions", str(PARTITIONS),
                          env=env, cwd=tmp_path)
            assert made.returncode == 0, made.stderr
        yield Deployment(tmp_path, env, east, west)
    finally:
        down = run_mq("down", env=env, cwd=tmp_path, timeout=60)
        assert down.returncode == 0, down.stderr


class SteadyProducer:
    """``mq produce orders --region east`` fed ``k<i % 50>:e-<i>`` lines at a steady rate until
    stopped; ``stop`` returns how many records it wrote (each acknowledged, acks=all)."""

    def __init__(self, d: Deployment, per_s: int) -> None:
        self.stop_file = d.cwd / f"stop-{time.monotonic_ns()}"
        script = f"{lines_until('e', self.stop_file, per_s)} | mq produce orders --region east " \
                 "--key-separator : --acks all"
        self.proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", script], env=d.env, cwd=d.cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        self.stop_file.touch()
        _, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        written = int(re.search(r"lines=(\d+)", err).group(1))
        assert f"produced {written} records" in err, err
        return written

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def mirror_status(d: Deployment) -> dict:
    out = run_mq("mirror", "status", "--flow", "east-to-west", "--json", env=d.env, cwd=d.cwd)
    return valid("mq mirror status", json.loads(out.stdout)) if out.returncode == 0 else {}


def committed_in(d: Deployment, region: str, group: str, topic: str) -> dict[int, int]:
    out = shell(f"mq group describe {group} --region {region} --json", d.env, d.cwd)
    assert out.returncode == 0, out.stderr
    return {p["partition"]: p["current_offset"] for p in json.loads(out.stdout)["partitions"]
            if p["topic"] == topic and p["current_offset"] is not None}


def origin_offsets(records: list[dict]) -> dict[int, list[int]]:
    """East's offsets of the records of ``east.orders`` read in west, per partition."""
    out: dict[int, list[int]] = {}
    for r in records:
        out.setdefault(r["partition"], []).append(int(dict(r["headers"])["mq.origin.offset"]))
    return out


def failover_under_load(d: Deployment, *, per_s: int, consume_s: float, after_s: float) -> dict:
    """Scenario 1 (module docstring); returns the figures measured."""
    producer = SteadyProducer(d, per_s)
    east_consumer = west_consumer = None
    try:
        wait_for(lambda: len(consume(f"orders --region east --max-messages {per_s // 2}", d.env, d.cwd))
                 == per_s // 2, 30, "records in east")
        east_consumer = subprocess.Popen(
            ["mq", "consume", "orders", "--region", "east", "--group", "billing", "--from-beginning",
             "--consumer-property", "auto.commit.interval.ms=200", "--timeout-ms", "60000"],
            env=d.env, cwd=d.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(consume_s)  # the group consumes under load for this long (a duration, not a wait)
        wait_for(lambda: committed_in(d, "east", "billing", "orders"), 30, "billing's commits in east")
        os.kill(east_consumer.pid, signal.SIGKILL)  # the group's consumers die with their region
        east_consumer.wait(10)
        committed = committed_in(d, "east", "billing", "orders")
        assert producer.running(), "the load must go on through the fail-over"

        moved = run_mq("mirror", "failover", "--to", "west", "--group", "billing", "--translate", "--json",
                       env=d.env, cwd=d.cwd, timeout=90)
        assert moved.returncode == 0, moved.stderr
        report = valid("mq mirror failover --to REGION --group G --translate --json",
                       json.loads(moved.stdout))  # one flow into west: one report
        assert (report["flow"], report["basis"], report["group"]) == ("east-to-west", "source", "billing")
        rows = {p["partition"]: p for p in report["partitions"]}
        assert {p: r["committed"] for p, r in rows.items()} == committed, (rows, committed)
        assert all(r["action"] == "committed" and r["translated"] is not None for r in rows.values()), rows
        bounds = {p: r["reread_bound"] for p, r in rows.items()}
        assert all(0 <= b < LAG_MAX for b in bounds.values()), f"re-read bounds over the sync density: {bounds}"
        assert committed_in(d, "west", "billing", "east.orders") == {p: r["translated"] for p, r in rows.items()}

        # billing resumes in west while east still takes writes
        read_path = d.cwd / "west-billing.jsonl"  # a file, not a pipe: a full pipe would stall the consumer
        with open(read_path, "wb") as read_file:
            west_consumer = subprocess.Popen(
                ["mq", "consume", "east.orders", "--region", "west", "--group", "billing", "--format", "json",
                 "--timeout-ms", "4000"], env=d.env, cwd=d.cwd, stdout=read_file, stderr=subprocess.PIPE,
                text=True)
        time.sleep(after_s)  # the load runs on after the fail-over for this long
        assert producer.running() and west_consumer.poll() is None
        written = producer.stop()
        # an independent reader: east's log, and every record of it once in west's east.orders
        east_records = consume("orders --region east", d.env, d.cwd)
        assert len(east_records) == written
        ends = {p: 1 + max(r["offset"] for r in east_records if r["partition"] == p) for p in range(PARTITIONS)}
        copied = wait_for(lambda: (r := consume("east.orders --region west", d.env, d.cwd))
                          and len(r) >= written and r, 60, f"{written} records of east in west")
        assert Counter(r["value"] for r in copied) == Counter(r["value"] for r in east_records)
        _, err = west_consumer.communicate(timeout=60)
        assert west_consumer.returncode == 0, err
        read = origin_offsets([json.loads(line) for line in read_path.read_text().splitlines()])
        rereads = {}
        for p, c in committed.items():
            got = read.get(p, [])
            missing = set(range(c, ends[p])) - set(got)
            assert not missing, f"partition {p}: {len(missing)} records at or after the commit {c} lost, " \
                                f"e.g. {sorted(missing)[:5]}; read {len(got)} up to {max(got, default=None)}, " \
                                f"east ends {ends}; west consumer said: {err[-2000:]}"
            rereads[p] = sum(1 for o in got if o < c)
            assert rereads[p] <= bounds[p], f"partition {p}: {rereads[p]} re-reads over the printed bound {bounds[p]}"
        return {"written": written, "committed": committed, "bounds": bounds, "rereads": rereads}
    finally:
        for proc in (east_consumer, west_consumer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        producer.kill()


@pytest.mark.slow
def test_translated_failover_under_load_loses_nothing_committed_and_rereads_within_the_bound(
        active_active: Deployment) -> None:
    figures = failover_under_load(active_active, per_s=600, consume_s=3.0, after_s=3.0)
    print(f"translated fail-over under load: {figures}")


@pytest.mark.nightly
def test_translated_failover_under_heavier_load_for_longer(active_active: Deployment) -> None:
    figures = failover_under_load(active_active, per_s=3_000, consume_s=20.0, after_s=20.0)
    print(f"translated fail-over under load (nightly): {figures}")


# ---------------------------------------------------------------- a cut link


def orders_of(doc: dict) -> dict[int, dict]:
    return {p["partition"]: p for p in doc.get("partitions", []) if p["topic"] == "orders"}


def ends(bootstrap: str, topic: str) -> dict[int, int]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    return {tp.partition: end for tp, end in high_watermarks(bootstrap, tps).items()}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blackhole", pytest.param("refuse", marks=pytest.mark.nightly)])
def test_a_cut_link_shows_an_active_active_flows_lag_as_a_lower_bound_and_an_estimate_then_it_catches_up(
        active_active: Deployment, mode: str) -> None:
    """``blackhole``: fetches go unanswered (silence after the 5 s stall timeout);
    ``refuse``: connections are refused (silence at once)."""
    d = active_active
    rate = 300  # records/s into east, ~100 per partition
    producer = SteadyProducer(d, rate)
    try:
        def following() -> dict | None:
            doc = mirror_status(d)
            parts = orders_of(doc)
            ok = len(parts) == PARTITIONS and doc["state"] == "running" and not doc["source_unreachable"] and all(
                (p["source_rate_per_s"] or 0) > rate / PARTITIONS / 2 and (p["lag_records"] or 0) < 200
                for p in parts.values())
            return doc if ok else None

        wait_for(following, 30, "the flow to follow east and know its rate")
        # The rate is the source end's growth over the last RATE_WINDOW_MS: let the window hold
        # only the steady pace (`mq produce` sends what the pipe held while it started as a burst).
        time.sleep(RATE_WINDOW_MS / 1000)
        heard = wait_for(following, 30, "the flow to follow east at its steady rate")
        assert heard["lag_records_estimate"] is None and not heard["lag_records_lower_bound"]
        cut = run_mq("link", "cut", "east", "west", "--mode", mode, env=d.env, cwd=d.cwd)
        assert cut.returncode == 0, cut.stderr
        cut_ms = time.time() * 1000

        def silent() -> dict | None:
            doc = mirror_status(d)
            parts = orders_of(doc)
            ok = doc.get("source_unreachable") and len(parts) == PARTITIONS and all(
                p["source_unreachable"] and p["source_silent_s"] >= 3.0 for p in parts.values())
            return doc if ok else None

        wait_for(silent, 30, "the status to say east is not heard for 3 s")
        east_before = ends(d.east, "orders")
        doc = silent()
        east_after = ends(d.east, "orders")
        table = run_mq("mirror", "status", "--flow", "east-to-west", env=d.env, cwd=d.cwd).stdout.decode()
        overview = run_mq("status", env=d.env, cwd=d.cwd).stdout.decode()
        overview_json = json.loads(run_mq("status", "--json", env=d.env, cwd=d.cwd).stdout)
        assert producer.running(), "east must keep taking writes while the link is cut"
        west = ends(d.west, "east.orders")
        assert doc is not None and doc["state"] == "stalled" and doc["mode"] == "active-active"
        assert doc["lag_records_lower_bound"] and doc["source_heard_at_ms"] <= cut_ms + 1_000
        assert "source region east unreachable" in doc["reason"]
        for partition, p in orders_of(doc).items():
            low, high = east_before[partition] - west[partition], east_after[partition] - west[partition]
            print(f"orders-{partition}: missing in west {low}..{high}; status: lag >= {p['lag_records']}, "
                  f"estimate ~{p['lag_records_estimate']} ({p['source_rate_per_s']} rec/s x "
                  f"{p['source_silent_s']} s)")
            why = "no answer from the source" if mode == "blackhole" else "NETWORK_EXCEPTION"
            assert p["state"] == "stalled" and why in p["reason"], p["reason"]
            assert p["remote_topic"] == "east.orders" and p["mirrored_end"] == west[partition]  # one for one
            assert p["source_seen_wall_ms"] <= cut_ms + 1_000
            assert p["lag_records"] == p["source_end"] - p["mirrored_end"] <= low  # a lower bound
            assert low >= rate / PARTITIONS * 2  # east kept taking writes: a lag of 0 would be false
            assert abs(p["lag_records_estimate"] - p["lag_records"]
                       - p["source_rate_per_s"] * p["source_silent_s"]) <= 2
            assert 0.5 * low <= p["lag_records_estimate"] <= 1.5 * high, (p, low, high)
        assert doc["lag_records_estimate"] is not None and doc["lag_records_estimate"] >= sum(
            p["lag_records_estimate"] for p in orders_of(doc).values())

        assert "source east not heard for" in table and "a lower bound" in table and "estimate ~" in table, table
        rows = [line.split() for line in table.splitlines() if line.startswith("orders ")]
        assert len(rows) == PARTITIONS and all(r[2] == "stalled" and r[5].startswith(">=") and r[6].startswith("~")
                                               for r in rows), table
        line = next(line for line in overview.splitlines() if "east-to-west" in line and "active-active" in line)
        assert "stalled" in line and ">=" in line and "~" in line, overview
        valid("mq status", overview_json)
        flow = next(f for f in overview_json["flows"] if f["name"] == "east-to-west")
        assert flow["mirror_status"]["source_unreachable"] and flow["mirror_status"]["lag_records_estimate"]

        healed = run_mq("link", "heal", "east", "west", env=d.env, cwd=d.cwd)
        assert healed.returncode == 0, healed.stderr

        def heard_again() -> dict | None:
            doc = mirror_status(d)
            parts = orders_of(doc)
            ok = doc.get("state") == "running" and not doc.get("source_unreachable") and len(parts) == PARTITIONS \
                and all(not p["source_unreachable"] and p["lag_records_estimate"] is None for p in parts.values())
            return doc if ok else None

        after = wait_for(heard_again, 30, "the flow to hear east again")
        assert not after["lag_records_lower_bound"] and after["lag_records_estimate"] is None
        written = producer.stop()
    finally:
        producer.kill()
    copied = wait_for(lambda: (r := consume("east.orders --region west", d.env, d.cwd)) and len(r) >= written and r,
                      60, f"all {written} records of east in west")
    assert Counter(r["value"] for r in copied) == Counter(f"e-{i}" for i in range(1, written + 1))
    wait_for(lambda: (doc := mirror_status(d)) and doc["lag_records"] == 0 and doc["state"] == "running", 30,
             "the flow to catch up (lag 0)")
