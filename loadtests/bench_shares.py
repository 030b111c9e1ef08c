"""Share group throughput: K consumers on ONE partition, every record acknowledged.

    python -m loadtests.bench_shares [--records 200000] [--consumers 4] [--runs 3] [--no-peers]

Three brokers on this machine (``loadtests.region.BenchRegion``), a topic of one
partition (replication factor 3) holding ``--records`` records of ``--size-bytes``.
Each run starts a new share group reading from the earliest offset with 1 consumer
and then with ``--consumers`` consumers (runs alternate 1, K, 1, K), each consumer its
own process (``ShareConsumer``, ``max_poll_records`` ``--max-poll-records``, every
record accepted, acknowledgements piggybacked on the next ShareFetch). Timed from the
first acquisition to the moment the share-partition start offset reaches the log end
(every record acknowledged), read from ShareGroupDescribe every 20 ms.

Peer (``--no-peers`` skips it): Redis streams consumer groups with acknowledgements,
the nearest thing to a share group (each entry to one consumer, a pending list,
``XACK``): ``XREADGROUP COUNT n`` then ``XACK`` of the batch, the same counts, each
consumer its own process, when ``redis-server`` is installed.

Prints one JSON line per run and a summary per (system, consumers) with the median,
and the mq/redis ratios (PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from loadtests.group_workloads import _fill, create_topic
from loadtests.region import BenchRegion
from loadtests.stats import emit, load_average, median, versions
from mq.client.share_admin import ShareGroupAdmin
from mq.client.share_consumer import ShareConsumer
from mq.core.errors import MqError


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_shares", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="runs of each size (median)")
    parser.add_argument("--size-bytes", type=int, default=100)
    parser.add_argument("--max-poll-records", type=int, default=500)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--no-peers", action="store_true", help="skip Redis streams")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if min(args.records, args.consumers, args.runs, args.max_poll_records, args.brokers) < 1:
        parser.error("every count must be at least 1")
    return args


# ---------------------------------------------------------------- mq


async def _work(bootstrap: str, group: str, topic: str, max_poll_records: int) -> dict[str, int]:
    """One consumer process: accept everything until stopped (SIGTERM)."""
    seen = redelivered = 0
    async with ShareConsumer(bootstrap, group_id=group, topics=[topic], auto_offset_reset="earliest",
                             max_poll_records=max_poll_records) as consumer:
        try:
            while True:
                records = await consumer.poll(timeout_ms=200)
                seen += len(records)
                redelivered += sum(1 for r in records if r.delivery_count > 1)
        except asyncio.CancelledError:
            pass
    return {"records": seen, "redelivered": redelivered}


def worker_main(bootstrap: str, group: str, topic: str, max_poll_records: int) -> None:
    import signal

    async def run() -> dict[str, int]:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await _work(bootstrap, group, topic, max_poll_records)

    async def guarded() -> dict[str, int]:
        print("ready", flush=True)  # imported: wait for the others (the parent says go)
        await asyncio.to_thread(sys.stdin.readline)
        inner = asyncio.create_task(run())
        try:
            return await asyncio.shield(inner)
        except asyncio.CancelledError:
            return await inner

    print(json.dumps(asyncio.run(guarded())), flush=True)


async def _watch(bootstrap: str, group: str, records: int, timeout_s: float) -> tuple[float, float]:
    """(first acquisition, every record acknowledged), monotonic seconds."""
    started = None
    deadline = time.monotonic() + timeout_s
    async with ShareGroupAdmin(bootstrap) as admin:
        while time.monotonic() < deadline:
            try:
                group_doc = await admin.describe_group(group)
            except MqError:
                group_doc = None
            parts = [] if group_doc is None else group_doc.partitions
            now = time.monotonic()
            if parts and started is None and parts[0].end_offset > 0:
                started = now
            if parts and parts[0].start_offset >= records:
                return (started or now), now
            await asyncio.sleep(0.02)
    raise TimeoutError(f"share group {group} did not acknowledge {records} records in {timeout_s} s")


def mq_run(bootstrap: str, topic: str, group: str, consumers: int, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, "-m", "loadtests.bench_shares", "--worker", bootstrap, group, topic,
            str(args.max_poll_records)]
    procs = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
             for _ in range(consumers)]
    try:
        # Start together: on a loaded machine a consumer still importing would find the records taken.
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready", "a share worker died"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        go = time.monotonic()
        started, done = asyncio.run(_watch(bootstrap, group, args.records, timeout_s=300))
    finally:
        for proc in procs:
            proc.terminate()
    reports = [json.loads(proc.communicate(timeout=60)[0] or b"{}") for proc in procs]
    if started >= done:  # done within one look at the group (a tiny run): time it from the go
        started = go
    seconds = max(done - started, 1e-6)
    total = args.records
    return {"records": total, "bytes": total * args.size_bytes, "seconds": round(seconds, 4),
            "rec_per_s": round(total / seconds), "mb_per_s": round(total * args.size_bytes / 2**20 / seconds, 2),
            "delivered": sum(r.get("records", 0) for r in reports),
            "redelivered": sum(r.get("redelivered", 0) for r in reports),
            "per_consumer": [r.get("records", 0) for r in reports]}


# ---------------------------------------------------------------- redis streams


def _redis_reader(port: int, key: str, group: str, name: str, count: int, barrier: Any, out: Any) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        barrier.wait(timeout=60)
        started = time.monotonic()
        seen, last = 0, started
        while True:
            response = client.xreadgroup(group, name, {key: ">"}, count=count)
            entries = response[0][1] if response else []
            if not entries:
                break
            client.xack(key, group, *[entry_id for entry_id, _ in entries])
            seen += len(entries)
            last = time.monotonic()
        out.put({"count": seen, "started": started, "last": last})
    except BaseException as exc:
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        client.close()


def redis_run(port: int, key: str, group: str, consumers: int, args: argparse.Namespace) -> dict[str, Any]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    client.xgroup_create(key, group, id="0")
    client.close()
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(consumers + 1), ctx.Queue()
    procs = [ctx.Process(target=_redis_reader, args=(port, key, group, f"c{i}", args.max_poll_records, barrier, out),
                         daemon=True) for i in range(consumers)]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=60)
        reports = [out.get(timeout=300) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"redis reader failed: {errors[0]}")
    total = sum(r["count"] for r in reports)
    seconds = max(r["last"] for r in reports) - min(r["started"] for r in reports)
    return {"records": total, "bytes": total * args.size_bytes, "seconds": round(seconds, 4),
            "rec_per_s": round(total / max(seconds, 1e-6)), "per_consumer": [r["count"] for r in reports]}


# ---------------------------------------------------------------- main


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    stamp = versions()
    tag = f"{os.getpid()}-{int(time.time())}"

    def record(line: dict[str, Any]) -> None:
        line.update(load_avg_1m=load_average(), versions=stamp)
        lines.append(line)
        emit(line)

    configs = {"share.coordinator.state.topic.num.partitions": "3"}
    with BenchRegion.start(configs=configs, brokers=args.brokers) as region:
        topic = f"share-tp-{tag}"
        create_topic(region.bootstrap, topic, 1, replication_factor=args.brokers)
        region.wait_full_isr(topic, 1)
        _fill(region.bootstrap, topic, 1, args.records, args.size_bytes)
        redis_server = None
        if not args.no_peers:
            from loadtests import group_peers, peers

            redis_server = peers.RedisServer()
            if redis_server.available:
                redis_server.start()
                group_peers.fill_stream(redis_server.port, f"share-{tag}", args.records, args.size_bytes)
            else:
                print("skipping peer redis-server: not installed (apt-get install redis-server)", file=sys.stderr)
                redis_server = None
        try:
            for n in range(1, args.runs + 1):
                for consumers in sorted({1, args.consumers}):
                    line = mq_run(region.bootstrap, topic, f"share-{tag}-{n}-{consumers}", consumers, args)
                    record({"workload": "share-throughput", "system": "mq", "run": n, "consumers": consumers,
                            "partitions": 1, **line, "broker_rss_mb": region.rss_mb(),
                            "settings": {"size_bytes": args.size_bytes, "max_poll_records": args.max_poll_records,
                                         "brokers": args.brokers, "replication_factor": args.brokers,
                                         "acks": "accept every record, piggybacked on the next ShareFetch",
                                         "timed": "first acquisition -> start offset at the log end"}})
                    if redis_server is not None:
                        line = redis_run(redis_server.port, f"share-{tag}", f"g{n}-{consumers}", consumers, args)
                        record({"workload": "share-throughput", "system": "redis-streams", "run": n,
                                "consumers": consumers, **line, "server_rss_mb": redis_server.rss_mb(),
                                "settings": {"api": f"XREADGROUP COUNT {args.max_poll_records} + XACK",
                                             "size_bytes": args.size_bytes}})
        finally:
            if redis_server is not None:
                redis_server.stop()
    summarize(lines, args.consumers)
    return lines


def summarize(lines: list[dict[str, Any]], consumers: int) -> None:
    rates: dict[tuple[str, int], float] = {}
    for system in ("mq", "redis-streams"):
        for k in sorted({x["consumers"] for x in lines if x["system"] == system}):
            runs = [x for x in lines if x["system"] == system and x["consumers"] == k]
            rates[(system, k)] = median([r["rec_per_s"] for r in runs])
            emit({"summary": True, "workload": "share-throughput", "system": system, "consumers": k,
                  "runs": len(runs), "median_rec_per_s": round(rates[(system, k)])})
    for k in sorted({k for _, k in rates}):
        if ("mq", k) in rates and ("redis-streams", k) in rates:
            emit({"workload": "share-throughput", "ratio": f"mq / redis-streams, {k} consumer(s)",
                  "median_ratio": round(rates[("mq", k)] / rates[("redis-streams", k)], 2)})
    if ("mq", 1) in rates and ("mq", consumers) in rates:
        emit({"workload": "share-throughput", "ratio": f"mq {consumers} consumers / 1 consumer, one partition",
              "median_ratio": round(rates[("mq", consumers)] / rates[("mq", 1)], 2)})


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["--worker"]:
        worker_main(raw[1], raw[2], raw[3], int(raw[4]))
        return 0
    args = parse_args(raw)
    emit({"shares_bench": True, "load_avg_1m": load_average(), "cpus": os.cpu_count(), "records": args.records,
          "consumers": args.consumers, "runs": args.runs})
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
