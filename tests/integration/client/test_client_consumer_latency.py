"""Consumer latency after assign and seeks: nothing may wait out a timeout or a long poll.

Each test times one call against a generous bound (300 ms) that a loaded CI machine
meets easily, while the bugs these tests guard against cost the whole poll timeout
(5 s here) or a broker-held long-poll fetch (``fetch_max_wait_ms``, 3 s here): the
first poll after ``assign`` used to wait its whole timeout because the new topic's
leader was unknown and nothing asked for metadata; seeks did not wake a pending poll,
and a ListOffsets or the next fetch queued behind a long-poll fetch at the broker.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from mq.client import Admin, Consumer, Producer
from mq.core.types import TopicPartition

FAST_MS = 300
POLL_TIMEOUT_MS = 5000
LONG_POLL_MS = 3000  # fetch_max_wait_ms: what a queued request would wait behind
BASE_TS = 1_700_000_000_000


async def _topic_with_records(bootstrap: str, topic: str, count: int = 10) -> TopicPartition:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions=1)
    async with Producer(bootstrap, linger_ms=0) as producer:
        for i in range(count):  # one batch each, so every timestamp is findable
            await producer.send(topic, b"r%d" % i, timestamp_ms=BASE_TS + 1000 * i)
    return TopicPartition(topic, 0)


async def _timed(awaitable) -> tuple[object, float]:
    start = time.perf_counter()
    result = await awaitable
    return result, (time.perf_counter() - start) * 1000


async def _drain_to_end(consumer: Consumer, tp: TopicPartition, end: int) -> None:
    """Read up to ``end``, then poll once more so a long-poll fetch is in flight."""
    deadline = time.monotonic() + 10
    while await consumer.position(tp) < end and time.monotonic() < deadline:
        await consumer.poll(200)
    assert await consumer.position(tp) == end
    assert await consumer.poll(20) == []
    assert consumer.fetcher.in_flight_node(tp) is not None, "no long-poll fetch in flight"


@pytest.mark.parametrize("how", ["seek", "seek_to_beginning", "seek_to_timestamp"])
async def test_first_poll_after_assign_returns_records_at_once(shared_broker, topic_name,
                                                               how) -> None:
    bootstrap = shared_broker.bootstrap
    tp = await _topic_with_records(bootstrap, topic_name)
    async with Consumer(bootstrap, fetch_max_wait_ms=LONG_POLL_MS) as consumer:
        assert consumer.cluster.metadata.leader_for(tp) is None  # the case under test
        consumer.assign([tp])
        if how == "seek":
            consumer.seek(tp, 0)
        elif how == "seek_to_beginning":
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek_to_timestamp(BASE_TS, tp)
        records, ms = await _timed(consumer.poll(timeout_ms=POLL_TIMEOUT_MS))
    assert [r.offset for r in records] == list(range(10))
    assert ms < FAST_MS, f"first poll after assign + {how} took {ms:.0f} ms"


async def test_seek_to_timestamp_then_position_is_prompt(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    tp = await _topic_with_records(bootstrap, topic_name)
    async with Consumer(bootstrap, fetch_max_wait_ms=LONG_POLL_MS) as consumer:
        consumer.assign([tp])
        consumer.seek_to_timestamp(BASE_TS + 4500, tp)
        position, ms = await _timed(consumer.position(tp))
        assert (position, ms < FAST_MS) == (5, True), f"first lookup took {ms:.0f} ms"
        consumer.seek_to_timestamp(BASE_TS + 2500, tp)
        position, ms = await _timed(consumer.position(tp))
        assert (position, ms < FAST_MS) == (3, True), f"second lookup took {ms:.0f} ms"
        await _drain_to_end(consumer, tp, 10)
        # The ListOffsets must not queue behind the long-poll fetch held at the broker.
        consumer.seek_to_timestamp(BASE_TS + 1500, tp)
        position, ms = await _timed(consumer.position(tp))
        assert (position, ms < FAST_MS) == (2, True), f"lookup behind a long poll took {ms:.0f} ms"
        records, ms = await _timed(consumer.poll(timeout_ms=POLL_TIMEOUT_MS))
        assert records[0].offset == 2 and ms < FAST_MS, f"poll after the lookup took {ms:.0f} ms"


@pytest.mark.parametrize("how", ["seek", "seek_to_beginning"])
async def test_seek_during_a_long_poll_fetches_at_once(shared_broker, topic_name, how) -> None:
    bootstrap = shared_broker.bootstrap
    tp = await _topic_with_records(bootstrap, topic_name)
    async with Consumer(bootstrap, auto_offset_reset="earliest",
                        fetch_max_wait_ms=LONG_POLL_MS) as consumer:
        consumer.assign([tp])
        await _drain_to_end(consumer, tp, 10)
        if how == "seek":
            consumer.seek(tp, 3)
        else:
            consumer.seek_to_beginning(tp)
        records, ms = await _timed(consumer.poll(timeout_ms=POLL_TIMEOUT_MS))
        first = 3 if how == "seek" else 0
        assert [r.offset for r in records] == list(range(first, 10))
        assert ms < FAST_MS, f"poll after {how} during a long poll took {ms:.0f} ms"


async def test_a_seek_wakes_a_pending_poll(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    tp = await _topic_with_records(bootstrap, topic_name)
    async with Consumer(bootstrap, auto_offset_reset="latest",
                        fetch_max_wait_ms=LONG_POLL_MS) as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 10
        pending = asyncio.ensure_future(consumer.poll(timeout_ms=POLL_TIMEOUT_MS))
        deadline = time.monotonic() + 5
        while consumer.fetcher.in_flight_node(tp) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.005)  # until the pending poll's fetch is in flight
        assert not pending.done()
        start = time.perf_counter()
        consumer.seek_to_timestamp(BASE_TS + 6500, tp)
        records = await asyncio.wait_for(pending, POLL_TIMEOUT_MS / 1000)
        ms = (time.perf_counter() - start) * 1000
        assert [r.offset for r in records] == [7, 8, 9]
        assert ms < FAST_MS, f"a seek took {ms:.0f} ms to wake the pending poll"


async def test_first_poll_after_assigning_a_topic_created_later(shared_broker, topic_name) -> None:
    """A topic unknown at assign time: poll keeps asking for metadata (spaced by the
    refresh backoff) and fetches once the topic exists."""
    bootstrap = shared_broker.bootstrap
    tp = TopicPartition(topic_name, 0)
    async with Consumer(bootstrap, auto_offset_reset="earliest",
                        fetch_max_wait_ms=LONG_POLL_MS) as consumer:
        consumer.assign([tp])
        assert await consumer.poll(timeout_ms=100) == []
        await _topic_with_records(bootstrap, topic_name, count=3)
        records, ms = await _timed(consumer.poll(timeout_ms=POLL_TIMEOUT_MS))
        assert [r.offset for r in records] == [0, 1, 2]
        # at most a few refresh backoffs (retry_backoff_ms=100), never the poll timeout
        assert ms < 1000, f"poll after the topic appeared took {ms:.0f} ms"
