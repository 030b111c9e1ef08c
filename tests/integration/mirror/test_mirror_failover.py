"""Fail-over and fail-back between two real regions, through the commands users run.

The flow is described in a cluster.json (as ``mq up`` writes it) and the mirror runs as
``python -m mirror run --cluster ... --flow east->west``; the commands find it by its pid
file, stop it, promote, report records at risk, save the diverged tail, reverse and
resume."""

from __future__ import annotations

import json
import os
import signal
import time

import jsonschema

from mq.cli import schemas
from mq.client import blocking
from mq.core.types import TopicPartition
from mq.deploy.shaping import LinkSettings
from tests.integration.mirror.harness import (
    Link,
    MirrorProcess,
    high_watermarks,
    produce,
    raw_batches,
    run_cli,
    topic_configs,
    wait_for,
    write_cluster,
)

TPS = [TopicPartition("orders", p) for p in range(2)]


def committed(bootstrap: str, group: str) -> dict[TopicPartition, int]:
    with blocking.Admin(bootstrap) as admin:
        return {tp: om.offset for tp, om in admin.list_group_offsets(group).items()}


def start_flow(regions, mirrors, east_link: dict[str, str]) -> tuple[MirrorProcess, str]:
    cluster = write_cluster(regions.tmp / "cluster.json", regions.east.bootstrap, regions.west.bootstrap,
                            east_link=east_link, west_link=regions.west_link.address_map, interval_ms=200)
    mirror = MirrorProcess(["--cluster", str(cluster), "--flow", "east->west"], regions.tmp / "mirror-east->west")
    mirrors.append(mirror)
    return mirror.start(), str(cluster)


def setup_flow(regions, mirrors, records: int = 2000, east_link: dict[str, str] | None = None):
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 2, 1)
    produce(regions.east.bootstrap, "orders", records, batch=100)
    mirror, cluster = start_flow(regions, mirrors, east_link or regions.east_link.address_map)
    return mirror, cluster


def caught_up(regions) -> bool:
    try:
        return high_watermarks(regions.east.bootstrap, TPS) == high_watermarks(regions.west.bootstrap, TPS)
    except Exception:  # noqa: BLE001 - not created in west yet
        return False


def kill_pid_file(path) -> None:
    try:
        os.kill(int(path.read_text().strip()), signal.SIGTERM)
    except (OSError, ValueError):
        pass


def test_failover_reports_the_records_at_risk_exactly_and_groups_resume_at_synced_offsets(
        regions, mirrors) -> None:
    mirror, cluster = setup_flow(regions, mirrors)
    wait_for(lambda: caught_up(regions), 30, "west to catch up")
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.alter_group_offsets("billing", {tp: 600 for tp in TPS})
    wait_for(lambda: committed(regions.west.bootstrap, "billing") == {tp: 600 for tp in TPS}, 20, "the sync")

    mirror.kill()  # the flow is down: what east takes now is at risk
    produce(regions.east.bootstrap, "orders", 300, batch=30)
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.alter_group_offsets("billing", {tp: 1_150 for tp in TPS})
    east_ends = high_watermarks(regions.east.bootstrap, TPS)
    west_ends = high_watermarks(regions.west.bootstrap, TPS)

    result = run_cli("failover", "--cluster", cluster, "--to", "west", "--group", "billing", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    jsonschema.Draft202012Validator(schemas.schema_of("mq mirror failover --to REGION --json").schema).validate(report)
    rows = {(p["topic"], p["partition"]): p for p in report["partitions"]}
    for tp in TPS:
        row = rows[(tp.topic, tp.partition)]
        assert (row["source_end"], row["mirrored_end"], row["basis"]) == (east_ends[tp], west_ends[tp], "source")
        assert row["records"] == east_ends[tp] - west_ends[tp]
        assert row["records_kind"] == "exact" and row["records_estimate"] is None  # no estimate beside an exact figure
    assert report["records_at_risk"] == 300 and report["records_at_risk_exact"]
    assert report["records_at_risk_estimate"] is None
    assert "stopped" in result.stderr or "not running" in result.stderr  # step 1 printed

    # The final sync copied the last commits, clamped to what west has.
    assert committed(regions.west.bootstrap, "billing") == {tp: min(1_150, west_ends[tp]) for tp in TPS}
    assert "mirror.source.region" not in topic_configs(regions.west.bootstrap, "orders")
    for tp in TPS:  # everything acknowledged and mirrored before is in west at the same offsets
        assert raw_batches(regions.west.bootstrap, tp) == raw_batches(regions.east.bootstrap, tp, end=west_ends[tp])
    produce(regions.west.bootstrap, "orders", 10, batch=10)  # west is the writer now
    assert sum(high_watermarks(regions.west.bootstrap, TPS).values()) == sum(west_ends.values()) + 10


def test_failover_with_the_source_unreachable_reports_the_last_known_figures(regions, mirrors) -> None:
    # A long link (1 s round trip) and a backlog of ~4 MiB per partition: the mirror learns
    # east's ends from its first fetch but needs several round trips (1 MiB each) to copy.
    far = Link((regions.east.host, regions.east.port), LinkSettings(latency_ms=500))
    try:
        with blocking.Admin(regions.east.bootstrap) as admin:
            admin.create_topic("orders", 2, 1)
        produce(regions.east.bootstrap, "orders", 80_000, batch=1000)
        east_ends = high_watermarks(regions.east.bootstrap, TPS)
        mirror, cluster = start_flow(regions, mirrors, far.address_map)
        wait_for(lambda: all((p := mirror.partition("orders", tp.partition)) and p["source_end"] == east_ends[tp]
                             for tp in TPS), 20, "the mirror to have seen east's ends", every_s=0.05)
        far.cut("refuse")  # the region is lost while the mirror is behind
        started = time.monotonic()
        result = run_cli("failover", "--cluster", cluster, "--to", "west", "--json")
        took = time.monotonic() - started
        assert result.returncode == 0, result.stdout + result.stderr
        assert "did not answer" in result.stderr, result.stderr
        report = json.loads(result.stdout)
        west_ends = high_watermarks(regions.west.bootstrap, TPS)
        for row in report["partitions"]:
            tp = TopicPartition(row["topic"], row["partition"])
            assert row["basis"].startswith("last known")
            assert (row["source_end"], row["mirrored_end"]) == (east_ends[tp], west_ends[tp])
            assert row["records"] == east_ends[tp] - west_ends[tp]
            assert row["records_kind"] == "lower bound"
            # East took no writes while the mirror watched it: a rate of 0, so the estimate
            # is the lower bound (or none, if the mirror saw east too briefly to measure it).
            assert row["records_estimate"] in (None, row["records"]), row
        # Nothing was produced after the mirror's last fetch, so the last known figures are exact.
        assert report["records_at_risk"] == sum(east_ends.values()) - sum(west_ends.values()) > 0
        assert not report["records_at_risk_exact"]  # a lower bound in general (exact here: nothing written since)
        assert took < 20, f"fail-over took {took:.1f} s with the source unreachable"
    finally:
        far.close()


def test_failback_saves_the_diverged_tail_and_leaves_both_regions_identical(regions, mirrors) -> None:
    mirror, cluster = setup_flow(regions, mirrors)
    wait_for(lambda: caught_up(regions), 30, "west to catch up")
    mirror.kill()
    produce(regions.east.bootstrap, "orders", 300, batch=30)  # acknowledged in east only
    failover = run_cli("failover", "--cluster", cluster, "--to", "west", "--json")
    assert failover.returncode == 0, failover.stderr
    promotion = json.loads(failover.stdout)["promotion_ends"]["orders"]
    tails = {tp: raw_batches(regions.east.bootstrap, tp, start=promotion[tp.partition]) for tp in TPS}
    assert sum(len(t) for t in tails.values()) > 0
    produce(regions.west.bootstrap, "orders", 200, batch=20, prefix="w")  # west is the writer
    with blocking.Admin(regions.west.bootstrap) as admin:
        admin.alter_group_offsets("billing", {tp: 900 for tp in TPS})

    try:
        result = run_cli("failback", "--cluster", cluster, "--to", "east", "--catch-up-timeout-s", "60")
        assert result.returncode == 0, result.stdout + result.stderr
        for step in ("1. east", "2. east", "3. east", "4. reverse flow failback-east->west", "6. west",
                     "7. caught up", "9. east", "10. flow east->west resumed"):
            assert step in result.stdout, f"step {step!r} not printed:\n{result.stdout}"
        for tp in TPS:  # the diverged tail, same offsets and bytes, in orders.diverged
            saved = raw_batches(regions.east.bootstrap, TopicPartition("orders.diverged", tp.partition),
                                start=promotion[tp.partition])
            assert saved == tails[tp]
            assert raw_batches(regions.east.bootstrap, tp) == raw_batches(regions.west.bootstrap, tp)
        assert "mirror.source.region" not in topic_configs(regions.east.bootstrap, "orders")
        assert topic_configs(regions.west.bootstrap, "orders")["mirror.source.region"] == "east"
        assert committed(regions.east.bootstrap, "billing") == {tp: 900 for tp in TPS}
        assert not os.path.exists(regions.tmp / "mirror-east->west" / "failover.json")
        recorded = json.loads((regions.tmp / "cluster.json").read_text())  # where `mq down` looks
        assert [f["name"] for f in recorded["flows"]] == ["east->west"]  # the reverse flow is gone
        resumed = recorded["processes"]["mirror/east->west"]["pid"]
        assert int((regions.tmp / "mirror-east->west" / "mirror.pid").read_text()) == resumed
        assert not (regions.tmp / "mirror-failback-east->west" / "mirror.pid").exists()

        produce(regions.east.bootstrap, "orders", 100, batch=10, prefix="e2")  # east writes again
        wait_for(lambda: caught_up(regions), 30, "the resumed flow to copy east's new records")
    finally:
        kill_pid_file(regions.tmp / "mirror-east->west" / "mirror.pid")
        kill_pid_file(regions.tmp / "mirror-failback-east->west" / "mirror.pid")
