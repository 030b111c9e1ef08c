"""The idempotent producer end to end: on by default with acks=all, and a batch resent
after its answer was lost (the broker paused past request_timeout_ms, then resumed and
appended what it had already read) is written once."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from mq.client import Admin, Consumer, Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition


async def test_idempotence_is_on_by_default_with_acks_all(shared_broker, topic_name) -> None:
    async with Admin(shared_broker.bootstrap) as admin:
        await admin.create_topic(topic_name)
    async with Producer(shared_broker.bootstrap, acks="all") as producer:
        metas = [await f for f in [producer.send(topic_name, b"v%d" % i) for i in range(10)]]
        assert producer.metrics["idempotent"] and producer.metrics["producer_id"] >= 1 << 24
    assert [m.offset for m in metas] == list(range(10))
    assert not Producer(shared_broker.bootstrap, acks=1).idempotent
    assert not Producer(shared_broker.bootstrap, acks="all", retries=0).idempotent
    assert not Producer(shared_broker.bootstrap, acks="all", enable_idempotence=False).idempotent
    with pytest.raises(MqError) as err:
        Producer(shared_broker.bootstrap, acks=1, enable_idempotence=True)
    assert err.value.code == ErrorCode.INVALID_CONFIG and "acks" in err.value.message


async def read_all(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    got: list = []
    deadline = time.monotonic() + 15
    while len(got) < count and time.monotonic() < deadline:
        got += await consumer.poll(300)
    got += await consumer.poll(300)  # anything beyond ``count`` (a duplicate) shows up too
    await consumer.close()
    return got


async def test_resent_batches_after_lost_answers_are_written_once(broker) -> None:
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topic("idem-resend")
    async with Producer(broker.bootstrap, acks="all", linger_ms=1, retry_backoff_ms=50,
                        request_timeout_ms=400, delivery_timeout_ms=30_000) as producer:
        before = [await f for f in [producer.send("idem-resend", b"before-%d" % i) for i in range(20)]]
        broker.proc.send_signal(signal.SIGSTOP)  # the broker reads nothing, answers nothing ...
        try:
            during = [producer.send("idem-resend", b"during-%d" % i) for i in range(200)]
            deadline = time.monotonic() + 10
            while producer.metrics["retries"] < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # ... requests time out and are resent
        finally:
            broker.proc.send_signal(signal.SIGCONT)  # ... then it appends the old copies too
        metas = [await f for f in during]
        assert producer.metrics["retries"] >= 2
    got = await read_all(broker.bootstrap, "idem-resend", 220)
    values = [r.value for r in got]
    assert len(values) == len(set(values)) == 220, f"{len(values) - len(set(values))} duplicates"
    assert values == [b"before-%d" % i for i in range(20)] + [b"during-%d" % i for i in range(200)]
    assert [m.offset for m in before + metas] == list(range(220))
