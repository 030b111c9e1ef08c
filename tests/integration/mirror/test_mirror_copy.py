"""The mirror as a process between two real regions: byte-identical copies at the same
offsets, restarts after SIGKILL that never lose, duplicate or reorder, a cut link that
stalls the flow, and gaps with exact offsets."""

from __future__ import annotations

import random
import threading
import time
import urllib.request

import pytest

from mq.client import blocking
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from tests.integration.mirror.harness import (
    MirrorProcess,
    high_watermarks,
    mirror_args,
    produce,
    raw_batches,
    run_cli,
    topic_configs,
    wait_for,
)


def start_mirror(regions, mirrors, **kw) -> MirrorProcess:
    state_dir = regions.tmp / "mirror-east->west"
    m = MirrorProcess(mirror_args("east->west", regions.east.bootstrap, regions.west.bootstrap, state_dir,
                                  address_map=regions.east_link.address_map, **kw), state_dir)
    mirrors.append(m)
    return m.start()


def caught_up(regions, tps: list[TopicPartition]) -> bool:
    source = high_watermarks(regions.east.bootstrap, tps)
    try:
        target = high_watermarks(regions.west.bootstrap, tps)
    except MqError:
        return False  # not created yet
    return source == target


def assert_identical(regions, tps: list[TopicPartition]) -> int:
    count = 0
    for tp in tps:
        east = raw_batches(regions.east.bootstrap, tp)
        west = raw_batches(regions.west.bootstrap, tp)
        assert [b for b, _ in west] == [b for b, _ in east], f"{tp}: batch offsets differ"
        assert west == east, f"{tp}: batch bytes differ"
        count += len(east)
    return count


def test_topics_are_copied_byte_identical_at_the_same_offsets_through_the_link(regions, mirrors) -> None:
    tps = [TopicPartition("orders", p) for p in range(3)]
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 3, 1, {"retention.ms": "86400000"})
        admin.create_topic("audit", 1, 1)
    with blocking.Admin(regions.west.bootstrap) as admin:
        admin.create_topic("audit", 1, 1)  # west's own topic of the same name: never written
    produce(regions.east.bootstrap, "orders", 3000)
    produce(regions.east.bootstrap, "audit", 100)
    produce(regions.east.bootstrap, "orders", 500, compression="lz4", batch=50)
    mirror = start_mirror(regions, mirrors)
    wait_for(lambda: caught_up(regions, tps), 30, "west to hold every record of east")
    assert assert_identical(regions, tps) > 3

    configs = topic_configs(regions.west.bootstrap, "orders")
    assert configs["mirror.source.region"] == "east" and configs["retention.ms"] == "86400000"
    with blocking.Producer(regions.west.bootstrap, acks="all", retries=0) as producer, \
            pytest.raises(MqError) as refused:
        producer.send("orders", b"not here")
    assert refused.value.code == ErrorCode.MIRROR_TOPIC_READ_ONLY
    assert regions.east_link.forwarded_bytes() > 3500 * 100  # the copy crossed the link

    doc = wait_for(lambda: (mirror.status() or {}).get("heartbeats", {}).get("latency_p50_ms") is not None
                   and mirror.status(), 15, "heartbeats mirrored with a latency")
    assert doc["state"] == "running" and doc["totals"]["lag_records"] == 0
    assert {p["topic"] for p in doc["partitions"]} == {"orders", "heartbeats"}
    assert "audit exists in west and is not a mirror topic" in doc["problems"]["audit"]
    assert high_watermarks(regions.west.bootstrap, [TopicPartition("audit", 0)]) == {TopicPartition("audit", 0): 0}
    assert "event=topic_not_mirrored" in mirror.log_text() and "WARNING" in mirror.log_text()
    scrape = urllib.request.urlopen(f"http://{mirror.metrics}/metrics", timeout=5).read().decode()
    assert 'mq_mirror_lag_records{flow="east->west",partition="0",topic="orders"} 0.0' in scrape
    assert "mq_mirror_replication_latency_seconds_bucket" in scrape

    table = run_cli("status", "--data-dir", str(regions.tmp))
    assert table.returncode == 0, table.stderr
    assert "flow east->west: east -> west  state running" in table.stdout
    assert any(line.split()[:3] == ["orders", "0", "running"] for line in table.stdout.splitlines())
    as_json = run_cli("status", "--data-dir", str(regions.tmp), "--flow", "east->west", "--json")
    assert '"flow": "east->west"' in as_json.stdout


def test_a_mirror_killed_five_times_during_a_100k_record_flow_loses_duplicates_and_reorders_nothing(
        regions, mirrors) -> None:
    tps = [TopicPartition("orders", p) for p in range(3)]
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 3, 1)
    done = threading.Event()

    def writer() -> None:
        with blocking.Producer(regions.east.bootstrap, acks="all") as producer:
            for start in range(0, 100_000, 1_000):
                producer.send_many("orders", [(None, b"%06d" % i + b"." * 94) for i in range(start, start + 1_000)])
                time.sleep(0.07)  # ~8 s of writing: the kills land mid-flow
        done.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    mirror = start_mirror(regions, mirrors)
    rng = random.Random(10)
    for _ in range(5):
        time.sleep(rng.uniform(0.5, 1.2))  # let it copy a while, then kill it anywhere
        mirror.kill()
        mirror.start()
    thread.join(60)
    assert done.is_set(), "the writer did not finish"
    wait_for(lambda: caught_up(regions, tps), 40, "west to catch up after five SIGKILLs")
    assert sum(high_watermarks(regions.west.bootstrap, tps).values()) == 100_000
    assert_identical(regions, tps)
    assert mirror.starts == 6


def test_a_cut_link_stalls_the_flow_and_a_gap_is_reported_with_exact_offsets(regions, mirrors) -> None:
    tp = TopicPartition("orders", 0)
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 1, 1)
    produce(regions.east.bootstrap, "orders", 1000, batch=100)
    mirror = start_mirror(regions, mirrors)
    wait_for(lambda: caught_up(regions, [tp]), 30, "the first 1000 records in west")

    # "refuse": the mirror's open connections are reset, so no answer is held in the link
    # and everything from 1000 on is produced after its last fetch: the gap starts at 1000.
    regions.east_link.cut("refuse")
    produce(regions.east.bootstrap, "orders", 1000, batch=100)  # offsets 1000..1999, not mirrored
    part = wait_for(lambda: (p := mirror.partition("orders", 0)) and p["state"] == "stalled" and p,
                    20, "the partition to say stalled")
    assert "link down" in part["reason"] or "source" in part["reason"]
    with blocking.Admin(regions.east.bootstrap) as admin:  # retention outruns the stalled mirror
        assert admin.delete_records({tp: 1500})[tp] == 1500
    produce(regions.east.bootstrap, "orders", 500, batch=100)  # 2000..2499
    regions.east_link.heal()

    wait_for(lambda: caught_up(regions, [tp]), 30, "west to continue after the gap")
    part = wait_for(lambda: (p := mirror.partition("orders", 0)) and p["gaps"] and p, 10, "the gap in the status")
    assert part["gaps"] == [[1000, 1500]] and part["gap_records"] == 500
    assert "event=gap" in mirror.log_text() and "from_offset=1000 to_offset=1500 records=500" in mirror.log_text()
    scrape = urllib.request.urlopen(f"http://{mirror.metrics}/metrics", timeout=5).read().decode()
    assert 'mq_mirror_gap_records_total{flow="east->west",partition="0",topic="orders"} 500.0' in scrape
    east = raw_batches(regions.east.bootstrap, tp, start=1500)
    assert raw_batches(regions.west.bootstrap, tp, start=1500) == east and east[0][0] == 1500


def test_a_slow_jittery_link_cut_for_seconds_and_healed_loses_and_duplicates_nothing(regions, mirrors) -> None:
    from mq.deploy.shaping import LinkSettings
    from tests.integration.mirror.harness import Link

    tps = [TopicPartition("orders", p) for p in range(2)]
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 2, 1)
    wan = Link((regions.east.host, regions.east.port), LinkSettings(latency_ms=100, jitter_ms=20))
    try:
        state_dir = regions.tmp / "mirror-east->west"
        mirror = MirrorProcess(mirror_args("east->west", regions.east.bootstrap, regions.west.bootstrap,
                                           state_dir, address_map=wan.address_map), state_dir)
        mirrors.append(mirror)
        mirror.start()
        produce(regions.east.bootstrap, "orders", 5000, batch=250)
        wan.cut()  # blackhole: a WAN outage; what is in flight is held, not lost
        produce(regions.east.bootstrap, "orders", 5000, batch=250)
        wait_for(lambda: (mirror.status() or {}).get("state") == "stalled", 15, "the flow to say stalled")
        before = {p["partition"]: p["source_end"] for p in mirror.status()["partitions"] if p["topic"] == "orders"}
        mirror.kill()  # restarted while the source is unreachable: it still lists every partition
        mirror.start()
        doc = wait_for(lambda: (d := mirror.status()) and d.get("pid") == mirror.proc.pid
                       and d.get("state") == "stalled" and d, 20, "the restarted flow to say stalled")
        assert "unreachable" in doc["reason"]
        assert {p["partition"]: p["source_end"] for p in doc["partitions"] if p["topic"] == "orders"} == before
        wan.heal()
        wait_for(lambda: caught_up(regions, tps), 40, "west to catch up after the link healed")
        assert sum(high_watermarks(regions.west.bootstrap, tps).values()) == 10_000
        assert_identical(regions, tps)
        wait_for(lambda: (mirror.status() or {}).get("state") == "running", 10, "the flow to say running")
    finally:
        wan.close()
