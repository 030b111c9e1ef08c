"""The region workloads of ``loadtests.bench_region``: P3 (throughput), P4 (end-to-end
latency at a fixed rate) and fail-over, on the async client (``mq.client``)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from loadtests.region import BenchRegion
from loadtests.stats import Result, latency_summary
from mq.client import Admin, Consumer, Producer
from mq.core.types import TopicPartition
from mq.lab.workloads import make_values

VALUE_POOL = 4096
STALL_S = 60.0
STAMP = struct.Struct(">qq")  # P4 and P7-latency values start with (sequence, monotonic_ns at send)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=_new_loop) as runner:
        return runner.run(coro)


def create_topic(bootstrap: str, topic: str, partitions: int, min_insync: str) -> None:
    async def create() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic, partitions=partitions, replication_factor=3,
                                     configs={"min.insync.replicas": min_insync})
    _run(create())


def delete_topic(bootstrap: str, topic: str) -> None:
    """Untimed, so every run starts from the same state."""
    async def delete() -> None:
        async with Admin(bootstrap) as admin:
            await admin.delete_topics([topic])
    _run(delete())


# ---------------------------------------------------------------- P3


def _p3_producer(bootstrap: str, topic: str, partitions: int, index: int, count: int,
                 size_bytes: int, seed: int, chunk_records: int, in_flight: int, linger_ms: int,
                 batch_size: int, barrier: Any, out: Any) -> None:
    """One producer process: warm up (one record per partition), wait for the others,
    then send ``count`` records in send_many calls, partitions round-robin."""
    pool = make_values(seed + index, min(count, VALUE_POOL), size_bytes=size_bytes)
    pairs = [(None, pool[i % len(pool)]) for i in range(count)]

    async def produce() -> dict[str, Any]:
        samples: list[int] = []
        async with Producer(bootstrap, acks="all", linger_ms=linger_ms,
                            batch_size=batch_size) as producer:
            await asyncio.gather(*(producer.send_many(topic, [(None, pool[0])], partition=p)
                                   for p in range(partitions)))
            barrier.wait(timeout=120)
            acked = 0

            async def call(chunk: list, partition: int) -> None:
                nonlocal acked
                sent = time.perf_counter_ns()
                metadata = await producer.send_many(topic, chunk, partition=partition)
                samples.append(time.perf_counter_ns() - sent)
                acked += len(metadata)

            start = time.monotonic()
            pending: set[asyncio.Task] = set()
            for k, begin in enumerate(range(0, count, chunk_records)):
                if len(pending) >= in_flight:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        task.result()
                pending.add(asyncio.ensure_future(
                    call(pairs[begin:begin + chunk_records], (index + k) % partitions)))
            for task in await asyncio.gather(*pending, return_exceptions=True):
                if isinstance(task, BaseException):
                    raise task
            end = time.monotonic()
        return {"start": start, "end": end, "acked": acked, "samples": samples}

    try:
        out.put(_run(produce()))
    except BaseException as exc:  # reported by the parent, never hung on
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def py_spy() -> str | None:
    local = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return local if os.access(local, os.X_OK) else shutil.which("py-spy")


def _start_profilers(profile_dir: str, pids: dict[str, int], seconds: float) -> list[subprocess.Popen]:
    os.makedirs(profile_dir, exist_ok=True)
    spy = py_spy()
    assert spy, "py-spy is not installed"
    procs = []
    for name, pid in sorted(pids.items()):
        for fmt, ext in (("flamegraph", "svg"), ("raw", "txt")):
            procs.append(subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--rate", "200", "--duration", str(int(seconds) + 1),
                 "--format", fmt, "--output", os.path.join(profile_dir, f"{name}.{ext}"), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def p3(bootstrap: str, topic: str, *, partitions: int, producers: int, records: int, size_bytes: int,
       seed: int, chunk_records: int, in_flight: int, linger_ms: int, batch_size: int = 64 * 1024,
       profile_dir: str | None = None, broker_pids: dict[int, int] | None = None,
       profile_seconds: float = 8.0) -> Result:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(producers + 1)
    out = ctx.Queue()
    per = [records // producers + (1 if i < records % producers else 0) for i in range(producers)]
    procs = [ctx.Process(target=_p3_producer, daemon=True, args=(
        bootstrap, topic, partitions, i, per[i], size_bytes, seed, chunk_records, in_flight,
        linger_ms, batch_size, barrier, out)) for i in range(producers)]
    for proc in procs:
        proc.start()
    spies: list[subprocess.Popen] = []
    try:
        barrier.wait(timeout=120)
        if profile_dir:
            pids = {f"broker-{n}": pid for n, pid in (broker_pids or {}).items()}
            pids.update({f"producer-{i}": proc.pid for i, proc in enumerate(procs) if proc.pid})
            spies = _start_profilers(profile_dir, pids, profile_seconds)
        reports = [out.get(timeout=STALL_S + records / 10_000) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        for spy in spies:
            spy.wait(timeout=60)
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"P3 producer failed: {errors[0]}")
    acked = sum(r["acked"] for r in reports)
    assert acked == records, f"acknowledged {acked} of {records}"
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    samples = [s for r in reports for s in r["samples"]]
    return Result("P3", "mq", "produce", 0, records, size_bytes, seconds,
                  latency_summary(samples, of=f"one send_many call of {chunk_records} records"), None,
                  {"api": "send_many", "acks": "all", "replication_factor": 3, "min_insync_replicas": 2,
                   "partitions": partitions, "producers": producers, "producer_processes": producers,
                   "chunk_records": chunk_records, "in_flight": in_flight, "linger_ms": linger_ms,
                   "batch_size": batch_size, "partitioning": "round-robin per send_many call",
                   **({"profile_dir": profile_dir} if profile_dir else {})})


# ---------------------------------------------------------------- P4


def latency_reader(bootstrap: str, topic: str, partitions: list[int], count: int, fetch_max_wait_ms: int,
                   ready: Any, stop: Any, out: Any) -> None:
    """Read ``count`` records from the end of ``partitions`` (or until ``stop`` is set, when
    given), in its own process; one latency (now - the send stamp) per record."""
    async def consume() -> list[tuple[int, int]]:
        tps = [TopicPartition(topic, p) for p in partitions]
        latencies: list[tuple[int, int]] = []
        async with Consumer(bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=fetch_max_wait_ms,
                            max_poll_records=10_000) as consumer:
            consumer.assign(tps)
            await consumer.poll(timeout_ms=100)  # position resolved, connections open
            ready.set()
            progress = time.monotonic()
            unpack, now_ns = STAMP.unpack_from, time.monotonic_ns
            while len(latencies) < count and not (stop is not None and stop.is_set()):
                records = await consumer.poll(timeout_ms=1000)
                now = now_ns()
                if records:
                    progress = time.monotonic()
                    for record in records:
                        seq, sent = unpack(record.value)
                        latencies.append((seq, now - sent))
                elif time.monotonic() - progress > STALL_S:
                    raise RuntimeError(f"consumer stalled at {len(latencies)} of {count}")
        return latencies

    try:
        out.put(_run(consume()))
    except BaseException as exc:
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


async def p4(bootstrap: str, topic: str, *, rate: int, seconds: float, warmup_s: float,
             size_bytes: int) -> Result:
    count = int(rate * (seconds + warmup_s))
    warmup = int(rate * warmup_s)
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=latency_reader, args=(bootstrap, topic, [0], count, 500, ready, None, out),
                           daemon=True)
    consumer.start()
    loop = asyncio.get_running_loop()
    try:
        if not await loop.run_in_executor(None, ready.wait, 60):
            raise RuntimeError("P4 consumer did not start")
        pad = b"x" * max(0, size_bytes - STAMP.size)
        acks: list[int] = []

        def timed(sent_ns: int) -> Callable[[Any], None]:
            return lambda _f: acks.append(time.monotonic_ns() - sent_ns)

        async with Producer(bootstrap, acks="all", linger_ms=0) as producer:
            await producer.partitions_for(topic)
            start = time.monotonic()
            sent = 0
            while sent < count:
                due = min(count, int((time.monotonic() - start) * rate) + 1)
                while sent < due:
                    now = time.monotonic_ns()
                    future = producer.send(topic, STAMP.pack(sent, now) + pad, partition=0)
                    if sent % 10 == 0:
                        future.add_done_callback(timed(now))
                    sent += 1
                await asyncio.sleep(max(0.0, start + sent / rate - time.monotonic()))
            await producer.flush()
            produce_seconds = time.monotonic() - start
        report = await loop.run_in_executor(None, out.get, True, STALL_S)
    finally:
        consumer.join(timeout=10)
        if consumer.is_alive():
            consumer.kill()
    error = report.get("error") if isinstance(report, dict) else None
    if error:
        raise RuntimeError(f"P4 consumer failed: {error}")
    measured = [lat for seq, lat in report if seq >= warmup]
    assert sorted(seq for seq, _ in report) == list(range(count)), "every record consumed once"
    latency = latency_summary(measured, of="produce (send) -> consumer poll returns it, every record")
    return Result("P4", "mq", "end-to-end", 0, count - warmup, size_bytes,
                  produce_seconds * (count - warmup) / count, latency, None,
                  {"target_rec_per_s": rate, "api": "send() per record + Consumer.poll",
                   "acks": "all", "replication_factor": 3, "min_insync_replicas": 2, "partitions": 1,
                   "linger_ms": 0, "fetch_max_wait_ms": 500, "warmup_s": warmup_s,
                   "send_to_ack": latency_summary(acks, of="send -> ack, every 10th record")})


# ---------------------------------------------------------------- fail-over


async def failover(region: BenchRegion, topic: str, *, kills: int, rate: int,
                   size_bytes: int) -> list[dict[str, Any]]:
    """``kills`` times: SIGKILL the leader of partition 0 while a producer sends at ``rate``;
    time to the first ack of a record sent after the kill; restart; wait for a full ISR."""
    value = b"f" * size_bytes
    acked_at: list[tuple[float, float]] = []  # (sent, acked) monotonic seconds
    failed = 0
    stop = asyncio.Event()

    def on_done(sent: float) -> Callable[[Any], None]:
        def done(future: Any) -> None:
            nonlocal failed
            if future.exception() is None:
                acked_at.append((sent, time.monotonic()))
            else:
                failed += 1
        return done

    async def produce(producer: Producer) -> None:
        start, sent = time.monotonic(), 0
        while not stop.is_set():
            due = int((time.monotonic() - start) * rate) + 1
            while sent < due:
                producer.send(topic, value, partition=0).add_done_callback(on_done(time.monotonic()))
                sent += 1
            await asyncio.sleep(max(0.0, start + sent / rate - time.monotonic()))

    lines = []
    async with Producer(region.bootstrap, acks="all", linger_ms=1) as producer:
        await producer.partitions_for(topic)
        task = asyncio.ensure_future(produce(producer))
        try:
            for kill in range(1, kills + 1):
                lines.append(await _one_kill(region, topic, kill, acked_at, lambda: failed,
                                             restart=kill < kills))
        finally:
            stop.set()
            await task
            await producer.flush()
    return lines


async def _one_kill(region: BenchRegion, topic: str, kill: int, acked_at: list[tuple[float, float]],
                    failed: Callable[[], int], *, restart: bool) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    leader = await loop.run_in_executor(None, lambda: region.leader(topic, 0))
    controller = await loop.run_in_executor(None, region.controller)
    await asyncio.sleep(0.5)  # acks flowing before the kill
    before = len(acked_at)
    killed_at = time.monotonic()
    await loop.run_in_executor(None, region.kill, leader)
    new_leader, new_leader_at, first_ack = -1, None, None
    deadline = killed_at + 60
    while time.monotonic() < deadline and (first_ack is None or new_leader_at is None):
        if new_leader_at is None:
            seen = await loop.run_in_executor(None, lambda: region.leader(topic, 0, exclude=(leader,)))
            if seen not in (-1, leader):
                new_leader, new_leader_at = seen, time.monotonic()
        if first_ack is None:
            after = [acked for sent, acked in acked_at[before:] if sent > killed_at]
            first_ack = min(after) if after else None
        await asyncio.sleep(0.02)
    if restart:  # the next kill starts from a full ISR again
        await loop.run_in_executor(None, region.restart, leader)
        await loop.run_in_executor(None, region.wait_full_isr, topic, 1)
    return {"workload": "failover", "run": kill, "killed": leader, "killed_was_controller": leader == controller,
            "new_leader": new_leader,
            "kill_to_first_ack_s": round(first_ack - killed_at, 3) if first_ack else None,
            "kill_to_new_leader_s": round(new_leader_at - killed_at, 3) if new_leader_at else None,
            "records_acked_total": len(acked_at), "records_failed_total": failed(),
            "settings": {"acks": "all", "replication_factor": 3, "min_insync_replicas": 2,
                         "api": "send() per record", "timeouts": "client and broker defaults"}}


__all__ = ["create_topic", "delete_topic", "failover", "p3", "p4", "py_spy"]
