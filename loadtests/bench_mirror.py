"""P7 (issue 10): the mirror service's throughput and replication latency through a WAN link.

    python -m loadtests.bench_mirror [--records N] [--partitions 6] [--latency-ms 50]
                                     [--steady-rate 50000] [--steady-s 20] [--runs K]

Two single-broker regions (broker subprocesses on loopback), the product's link proxy
(``mq.deploy.link_proxy``, ``--latency-ms`` one way, in its own process) in front of the
source, and the mirror as users run it (``python -m mirror run``, its own process):

* **copy**: N records of ``--size-bytes`` (100) are produced into P partitions of the
  source with the mirror stopped (the source-produce rate is reported beside), then the
  mirror starts and the time until the target's high watermarks equal the source's is
  measured from the first mirrored record (``copy_rec_per_s``) and from the mirror's start
  (``total_s``: process start, discovery, topic creation included);
* **steady**: with the mirror caught up, records are produced at ``--steady-rate`` for
  ``--steady-s`` seconds; the replication latency (arrival in the target - the batch's max
  timestamp, per batch, as the mirror measures it) is read from the mirror's status file:
  p50 and p99 over the window, the worst partition, and the heartbeats' end-to-end latency.

One JSON line per phase and run, then a summary with the medians.
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
import time
from collections.abc import Sequence
from pathlib import Path

from loadtests.stats import emit, load_average, median, versions
from mq.client import Admin, Producer
from mq.core.types import TopicPartition
from mq.lab.cluster import BrokerHandle
from mq.lab.workloads import make_values

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_mirror", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--size-bytes", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=50.0, help="one way, each direction of the link")
    parser.add_argument("--steady-rate", type=int, default=50_000, help="records/s in the latency phase")
    parser.add_argument("--steady-s", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--serve-link", nargs=2, metavar=("TARGET", "LATENCY_MS"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---------------------------------------------------------------- the link, in its own process


def serve_link(target: str, latency_ms: float) -> int:
    """Run one link listener in front of ``target``; print its port; run until SIGTERM
    (SIGUSR1 cuts it)."""
    from mq.deploy.link_proxy import Direction, LinkListener
    from mq.deploy.shaping import LinkSettings

    async def main() -> None:
        host, port = target.rsplit(":", 1)
        settings = LinkSettings(latency_ms=latency_ms)
        listener = await LinkListener((host, int(port)), Direction("to", settings),
                                      Direction("from", settings)).start()
        print(listener.port, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        # SIGUSR1 cuts the link (a WAN outage: silence both ways), as `mq link cut` would.
        loop.add_signal_handler(signal.SIGUSR1, lambda: (listener.forward.cut(), listener.backward.cut()))
        await stop.wait()
        await listener.close()

    asyncio.run(main())
    return 0


def start_link(target: str, latency_ms: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "loadtests.bench_mirror", "--serve-link", target, str(latency_ms)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"127.0.0.1:{port}"


# ---------------------------------------------------------------- phases


async def produce_all(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> float:
    chunk = 5000
    async with Producer(bootstrap, acks=-1, linger_ms=5) as producer:
        start = time.perf_counter()
        pending = []
        for i in range(0, len(values), chunk):
            pending.append(asyncio.ensure_future(producer.send_many(
                topic, [(None, v) for v in values[i:i + chunk]], partition=(i // chunk) % partitions)))
            if len(pending) >= 8:
                await pending.pop(0)
        for future in pending:
            await future
        return time.perf_counter() - start


async def produce_steady(bootstrap: str, topic: str, values: list[bytes], rate: int, seconds: float) -> int:
    """``rate`` records/s in ticks of 10 ms (send_many per tick), for ``seconds``."""
    tick_s = 0.01
    per_tick = max(1, int(rate * tick_s))
    sent = 0
    async with Producer(bootstrap, acks=-1, linger_ms=2) as producer:
        start = time.perf_counter()
        pending: list[asyncio.Future] = []
        while (now := time.perf_counter() - start) < seconds:
            due = int(now / tick_s) + 1
            while sent < due * per_tick:
                pending.append(asyncio.ensure_future(producer.send_many(
                    topic, [(None, values[(sent + i) % len(values)]) for i in range(per_tick)])))
                sent += per_tick
            pending = [f for f in pending if not f.done()]
            await asyncio.sleep(max(0.0, (due * tick_s) - (time.perf_counter() - start)))
        for future in pending:
            await future
    return sent


async def ends(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    async with Admin(bootstrap) as admin:
        return {tp: info.offset for tp, info in (await admin.list_offsets({tp: -1 for tp in tps})).items()}


async def wait_copied(target: str, goal: dict[TopicPartition, int], started: float,
                      timeout_s: float = 600.0) -> tuple[float, float]:
    """(seconds since the copy began, seconds from ``started``) until done. The copy began
    after the last poll that found nothing mirrored yet (polls are 20 ms apart)."""
    empty = started
    async with Admin(target) as admin:
        while time.perf_counter() - started < timeout_s:
            t = time.perf_counter()
            try:
                now = {tp: i.offset for tp, i in (await admin.list_offsets({tp: -1 for tp in goal})).items()}
            except Exception:  # noqa: BLE001 - the mirror has not created the topic yet
                now = {}
            if not any(now.values()):
                empty = t
            if now == goal:
                done = time.perf_counter()
                return done - empty, done - started
            await asyncio.sleep(0.02)
    raise TimeoutError(f"the mirror did not copy {sum(goal.values())} records in {timeout_s} s")


class Mirror:
    def __init__(self, root: Path, source: str, target: str, link: str) -> None:
        self.state_dir = root / "mirror-bench"
        self.log = open(root / "mirror.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mirror", "run", "--flow", "bench", "--source-bootstrap", source,
             "--target-bootstrap", target, "--source-address-map", f"{source}={link}",
             "--source-region", "east", "--target-region", "west", "--state-dir", str(self.state_dir),
             "--refresh-topics-interval-ms", "500"],
            cwd=ROOT, stdout=self.log, stderr=self.log, env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def status(self) -> dict:
        try:
            return json.loads((self.state_dir / "status.json").read_text())
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run_once(args: argparse.Namespace, run: int, root: Path, values: list[bytes]) -> tuple[dict, dict]:
    east = BrokerHandle.start(node_id=1, data_dir=root / "east")
    west = BrokerHandle.start(node_id=1, data_dir=root / "west")
    link, link_address = start_link(east.bootstrap, args.latency_ms)
    mirror = None
    try:
        topic = "bench"
        tps = [TopicPartition(topic, p) for p in range(args.partitions)]

        async def create() -> None:
            async with Admin(east.bootstrap) as admin:
                await admin.create_topic(topic, args.partitions)

        asyncio.run(create())
        produce_s = asyncio.run(produce_all(east.bootstrap, topic, values, args.partitions))
        goal = asyncio.run(ends(east.bootstrap, tps))
        started = time.perf_counter()
        mirror = Mirror(root, east.bootstrap, west.bootstrap, link_address)
        copy_s, total_s = asyncio.run(wait_copied(west.bootstrap, goal, started))
        copied = {"workload": "mirror-copy", "run": run, "records": args.records, "size_bytes": args.size_bytes,
                  "partitions": args.partitions, "link_latency_ms": args.latency_ms,
                  "copy_s": round(copy_s, 2), "total_s": round(total_s, 2),
                  "copy_rec_per_s": round(args.records / copy_s),
                  "copy_mb_per_s": round(args.records * args.size_bytes / copy_s / 1e6, 1),
                  "source_produce_rec_per_s": round(args.records / produce_s),
                  "load_average": load_average(), "versions": versions()}
        emit(copied)
        # The steady phase writes its own topic, so its latency window holds only its batches.
        steady_topic = "steady"
        steady_tps = [TopicPartition(steady_topic, p) for p in range(args.partitions)]

        async def create_steady() -> None:
            async with Admin(east.bootstrap) as admin:
                await admin.create_topic(steady_topic, args.partitions)

        asyncio.run(create_steady())
        deadline = time.monotonic() + 30
        while len([p for p in mirror.status().get("partitions", []) if p["topic"] == steady_topic
                   and p["state"] == "running"]) < args.partitions:
            if time.monotonic() > deadline:
                raise TimeoutError("the mirror did not pick up the steady topic within 30 s")
            time.sleep(0.1)  # polling the mirror's discovery, with a deadline
        sent = asyncio.run(produce_steady(east.bootstrap, steady_topic, values, args.steady_rate, args.steady_s))
        asyncio.run(wait_copied(west.bootstrap, asyncio.run(ends(east.bootstrap, steady_tps)), time.perf_counter()))
        time.sleep(1.5)  # one status write after the last append
        status = mirror.status()
        parts = [p for p in status.get("partitions", []) if p["topic"] == steady_topic]
        steady = {"workload": "mirror-steady", "run": run, "rate": args.steady_rate, "seconds": args.steady_s,
                  "records": sent, "link_latency_ms": args.latency_ms,
                  "latency_p50_ms": median([p["latency_p50_ms"] for p in parts if p["latency_p50_ms"] is not None]),
                  "latency_p99_ms_worst_partition": max((p["latency_p99_ms"] or 0) for p in parts),
                  "heartbeat_p50_ms": status.get("heartbeats", {}).get("latency_p50_ms"),
                  "heartbeat_p99_ms": status.get("heartbeats", {}).get("latency_p99_ms"),
                  "load_average": load_average()}
        emit(steady)
        return copied, steady
    finally:
        if mirror is not None:
            mirror.stop()
        link.send_signal(signal.SIGTERM)
        link.wait(10)
        east.stop()
        west.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_link:
        return serve_link(args.serve_link[0], float(args.serve_link[1]))
    values = make_values(args.seed, min(args.records, 4096), size_bytes=args.size_bytes)
    values = [values[i % len(values)] for i in range(args.records)]
    copies, steadies = [], []
    for run in range(1, args.runs + 1):
        root = Path(tempfile.mkdtemp(prefix="mq-bench-mirror-svc-"))
        try:
            copied, steady = run_once(args, run, root, values)
            copies.append(copied)
            steadies.append(steady)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    emit({"summary": True, "workload": "mirror", "runs": args.runs,
          "median_copy_rec_per_s": round(median([c["copy_rec_per_s"] for c in copies])),
          "median_source_produce_rec_per_s": round(median([c["source_produce_rec_per_s"] for c in copies])),
          "median_latency_p50_ms": median([s["latency_p50_ms"] for s in steadies]),
          "median_latency_p99_ms": median([s["latency_p99_ms_worst_partition"] for s in steadies])})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
