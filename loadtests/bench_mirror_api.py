"""Raw copy throughput of the mirror topic API: fetch_raw_many from a source broker,
mirror_append to a target broker, batches never decoded, no link in between.

    python -m loadtests.bench_mirror_api [--records N] [--partitions P] [--runs K]
                                         [--acks -1|1] [--fetch-bytes B]

Two single-broker "regions" (broker subprocesses on loopback, temporary data dirs).
Each run produces N records of ``--size-bytes`` (100) into a fresh topic of P
partitions in the source (the produce rate is reported beside the copy rate), creates
the mirror topic in the target, then copies with one task per partition: fetch the
source's stored batches from the target's log end, MirrorAppend them, repeat until the
partition is caught up. One JSON line per run (records, seconds, rec/s, MB/s), then a
summary with the median. This is the ceiling of the mirror service's data path on this
machine; P7 (issue 10) measures the service itself through a 50 ms link.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from loadtests.stats import emit, median, versions
from mq.client import Admin, Producer
from mq.core.types import TopicPartition
from mq.lab.cluster import BrokerHandle
from mq.lab.workloads import make_values
from mq.protocol.batch_format import iter_batches


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_mirror_api",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-bytes", type=int, default=100)
    parser.add_argument("--acks", type=int, choices=(-1, 1), default=-1)
    parser.add_argument("--fetch-bytes", type=int, default=1024 * 1024, help="bytes fetched per partition and round")
    parser.add_argument("--batch-size", type=int, default=64 * 1024, help="the source producer's batch.size")
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args(argv)


async def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int, batch_size: int) -> float:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions)
    chunk = 5000
    async with Producer(bootstrap, acks=1, linger_ms=5, batch_size=batch_size) as producer:
        start = time.perf_counter()
        pending = []
        for i in range(0, len(values), chunk):
            part = (i // chunk) % partitions
            pending.append(asyncio.ensure_future(
                producer.send_many(topic, [(None, v) for v in values[i:i + chunk]], partition=part)))
            if len(pending) >= 8:
                await pending.pop(0)
        for future in pending:
            await future
        await producer.flush()
        return time.perf_counter() - start


async def copy_partition(source: Admin, target: Admin, tp: TopicPartition, goal: int, *, acks: int,
                         fetch_bytes: int) -> int:
    position, copied_bytes = 0, 0
    while position < goal:
        fetched = await source.fetch_raw(tp, position, fetch_bytes)
        if not fetched.records:
            continue
        await target.mirror_append(tp, fetched.records, acks=acks)
        copied_bytes += len(fetched.records)
        for _, header in iter_batches(fetched.records):
            position = header.next_offset
    return copied_bytes


async def copy(source_bootstrap: str, target_bootstrap: str, topic: str, partitions: int, *, acks: int,
               fetch_bytes: int) -> tuple[float, int]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with Admin(source_bootstrap) as source, Admin(target_bootstrap) as target:
        goals = {tp: info.offset for tp, info in (await source.list_offsets({tp: -1 for tp in tps})).items()}
        await target.create_topic(topic, partitions, configs={"mirror.source.region": "east"})
        await target.list_offsets({tp: -1 for tp in tps})  # metadata and leaders known before timing
        start = time.perf_counter()
        sizes = await asyncio.gather(*(copy_partition(source, target, tp, goals[tp], acks=acks,
                                                      fetch_bytes=fetch_bytes) for tp in tps))
        seconds = time.perf_counter() - start
        ends = await target.list_offsets({tp: -1 for tp in tps})
        assert all(ends[tp].offset == goals[tp] for tp in tps), (ends, goals)
        return seconds, sum(sizes)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    values = make_values(args.seed, min(args.records, 4096), size_bytes=args.size_bytes)
    values = [values[i % len(values)] for i in range(args.records)]
    root = Path(tempfile.mkdtemp(prefix="mq-bench-mirror-"))
    east = west = None
    rates = []
    try:
        east = BrokerHandle.start(node_id=1, data_dir=root / "east")
        west = BrokerHandle.start(node_id=1, data_dir=root / "west")
        for run in range(1, args.runs + 1):
            topic = f"mirror-bench-r{run}"
            produce_s = asyncio.run(produce(east.bootstrap, topic, values, args.partitions, args.batch_size))
            copy_s, copied_bytes = asyncio.run(copy(east.bootstrap, west.bootstrap, topic, args.partitions,
                                                    acks=args.acks, fetch_bytes=args.fetch_bytes))
            rate = args.records / copy_s
            rates.append(rate)
            emit({"workload": "mirror-api-copy", "run": run, "records": args.records, "size_bytes": args.size_bytes,
                  "partitions": args.partitions, "acks": args.acks, "fetch_bytes": args.fetch_bytes,
                  "source_batch_size": args.batch_size,
                  "seconds": round(copy_s, 3), "rec_per_s": round(rate), "mb_per_s": round(copied_bytes / copy_s / 1e6, 1),
                  "source_produce_rec_per_s": round(args.records / produce_s), "versions": versions()})
        emit({"summary": True, "workload": "mirror-api-copy", "runs": args.runs,
              "median_rec_per_s": round(median(rates))})
    finally:
        for broker in (east, west):
            if broker is not None:
                broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
