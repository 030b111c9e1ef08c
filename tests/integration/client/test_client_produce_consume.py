"""Producer and Consumer against a real broker process."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from mq.client import Admin, Consumer, Producer
from mq.client.internals.partitioner import murmur2
from mq.core.errors import ErrorCode, MqError
from mq.core.types import CompressionType, TimestampType, TopicPartition
from mq.protocol.messages import FetchPartition, FetchRequest, FetchTopic
from mq.protocol.record_batch import read_header
from tests.integration.conftest import free_port


async def create(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions=partitions, configs=configs)


async def consume_all(bootstrap: str, tps: list[TopicPartition], count: int,
                      timeout_s: float = 10.0, **config) -> list:
    out = []
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                        **config) as consumer:
        consumer.assign(tps)
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            out += await consumer.poll(200)
    return out


async def test_round_trip_keys_values_headers(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name)
    async with Producer(bootstrap, linger_ms=1) as producer:
        first = await producer.send(topic_name, b"v0", key=b"k0", headers={"source": b"web"})
        futures = [producer.send(topic_name, b"v%d" % i, key=b"k%d" % i,
                                 headers=[("n", b"%d" % i)]) for i in range(1, 50)]
        tombstone = producer.send(topic_name, None, key=b"gone")
        metas = [first] + [await f for f in futures] + [await tombstone]
    assert [m.offset for m in metas] == list(range(51))
    assert {(m.topic, m.partition) for m in metas} == {(topic_name, 0)}
    records = await consume_all(bootstrap, [TopicPartition(topic_name, 0)], 51)
    assert [(r.offset, r.key, r.value) for r in records[:2]] == [(0, b"k0", b"v0"), (1, b"k1", b"v1")]
    assert records[0].headers == (("source", b"web"),) and records[7].headers == (("n", b"7"),)
    assert records[50].value is None and records[50].key == b"gone"
    assert records[0].timestamp == metas[0].timestamp
    assert records[0].timestamp_type == TimestampType.CREATE_TIME


async def test_keys_go_to_their_murmur2_partition(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name, partitions=3)
    keys = [b"user-%d" % i for i in range(150)]
    async with Producer(bootstrap) as producer:
        metas = [await f for f in [producer.send(topic_name, b"x", key=k) for k in keys]]
        bulk = await producer.send_many(topic_name, [(k, b"y") for k in keys])
    expected = [(murmur2(k) & 0x7FFFFFFF) % 3 for k in keys]
    assert [m.partition for m in metas] == expected
    assert [m.partition for m in bulk] == expected
    assert set(Counter(expected)) == {0, 1, 2}  # the test itself spans every partition
    records = await consume_all(bootstrap, [TopicPartition(topic_name, p) for p in range(3)], 300)
    for record in records:
        assert record.partition == (murmur2(record.key) & 0x7FFFFFFF) % 3
    # per-record and bulk metadata name the offsets the consumer sees
    by_offset = {(r.partition, r.offset): r.value for r in records}
    assert all(by_offset[(m.partition, m.offset)] == b"x" for m in metas)
    assert all(by_offset[(m.partition, m.offset)] == b"y" for m in bulk)


async def test_keyless_records_stick_then_spread(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name, partitions=3)
    async with Producer(bootstrap, batch_size=2000, linger_ms=1000) as producer:
        futures = [producer.send(topic_name, b"z" * 100) for _ in range(200)]
        await producer.flush()
        metas = [await f for f in futures]
    partitions = [m.partition for m in metas]
    switches = sum(1 for a, b in zip(partitions, partitions[1:]) if a != b)
    assert len(set(partitions)) > 1  # not always partition 0
    assert switches < 30  # sticky: runs of a batch, not round-robin


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", None])
async def test_compression_codecs(shared_broker, topic_name, codec) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name)
    values = [b"value-%d " % i * 20 for i in range(300)]
    async with Producer(bootstrap, compression=codec) as producer:
        for f in [producer.send(topic_name, v) for v in values]:
            await f
        request = FetchRequest(topics=[FetchTopic(topic_name, [FetchPartition(0, 0)])])
        response = await producer.cluster.request_any(request)
    stored = read_header(response.topics[0].partitions[0].records)
    assert stored.compression == CompressionType.parse(codec)
    records = await consume_all(bootstrap, [TopicPartition(topic_name, 0)], 300)
    assert [r.value for r in records] == values


async def test_dead_first_bootstrap_address_still_works(shared_broker, topic_name) -> None:
    dead = f"127.0.0.1:{free_port()}"
    bootstrap = f"{dead},{shared_broker.bootstrap}"
    await create(bootstrap, topic_name)
    for seed in range(4):  # whichever address the rotation tries first
        async with Producer(bootstrap, seed=seed) as producer:
            meta = await producer.send(topic_name, b"via-%d" % seed)
        assert meta.offset == seed
    with pytest.raises(MqError) as err:
        async with Admin(dead):
            pass
    assert err.value.code == ErrorCode.NETWORK_EXCEPTION and dead in str(err.value)


async def test_seek_to_timestamp_beginning_end(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name)
    base = 1_700_000_000_000
    async with Producer(bootstrap) as producer:
        for i in range(10):  # separate batches, so every timestamp is findable
            await producer.send(topic_name, b"t%d" % i, timestamp_ms=base + 1000 * i)
    tp = TopicPartition(topic_name, 0)
    async with Consumer(bootstrap, fetch_max_wait_ms=50) as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 10  # auto_offset_reset=latest
        consumer.seek_to_timestamp(base + 4500, tp)
        assert await consumer.position(tp) == 5
        records = await consumer.poll(2000)
        assert records[0].offset == 5 and records[0].timestamp == base + 5000
        consumer.seek_to_beginning()
        assert await consumer.position(tp) == 0
        consumer.seek_to_timestamp(base + 100_000, tp)  # after every record: the end
        assert await consumer.position(tp) == 10
        consumer.seek(tp, 8)
        assert [r.offset for r in await consumer.poll(2000)] == [8, 9]
        assert await consumer.position(tp) == 10 and consumer.highwater(tp) == 10
        assert await consumer.end_offsets([tp]) == {tp: 10}
        assert await consumer.partitions_for(topic_name) == [0]


async def test_poll_waits_then_returns_new_records(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name)
    tp = TopicPartition(topic_name, 0)
    async with Consumer(bootstrap, fetch_max_wait_ms=200, max_poll_records=7) as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 0  # "latest" resolved before anything is sent
        assert await consumer.poll(100) == []
        async with Producer(bootstrap) as producer:
            await producer.send_many(topic_name, [(None, b"n%d" % i) for i in range(20)])
        got = []
        deadline = time.monotonic() + 5
        while len(got) < 20 and time.monotonic() < deadline:
            batch = await consumer.poll(500)
            assert len(batch) <= 7
            got += batch
        assert [r.offset for r in got] == list(range(20))


async def test_out_of_range_resets_and_records_a_gap(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name)
    tp = TopicPartition(topic_name, 0)
    async with Producer(bootstrap) as producer:
        for i in range(3):
            await producer.send_many(topic_name, [(None, b"r")] * 10)
    async with Admin(bootstrap) as admin:
        assert await admin.delete_records({tp: 20}) == {tp: 20}
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 5)
        got = []
        deadline = time.monotonic() + 5
        while len(got) < 10 and time.monotonic() < deadline:
            got += await consumer.poll(200)
        assert got[0].offset == 20
        assert [(g.expected_offset, g.next_offset) for g in consumer.gaps] == [(5, 20)]
    async with Consumer(bootstrap, auto_offset_reset="none", fetch_max_wait_ms=50) as strict:
        strict.assign([tp])
        strict.seek(tp, 5)
        with pytest.raises(MqError) as err:
            for _ in range(20):
                await strict.poll(200)
        assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_acks_zero_and_all(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name)
    async with Producer(bootstrap, acks=0) as producer:
        metas = [await f for f in [producer.send(topic_name, b"fire-%d" % i) for i in range(20)]]
    assert {m.offset for m in metas} == {-1}
    async with Producer(bootstrap, acks="all") as producer:
        meta = await producer.send(topic_name, b"last")
    assert meta.offset == 20  # the acks=0 records were all written before it
    records = await consume_all(bootstrap, [TopicPartition(topic_name, 0)], 21)
    assert [r.value for r in records[:2]] == [b"fire-0", b"fire-1"]


async def test_unknown_topic_and_bad_partition_fail_clearly(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name, partitions=2)
    async with Producer(bootstrap, max_block_ms=300) as producer:
        with pytest.raises(MqError) as err:
            await producer.send("no-such-topic-" + topic_name, b"x")
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC
        await producer.send(topic_name, b"warm")
        with pytest.raises(MqError) as err:
            producer.send(topic_name, b"x", partition=2)
        assert err.value.code == ErrorCode.INVALID_PARTITIONS
        with pytest.raises(MqError) as err:
            await producer.send(topic_name, b"x" * 2_000_000)
        assert err.value.code == ErrorCode.RECORD_TOO_LARGE


async def test_send_many_is_ordered_with_metadata(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name)
    records = [(None, b"%06d" % i) for i in range(5000)]
    async with Producer(bootstrap, batch_size=16 * 1024) as producer:
        metas = await producer.send_many(topic_name, records, partition=0)
        # 5000 records of ~18 estimated bytes: cut into batches of about batch_size
        assert 5 <= producer.sender.stats["batches"] <= 7
        with_headers = await producer.send_many(topic_name, [(b"k", b"h", {"x": b"1"})])
    assert len(metas) == 5000 and [m.offset for m in metas] == list(range(5000))
    assert metas[-1].offset == 4999 and metas[1234].offset == 1234
    assert with_headers[0].offset == 5000
    got = await consume_all(bootstrap, [TopicPartition(topic_name, 0)], 5001)
    assert [r.value for r in got[:5000]] == [v for _, v in records]
    assert got[5000].headers == (("x", b"1"),)


async def test_send_batch_appends_one_batch_with_each_records_own_timestamp(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    await create(bootstrap, topic_name, partitions=2)
    records = [(b"k%d" % i, b"v%d" % i, (("n", b"%d" % i),), 1_000_000 + 7 * i) for i in range(40)]
    async with Producer(bootstrap, retries=0, batch_size=128) as producer:  # batch_size does not split it
        first = await producer.send_batch(topic_name, 1, records)
        second = await producer.send_batch(topic_name, 1, records[:3])
        with pytest.raises(MqError) as refused:
            await producer.send_batch(topic_name, 2, records)
        assert refused.value.code == ErrorCode.INVALID_PARTITIONS
    assert (first, second) == (0, 40)
    tp = TopicPartition(topic_name, 1)
    got = await consume_all(bootstrap, [tp], 43)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got[:40]] == [
        (i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(records)]
    async with Admin(bootstrap) as admin:
        raw = await admin.fetch_raw(tp, 0)
    bases = []
    pos = 0
    while pos < len(raw.records):
        header = read_header(raw.records, pos)
        bases.append(header.base_offset)
        pos += header.size
    assert bases == [0, 40]  # one batch per call
