"""Consumer groups end to end: Consumer(group_id=...) against a real broker process.

Each test uses its own topic and group on one broker started with fast group settings
(no initial rebalance delay, short minimum session)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator

import pytest

from mq.client import Admin, Consumer, OffsetAndMetadata, Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from tests.integration.conftest import BrokerProcess, free_port

CONFIGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500",
           "offsets.topic.num.partitions": "3"}
FAST = {"auto_offset_reset": "earliest", "fetch_max_wait_ms": 100, "session_timeout_ms": 6_000,
        "heartbeat_interval_ms": 200, "retry_backoff_ms": 50, "auto_commit_interval_ms": 500}
_groups = itertools.count()


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("groups") / "broker", free_port(), configs=dict(CONFIGS))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def group_name(topic_name: str) -> str:
    return f"g-{topic_name}-{next(_groups)}"


async def create(bootstrap: str, topic: str, partitions: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions=partitions)


async def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, *, start: int = 0) -> None:
    async with Producer(bootstrap, linger_ms=2) as producer:
        for p in range(partitions):
            await producer.send_many(topic, [(None, b"%d-%d" % (p, start + i)) for i in range(per_partition)],
                                     partition=p)


async def until(condition: Callable[[], bool], timeout_s: float = 20.0, what: str = "") -> None:
    """Poll a condition with a deadline (the members run in their own tasks)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        await asyncio.sleep(0.02)


class Member:
    """One group consumer polling in a task, recording (generation, record) and callbacks."""

    def __init__(self, bootstrap: str, group: str, topics: list[str] | None = None, *,
                 pattern: str | None = None, **config: object) -> None:
        self.topics, self.pattern = topics, pattern
        self.records: list[tuple[int, object]] = []
        self.received_at: list[tuple[float, TopicPartition]] = []
        self.events: list[tuple[str, list[TopicPartition]]] = []
        self._stop = False
        self.task: asyncio.Task | None = None
        self.consumer = Consumer(
            bootstrap, group_id=group, on_assign=lambda tps: self.events.append(("assign", tps)),
            on_revoke=lambda tps: self.events.append(("revoke", tps)),
            on_lost=lambda tps: self.events.append(("lost", tps)), **{**FAST, **config})

    async def start(self) -> Member:
        await self.consumer.start()
        self.consumer.subscribe(self.topics, pattern=self.pattern)
        self.task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _run(self) -> None:
        while not self._stop:
            records = await self.consumer.poll(100)
            generation = self.consumer.group_metadata().generation_id
            now = time.monotonic()
            for r in records:
                self.records.append((generation, r))
                self.received_at.append((now, TopicPartition(r.topic, r.partition)))

    async def stop(self, *, close: bool = True) -> None:
        self._stop = True
        if self.task is not None:
            await self.task
        if close:
            await self.consumer.close()

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self.consumer.assignment())

    def kinds(self, kind: str) -> list[list[TopicPartition]]:
        return [tps for k, tps in self.events if k == kind]


def check_exactly_once(members: list[Member], expected: int) -> None:
    seen = Counter((r.partition, r.offset) for m in members for _, r in m.records)
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert not duplicates, f"records read twice: {sorted(duplicates)[:10]}"
    assert len(seen) == expected, f"read {len(seen)} distinct records, expected {expected}"


def check_one_owner_per_generation(members: list[Member]) -> None:
    owners: dict[tuple[int, int], set[int]] = defaultdict(set)
    for i, m in enumerate(members):
        for generation, r in m.records:
            assert generation >= 0, "records handed out outside a generation"
            owners[(generation, r.partition)].add(i)
    shared = {k: v for k, v in owners.items() if len(v) > 1}
    assert not shared, f"partitions read by two members in one generation: {shared}"


def total(members: list[Member]) -> int:
    return sum(len(m.records) for m in members)


async def test_three_consumers_share_twelve_partitions_exactly_once(group_broker, topic_name, group_name):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 12)
    await produce(bootstrap, topic_name, 12, 50)
    members = [Member(bootstrap, group_name, [topic_name])]
    await members[0].start()
    await until(lambda: total(members) >= 200, what="the first member reads")
    members += [await Member(bootstrap, group_name, [topic_name]).start() for _ in range(2)]
    await until(lambda: all(len(m.assignment) == 4 for m in members) and total(members) >= 600,
                what="three members with four partitions each")
    await produce(bootstrap, topic_name, 12, 50, start=50)
    await until(lambda: total(members) >= 1200, what="all 1200 records")
    final = [m.assignment for m in members]
    for m in members:
        await m.stop()
    check_exactly_once(members, 1200)
    check_one_owner_per_generation(members)
    assert sorted(tp.partition for assignment in final for tp in assignment) == list(range(12))
    first = members[0]
    assert first.kinds("assign")[0] == [TopicPartition(topic_name, p) for p in range(12)]
    assert first.kinds("revoke"), "an eager member revokes before rejoining"
    # close committed every position: the group's offsets are the log ends
    async with Consumer(bootstrap, group_id=group_name, **FAST) as probe:
        committed = await probe.committed([TopicPartition(topic_name, p) for p in range(12)])
    assert {tp.partition: om.offset for tp, om in committed.items() if om} == {p: 100 for p in range(12)}


@pytest.mark.parametrize("auto_commit", [False, True])
async def test_restart_reads_no_record_twice_and_skips_none(group_broker, topic_name, group_name, auto_commit):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 1)
    await produce(bootstrap, topic_name, 1, 100)
    tp = TopicPartition(topic_name, 0)
    first: list = []
    async with Consumer(bootstrap, group_id=group_name, enable_auto_commit=auto_commit, **FAST) as c:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        while len(first) < 37 and time.monotonic() < deadline:
            first += await c.poll(200, max_records=37 - len(first))
        assert len(first) == 37
        if not auto_commit:
            await c.commit()
            assert (await c.committed([tp])) == {tp: OffsetAndMetadata(37)}
    second: list = []
    async with Consumer(bootstrap, group_id=group_name, **FAST) as c:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        while len(second) < 63 and time.monotonic() < deadline:
            second += await c.poll(200)
        assert await c.position(tp) == 100
    assert [r.offset for r in first] == list(range(37))
    assert [r.offset for r in second] == list(range(37, 100))


async def test_cooperative_rebalance_keeps_unaffected_partitions_consuming(group_broker, topic_name, group_name):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 12)
    stop = asyncio.Event()
    produced = 0

    async def keep_producing() -> None:
        nonlocal produced
        async with Producer(bootstrap, linger_ms=1) as producer:
            while not stop.is_set():
                await producer.send_many(topic_name, [(None, b"x")], partition=produced % 12)
                produced += 1
                await asyncio.sleep(0.002)

    producer_task = asyncio.get_running_loop().create_task(keep_producing())
    a = await Member(bootstrap, group_name, [topic_name], assignor="cooperative-sticky").start()
    await until(lambda: len(a.assignment) == 12 and len(a.records) >= 100, what="a owns all twelve")
    b_started = time.monotonic()
    b = await Member(bootstrap, group_name, [topic_name], assignor="cooperative-sticky").start()
    await until(lambda: len(b.assignment) == 6 and len(a.assignment) == 6, what="six partitions each")
    b_assigned = time.monotonic()
    kept, moved = set(a.assignment), set(b.assignment)
    await asyncio.sleep(0.3)  # let both read what was produced during the hand-off
    stop.set()
    await producer_task
    await until(lambda: total([a, b]) >= produced, what="every produced record read")
    for m in (a, b):
        await m.stop()
    # a revoked exactly what moved to b, once; it never lost or re-got what it kept
    assert [set(tps) for tps in a.kinds("revoke")[:1]] == [moved]
    assert not a.kinds("lost")
    assert all(not (set(tps) & kept) for tps in a.kinds("assign")[1:])
    during = {tp for t, tp in a.received_at if b_started <= t <= b_assigned}
    assert during & kept, "a stopped consuming its kept partitions during the rebalance"
    check_exactly_once([a, b], produced)
    check_one_owner_per_generation([a, b])


async def test_static_member_restart_keeps_its_assignment(group_broker, topic_name, group_name):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 6)
    a = await Member(bootstrap, group_name, [topic_name], group_instance_id="a").start()
    b = await Member(bootstrap, group_name, [topic_name], group_instance_id="b").start()
    await until(lambda: len(a.assignment) == 3 and len(b.assignment) == 3, what="three partitions each")
    before = a.assignment
    generation = b.consumer.group_metadata().generation_id
    b_events = len(b.events)
    await a.stop()  # a static member sends no LeaveGroup
    a2 = await Member(bootstrap, group_name, [topic_name], group_instance_id="a").start()
    await until(lambda: len(a2.assignment) == 3, what="a's restart joins")
    assert a2.assignment == before
    assert a2.consumer.group_metadata().generation_id == generation
    await asyncio.sleep(0.5)  # several heartbeats of b: none may report a rebalance
    assert b.events[b_events:] == [] and b.consumer.group_metadata().generation_id == generation
    for m in (a2, b):
        await m.stop()


async def test_fenced_static_member_commit_raises(group_broker, topic_name, group_name):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 2)
    await produce(bootstrap, topic_name, 2, 10)
    zombie = await Member(bootstrap, group_name, [topic_name], group_instance_id="z",
                          enable_auto_commit=False).start()
    await until(lambda: len(zombie.records) == 20, what="the first instance reads")
    await zombie.stop(close=False)
    successor = await Member(bootstrap, group_name, [topic_name], group_instance_id="z").start()
    await until(lambda: len(successor.assignment) == 2, what="the new instance takes over")
    with pytest.raises(MqError) as err:
        await zombie.consumer.commit()
    assert err.value.code in (ErrorCode.FENCED_INSTANCE_ID, ErrorCode.ILLEGAL_GENERATION,
                              ErrorCode.UNKNOWN_MEMBER_ID)
    await zombie.consumer.close()
    await successor.stop()


async def test_poll_timeout_leaves_then_commit_fails_and_next_poll_rejoins(group_broker, topic_name, group_name):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 2)
    await produce(bootstrap, topic_name, 2, 5)
    lost: list = []
    async with Consumer(bootstrap, group_id=group_name, max_poll_interval_ms=600,
                        enable_auto_commit=False, on_lost=lost.append, **FAST) as c:
        c.subscribe([topic_name])
        records: list = []
        deadline = time.monotonic() + 20
        while len(records) < 10 and time.monotonic() < deadline:
            records += await c.poll(100)
        generation = c.group_metadata().generation_id
        assert generation >= 1
        await until(lambda: c.group_metadata().generation_id == -1, what="leaving after the poll timeout")
        with pytest.raises(MqError) as err:
            await c.commit({TopicPartition(topic_name, 0): 5})
        assert err.value.code == ErrorCode.ILLEGAL_GENERATION
        deadline = time.monotonic() + 20
        while (len(c.assignment()) < 2 or c.group_metadata().generation_id <= generation) \
                and time.monotonic() < deadline:
            await c.poll(100)
        assert len(c.assignment()) == 2 and c.group_metadata().generation_id > generation
        assert [sorted(tp.partition for tp in tps) for tps in lost] == [[0, 1]]


async def test_pattern_subscription_assigns_matching_topics(group_broker, topic_name, group_name):
    bootstrap = group_broker.bootstrap
    prefix = topic_name
    for suffix, parts in (("a", 2), ("b", 1)):
        await create(bootstrap, f"{prefix}.{suffix}", parts)
    await create(bootstrap, f"other-{prefix}", 1)
    m = await Member(bootstrap, group_name, pattern=rf"{prefix}\..*").start()
    await until(lambda: len(m.assignment) == 3, what="three matching partitions")
    assert {tp.topic for tp in m.assignment} == {f"{prefix}.a", f"{prefix}.b"}
    await produce(bootstrap, f"{prefix}.b", 1, 4)
    await until(lambda: len(m.records) == 4, what="records of a matched topic")
    await m.stop()


async def test_commit_async_callback_and_metadata(group_broker, topic_name, group_name):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 1)
    await produce(bootstrap, topic_name, 1, 10)
    tp = TopicPartition(topic_name, 0)
    async with Consumer(bootstrap, group_id=group_name, enable_auto_commit=False, **FAST) as c:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        got: list = []
        while len(got) < 10 and time.monotonic() < deadline:
            got += await c.poll(100)
        seen: list = []
        await c.commit_async({tp: OffsetAndMetadata(4, "half")}, callback=lambda o, e: seen.append((o, e)))
        assert seen == [({tp: OffsetAndMetadata(4, "half")}, None)]
        assert (await c.committed([tp]))[tp] == OffsetAndMetadata(4, "half")
        with pytest.raises(MqError) as err:
            await c.commit({tp: OffsetAndMetadata(5, "m" * 10_000)})
        assert err.value.code == ErrorCode.OFFSET_METADATA_TOO_LARGE
        lag = c.metrics()
        assert lag["records_lag"] == {tp: 0} and lag["generation_id"] >= 1


def test_blocking_consumer_group_surface(group_broker, topic_name, group_name):
    from mq.client import blocking

    bootstrap = group_broker.bootstrap
    with blocking.Admin(bootstrap) as admin:
        admin.create_topic(topic_name, partitions=2)
    with blocking.Producer(bootstrap) as producer:
        for p in range(2):
            producer.send_many(topic_name, [(None, b"v")] * 5, partition=p)
    assigned: list = []
    with blocking.Consumer(bootstrap, group_id=group_name, enable_auto_commit=False,
                           on_assign=assigned.extend, **FAST) as c:
        c.subscribe(topic_name)
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got += c.poll(100)
        assert len(got) == 10 and sorted(tp.partition for tp in assigned) == [0, 1]
        c.commit()
        tps = [TopicPartition(topic_name, p) for p in range(2)]
        assert c.committed(tps) == {tp: OffsetAndMetadata(5) for tp in tps}
        c.commit_async({tps[0]: 3}).result(10)
        assert c.committed(tps[:1]) == {tps[0]: OffsetAndMetadata(3)}
        assert c.group_metadata().generation_id >= 1 and c.subscription() == [topic_name]
        assert c.metrics()["records_lag"] == {tp: 0 for tp in tps}


async def test_callback_error_propagates_from_poll_with_the_assignment_in_place(group_broker, topic_name,
                                                                                group_name):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 2)
    await produce(bootstrap, topic_name, 2, 3)
    calls: list = []

    def on_assign(tps: list[TopicPartition]) -> None:
        calls.append(tps)
        if len(calls) == 1:
            raise RuntimeError("application bug")

    async with Consumer(bootstrap, group_id=group_name, on_assign=on_assign, **FAST) as c:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        with pytest.raises(RuntimeError):
            while time.monotonic() < deadline:
                await c.poll(100)
        assert len(c.assignment()) == 2
        got: list = []
        while len(got) < 6 and time.monotonic() < deadline:
            got += await c.poll(100)
        assert len(got) == 6 and len(calls) == 1


async def test_unsubscribe_leaves_so_the_other_member_takes_over(group_broker, topic_name, group_name):
    bootstrap = group_broker.bootstrap
    await create(bootstrap, topic_name, 2)
    a = await Member(bootstrap, group_name, [topic_name]).start()
    b = await Member(bootstrap, group_name, [topic_name]).start()
    await until(lambda: len(a.assignment) == 1 and len(b.assignment) == 1, what="one partition each")
    a.consumer.unsubscribe()
    assert a.consumer.assignment() == [] and a.consumer.subscription() is None
    await until(lambda: len(b.assignment) == 2, timeout_s=4, what="b takes both (well before the session timeout)")
    assert a.kinds("revoke")[-1:] and len(a.kinds("revoke")[-1]) == 1
    a.consumer.assign([TopicPartition(topic_name, 0)])  # manual assignment is allowed again
    for m in (a, b):
        await m.stop()
