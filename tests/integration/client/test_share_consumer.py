"""Share groups against a real broker process: many members on one partition, acks,
redelivery after a lock expires, dead letters, bad acknowledgements."""

from __future__ import annotations

import asyncio

import pytest

from mq.client import Admin, Consumer, Producer
from mq.client.share_consumer import ShareConsumer
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol import share_messages as s

CONFIGS = {"share.record.lock.duration.ms": "1500", "share.delivery.attempt.limit": "3",
           "share.session.timeout.ms": "6000", "share.heartbeat.interval.ms": "500",
           "offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "1"}


@pytest.fixture
def share_broker(broker_factory):
    return broker_factory(CONFIGS)


async def _produce(bootstrap: str, topic: str, n: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, 1, 1)
    async with Producer(bootstrap, acks="all") as p:
        for i in range(n):
            p.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
        await p.flush()


async def read_partition(bootstrap: str, topic: str) -> list:
    """Every record of partition 0, from offset 0: an independent reader."""
    out: list = []
    async with Consumer(bootstrap) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning(TopicPartition(topic, 0))
        empty = 0
        while empty < 3:
            records = await c.poll(timeout_ms=300)
            out.extend(records)
            empty = 0 if records else empty + 1
    return out


def test_members_share_one_partition_and_every_record_is_accepted_once(share_broker):
    async def run() -> None:
        b = share_broker.bootstrap
        await _produce(b, "jobs", 300)
        seen: dict[str, list[str]] = {}
        consumers = [ShareConsumer(b, group_id="w", topics=["jobs"], auto_offset_reset="earliest",
                                   max_poll_records=20, client_id=f"c{i}") for i in range(3)]
        for c in consumers:
            await c.start()

        async def work(c: ShareConsumer) -> None:
            idle = 0
            while idle < 5:
                records = await c.poll(timeout_ms=200)
                idle = 0 if records else idle + 1
                for r in records:
                    seen.setdefault(r.value.decode(), []).append(c.member_id)
                    c.acknowledge(r, "accept")
                await asyncio.sleep(0)
            await c.commit()

        await asyncio.gather(*(work(c) for c in consumers))
        assert sorted(seen) == sorted(f"v{i}" for i in range(300))
        assert all(len(v) == 1 for v in seen.values())
        assert len({m for v in seen.values() for m in v}) >= 2, "one partition, several members"
        described = await _describe(consumers[0], "w")
        part = described.partitions[0]
        assert (part.start_offset, part.acquired, part.available) == (300, 0, 0)
        for c in consumers:
            await c.close()
    asyncio.run(run())


async def _describe(c: ShareConsumer, group: str) -> s.DescribedShareGroup:
    response = await c._send(s.ShareGroupDescribeRequest([group]))
    return response.groups[0]


def test_release_and_lock_expiry_redeliver_then_reject_dead_letters(share_broker):
    async def run() -> None:
        b = share_broker.bootstrap
        await _produce(b, "q", 3)
        async with ShareConsumer(b, group_id="g", topics=["q"], auto_offset_reset="earliest",
                                 acknowledgement_mode="explicit") as c:
            first = await c.poll(timeout_ms=3000)
            assert [(r.offset, r.delivery_count) for r in first] == [(0, 1), (1, 1), (2, 1)]
            c.acknowledge(first[0], "accept")
            c.acknowledge(first[1], "release")
            c.acknowledge(first[2], "reject")
            again = await c.poll(timeout_ms=3000)  # 1 redelivered; 2 dead-lettered (not returned)
            assert [(r.offset, r.delivery_count) for r in again] == [(1, 2)]
            # never acknowledged: the lock expires (1.5 s) and it comes back a third time
            third = await c.poll(timeout_ms=4000)
            assert [(r.offset, r.delivery_count) for r in third] == [(1, 3)]
            c.acknowledge(third[0], "release")  # the last attempt: a dead letter now
            assert await c.poll(timeout_ms=500) == []
            await c.commit()
            assert c.dead_letters_written == 2
            bogus = await c._send(s.ShareAcknowledgeRequest("g", c.member_id, [s.PartitionAcknowledgements(
                "q", 0, [s.AcknowledgementBatch(0, 0, 1)])]))
            assert bogus.acknowledgements[0].error_code == ErrorCode.INVALID_RECORD_STATE
            described = await _describe(c, "g")
            assert described.partitions[0].start_offset == 3
        dead = await read_partition(b, "g.dlq")
        heads = [dict(r.headers) for r in dead]
        assert sorted((h["mq.dlq.offset"], h["mq.dlq.reason"], h["mq.dlq.delivery.count"]) for h in heads) == [
            (b"1", b"delivery attempts exhausted", b"3"), (b"2", b"rejected", b"1")]
        assert {h["mq.dlq.topic"] for h in heads} == {b"q"} and {r.value for r in dead} == {b"v1", b"v2"}
    asyncio.run(run())


def test_bad_share_requests_get_named_errors_and_the_broker_keeps_serving(share_broker):
    async def run() -> None:
        b = share_broker.bootstrap
        await _produce(b, "bad", 5)
        async with ShareConsumer(b, group_id="bad-g", topics=["bad"], auto_offset_reset="earliest",
                                 acknowledgement_mode="explicit") as c:
            got = await c.poll(timeout_ms=3000)
            assert len(got) == 5
            send = c._send
            empty = await send(s.ShareGroupDescribeRequest([]))
            assert empty.groups == []
            ghost = await send(s.ShareFetchRequest("bad-g", "ghost", 10))
            assert ghost.error_code == ErrorCode.UNKNOWN_MEMBER_ID and "ghost" in ghost.error_message
            huge = await send(s.ShareAcknowledgeRequest("bad-g", c.member_id, [s.PartitionAcknowledgements(
                "bad", 0, [s.AcknowledgementBatch(0, 2**62, 1), s.AcknowledgementBatch(3, 1, 1)])]))
            assert huge.acknowledgements[0].error_code == ErrorCode.INVALID_REQUEST
            weird = await send(s.ShareFetchRequest("bad-g", c.member_id, -5, max_bytes=-1, acknowledgements=[
                s.PartitionAcknowledgements("bad", 7, [s.AcknowledgementBatch(0, 0, 1)]),
                s.PartitionAcknowledgements("bad", 0, [s.AcknowledgementBatch(0, 0, 77)])]))
            assert weird.error_code == ErrorCode.NONE and weird.partitions == []
            assert [a.error_code for a in weird.acknowledgements] == [ErrorCode.INVALID_RECORD_STATE,
                                                                      ErrorCode.INVALID_REQUEST]
            bad_beat = await send(s.ShareGroupHeartbeatRequest("bad-g", "", 0, ["bad"], "sideways"))
            assert bad_beat.error_code == ErrorCode.INVALID_CONFIG
            # Nothing corrupted: the five records are still held and accept normally.
            for r in got:
                c.acknowledge(r, "accept")
            results = await c.commit()
            assert [r.error_code for r in results] == [ErrorCode.NONE]
            described = await _describe(c, "bad-g")
            assert described.partitions[0].start_offset == 5
        assert "Traceback" not in share_broker.stderr_text()
        assert share_broker.running
    asyncio.run(run())


def test_blocking_share_consumer(share_broker):
    from mq.client import blocking

    b = share_broker.bootstrap
    asyncio.run(_produce(b, "sync", 20))
    got = []
    with blocking.ShareConsumer(b, group_id="sync-g", topics=["sync"], auto_offset_reset="earliest",
                                acknowledgement_mode="explicit") as c:
        while len(got) < 20:
            for r in c.poll(timeout_ms=2000):
                got.append(r.offset)
                c.acknowledge(r, "accept")
        assert [r.error_code for r in c.commit()] == [ErrorCode.NONE]
        assert c.member_id
    assert sorted(got) == list(range(20))


def test_an_idle_poll_waits_on_the_broker_and_wakes_for_a_new_record(share_broker):
    async def run() -> None:
        b = share_broker.bootstrap
        await _produce(b, "idle", 0)
        async with ShareConsumer(b, group_id="idle-g", topics=["idle"], auto_offset_reset="earliest") as c:
            sent = []
            send = c._send

            async def counting(request):
                sent.append(type(request).__name__)
                return await send(request)

            c._send = counting  # type: ignore[method-assign]
            assert await c.poll(timeout_ms=1500) == []
            fetches = sent.count("ShareFetchRequest")
            assert fetches <= 5, f"{fetches} fetches for 1.5 s of nothing: the broker should hold them"

            async def produce_later() -> float:
                await asyncio.sleep(0.3)
                async with Producer(b, acks="all") as p:
                    await p.send("idle", b"wake")
                    return asyncio.get_running_loop().time()

            task = asyncio.create_task(produce_later())
            got = await c.poll(timeout_ms=5000)
            woke = asyncio.get_running_loop().time() - await task  # after the send was acknowledged
            assert [r.value for r in got] == [b"wake"]
            print(f"{fetches} fetches in an idle 1.5 s poll; answered {woke * 1000:.0f} ms after the produce")
    asyncio.run(run())
