"""Restart keeps topics (metadata log replay), configs and data; retention runs from poll."""

from __future__ import annotations

import time
import urllib.request

from mq.protocol.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    ConfigResource,
    ConfigResourceType,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    MetadataRequest,
)

from .raw import RawClient, batch, values_of


def _state(c: RawClient) -> tuple:
    meta = c.request(MetadataRequest(None))
    topics = sorted((t.name, t.topic_id, len(t.partitions)) for t in meta.topics)
    configs = c.request(DescribeConfigsRequest([ConfigResource(ConfigResourceType.TOPIC, "keep", ["retention.ms"])]))
    return topics, configs.results[0].configs[0].value, meta.cluster_id


def test_graceful_and_crash_restart_keep_topics_configs_and_data(broker):
    with RawClient.to(broker) as c:
        c.create_topic("keep", 2, {"retention.ms": "123456"})
        c.create_topic("drop", 1)
        c.request(DeleteTopicsRequest(["drop"]))
        for i in range(50):
            c.produce("keep", i % 2, batch([b"v%d" % i]))
        before = _state(c)
    assert broker.stop() == 0  # SIGTERM: graceful, exit code 0
    assert "broker_stopped" in broker.stderr_text()
    assert (broker.data_dir / "keep-0" / "recovery-point-offset-checkpoint").exists()
    broker.start()
    with RawClient.to(broker) as c:
        assert _state(c) == before
        assert [v for _, v in values_of(c.fetch("keep", 0, 0).records)] == [b"v%d" % i for i in range(0, 50, 2)]
        c.produce("keep", 0, batch([b"after"]))
    broker.kill()  # SIGKILL: nothing flushed by us, the page cache keeps it
    broker.start()
    with RawClient.to(broker) as c:
        assert _state(c) == before
        records = values_of(c.fetch("keep", 0, 0).records)
        assert records[-1] == (25, b"after") and len(records) == 26
        assert not (broker.data_dir / "drop-0").exists()


def test_retention_via_alter_configs_and_poll(broker_factory):
    broker = broker_factory({"log.retention.check.interval.ms": "100"})
    with RawClient.to(broker) as c:
        c.create_topic("ret", 1, {"segment.bytes": "1024"})
        old = int(time.time() * 1000) - 3_600_000
        for i in range(10):
            assert c.produce("ret", 0, batch([b"x" * 600], timestamp_ms=old)).error_code == 0
        earliest = ListOffsetsRequest([ListOffsetsTopic("ret", [ListOffsetsPartition(0, -2)])])
        assert c.request(earliest).topics[0].partitions[0].offset == 0
        alter = AlterConfigsRequest([AlterConfigsResource(ConfigResourceType.TOPIC, "ret", [
            AlterableConfig("retention.ms", AlterConfigOp.SET, "60000")])])
        assert c.request(alter).results[0].error_code == 0
        deadline = time.monotonic() + 10
        start = 0
        while time.monotonic() < deadline and start == 0:
            start = c.request(earliest).topics[0].partitions[0].offset
            time.sleep(0.05)
        assert start > 0, "retention never deleted a segment"
        assert c.fetch("ret", 0, 0).error_code == 1  # OFFSET_OUT_OF_RANGE below the new start
        assert c.fetch("ret", 0, start).error_code == 0


def test_metrics_endpoint(broker):
    with RawClient.to(broker) as c:
        c.create_topic("met", 1)
        c.produce("met", 0, batch([b"a", b"b", b"c"]))
        c.fetch("met", 0, 0)
    body = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    assert 'mq_topic_records_in_total{topic="met"} 3.0' in body
    assert 'mq_topic_records_out_total{topic="met"} 3.0' in body
    assert 'mq_request_latency_seconds_count{api="produce"} 1.0' in body
    assert 'mq_log_size_bytes{partition="0",topic="met"}' in body
    assert 'mq_log_end_offset{partition="0",topic="met"} 3.0' in body
