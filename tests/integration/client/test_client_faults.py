"""Back-pressure, retries and timeouts against a broker that pauses, stops and restarts."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from mq.client import Admin, Consumer, Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition


async def test_full_buffer_blocks_then_raises_buffer_exhausted(broker) -> None:
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topic("bp")
    producer = Producer(broker.bootstrap, buffer_memory=4096, max_block_ms=300, linger_ms=0,
                        request_timeout_ms=20_000, delivery_timeout_ms=30_000)
    await producer.start()
    await producer.send("bp", b"warm-up")
    broker.proc.send_signal(signal.SIGSTOP)  # the broker stops answering: nothing frees memory
    try:
        accepted = []
        with pytest.raises(MqError) as err:
            for _ in range(200):
                accepted.append(producer.send_nowait("bp", b"x" * 100))
        assert err.value.code == ErrorCode.BUFFER_EXHAUSTED
        assert 10 < len(accepted) < 100  # 4 KiB holds a few dozen 100-byte records
        started = time.monotonic()
        blocked = producer.send("bp", b"waits")
        assert not blocked.done()
        with pytest.raises(MqError) as err:
            await blocked
        waited = time.monotonic() - started
        assert err.value.code == ErrorCode.BUFFER_EXHAUSTED and 0.25 <= waited < 5
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    metas = [await f for f in accepted]  # everything accepted is delivered after the pause
    assert [m.offset for m in metas] == list(range(1, len(accepted) + 1))
    after = await producer.send("bp", b"after")
    assert after.offset == len(accepted) + 1
    await producer.close()


async def test_retries_carry_records_across_a_broker_restart(broker) -> None:
    """In-flight batches time out against a paused broker, are retried, and land once it
    is back; a consumer reading across the restart reconnects and sees all of them."""
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topic("rs")
    consumer = Consumer(broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50,
                        request_timeout_ms=1_000)
    await consumer.start()
    consumer.assign([TopicPartition("rs", 0)])
    got: list = []
    async with Producer(broker.bootstrap, linger_ms=1, retry_backoff_ms=50,
                        delivery_timeout_ms=30_000, request_timeout_ms=500) as producer:
        before = [await f for f in [producer.send("rs", b"before-%d" % i) for i in range(50)]]
        while len(got) < 50:
            got += await consumer.poll(1000)
        broker.proc.send_signal(signal.SIGSTOP)  # requests now go unanswered ...
        during = [producer.send("rs", b"during-%d" % i) for i in range(50)]
        deadline = time.monotonic() + 10
        while producer.metrics["retries"] == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # ... until request_timeout_ms fails them: a retry
        assert producer.metrics["retries"] > 0
        assert not any(f.done() for f in during)
        broker.kill()  # the paused broker never read them; it comes back on the same port
        broker.start()
        metas = [await f for f in during]
    assert [m.offset for m in before] == list(range(50))
    assert sorted(m.offset for m in metas) == list(range(50, 100))
    deadline = time.monotonic() + 15
    while len(got) < 100 and time.monotonic() < deadline:
        got += await consumer.poll(300)
    await consumer.close()
    assert [r.offset for r in got] == list(range(100))
    assert sorted(r.value for r in got) == sorted(
        [b"before-%d" % i for i in range(50)] + [b"during-%d" % i for i in range(50)])


async def test_delivery_timeout_when_the_broker_stays_down(broker) -> None:
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topic("dt")
    async with Producer(broker.bootstrap, linger_ms=0, delivery_timeout_ms=800,
                        request_timeout_ms=300, retry_backoff_ms=50) as producer:
        await producer.send("dt", b"ok")
        broker.kill()
        started = time.monotonic()
        with pytest.raises(MqError) as err:
            await producer.send("dt", b"lost")
        assert err.value.code == ErrorCode.DELIVERY_TIMEOUT
        assert time.monotonic() - started < 5
        await producer.close(timeout_ms=0)


async def test_a_silent_bootstrap_address_costs_seconds_not_the_request_timeout(broker) -> None:
    """The first bootstrap address accepts connections but never answers (a paused
    broker): the client gives up on it after a few seconds and uses the next one."""
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        async with Admin(f"127.0.0.1:{port},{broker.bootstrap}", request_timeout_ms=30_000) as admin:
            await admin.create_topic("after-silence")
        assert time.monotonic() - started < 10
    finally:
        silent.close()
