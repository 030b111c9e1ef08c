"""A link cut while east keeps taking writes, through the commands users run: what
`python -m mirror status` says while the source cannot be heard (the lag as a lower bound
as of the last answer, the seconds since, an estimate from the last known produce rate),
what `failover` reports as at risk (lower bound and estimate, per partition and in total),
and, once healed, what `failback --json` saved per topic-partition: compared each time with
what is truly missing in west, read from both regions directly."""

from __future__ import annotations

import json
import threading
import time
from typing import Self

import jsonschema

from mq.cli import schemas
from mq.client import blocking
from mq.core.types import TopicPartition
from tests.integration.mirror.harness import (
    MirrorProcess,
    high_watermarks,
    mirror_args,
    raw_batches,
    run_cli,
    wait_for,
    write_cluster,
)
from tests.integration.mirror.test_mirror_failover import kill_pid_file

TPS = [TopicPartition("orders", p) for p in range(2)]
RATE_PER_PARTITION = 200  # records/s, 10 every 50 ms
TICK_S = 0.05


class SteadyWriter:
    """Writes to every partition of orders in east at a steady pace (acks=all) on a
    thread, as an application keeps doing while its region's link is cut."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="steady-writer", daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)
        assert self.error is None, f"the writer failed: {self.error!r}"

    def _run(self) -> None:
        n = RATE_PER_PARTITION * TICK_S
        try:
            with blocking.Producer(self.bootstrap, acks="all", linger_ms=0) as producer:
                due = time.monotonic()
                while not self.stopped.is_set():
                    for tp in TPS:
                        producer.send_many("orders", [(None, b"x" * 100)] * int(n), partition=tp.partition)
                    due = max(due + TICK_S, time.monotonic() - TICK_S)  # a steady pace, no bursts
                    self.stopped.wait(max(0.0, due - time.monotonic()))  # pacing, not waiting for a condition
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc


def valid(command: str, doc: dict) -> dict:
    """``doc`` as documented (mq/cli/schemas_mirror.py, docs/reference/json-output.md)."""
    jsonschema.Draft202012Validator(schemas.schema_of(command).schema).validate(doc)
    return doc


def status(regions) -> dict:
    result = run_cli("status", "--data-dir", str(regions.tmp), "--flow", "east->west", "--json")
    return valid("mq mirror status", json.loads(result.stdout)) if result.returncode == 0 else {}


def orders(doc: dict) -> dict[TopicPartition, dict]:
    return {TopicPartition(p["topic"], p["partition"]): p for p in doc.get("partitions", [])
            if p["topic"] == "orders"}


def measured_and_caught_up(mirror: MirrorProcess) -> dict | None:
    """The mirror has measured east's produce rate and follows it closely (its status file)."""
    doc = mirror.status() or {}
    parts = orders(doc)
    if doc.get("state") != "running" or sorted(parts) != TPS:
        return None
    ok = all((p["source_rate_per_s"] or 0) > RATE_PER_PARTITION / 2 and (p["lag_records"] or 0) < 200
             for p in parts.values())
    return doc if ok else None


def silent_for(mirror: MirrorProcess, seconds: float) -> dict | None:
    doc = mirror.status() or {}
    parts = orders(doc)
    if not doc.get("source_unreachable") or sorted(parts) != TPS:
        return None
    return doc if all(p["source_unreachable"] and p["source_silent_s"] >= seconds for p in parts.values()) else None


def test_a_cut_link_shows_the_lag_as_a_lower_bound_as_of_the_last_answer_and_an_estimate(regions, mirrors) -> None:
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 2, 1)
    state_dir = regions.tmp / "mirror-east->west"
    mirror = MirrorProcess(mirror_args("east->west", regions.east.bootstrap, regions.west.bootstrap, state_dir,
                                       address_map=regions.east_link.address_map), state_dir)
    mirrors.append(mirror)
    with SteadyWriter(regions.east.bootstrap) as writer:
        mirror.start()
        wait_for(lambda: measured_and_caught_up(mirror), 30, "the mirror to follow east and know its rate")
        regions.east_link.cut("refuse")
        cut_ms = time.time() * 1000
        wait_for(lambda: silent_for(mirror, 4.0), 30, "the status to say east is not heard for 4 s")
        east_before = high_watermarks(regions.east.bootstrap, TPS)
        doc = status(regions)
        east_after = high_watermarks(regions.east.bootstrap, TPS)
        writer.stop()
    west = high_watermarks(regions.west.bootstrap, TPS)

    assert doc["state"] == "stalled" and doc["source_unreachable"] and doc["lag_records_lower_bound"]
    assert "source region east unreachable" in doc["reason"]
    assert doc["lag_as_of_ms"] <= doc["source_heard_at_ms"] <= cut_ms + 1_000
    for tp, p in orders(doc).items():
        truth_low, truth_high = east_before[tp] - west[tp], east_after[tp] - west[tp]
        print(f"{tp}: missing in west {truth_low}..{truth_high}; status: lag >= {p['lag_records']}, "
              f"estimate ~{p['lag_records_estimate']} ({p['source_rate_per_s']} rec/s x {p['source_silent_s']} s)")
        assert p["state"] == "stalled" and p["mirrored_end"] == west[tp]
        assert p["source_seen_wall_ms"] <= cut_ms + 1_000 and p["source_silent_s"] >= 4.0
        assert p["lag_records"] == p["source_end"] - p["mirrored_end"] <= truth_low  # a lower bound
        assert truth_low >= RATE_PER_PARTITION * 3  # east kept taking writes: the old "lag 0" was false
        assert p["lag_seconds"] is None or p["lag_records"] > 0  # never "0 s" while east is silent
        rate = p["source_rate_per_s"]
        assert RATE_PER_PARTITION * 0.5 <= rate <= RATE_PER_PARTITION * 1.5
        assert abs(p["lag_records_estimate"] - p["lag_records"] - rate * p["source_silent_s"]) <= 2
        assert 0.5 * truth_low <= p["lag_records_estimate"] <= 1.5 * truth_high, (p, truth_low, truth_high)
    estimates = [p["lag_records_estimate"] for p in doc["partitions"]]  # heartbeats-0 is silent too
    assert doc["lag_records_estimate"] == (None if None in estimates else sum(estimates))
    assert doc["lag_records_estimate"] is None or doc["lag_records_estimate"] >= sum(
        p["lag_records_estimate"] for p in orders(doc).values())

    text = run_cli("status", "--data-dir", str(regions.tmp), "--flow", "east->west").stdout
    assert "source east not heard for" in text and "a lower bound" in text and "estimate ~" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("orders ")]
    assert len(rows) == 2 and all(r[2] == "stalled" and r[5].startswith(">=") and r[6].startswith("~") for r in rows)

    regions.east_link.heal()
    wait_for(lambda: (d := mirror.status()) and not d.get("source_unreachable") and d.get("state") == "running",
             30, "the flow to hear east again")
    healed = status(regions)
    assert healed["lag_records_estimate"] is None and not healed["lag_records_lower_bound"]
    assert all(not p["source_unreachable"] and p["lag_records_estimate"] is None for p in orders(healed).values())


def test_failover_with_the_link_cut_reports_a_lower_bound_and_an_estimate_and_failback_the_exact_tail(
        regions, mirrors) -> None:
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 2, 1)
    cluster = str(write_cluster(regions.tmp / "cluster.json", regions.east.bootstrap, regions.west.bootstrap,
                                east_link=regions.east_link.address_map,
                                west_link=regions.west_link.address_map, interval_ms=200))
    mirror = MirrorProcess(["--cluster", cluster, "--flow", "east->west"], regions.tmp / "mirror-east->west")
    mirrors.append(mirror)
    try:
        with SteadyWriter(regions.east.bootstrap) as writer:
            mirror.start()
            wait_for(lambda: measured_and_caught_up(mirror), 30, "the mirror to follow east and know its rate")
            regions.east_link.cut("refuse")
            wait_for(lambda: silent_for(mirror, 3.0), 30, "the status to say east is not heard for 3 s")
            # East keeps its pace while west is promoted: the estimate's assumption holds.
            east_before = high_watermarks(regions.east.bootstrap, TPS)
            result = run_cli("failover", "--cluster", cluster, "--to", "west", "--json")
            east_after = high_watermarks(regions.east.bootstrap, TPS)
            writer.stop()
        assert result.returncode == 0, result.stdout + result.stderr
        assert "did not answer" in result.stderr and "lower bound" in result.stderr
        report = valid("mq mirror failover --to REGION --json", json.loads(result.stdout))
        promotion = report["promotion_ends"]["orders"]
        assert not report["records_at_risk_exact"]
        rows = {TopicPartition(r["topic"], r["partition"]): r for r in report["partitions"]}
        lows = {tp: east_before[tp] - promotion[tp.partition] for tp in TPS}
        highs = {tp: east_after[tp] - promotion[tp.partition] for tp in TPS}
        for tp in TPS:
            row = rows[tp]
            print(f"{tp}: missing in west at fail-over {lows[tp]}..{highs[tp]}; reported at risk >= "
                  f"{row['records']}, estimate ~{row['records_estimate']}")
            assert row["mirrored_end"] == promotion[tp.partition]
            assert row["records_kind"] == "lower bound" and row["basis"].startswith("last known")
            assert row["records"] == row["source_end"] - row["mirrored_end"] <= lows[tp]
            assert row["source_silent_s"] >= 3.0 and row["source_rate_per_s"] > 0
            assert abs(row["records_estimate"] - row["records"]
                       - row["source_rate_per_s"] * row["source_silent_s"]) <= 2
            assert 0.5 * lows[tp] <= row["records_estimate"] <= 1.5 * highs[tp], (row, lows[tp], highs[tp])
        assert report["records_at_risk"] == sum(rows[tp]["records"] for tp in TPS) <= sum(lows.values())
        assert report["records_at_risk_estimate"] == sum(rows[tp]["records_estimate"] for tp in TPS)

        table = run_cli("status", "--data-dir", str(regions.tmp), "--flow", "east->west")
        assert "state failed-over" in table.stdout and "at least" in table.stdout

        # Healed: fail-back saves east's tail; per partition it is exactly what west missed.
        regions.east_link.heal()
        east_final = high_watermarks(regions.east.bootstrap, TPS)
        back = run_cli("failback", "--cluster", cluster, "--to", "east", "--json", "--catch-up-timeout-s", "60")
        assert back.returncode == 0, back.stdout + back.stderr
        summary = valid("mq mirror failback", json.loads(back.stdout))
        saved = {TopicPartition(d["topic"], d["partition"]): d for d in summary["diverged_partitions"]}
        assert sorted(saved) == TPS
        for tp in TPS:
            missing = east_final[tp] - promotion[tp.partition]  # the truth, read from both regions
            assert saved[tp] == {"topic": "orders", "partition": tp.partition, "from_offset": promotion[tp.partition],
                                 "to_offset": east_final[tp], "records": missing, "saved_to": "orders.diverged"}
            assert rows[tp]["records"] <= missing  # the lower bound held
            diverged = raw_batches(regions.east.bootstrap, TopicPartition("orders.diverged", tp.partition),
                                   start=promotion[tp.partition])
            assert diverged and diverged[0][0] == promotion[tp.partition]
            assert high_watermarks(regions.east.bootstrap, [TopicPartition("orders.diverged", tp.partition)]) == {
                TopicPartition("orders.diverged", tp.partition): east_final[tp]}
        assert summary["diverged"] == {"orders": [saved[tp]["records"] for tp in TPS]}
    finally:
        kill_pid_file(regions.tmp / "mirror-east->west" / "mirror.pid")
        kill_pid_file(regions.tmp / "mirror-failback-east->west" / "mirror.pid")
