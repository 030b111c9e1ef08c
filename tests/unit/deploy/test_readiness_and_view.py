"""Region readiness from Metadata answers, the status view, and stopping processes."""

from __future__ import annotations

import subprocess
import sys

from mq.deploy.cluster_view import view_of
from mq.deploy.launcher import Launcher
from mq.deploy.process import is_alive
from mq.deploy.readiness import region_problems
from mq.deploy.topology import BrokerSpec
from mq.protocol.messages import BrokerInfo, MetadataResponse, PartitionMetadata, TopicMetadata

SPECS = [BrokerSpec(i, f"127.0.0.1:{9091 + i}", f"/d/broker-{i}") for i in (1, 2, 3)]


def meta(controller: int = 1, fenced: tuple[int, ...] = (), present: tuple[int, ...] = (1, 2, 3),
         topics: list[TopicMetadata] | None = None) -> MetadataResponse:
    brokers = [BrokerInfo(i, "127.0.0.1", 9091 + i, fenced=i in fenced) for i in present]
    return MetadataResponse(brokers, controller, topics or [], "c1", controller_epoch=4)


def test_ready_when_every_broker_sees_a_controller_and_everyone_unfenced():
    answers = {i: meta() for i in (1, 2, 3)}
    assert region_problems(SPECS, [1, 2, 3], answers) == []


def test_each_reason_not_ready_is_named():
    answers = {1: meta(controller=-1), 2: meta(fenced=(3,)), 3: "connection refused"}
    assert region_problems(SPECS, [1, 2, 3], answers) == [
        "broker-1 knows no active controller yet",
        "broker-2 sees broker 3 fenced",
        "broker-3 did not answer Metadata (connection refused)",
    ]
    assert region_problems(SPECS[:1], [1, 2, 3], {1: meta(present=(1,))}) == [
        "broker-1 has not seen broker 2, 3 register"]


def test_a_restarted_broker_only_needs_itself():
    assert region_problems(SPECS[1:2], [2], {2: meta(present=(2,), controller=3)}) == []


def test_view_of_metadata_and_high_watermarks():
    topics = [
        TopicMetadata("b", 0, [PartitionMetadata(1, 0, 2, 5, [2, 3, 1], [2, 3]),
                               PartitionMetadata(0, 0, -1, 6, [1, 2, 3], [1])]),
        TopicMetadata("a", 0, [PartitionMetadata(0, 0, 1, 0, [1, 2, 3], [1, 2, 3])]),
        TopicMetadata("__cluster_metadata", 0, [PartitionMetadata(0, 0, 1, 0, [1], [1])], is_internal=True),
    ]
    view = view_of(meta(fenced=(3,), topics=topics), {("a", 0): 42, ("b", 1): 7})
    assert (view.controller_id, view.controller_epoch) == (1, 4)
    assert [(b.node_id, b.fenced) for b in view.brokers] == [(1, False), (2, False), (3, True)]
    rows = [(p.topic, p.partition, p.leader, p.high_watermark, p.under_replicated, p.offline)
            for p in view.partitions]
    assert rows == [("a", 0, 1, 42, False, False), ("b", 0, -1, None, True, True), ("b", 1, 2, 7, True, False)]
    doc = view.to_json()
    assert doc["controller"] == {"id": 1, "epoch": 4}
    assert doc["partitions"][2] == {"topic": "b", "partition": 1, "leader": 2, "leader_epoch": 5,
                                    "replicas": [2, 3, 1], "isr": [2, 3], "high_watermark": 7,
                                    "under_replicated": True, "offline": False, "error_code": 0}


def _child(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # handlers installed
    return proc


def test_stop_all_terms_then_kills_the_stubborn():
    polite = _child("import time; print('ready', flush=True); time.sleep(60)")
    stubborn = _child("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "print('ready', flush=True); time.sleep(60)")
    try:
        results = Launcher._stop_all([(SPECS[0], polite.pid), (SPECS[1], stubborn.pid), (SPECS[2], None)], 1.0)
        assert [(r.name, r.outcome) for r in results] == [
            ("broker-1", "stopped"), ("broker-2", "killed"), ("broker-3", "not running")]
        assert results[1].waited_ms >= 1000
    finally:
        for proc in (polite, stubborn):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert not is_alive(stubborn.pid)
