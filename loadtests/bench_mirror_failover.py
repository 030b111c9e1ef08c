"""Fail-over under load (issue 10): time from the command to the first acknowledged produce
in the new primary, and the records at risk, at a given write rate.

    python -m loadtests.bench_mirror_failover [--rates 10000,50000] [--latency-ms 50] [--runs 1]

Per rate: two single-broker regions, the link proxy (50 ms each way, its own process), the
mirror from a cluster.json as ``mq up`` writes it; records are written to 6 partitions of
east at the rate for 4 s, and as soon as the last of them is acknowledged the link is cut
(the region is lost: silence both ways), so what west lacks is the replication lag at that
moment. Then ``python -m mirror failover --to west`` runs and one record is
produced in west with acks=all: ``failover_s`` is from the command's start to that
acknowledgement. ``at_risk_reported`` is what the command printed (east did not answer, so
the last figures the mirror saw); ``at_risk_actual`` is east's high watermark minus west's,
read directly afterwards (records acknowledged in east that west does not have).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from loadtests.bench_mirror import ROOT, ends, produce_steady, start_link
from loadtests.stats import emit, load_average, median, versions
from mq.client import Admin, Producer
from mq.core.types import TopicPartition
from mq.deploy.topology import BrokerSpec, Deployment, FlowSpec, LinkPair, ProxyRoute, Topology
from mq.lab.cluster import BrokerHandle
from mq.lab.workloads import make_values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_mirror_failover",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10000,50000", help="write rates in records/s, comma-separated")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--write-s", type=float, default=4.0, help="seconds of writing before the cut")
    parser.add_argument("--runs", type=int, default=1)
    return parser.parse_args(argv)


def write_cluster(root: Path, east: str, west: str, link: str) -> Path:
    regions = (Topology("east", str(root / "east"), (BrokerSpec(1, east, str(root / "east")),)),
               Topology("west", str(root / "west"), (BrokerSpec(1, west, str(root / "west")),)))
    pair = LinkPair(("east", "west"), "127.0.0.1:1", (ProxyRoute("east", 1, east, link),), str(root / "links"))
    flow = FlowSpec("east-to-west", "east", "west", refresh_topics_interval_ms=500,
                    sync_group_offsets_interval_ms=1000, data_dir=str(root / "mirror-east-to-west"))
    path = root / "cluster.json"
    path.write_text(json.dumps(Deployment(str(root), regions, pairs=(pair,), flows=(flow,)).to_json()))
    return path


async def first_produce(bootstrap: str) -> None:
    async with Producer(bootstrap, acks=-1, linger_ms=0) as producer:
        await producer.send("bench", b"first in the new primary")


def run_once(args: argparse.Namespace, rate: int, run: int, root: Path) -> dict:
    east = BrokerHandle.start(node_id=1, data_dir=root / "east")
    west = BrokerHandle.start(node_id=1, data_dir=root / "west")
    link, link_address = start_link(east.bootstrap, args.latency_ms)
    mirror = None
    try:
        cluster = write_cluster(root, east.bootstrap, west.bootstrap, link_address)
        tps = [TopicPartition("bench", p) for p in range(args.partitions)]

        async def create() -> None:
            async with Admin(east.bootstrap) as admin:
                await admin.create_topic("bench", args.partitions)

        asyncio.run(create())
        state_dir = root / "mirror-east-to-west"
        state_dir.mkdir(parents=True, exist_ok=True)
        with open(state_dir / "mirror.log", "ab") as log:
            mirror = subprocess.Popen([sys.executable, "-m", "mirror", "run", "--cluster", str(cluster),
                                       "--flow", "east-to-west"], cwd=ROOT, stdout=log, stderr=log,
                                      env=dict(os.environ, PYTHONUNBUFFERED="1"))
        (state_dir / "mirror.pid").write_text(f"{mirror.pid}\n")
        time.sleep(3)  # the mirror starts and creates the mirror topic before the writing begins
        values = make_values(7, 4096, size_bytes=100)
        writer = threading.Thread(target=lambda: asyncio.run(
            produce_steady(east.bootstrap, "bench", values, rate, args.write_s)))
        writer.start()
        writer.join()
        link.send_signal(signal.SIGUSR1)  # the region is lost right after its last acknowledged write
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "mirror", "failover", "--cluster", str(cluster),
                                 "--to", "west", "--json"], cwd=ROOT, capture_output=True, text=True,
                                check=False, timeout=120)
        asyncio.run(first_produce(west.bootstrap))
        failover_s = time.perf_counter() - started
        if result.returncode != 0:
            raise RuntimeError(f"failover failed: {result.stderr}")
        report = json.loads(result.stdout)
        east_ends, west_ends = asyncio.run(ends(east.bootstrap, tps)), asyncio.run(ends(west.bootstrap, tps))
        line = {"workload": "mirror-failover", "run": run, "rate": rate, "link_latency_ms": args.latency_ms,
                "failover_s": round(failover_s, 2), "at_risk_reported": report["records_at_risk"],
                # west's ends include the one record produced there after the fail-over
                "at_risk_actual": sum(east_ends.values()) - (sum(west_ends.values()) - 1),
                "records_written": sum(east_ends.values()), "load_average": load_average(), "versions": versions()}
        emit(line)
        return line
    finally:
        if mirror is not None and mirror.poll() is None:
            mirror.kill()
            mirror.wait()
        link.send_signal(signal.SIGTERM)
        link.wait(10)
        east.stop()
        west.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    lines = []
    for rate in (int(r) for r in args.rates.split(",")):
        for run in range(1, args.runs + 1):
            root = Path(tempfile.mkdtemp(prefix="mq-bench-failover-"))
            try:
                lines.append(run_once(args, rate, run, root))
            finally:
                shutil.rmtree(root, ignore_errors=True)
    emit({"summary": True, "workload": "mirror-failover", "median_failover_s": median([x["failover_s"] for x in lines])})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
