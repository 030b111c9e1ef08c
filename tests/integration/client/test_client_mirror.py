"""Mirror topics between two single-broker "regions" on loopback, through the client
API the mirror service uses: raw fetches from the source, MirrorAppend on the target.
The copy has the source's offsets, timestamps and bytes (all but the partition leader
epoch); a copier restarted from scratch appends nothing twice; producers are refused
on the mirror until it is promoted; bad input gets named errors and no broker trace;
``address_map`` makes every connection go through a proxy."""

from __future__ import annotations

import asyncio

import pytest

from mq.client import Admin, Consumer, OffsetOutOfRange, Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch
from tests.integration.client.mirror_copy import copy_until_caught_up, raw_batches

PARTITIONS = 6
T0 = 1_700_000_000_000
LEADER_EPOCH_END = 16  # bytes 12-15 of a batch hold the partition leader epoch, the target's own


@pytest.fixture
def regions(broker_factory):
    """(east, west): two independent single-broker clusters."""
    return broker_factory(), broker_factory()


async def _produce(bootstrap: str, topic: str, count: int, **config) -> None:
    async with Producer(bootstrap, acks="all", linger_ms=2, **config) as producer:
        futures = [producer.send(topic, value=b"%05d" % i + b"x" * 95, key=b"k%d" % (i % 37),
                                 headers={"h": b"%d" % i}, timestamp_ms=T0 + i) for i in range(count)]
        for future in futures:
            await future


async def _records(bootstrap: str, topic: str) -> list[tuple]:
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
        out: list[tuple] = []
        while len(out) < sum(ends.values()):
            out += [(r.partition, r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                    for r in await consumer.poll(500)]
        return sorted(out)


async def test_copy_is_byte_identical_restart_safe_and_read_only_until_promoted(regions) -> None:
    east, west = regions
    tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
    async with Admin(east.bootstrap) as source, Admin(west.bootstrap) as target:
        await source.create_topic("orders", PARTITIONS)
        await target.create_topic("orders", PARTITIONS, configs={"mirror.source.region": "east"})
        await _produce(east.bootstrap, "orders", 2000)
        await _produce(east.bootstrap, "orders", 1000, compression="lz4")
        counts = await copy_until_caught_up(source, target, tps)
        assert counts["appended"] > 0 and counts["duplicates"] == 0
        for tp in tps:
            assert await raw_batches(source, tp) == await raw_batches(target, tp), tp
        assert await _records(east.bootstrap, "orders") == await _records(west.bootstrap, "orders")

        # a copier restarted with its progress lost resends everything: all duplicates
        resent = 0
        for tp in tps:
            fetched = await source.fetch_raw(tp, 0, 64 * 1024 * 1024)
            result = await target.mirror_append(tp, fetched.records)
            assert result.appended == 0
            resent += result.duplicates
        assert resent == counts["appended"]
        for tp in tps:
            assert await raw_batches(source, tp) == await raw_batches(target, tp), tp

        with pytest.raises(MqError) as refused:
            async with Producer(west.bootstrap, acks="all") as producer:
                await producer.send("orders", value=b"x", partition=0)
        assert refused.value.code == ErrorCode.MIRROR_TOPIC_READ_ONLY
        assert "mirror of region east" in refused.value.message

        await target.alter_configs("orders", delete=["mirror.source.region"])  # promote
        end = (await target.list_offsets({tps[0]: -1}))[tps[0]].offset
        async with Producer(west.bootstrap, acks="all") as producer:
            meta = await producer.send("orders", value=b"written in west", partition=0)
        assert meta.offset == end
        with pytest.raises(MqError) as demoted:
            await target.mirror_append(tps[0], (await source.fetch_raw(tps[0], 0)).records)
        assert demoted.value.code == ErrorCode.NOT_MIRROR_TOPIC
    for broker in regions:
        assert "Traceback" not in broker.stderr_text()


async def test_bad_input_gets_named_errors_and_changes_nothing(regions) -> None:
    _, west = regions
    tp = TopicPartition("mirror", 0)
    batch = build_batch([(b"k", b"v%d" % i, (), T0 + i) for i in range(3)], base_offset=0)
    async with Admin(west.bootstrap, request_timeout_ms=5000) as target:
        await target.create_topic("mirror", 1, configs={"mirror.source.region": "east",
                                                        "max.message.bytes": "4096"})
        await target.create_topic("plain", 1)
        assert (await target.mirror_append(tp, batch)).appended == 1
        corrupt = bytearray(build_batch([(b"k", b"w", (), T0)], base_offset=3))
        corrupt[-1] ^= 1
        big = build_batch([(None, bytes(8000), (), T0)], base_offset=3)
        cases = [
            (bytes(corrupt), ErrorCode.CORRUPT_MESSAGE),
            (b"\x00" * 40, ErrorCode.CORRUPT_MESSAGE),
            (build_batch([(b"k", b"w", (), T0)], base_offset=3) + b"junk", ErrorCode.CORRUPT_MESSAGE),
            (build_batch([(b"k", b"w", (), T0)], base_offset=3) + build_batch([(b"k", b"w", (), T0)], base_offset=9),
             ErrorCode.INVALID_RECORD),
            (big, ErrorCode.RECORD_TOO_LARGE),
            (build_batch([(b"k", b"w", (), T0)], base_offset=50), ErrorCode.MIRROR_OFFSET_GAP),
            (build_batch([(b"k", b"other", (), T0)], base_offset=0), ErrorCode.MIRROR_DIVERGED),
        ]
        for records, code in cases:
            with pytest.raises(MqError) as err:
                await target.mirror_append(tp, records)
            assert err.value.code == code, (code, err.value)
        with pytest.raises(MqError) as err:
            await target.mirror_append(TopicPartition("plain", 0), batch)
        assert err.value.code == ErrorCode.NOT_MIRROR_TOPIC
        with pytest.raises(MqError) as err:
            await target.mirror_truncate(TopicPartition("plain", 0), 0)
        assert err.value.code == ErrorCode.NOT_MIRROR_TOPIC
        with pytest.raises(MqError) as err:
            await target.mirror_append(tp, batch, acks=0)
        assert err.value.code == ErrorCode.INVALID_REQUIRED_ACKS
        with pytest.raises(MqError) as err:
            await target.mirror_append(TopicPartition("mirror", 7), batch)
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC
        assert (await target.list_offsets({tp: -1}))[tp].offset == 3
        assert (await target.fetch_raw(tp, 0)).records[12:16] == b"\x00\x00\x00\x00"  # the target's epoch 0
        with pytest.raises(OffsetOutOfRange) as out_of_range:
            await target.fetch_raw(tp, 100)
        assert (out_of_range.value.log_start_offset, out_of_range.value.high_watermark) == (0, 3)
        assert await target.mirror_truncate(tp, 0) == 0  # a single replica: cut at once
    assert "Traceback" not in west.stderr_text()


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def test_address_map_sends_every_connection_through_the_proxy(broker) -> None:
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        upstream_reader, upstream_writer = await asyncio.open_connection(broker.host, broker.port)
        await asyncio.gather(_forward(reader, upstream_writer), _forward(upstream_reader, writer))

    proxy = await asyncio.start_server(handle, "127.0.0.1", 0)
    proxy_address = f"127.0.0.1:{proxy.sockets[0].getsockname()[1]}"
    mapping = {broker.bootstrap: proxy_address}
    try:
        async with Admin(broker.bootstrap, address_map=mapping) as admin:
            await admin.create_topic("linked", 2)
            async with Producer(broker.bootstrap, address_map=mapping, acks="all") as producer:
                await producer.send("linked", value=b"through the link", partition=1)
            fetched = await admin.fetch_raw(TopicPartition("linked", 1), 0)
            assert b"through the link" in fetched.records and fetched.high_watermark == 1
            dialled = {address for address, _lane in admin._client._connections}
            assert dialled == {("127.0.0.1", int(proxy_address.rsplit(":", 1)[1]))}
        async with Consumer(broker.bootstrap, address_map=mapping, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("linked", 1)])
            records = await consumer.poll(2000)
            assert [r.value for r in records] == [b"through the link"]
            assert {a for a, _ in consumer.cluster._connections} == dialled
        assert len(accepted) >= 3  # admin, producer and consumer all came through it
        with pytest.raises(MqError) as err:
            Admin(broker.bootstrap, address_map={"no-port": proxy_address})
        assert err.value.code == ErrorCode.INVALID_CONFIG and "address_map" in err.value.message
    finally:
        proxy.close()


def test_the_blocking_facade_has_the_mirror_methods(broker) -> None:
    from mq.client import blocking

    tp = TopicPartition("blocking-mirror", 0)
    batch = build_batch([(b"k", b"v%d" % i, (), T0 + i) for i in range(4)], base_offset=0)
    with blocking.Admin(broker.bootstrap) as admin:
        admin.create_topic(tp.topic, 1, configs={"mirror.source.region": "east"})
        result = admin.mirror_append(tp, batch, acks=1)
        assert (result.appended, result.log_end_offset) == (1, 4)
        assert admin.mirror_append(tp, batch).duplicates == 1
        fetched = admin.fetch_raw_many({tp: 0})[tp]
        assert fetched.records[LEADER_EPOCH_END:] == batch[LEADER_EPOCH_END:]
        assert admin.mirror_truncate(tp, 0) == 0
        assert admin.fetch_raw(tp, 0).records == b""
