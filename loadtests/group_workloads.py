"""The workloads of ``loadtests.bench_groups``: rebalance pause (eager vs cooperative),
group consume throughput (1 vs N consumer processes, Redis streams consumer groups
alongside) and coordinator fail-over."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import queue
import sys
import time
from collections.abc import Iterator
from typing import Any

from loadtests.region import BenchRegion
from loadtests.region_workloads import _run
from mq.client import Admin, Consumer, Producer
from mq.core.types import TopicPartition
from mq.lab.groups import GroupLab, PartitionLoad
from mq.lab.rebalance import is_balanced

OFFSETS_TOPIC = "__consumer_offsets"
SETTLE_TIMEOUT_S = 60.0


def create_topic(bootstrap: str, topic: str, partitions: int, *, replication_factor: int = 3) -> None:
    async def create() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic, partitions=partitions, replication_factor=replication_factor)
    _run(create())


# ---------------------------------------------------------------- rebalance pause


def rebalance(region: BenchRegion, args: argparse.Namespace, *, tag: str) -> Iterator[dict[str, Any]]:
    topic = f"rebalance-{tag}"
    create_topic(region.bootstrap, topic, args.partitions)
    region.wait_full_isr(topic, args.partitions)
    protocols = (("eager", args.eager_assignor), ("cooperative", "cooperative-sticky"))
    with PartitionLoad(region.bootstrap, topic, partitions=args.partitions, rate_per_s=args.rate,
                       value=b"r" * args.size_bytes) as load:
        for run in range(1, args.runs + 1):
            for protocol, assignor in protocols:
                line = one_join(region.bootstrap, topic, args, group=f"rb-{tag}-{protocol}-{run}",
                                assignor=assignor)
                if load.error is not None:
                    raise RuntimeError(f"the load failed: {load.error!r}")
                line.update(run=run, protocol=protocol, assignor=assignor)
                yield {"workload": "rebalance", **line}


def one_join(bootstrap: str, topic: str, args: argparse.Namespace, *, group: str,
             assignor: str) -> dict[str, Any]:
    """A fresh group of ``args.consumers`` members; one more joins; the pause it caused."""
    lab = GroupLab(bootstrap, [topic], group_id=group, partitions={topic: args.partitions},
                   assignor=assignor, auto_offset_reset="latest",
                   session_timeout_ms=args.session_timeout_ms,
                   heartbeat_interval_ms=args.heartbeat_interval_ms)
    with lab:
        for i in range(args.consumers):
            lab.add(f"c{i + 1}")
        stable = lab.wait_stable(args.consumers, timeout_s=SETTLE_TIMEOUT_S)
        steady_from = lab.wait_consumed(stable, timeout_s=SETTLE_TIMEOUT_S)
        time.sleep(args.steady_s)  # a measurement window, not a wait for a condition
        steady_to = lab.now_s()
        steady = lab.steady_gap(steady_from, steady_to)
        before = lab.assignment()
        joined = lab.mark("join", kind="join")
        lab.add(f"c{args.consumers + 1}")
        settled = lab.wait_stable(args.consumers + 1, timeout_s=SETTLE_TIMEOUT_S)
        flowing = lab.wait_consumed(settled, timeout_s=SETTLE_TIMEOUT_S)
        end = flowing + args.tail_s
        time.sleep(max(0.0, end - lab.now_s()))
        threshold = max(args.min_threshold_s, args.threshold_factor * steady)
        stats = lab.pause(joined, end, threshold_s=threshold)
        after = lab.assignment()
        owner_before = {tp: m for m, tps in before.items() for tp in tps}
        moved = sum(1 for m, tps in after.items() for tp in tps if owner_before.get(tp) != m)
        generations = sorted({g["generation"] for g in lab.generations() if g["t_s"] >= joined and g["generation"] >= 0})
        duplicates = lab.duplicates()
    return {**stats.row(), "steady_median_longest_gap_s": round(steady, 3),
            "steady_window_s": round(steady_to - steady_from, 3), "settle_s": round(settled - joined, 3),
            "moved_partitions": moved, "generations_after_join": generations, "duplicates": duplicates,
            "settings": {"partitions": args.partitions, "consumers_before": args.consumers,
                         "rate_rec_per_s": args.rate, "session_timeout_ms": args.session_timeout_ms,
                         "heartbeat_interval_ms": args.heartbeat_interval_ms,
                         "members": "threads, one event loop each, one process",
                         "kept_consuming": "longest gap between polls returning the partition <= threshold_s",
                         "kept_assigned": "owned by some member at every instant of the window"}}


# ---------------------------------------------------------------- group throughput


def _tp_member(bootstrap: str, topic: str, group: str, ends: dict[int, int], go: Any, stop: Any,
               out: Any, index: int) -> None:
    """One consumer process: join, pause what is assigned until ``go``, then read every
    assigned partition to its end offset; report the assignment and the finish."""
    async def member() -> None:
        consumer: Consumer | None = None

        def on_assign(tps: list[TopicPartition]) -> None:
            if not go.is_set() and consumer is not None:
                consumer.pause(*tps)

        consumer = Consumer(bootstrap, group_id=group, assignor="range", auto_offset_reset="earliest",
                            enable_auto_commit=False, max_poll_records=10_000,
                            session_timeout_ms=10_000, heartbeat_interval_ms=500, on_assign=on_assign)
        async with consumer:
            consumer.subscribe([topic])
            reported: list[TopicPartition] | None = None
            while not go.is_set():
                await consumer.poll(timeout_ms=50)
                mine = sorted(consumer.assignment())
                if mine != reported:
                    reported = mine
                    out.put(("assignment", index, [tp.partition for tp in mine]))
            started = time.monotonic()
            consumer.resume(*consumer.assignment())
            count, first, last = 0, None, None
            done_at: float | None = None
            next_offset: dict[int, int] = {}
            while not stop.is_set():
                records = await consumer.poll(timeout_ms=100)
                if records:
                    now = time.monotonic()
                    first = first or now
                    last = now
                    count += len(records)
                    for r in records:
                        next_offset[r.partition] = r.offset + 1
                mine = [tp.partition for tp in consumer.assignment()]
                if done_at is None and all(next_offset.get(p, 0) >= ends[p] for p in mine):
                    done_at = last or time.monotonic()
                    out.put(("done", index, {"count": count, "started": started, "first": first,
                                             "last": done_at, "partitions": sorted(mine)}))
    try:
        _run(member())
    except BaseException as exc:  # reported by the parent, never hung on
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))
        raise


def _mq_throughput(bootstrap: str, topic: str, partitions: int, ends: dict[int, int], consumers: int,
                   group: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    go, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_tp_member, daemon=True,
                         args=(bootstrap, topic, group, ends, go, stop, out, i)) for i in range(consumers)]
    spawned = time.monotonic()
    for proc in procs:
        proc.start()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    assignment: dict[int, list[TopicPartition]] = {}
    done: dict[int, dict[str, Any]] = {}
    try:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not go.is_set():
            kind, index, payload = _next(out, deadline)
            if kind == "assignment":
                assignment[index] = [TopicPartition(topic, p) for p in payload]
                if len(assignment) == consumers and is_balanced(
                        {str(k): v for k, v in assignment.items()}, tps):
                    joined = time.monotonic()
                    go.set()
        deadline = time.monotonic() + SETTLE_TIMEOUT_S + sum(ends.values()) / 20_000
        while len(done) < consumers:
            kind, index, payload = _next(out, deadline)
            if kind == "done":
                done[index] = payload
    finally:
        go.set()
        stop.set()
        for proc in procs:
            proc.join(timeout=15)
            if proc.is_alive():
                proc.kill()
    total = sum(d["count"] for d in done.values())
    assert total == sum(ends.values()), f"read {total} of {sum(ends.values())} records"
    start = min(d["started"] for d in done.values())
    seconds = max(d["last"] for d in done.values()) - start
    return {"records": total, "seconds": round(seconds, 4), "rec_per_s": round(total / seconds),
            "join_s": round(joined - spawned, 3),
            "per_consumer": [done[i]["count"] for i in sorted(done)],
            "partitions_per_consumer": [len(done[i]["partitions"]) for i in sorted(done)]}


def _next(out: Any, deadline: float) -> tuple[str, int, Any]:
    try:
        kind, index, payload = out.get(timeout=max(0.1, deadline - time.monotonic()))
    except queue.Empty:
        raise TimeoutError("a group-throughput consumer stalled") from None
    if kind == "error":
        raise RuntimeError(f"consumer {index} failed: {payload}")
    return kind, index, payload


def _fill(bootstrap: str, topic: str, partitions: int, records: int, size_bytes: int) -> dict[int, int]:
    async def fill() -> dict[int, int]:
        value = b"g" * size_bytes
        per = [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]
        async with Producer(bootstrap, acks=1, linger_ms=5) as producer:
            for p in range(partitions):
                for begin in range(0, per[p], 10_000):
                    await producer.send_many(topic, [(None, value)] * min(10_000, per[p] - begin), partition=p)
        return dict(enumerate(per))
    return _run(fill())


def group_throughput(region: BenchRegion, args: argparse.Namespace, *, tag: str) -> Iterator[dict[str, Any]]:
    topic = f"group-tp-{tag}"
    create_topic(region.bootstrap, topic, args.tp_partitions)
    region.wait_full_isr(topic, args.tp_partitions)
    ends = _fill(region.bootstrap, topic, args.tp_partitions, args.tp_records, args.size_bytes)
    redis = None
    if not args.no_peers:
        from loadtests import peers

        redis = peers.RedisServer()
        if redis.available:
            redis.start()
        else:
            print("skipping peer redis-server: not installed (apt-get install redis-server)",
                  file=sys.stderr)
            redis = None
    try:
        if redis is not None:
            from loadtests import group_peers

            group_peers.fill_stream(redis.port, f"tp-{tag}", args.tp_records, args.size_bytes)
        for run in range(1, args.tp_runs + 1):
            for consumers in (1, args.tp_consumers):
                line = _mq_throughput(region.bootstrap, topic, args.tp_partitions, ends, consumers,
                                      f"tp-{tag}-{run}-{consumers}")
                yield {"workload": "group-throughput", "system": "mq", "run": run, "consumers": consumers,
                       **line, "broker_rss_mb": region.rss_mb(),
                       "settings": {"partitions": args.tp_partitions, "size_bytes": args.size_bytes,
                                    "consumer_processes": consumers, "assignor": "range",
                                    "max_poll_records": 10_000,
                                    "timed": "all members resume together -> last record"}}
                if redis is not None:
                    line = group_peers.read_group(redis.port, f"tp-{tag}", f"g{run}-{consumers}",
                                                  consumers, args.tp_records)
                    yield {"workload": "group-throughput", "system": "redis-streams", "run": run,
                           "consumers": consumers, **line, "server_rss_mb": redis.rss_mb(),
                           "settings": {"api": "XREADGROUP COUNT 10000 NOACK", "size_bytes": args.size_bytes,
                                        "consumer_processes": consumers}}
    finally:
        if redis is not None:
            redis.stop()


# ---------------------------------------------------------------- coordinator fail-over


def coordinator_failover(region: BenchRegion, args: argparse.Namespace, *, tag: str) -> Iterator[dict[str, Any]]:
    topic = f"commits-{tag}"
    create_topic(region.bootstrap, topic, 1)
    region.wait_full_isr(topic, 1)
    yield from _run(_failover(region, args, topic, f"fo-{tag}"))


async def _coordinator(region: BenchRegion, group: str) -> int:
    async with Admin(region.bootstrap) as admin:
        return (await admin.describe_group(group)).coordinator_id


async def _failover(region: BenchRegion, args: argparse.Namespace, topic: str, group: str) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    tp = TopicPartition(topic, 0)
    commits: list[tuple[float, float, bool]] = []  # (sent, answered, ok)
    errors: dict[str, int] = {}
    stop = asyncio.Event()
    interval = args.commit_interval_ms / 1000
    lines = []
    async with Consumer(region.bootstrap, group_id=group, session_timeout_ms=10_000,
                        heartbeat_interval_ms=500, enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while tp not in consumer.assignment():
            if time.monotonic() > deadline:
                raise TimeoutError("the committing member got no assignment")
            await consumer.poll(timeout_ms=100)

        async def commit_loop() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                sent = time.monotonic()
                try:
                    await asyncio.wait_for(consumer.commit({tp: n}), 30)
                    commits.append((sent, time.monotonic(), True))
                except Exception as error:  # noqa: BLE001 - counted: the figure is when they stop
                    commits.append((sent, time.monotonic(), False))
                    name = getattr(getattr(error, "code", None), "name", None) or type(error).__name__
                    errors[name] = errors.get(name, 0) + 1
                await asyncio.sleep(interval)

        async def poll_loop() -> None:
            while not stop.is_set():
                await consumer.poll(timeout_ms=100)

        tasks = [asyncio.ensure_future(commit_loop()), asyncio.ensure_future(poll_loop())]
        try:
            for kill in range(1, args.kills + 1):
                await asyncio.sleep(1.0)  # commits flowing before the kill
                coordinator = await _coordinator(region, group)
                generation = consumer.group_metadata().generation_id
                before = len(commits)
                killed_at = time.monotonic()
                await loop.run_in_executor(None, region.kill, coordinator)
                first_ok = None
                deadline = killed_at + 60
                while first_ok is None and time.monotonic() < deadline:
                    ok = [answered for sent, answered, good in commits[before:] if good and sent > killed_at]
                    first_ok = min(ok) if ok else None
                    await asyncio.sleep(0.01)
                new_coordinator = await _coordinator(region, group)
                failed = sum(1 for _, _, good in commits[before:] if not good)
                lines.append({
                    "workload": "coordinator-failover", "run": kill, "killed": coordinator,
                    "new_coordinator": new_coordinator,
                    "kill_to_commit_s": round(first_ok - killed_at, 3) if first_ok else None,
                    "failed_commits": failed,
                    "generation_changed": consumer.group_metadata().generation_id != generation,
                    "errors": dict(sorted(errors.items())),
                    "settings": {"commit_interval_ms": args.commit_interval_ms, "session_timeout_ms": 10_000,
                                 "offsets_topic_replication_factor": 3}})
                errors.clear()
                await loop.run_in_executor(None, region.restart, coordinator)
                await loop.run_in_executor(None, _wait_offsets_isr, region)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
    return lines


def _wait_offsets_isr(region: BenchRegion) -> None:
    meta = region.metadata()
    count = next((len(t.partitions) for t in (meta.topics if meta else ()) if t.name == OFFSETS_TOPIC), 0)
    if count:
        region.wait_full_isr(OFFSETS_TOPIC, count)


__all__ = ["coordinator_failover", "group_throughput", "one_join", "rebalance"]
