"""mq.lab.geo and mq.lab.geo_measure: the two-region lab the geo notebook leans on starts
what `mq up` starts, drives links and the mirror as users do, and its measurements count
what they say."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.deploy import parse_topology
from mq.deploy.process import is_alive
from mq.lab.geo import FLOW, GeoLab, free_port_block, two_region_file
from mq.lab.geo_measure import Chunk, SteadyLoad, at_risk, committed, percentile, spread


def test_free_port_block_is_consecutive_and_free() -> None:
    base = free_port_block(5)
    for port in range(base, base + 5):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # raises if taken


def test_the_region_file_is_a_valid_two_region_topology(tmp_path: Path) -> None:
    import yaml

    doc = two_region_file(str(tmp_path), brokers=3, latency_ms=25, jitter_ms=5, sync_interval_ms=700)
    deployment = parse_topology(yaml.safe_dump(doc), source="lab")
    assert deployment.region_names == ["east", "west"]
    assert [len(r.brokers) for r in deployment.regions] == [3, 3]
    assert {(link.source, link.target) for link in deployment.links} == {("east", "west"), ("west", "east")}
    assert all(link.settings.latency_ms == 25 and link.settings.jitter_ms == 5 for link in deployment.links)
    [flow] = deployment.flows
    assert (flow.name, flow.source, flow.target, flow.sync_group_offsets_interval_ms) == (FLOW, "east", "west", 700)
    assert flow.topics_exclude == ("__.*",)


def test_measures_count_what_they_say() -> None:
    assert percentile([], 50) is None
    assert percentile([5, 1, 3], 50) == 3 and percentile(list(range(1, 101)), 99) == 99
    # at risk: per partition, acknowledged - held; a partition ahead counts 0, never negative
    assert at_risk({0: 100, 1: 50, 2: 7}, {0: 90, 1: 60}) == 10 + 0 + 7
    assert spread([3, 1, 2]) == {"runs": 3, "median": 2, "min": 1, "max": 3}
    load = SteadyLoad(None, "t", partitions=2, rate_per_s=100, origin=0.0)
    load.chunks = [Chunk(0.0, 1.0, 0, 10, 10), Chunk(1.0, 2.0, 1, 10, 10), Chunk(2.0, 3.0, 0, 10, 20),
                   Chunk(3.0, 4.0, 1, 10, None, "NOT_ENOUGH_REPLICAS: ...")]
    assert load.acked_ends(2.5) == {0: 10, 1: 10} and load.acked_ends() == {0: 20, 1: 10}
    assert load.acked_records() == 30 and load.failed_records() == 10


@pytest.fixture(scope="module")
def lab() -> GeoLab:
    lab = GeoLab.start(brokers=1, latency_ms=5, sync_interval_ms=300, refresh_interval_ms=300,
                       heartbeat_interval_ms=200)
    yield lab
    lab.close()


def test_a_mirror_topic_keeps_offsets_and_bytes_and_refuses_producers(lab: GeoLab) -> None:
    lab.admin("east").create_topic("orders", partitions=2)
    producer = lab.producer("east", acks="all")
    sent = producer.send_many("orders", [(b"k", f"v{i}".encode()) for i in range(50)], partition=1)
    ends = lab.wait_mirrored("orders", timeout_s=30)
    assert ends == lab.ends("east", "orders") == {0: 0, 1: 50}
    records = {}
    for region in ("east", "west"):
        consumer = lab.consumer(region)
        consumer.assign([TopicPartition("orders", 1)])
        consumer.seek(TopicPartition("orders", 1), 0)
        got = []
        while len(got) < 50:
            got += consumer.poll(timeout_ms=1000)
        records[region] = [(r.offset, r.timestamp, r.key, r.value) for r in got]
    assert records["east"] == records["west"]
    assert [r[0] for r in records["west"]] == [m.offset for m in sent]
    with pytest.raises(MqError) as refused:
        lab.producer("west").send("orders", b"x")
    assert refused.value.code == ErrorCode.MIRROR_TOPIC_READ_ONLY and "east" in str(refused.value)


def test_links_are_set_and_the_mirror_is_restarted_through_its_cli(lab: GeoLab) -> None:
    statuses = lab.set_link(latency_ms=30, jitter_ms=2)
    assert {(s.source, s.target) for s in statuses} == {("east", "west"), ("west", "east")}
    assert all(s.settings.latency_ms == 30 and s.state == "up" for s in lab.link_status())
    first = lab.mirror_pid()
    lab.stop_mirror()
    assert lab.mirror_pid() is None and not is_alive(first)
    pid = lab.start_mirror("--sync-group-offsets-interval-ms", "250")
    assert pid != first and lab.mirror_pid() == pid
    with pytest.raises(RuntimeError, match="already runs"):
        lab.start_mirror()
    status = lab.mirror_status()
    assert status["flow"] == FLOW and status["pid"] == pid
    lab.set_link(latency_ms=5, jitter_ms=0)


def test_fail_over_and_fail_back(lab: GeoLab) -> None:
    east = lab.admin("east")
    east.create_topic("pay", partitions=2)
    lab.wait_topic("west", "pay")
    producer = lab.producer("east", acks="all")
    for p in (0, 1):
        producer.send_many("pay", [(None, b"x")] * 40, partition=p)
    reader = lab.consumer("east", group_id="billing")
    reader.assign([TopicPartition("pay", 0)])
    reader.commit({TopicPartition("pay", 0): 25})
    lab.forget(reader)
    lab.wait_mirrored("pay")
    deadline = time.monotonic() + 20
    while committed(lab.admin("west"), "billing", "pay") != {0: 25} and time.monotonic() < deadline:
        time.sleep(0.1)
    run = lab.failover(to="west", groups=["billing"], topics=["pay"])
    assert run.ok and run.seconds > 0 and any(step.startswith("4. promoted") for step in run.steps)
    assert run.report["records_at_risk"] == 0 and run.report["promotion_ends"]["pay"] == [40, 40]
    assert run.report["groups"]["billing"]["offsets"] == {"pay-0": 25}
    assert lab.mirror_pid() is None  # the flow stopped
    lab.producer("west", acks="all").send_many("pay", [(None, b"west")] * 5, partition=0)
    producer.send_many("pay", [(None, b"late in east")] * 3, partition=1)  # east never stopped: diverges
    back = lab.failback(to="east")
    assert back.ok and back.report["writer"] == "east" and sum(back.report["diverged"]["pay"]) == 3
    assert lab.ends("east", "pay") == lab.ends("west", "pay") == {0: 45, 1: 40}
    assert lab.ends("east", "pay.diverged") == {0: 0, 1: 43}  # the tail, at its offsets [40, 43)
    assert lab.mirror_pid() is not None  # east -> west runs again


def test_close_stops_every_process_and_removes_the_directory() -> None:
    lab = GeoLab.start(brokers=1, latency_ms=1)
    root = lab.root
    pids = [s.pid for s in lab.launcher.status()] + [lab.mirror_pid()]
    pids += [s.pid for s in lab.launcher.service_status()[0]]
    assert all(pids)
    lab.close()
    assert not root.exists()
    assert not [pid for pid in pids if is_alive(pid)]


def test_a_lab_left_open_is_stopped_when_the_interpreter_exits(tmp_path: Path) -> None:
    """A notebook cell that fails before lab.close(): the detached processes must not outlive
    the kernel."""
    import subprocess
    import sys

    script = ("from mq.lab.geo import GeoLab\n"
              "lab = GeoLab.start(brokers=1, latency_ms=1)\n"
              "pids = [s.pid for s in lab.launcher.status()] + [lab.mirror_pid()]\n"
              "print(lab.root, *pids)\n"
              "raise RuntimeError('a cell failed')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "a cell failed" in done.stderr
    root, *pids = done.stdout.split()
    assert len(pids) == 3 and not Path(root).exists()
    assert not [pid for pid in map(int, pids) if is_alive(pid)]
