"""Conflict policies against real broker processes: one-broker regions (east, west, south;
``region.name`` set as `mq up` sets it). Bad conflict configs are refused at create and
alter with nothing written; a key produced outside its home region is refused by the broker
(NOT_HOME_REGION, nothing of the batch appended) or routed home by the producer; keyed
records of a last-writer-wins topic are stamped by the producer, and a missing or malformed
stamp is refused (INVALID_HLC); table views of regions that write the same keys at once, with
skewed clocks, end equal once the copies between them (made by hand, with random delays, as the
active-active mirror will make them) are drained."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from mq.client import Admin, Consumer, Producer
from mq.core.clock import SystemClock
from mq.core.conflict import home_region
from mq.core.errors import ErrorCode, MqError
from mq.core.hlc import Hlc, decode_hlc
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch
from tests.integration.broker.raw import RawClient
from tests.integration.conftest import BrokerProcess, free_port

REGIONS = ("east", "west")  # the home regions of the home-region topics
ALL_REGIONS = ("east", "west", "south")  # the brokers started (south: the three-region table test)
HOME = {"conflict.policy": "home-region", "conflict.home.regions": "east,west"}


@pytest.fixture(scope="module")
def regions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, BrokerProcess]]:
    procs = {name: BrokerProcess(tmp_path_factory.mktemp(name) / "broker-1", free_port(),
                                 configs={"region.name": name}) for name in ALL_REGIONS}
    try:
        for proc in procs.values():
            proc.start()
        yield procs
    finally:
        for proc in procs.values():
            proc.stop()


def keys_of(region: str, n: int) -> list[bytes]:
    return [k for k in (f"key-{i}".encode() for i in range(20 * n)) if home_region(k, REGIONS) == region][:n]


async def read_all(bootstrap: str, topic: str, expected: int, *, partitions: int = 1) -> list:
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        records: list = []
        deadline = asyncio.get_running_loop().time() + 10
        while len(records) < expected and asyncio.get_running_loop().time() < deadline:
            records += await consumer.poll(timeout_ms=200)
        records += await consumer.poll(timeout_ms=200)  # nothing more than expected
        return records


async def test_bad_conflict_configs_are_refused_and_nothing_is_written(regions) -> None:
    async with Admin(regions["east"].bootstrap) as admin:
        for configs, words in [
            ({"conflict.policy": "lww"}, "must be one of none, home-region, last-writer-wins"),
            ({"conflict.policy": "home-region"}, "needs conflict.home.regions"),
            ({**HOME, "conflict.home.map": "eu-:north"},
             "region 'north', which conflict.home.regions=east,west does not name"),
        ]:
            with pytest.raises(MqError) as info:
                await admin.create_topic("refused", configs=configs)
            assert info.value.code is ErrorCode.INVALID_CONFIG and words in info.value.message
        assert "refused" not in await admin.list_topics()
        await admin.create_topic("altered", configs=HOME)
        with pytest.raises(MqError, match="region 'south'"):
            await admin.alter_configs("altered", {"conflict.home.map": "s-:south"})
        with pytest.raises(MqError, match="needs conflict.home.regions"):
            await admin.alter_configs("altered", delete=["conflict.home.regions"])
        entries = {e.name: e.value for e in await admin.describe_configs("altered")}
        assert entries["conflict.home.map"] == "" and entries["conflict.home.regions"] == "east,west"


async def test_the_broker_refuses_a_foreign_key_and_writes_nothing_of_the_batch(regions) -> None:
    east = regions["east"]
    async with Admin(east.bootstrap) as admin:
        await admin.create_topic("orders-raw", configs=HOME)
    mine, theirs = keys_of("east", 1)[0], keys_of("west", 1)[0]
    with RawClient.to(east) as raw:
        answer = raw.produce("orders-raw", 0, build_batch([(mine, b"1", (), 1), (theirs, b"2", (), 1)]))
        assert answer.error_code == ErrorCode.NOT_HOME_REGION
        assert f"key {theirs.decode()!r} of topic orders-raw lives in region west" in answer.error_message
        assert raw.fetch("orders-raw", 0, 0).high_watermark == 0
        forwarded = build_batch([(theirs, b"3", (("mq.origin.region", b"west"),), 1)])
        assert raw.produce("orders-raw", 0, forwarded).error_code == 0  # a mirror's copy, judged by origin
    assert "Traceback" not in east.stderr_text()


async def test_the_producer_refuses_before_sending_or_routes_keys_home(regions) -> None:
    east, west = regions["east"], regions["west"]
    for proc in (east, west):
        async with Admin(proc.bootstrap) as admin:
            await admin.create_topic("orders", partitions=2, configs=HOME)
    mine, theirs = keys_of("east", 50), keys_of("west", 50)
    async with Producer(east.bootstrap, linger_ms=1) as producer:
        await producer.send("orders", b"here", key=mine[0])
        with pytest.raises(MqError) as info:
            producer.send("orders", b"there", key=theirs[0])
        assert info.value.code is ErrorCode.NOT_HOME_REGION and "lives in region west" in info.value.message
        with pytest.raises(MqError, match="lives in region west"):
            await producer.send_many("orders", [(mine[1], b"a"), (theirs[1], b"b")])
    async with Producer(east.bootstrap, linger_ms=1, home_bootstraps={"west": west.bootstrap}) as producer:
        sent = [producer.send("orders", b"v-" + k, key=k) for k in mine[2:] + theirs[2:]]
        await asyncio.gather(*sent)
        many = await producer.send_many("orders", [(k, b"m") for k in (mine[1], theirs[1])])
        assert len(many) == 2
    in_east = await read_all(east.bootstrap, "orders", 50, partitions=2)
    in_west = await read_all(west.bootstrap, "orders", 49, partitions=2)
    assert sorted(r.key for r in in_east) == sorted(mine)
    assert sorted(r.key for r in in_west) == sorted(theirs[1:])


async def test_last_writer_wins_records_are_stamped_and_bad_stamps_refused(regions) -> None:
    east = regions["east"]
    async with Admin(east.bootstrap) as admin:
        await admin.create_topic("prices", configs={"conflict.policy": "last-writer-wins"})

    class Behind(SystemClock):  # a producer whose wall clock is 10 s slow
        def wall_ms(self) -> int:
            return super().wall_ms() - 10_000

    async with Producer(east.bootstrap, linger_ms=1, clock=Behind()) as producer:
        for i in range(20):
            producer.send("prices", str(i).encode(), key=b"k%d" % (i % 3))
        producer.send("prices", b"keyless")
        await producer.flush()
        behind_ms = Behind().wall_ms()
        read_elsewhere = Hlc(behind_ms + 60_000, 7)  # a stamp from a clock a minute ahead
        producer.observe_hlc(read_elsewhere)
        await producer.send("prices", b"after", key=b"k0")
    records = await read_all(east.bootstrap, "prices", 22)
    stamps = [decode_hlc(dict(r.headers)["mq.hlc"]) for r in records if r.key is not None]
    assert len(stamps) == 21 and stamps == sorted(set(stamps))  # strictly increasing
    assert all(abs(s.wall_ms - behind_ms) < 5_000 for s in stamps[:20])  # the producer's (slow) clock
    assert stamps[20] > read_elsewhere  # ordered after what it read, its own clock notwithstanding
    assert [r.headers for r in records if r.key is None] == [()]

    async with Producer(east.bootstrap, hlc="never") as unstamped:
        with pytest.raises(MqError) as info:
            await unstamped.send("prices", b"x", key=b"k")
        assert info.value.code is ErrorCode.INVALID_HLC and "has no mq.hlc header" in info.value.message
    with RawClient.to(east) as raw:
        answer = raw.produce("prices", 0, build_batch([(b"k", b"x", (("mq.hlc", b"12:00"),), 1)]))
        assert answer.error_code == ErrorCode.INVALID_HLC and "mq.hlc='12:00'" in answer.error_message
        assert raw.fetch("prices", 0, 0).high_watermark == 22
    with pytest.raises(MqError, match="hlc must be one of auto, always, never"):
        Producer(east.bootstrap, hlc="sometimes")


# ------------------------------------------------------------ table views

async def mirror_by_hand(source: BrokerProcess, target: BrokerProcess, topic: str, origin: str,
                         count: int, partitions: int) -> None:
    """What the active-active mirror does (until it lands here): copy ``topic`` of the source
    region into ``<origin>.<topic>`` of the target, same partitions, timestamps and headers,
    plus the origin header."""
    records = await read_all(source.bootstrap, topic, count, partitions=partitions)
    assert len(records) == count
    async with Admin(target.bootstrap) as admin:
        await admin.create_topic(f"{origin}.{topic}", partitions=partitions)
    async with Producer(target.bootstrap, linger_ms=2) as producer:
        await asyncio.gather(*[
            producer.send(f"{origin}.{topic}", r.value, key=r.key, partition=r.partition, timestamp_ms=r.timestamp,
                          headers=(*r.headers, ("mq.origin.region", origin.encode())))
            for r in records])


async def test_table_views_of_two_regions_converge_under_last_writer_wins(regions) -> None:
    from mq.client import TableView

    east, west = regions["east"], regions["west"]
    lww = {"conflict.policy": "last-writer-wins", "conflict.home.regions": "east,west"}
    for proc in (east, west):
        async with Admin(proc.bootstrap) as admin:
            await admin.create_topic("accounts", partitions=3, configs=lww)

    class Skewed(SystemClock):
        def __init__(self, skew_ms: int) -> None:
            self.skew_ms = skew_ms

        def wall_ms(self) -> int:
            return super().wall_ms() + self.skew_ms

    keys = [f"acct-{i}".encode() for i in range(200)]
    async with Producer(east.bootstrap, linger_ms=2, clock=Skewed(+1_500)) as pe, \
            Producer(west.bootstrap, linger_ms=2, clock=Skewed(-1_500)) as pw:
        for i, key in enumerate(keys):  # the same keys, concurrently, in both regions
            pe.send("accounts", None if i % 25 == 0 else b"east-%d" % i, key=key)
            pw.send("accounts", b"west-%d" % i, key=key)
        await asyncio.gather(pe.flush(), pw.flush())

    async with TableView(west.bootstrap, "accounts", discover_interval_ms=200) as west_table, \
            TableView(east.bootstrap, "accounts", discover_interval_ms=200) as east_table:
        await east_table.catch_up()
        assert east_table.region == "east" and east_table.policy.value == "last-writer-wins"
        assert len(east_table) == 200 - 8  # east's own writes: 8 tombstones
        await asyncio.gather(mirror_by_hand(east, west, "accounts", "east", 200, 3),
                             mirror_by_hand(west, east, "accounts", "west", 200, 3))
        await asyncio.gather(west_table.catch_up(), east_table.catch_up())
        assert sorted(west_table.sources) == ["accounts", "east.accounts"]
        assert west_table.digest() == east_table.digest()
        # east's clock is 3 s ahead of west's: its stamps win every key, tombstones included
        assert west_table.items() == {k: b"east-%d" % i for i, k in enumerate(keys) if i % 25}
        assert west_table.entry(keys[0]).value is None and west_table.entry(keys[0]).region == "east"
        assert west_table.stats.superseded + west_table.stats.applied == 400


async def delayed_mirror(source: BrokerProcess, target: BrokerProcess, topic: str, origin: str, count: int,
                         partitions: int, rng: random.Random) -> None:
    """A stand-in for the active-active mirror while records are still being written: copy
    ``topic`` into ``<origin>.<topic>`` of the target as it grows, each fetched chunk after a
    random delay (per partition order kept, partitions interleaved as the delays fall)."""
    copied = 0
    async with Consumer(source.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=20,
                        max_poll_records=50) as consumer, Producer(target.bootstrap, linger_ms=1) as producer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = asyncio.get_running_loop().time() + 60
        while copied < count:
            assert asyncio.get_running_loop().time() < deadline, f"{origin}->{target}: {copied} of {count}"
            chunk = await consumer.poll(timeout_ms=100)
            await asyncio.sleep(rng.uniform(0.0, 0.08))
            await asyncio.gather(*[
                producer.send(f"{origin}.{topic}", r.value, key=r.key, partition=r.partition, timestamp_ms=r.timestamp,
                              headers=(*r.headers, ("mq.origin.region", origin.encode())))
                for r in chunk])
            copied += len(chunk)


async def test_three_regions_writing_the_same_1000_keys_converge(regions) -> None:
    from mq.client import TableView

    rng = random.Random(11)
    topic, partitions, keys = "balances", 3, [f"acct-{i:04d}".encode() for i in range(1_000)]
    configs = {"conflict.policy": "last-writer-wins", "conflict.home.regions": ",".join(ALL_REGIONS)}
    for name, proc in regions.items():
        async with Admin(proc.bootstrap) as admin:
            await admin.create_topic(topic, partitions=partitions, configs=configs)
            for other in ALL_REGIONS:
                if other != name:
                    await admin.create_topic(f"{other}.{topic}", partitions=partitions)

    class Skewed(SystemClock):
        def __init__(self, skew_ms: int) -> None:
            self.skew_ms = skew_ms

        def wall_ms(self) -> int:
            return super().wall_ms() + self.skew_ms

    async def write(name: str, skew_ms: int) -> None:
        order = list(keys)
        random.Random(name).shuffle(order)
        async with Producer(regions[name].bootstrap, linger_ms=2, clock=Skewed(skew_ms)) as producer:
            for i, key in enumerate(order):
                producer.send(topic, None if i % 50 == 0 else f"{name}-{i}".encode(), key=key)
                if i % 100 == 0:
                    await asyncio.sleep(0.01)  # the three regions' writes interleave
            await producer.flush()

    views = {name: TableView(proc.bootstrap, topic, discover_interval_ms=200) for name, proc in regions.items()}
    for view in views.values():
        await view.start()  # reading while the writes and the copies happen
    try:
        copies = [delayed_mirror(regions[src], regions[dst], topic, src, 1_000, partitions, random.Random(rng.random()))
                  for src in ALL_REGIONS for dst in ALL_REGIONS if src != dst]
        await asyncio.gather(write("east", +400), write("west", -300), write("south", 0), *copies)
        for view in views.values():
            await view.catch_up()
        digests = {name: view.digest() for name, view in views.items()}
        assert len(set(digests.values())) == 1, digests
        table = views["east"].table
        assert len(table.entries) == 1_000 and all(v.stats.applied + v.stats.superseded == 3_000
                                                  for v in views.values())
        assert {e.region for e in table.entries.values()} <= set(ALL_REGIONS)
        # every row is the write with the greatest (stamp, region) of the three, as written
        best: dict[bytes, tuple] = {}
        for name, proc in regions.items():
            for r in await read_all(proc.bootstrap, topic, 1_000, partitions=partitions):
                version = (decode_hlc(dict(r.headers)["mq.hlc"]), name)
                best[r.key] = max(best.get(r.key, version), version)
        assert {k: (e.hlc, e.region) for k, e in table.entries.items()} == best
    finally:
        for view in views.values():
            await view.close()
