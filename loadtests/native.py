"""mq's own workloads for the benchmark, on the async client (``mq.client``).

- P1: one ``send()`` per record (it returns a future at once, as Kafka's
  ``producer.send``), yielding to the loop every ``YIELD_EVERY`` records, then
  ``flush()``; latency is send -> acknowledgement of every ``latency_every``-th record.
- P1b: the bulk API, ``send_many()`` calls of ``chunk_records`` records with
  ``in_flight`` calls outstanding; latency is one whole call.
- P2: a consumer assigned to the partition, from offset 0, ``poll()`` until every
  record arrived.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from loadtests.stats import Result, latency_summary
from mq.client import Admin, Consumer, Producer
from mq.core.types import TopicPartition

STALL_S = 30.0  # no progress for this long fails the run instead of hanging it
YIELD_EVERY = 1000  # P1: records between two yields to the event loop


async def create_topic(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions=1)


async def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Drop a run's topics afterwards (untimed), so every run starts from the same state."""
    async with Admin(bootstrap) as admin:
        await admin.delete_topics(topics)


async def produce_per_record(bootstrap: str, topic: str, values: Sequence[bytes], *, run: int,
                             size_bytes: int, linger_ms: int, latency_every: int,
                             rss: Callable[[], float | None], acks: int | str = 1,
                             enable_idempotence: bool | None = None, workload: str = "P1",
                             system: str = "mq") -> Result:
    await create_topic(bootstrap, topic)
    samples: list[int] = []

    def timed(sent_ns: int) -> Callable[[Any], None]:
        return lambda _future: samples.append(time.perf_counter_ns() - sent_ns)

    async with Producer(bootstrap, acks=acks, linger_ms=linger_ms,
                        enable_idempotence=enable_idempotence) as producer:
        idempotent = producer.idempotent
        start = time.perf_counter()
        last = None
        for i, value in enumerate(values):
            if i % latency_every:
                last = producer.send(topic, value)
            else:
                sent_ns = time.perf_counter_ns()
                last = producer.send(topic, value)
                last.add_done_callback(timed(sent_ns))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                # A Kafka producer's I/O runs in its own thread; here it shares the
                # loop, so a tight loop of send() must let it run now and then.
                await producer.wait_for_buffer()
                await asyncio.sleep(0)
        await producer.flush()
        seconds = time.perf_counter() - start
        assert last is not None
        metadata = await last
    assert metadata.offset == len(values) - 1, f"last offset {metadata.offset}, sent {len(values)}"
    return Result(workload, system, "produce", run, len(values), size_bytes, seconds,
                  latency_summary(samples, of=f"send -> ack, every {latency_every}th record"),
                  rss(), {"api": "send() per record + flush", "acks": acks, "idempotent": idempotent,
                          "linger_ms": linger_ms, "partitions": 1, "yield_every": YIELD_EVERY})


async def produce_bulk(bootstrap: str, topic: str, values: Sequence[bytes], *, run: int,
                       size_bytes: int, linger_ms: int, chunk_records: int, in_flight: int,
                       rss: Callable[[], float | None], report: bool = True, acks: int | str = 1,
                       enable_idempotence: bool | None = None, workload: str = "P1b",
                       system: str = "mq") -> Result:
    await create_topic(bootstrap, topic)
    pairs = [(None, value) for value in values]  # the caller's records, built before timing
    samples: list[int] = []
    last_offset = -1

    async def send_chunk(chunk: list[tuple[None, bytes]]) -> None:
        nonlocal last_offset
        sent_ns = time.perf_counter_ns()
        metadata = await producer.send_many(topic, chunk)
        samples.append(time.perf_counter_ns() - sent_ns)
        last_offset = max(last_offset, metadata[-1].offset)

    async with Producer(bootstrap, acks=acks, linger_ms=linger_ms,
                        enable_idempotence=enable_idempotence) as producer:
        idempotent = producer.idempotent
        start = time.perf_counter()
        pending: set[asyncio.Task[None]] = set()
        for begin in range(0, len(pairs), chunk_records):
            if len(pending) >= in_flight:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
            pending.add(asyncio.ensure_future(send_chunk(pairs[begin:begin + chunk_records])))
        for task in await asyncio.gather(*pending, return_exceptions=True):
            if isinstance(task, BaseException):
                raise task
        seconds = time.perf_counter() - start
    assert last_offset == len(values) - 1, f"last offset {last_offset}, sent {len(values)}"
    return Result(workload, system, "produce", run, len(values), size_bytes, seconds,
                  latency_summary(samples, of=f"one send_many call of {chunk_records} records"),
                  rss(), {"api": "send_many", "chunk_records": chunk_records, "in_flight": in_flight,
                          "acks": acks, "idempotent": idempotent, "linger_ms": linger_ms})


async def consume_from_start(bootstrap: str, topic: str, count: int, *, run: int,
                             size_bytes: int, max_poll_records: int,
                             rss: Callable[[], float | None]) -> Result:
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap, auto_offset_reset="earliest",
                        max_poll_records=max_poll_records) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        start = time.perf_counter()
        received, last_offset, progress_at = 0, -1, time.monotonic()
        while received < count:
            records = await consumer.poll(timeout_ms=1000)
            if records:
                received += len(records)
                last_offset = records[-1].offset
                progress_at = time.monotonic()
            elif time.monotonic() - progress_at > STALL_S:
                raise RuntimeError(f"consumer stalled at {received} of {count} records")
        seconds = time.perf_counter() - start
    assert (received, last_offset) == (count, count - 1), f"read {received}, last offset {last_offset}"
    return Result("P2", "mq", "consume", run, received, size_bytes, seconds, None, rss(),
                  {"api": "poll", "max_poll_records": max_poll_records, "from_offset": 0})
