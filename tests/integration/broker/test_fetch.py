"""Fetch: long-poll wake-up and expiry, byte limits, high watermark semantics."""

from __future__ import annotations

import time

from mq.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    MetadataRequest,
)

from .raw import RawClient, batch, values_of


def test_long_poll_wakes_when_data_arrives(broker):
    with RawClient.to(broker) as consumer, RawClient.to(broker) as producer:
        producer.create_topic("lp", 1)
        started = time.monotonic()
        cid = consumer.send(FetchRequest([FetchTopic("lp", [FetchPartition(0, 0)])], max_wait_ms=20_000))
        # The fetch is parked; other requests on the same connection queue behind it.
        cid2 = consumer.send(MetadataRequest([]))
        producer.produce("lp", 0, batch([b"wake"]))
        got, response = consumer.recv(FetchRequest)
        elapsed = time.monotonic() - started
        assert got == cid and elapsed < 10, elapsed
        assert values_of(response.topics[0].partitions[0].records) == [(0, b"wake")]
        assert consumer.recv(MetadataRequest)[0] == cid2


def test_long_poll_expires_after_max_wait(broker):
    with RawClient.to(broker) as c:
        c.create_topic("idle", 1)
        started = time.monotonic()
        response = c.fetch("idle", 0, 0, max_wait_ms=300)
        elapsed = time.monotonic() - started
        assert response.error_code == 0 and response.records == b""
        assert 0.25 <= elapsed < 5, elapsed


def test_min_bytes_waits_for_enough_data(broker):
    with RawClient.to(broker) as consumer, RawClient.to(broker) as producer:
        producer.create_topic("mb", 1)
        cid = consumer.send(FetchRequest([FetchTopic("mb", [FetchPartition(0, 0)])], max_wait_ms=20_000,
                                         min_bytes=3000))
        producer.produce("mb", 0, batch([b"x" * 1000]))
        consumer.sock.settimeout(0.3)
        try:
            consumer.recv(FetchRequest)
            raise AssertionError("answered before min_bytes were available")
        except TimeoutError:
            pass
        consumer.sock.settimeout(10)
        producer.produce("mb", 0, batch([b"y" * 1000]))
        producer.produce("mb", 0, batch([b"z" * 1000]))
        got, response = consumer.recv(FetchRequest)
        assert got == cid and len(values_of(response.topics[0].partitions[0].records)) == 3


def test_partition_and_response_byte_limits(broker):
    with RawClient.to(broker) as c:
        c.create_topic("lim", 2)
        for p in (0, 1):
            for i in range(10):
                c.produce("lim", p, batch([bytes([65 + i]) * 1000]))
        one = c.fetch("lim", 0, 0, partition_max_bytes=2500)
        assert 1 <= len(values_of(one.records)) <= 2 and len(one.records) <= 2500
        # A single batch larger than the limit still comes back (progress is guaranteed).
        assert len(values_of(c.fetch("lim", 0, 0, partition_max_bytes=10).records)) == 1
        request = FetchRequest([FetchTopic("lim", [FetchPartition(0, 0, 1 << 20), FetchPartition(1, 0, 1 << 20)])],
                               max_wait_ms=0, max_bytes=5000)
        parts = c.request(request).topics[0].partitions
        total = sum(len(p.records) for p in parts)
        assert 0 < total <= 5000 and len(parts[0].records) > 0


def test_high_watermark_is_the_acknowledged_end(broker_factory):
    """flush policy always: the HW (and what a consumer sees) only covers fsynced data,
    and every acknowledged produce is below it when the ack arrives."""
    broker = broker_factory({"log.flush.policy": "always"})
    with RawClient.to(broker) as c:
        c.create_topic("hw", 1)
        for i in range(20):
            ack = c.produce("hw", 0, batch([b"%d" % i]))
            fetched = c.fetch("hw", 0, 0)
            assert fetched.high_watermark >= ack.base_offset + 1
        latest = c.request(ListOffsetsRequest([ListOffsetsTopic("hw", [ListOffsetsPartition(0, -1)])]))
        assert latest.topics[0].partitions[0].offset == 20
        assert len(values_of(c.fetch("hw", 0, 0).records)) == 20


def test_raw_flood_benchmark_runs(tmp_path):
    """The throughput tool (raw_flood.py) at tiny size: every produced record is fetched."""
    from .raw_flood import run

    produce, fetch = run(0.3, "replicated", tmp_path)
    assert produce["records"] > 0 and fetch["records"] == produce["records"]
