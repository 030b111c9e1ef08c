"""Throughput and latency benchmarks, with peers side by side in the same run.

    python -m loadtests.bench [--records N] [--runs K] [--only P1,P1b,P2,P5,P8]
                              [--size-bytes B] [--bootstrap HOST:PORT]
                              [-- ARGS FOR P8]
    mq bench ...  (the same)
    mq bench --only P3,P4,failover [REGION OPTIONS]   (loadtests/bench_region.py)
    mq bench --only rebalance,group-throughput,coordinator-failover [GROUP OPTIONS]
                                                     (loadtests/bench_groups.py)
    mq bench --only P7,P7-latency,geo-failover [GEO OPTIONS]   (loadtests/bench_geo.py)

Prints one JSON line per measured run (workload, records, bytes, seconds, rec/s,
MB/s, latency percentiles where they mean something, the server's RSS, versions),
then one line per peer ratio (per run and the median) and one summary line per
workload with the median of the runs. See docs/how-to/run-benchmarks.md.

Runs are interleaved: run 1 of mq, NATS, Redis, then run 2 of each, and so on, all
on the same seeded 100-byte values, so a machine getting slower or faster during the
benchmark shifts every system alike. Unless ``--bootstrap`` is given the benchmark
starts its own broker (a subprocess with a temporary data directory). A missing
``nats-server`` or ``redis-server`` is skipped with a message on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from loadtests import native, peers
from loadtests.stats import Result, emit, median, versions
from mq.lab.cluster import BrokerHandle
from mq.lab.workloads import make_values

WORKLOADS = ("P1", "P1b", "P2", "P5", "P1-idem", "P1b-idem", "P8", "P3", "P4", "failover",
             "rebalance", "group-throughput", "coordinator-failover", "P7", "P7-latency", "geo-failover")
REGION_WORKLOADS = ("P3", "P4", "failover")  # three brokers: loadtests/bench_region.py
GROUP_WORKLOADS = ("rebalance", "group-throughput", "coordinator-failover")  # loadtests/bench_groups.py
GEO_WORKLOADS = ("P7", "P7-latency", "geo-failover", "AA", "AA-latency", "AA-transform")  # two regions and the mirror(s): loadtests/bench_geo.py
DEFAULT_WORKLOADS = ("P1", "P1b", "P2", "P5")
IDEMPOTENCE_WORKLOADS = ("P1-idem", "P1b-idem")  # acks=all, plain against idempotent, side by side
IDEMPOTENCE_TARGET = 0.9  # issue 14: idempotent produce at most 10% slower
VALUE_POOL = 4096  # distinct values, cycled: same data for every system, little memory
# (mq workload, peer, operation, target ratio from PERFORMANCE.md)
PAIRS = (
    ("P1", "nats-jetstream", "produce", 10), ("P1b", "nats-jetstream", "produce", 10),
    ("P1", "redis-streams", "produce", 5), ("P1b", "redis-streams", "produce", 5),
    ("P2", "nats-jetstream", "consume", 5), ("P2", "redis-streams", "consume", 5),
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mq bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per run")
    parser.add_argument("--runs", type=int, default=3, help="runs of each workload (interleaved)")
    parser.add_argument("--only", default=",".join(DEFAULT_WORKLOADS),
                        help=f"comma-separated workloads out of {', '.join(WORKLOADS)}")
    parser.add_argument("--size-bytes", type=int, default=100, help="value size")
    parser.add_argument("--bootstrap", help="benchmark a running broker instead of starting one")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--chunk-records", type=int, default=10_000, help="records per send_many call (P1b)")
    parser.add_argument("--in-flight", type=int, default=4, help="send_many calls outstanding (P1b)")
    parser.add_argument("--max-poll-records", type=int, default=500, help="consumer batch (P2)")
    parser.add_argument("--latency-every", type=int, default=100,
                        help="time send -> ack of every Nth record (P1 and NATS publish)")
    parser.add_argument("--seed", type=int, default=1)
    argv = list(sys.argv[1:] if argv is None else argv)
    storage_argv = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.storage_argv = storage_argv
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in args.only if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    if args.records < 1 or args.runs < 1:
        parser.error("--records and --runs must be at least 1")
    return args


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Bench:
    """One invocation: the broker, the peers, the event loop and every result."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.versions = versions()
        self.results: list[Result] = []
        self.broker: BrokerHandle | None = None
        self.broker_root: Path | None = None
        self.nats = peers.NatsServer()
        self.redis = peers.RedisServer()
        self.runner = asyncio.Runner(loop_factory=_new_loop)
        # topics and streams are new in every invocation (a reused broker keeps old ones)
        self.tag = f"{os.getpid()}-{int(time.time())}"
        pool = make_values(args.seed, min(args.records, VALUE_POOL), size_bytes=args.size_bytes)
        self.values = [pool[i % len(pool)] for i in range(args.records)]

    @property
    def bootstrap(self) -> str:
        return self.args.bootstrap or (self.broker.bootstrap if self.broker else "")

    def broker_rss(self) -> float | None:
        return self.broker.rss_mb() if self.broker else None

    def record(self, result: Result) -> None:
        self.results.append(result)
        emit(result.to_json(self.versions))

    # ------------------------------------------------------------ setup

    def start(self) -> None:
        wanted = set(self.args.only)
        if wanted & {"P1", "P1b", "P2", "P5", *IDEMPOTENCE_WORKLOADS} and not self.args.bootstrap:
            self.broker_root = Path(tempfile.mkdtemp(prefix="mq-bench-broker-"))
            self.broker = BrokerHandle.start(node_id=1, data_dir=self.broker_root / "data")
        if "P5" in wanted:
            for server in (self.nats, self.redis):
                if server.available:
                    server.start()
                    self.versions[server.name] = server.version
                else:
                    print(f"skipping peer {server.name}: not installed "
                          f"(apt-get install {server.name})", file=sys.stderr)

    def close(self) -> None:
        for server in (self.nats, self.redis):
            server.stop()
        if self.broker:
            self.broker.stop()
        if self.broker_root:
            shutil.rmtree(self.broker_root, ignore_errors=True)
        self.runner.close()

    # ------------------------------------------------------------ runs

    def run_round(self, run: int) -> None:
        """One run of every selected workload: mq first, then each peer."""
        args, wanted, size = self.args, set(self.args.only), self.args.size_bytes
        mq_all = "P5" in wanted  # the ratios need mq's own figures from the same run
        per_record, bulk = f"bench-p1-{self.tag}-r{run}", f"bench-p1b-{self.tag}-r{run}"
        topics = []
        if "P1" in wanted or mq_all:
            topics.append(per_record)
            self.record(self.runner.run(native.produce_per_record(
                self.bootstrap, per_record, self.values, run=run, size_bytes=size,
                linger_ms=args.linger_ms, latency_every=args.latency_every, rss=self.broker_rss)))
        if wanted & {"P1b", "P2"} or mq_all:
            topics.append(bulk)
            result = self.runner.run(native.produce_bulk(
                self.bootstrap, bulk, self.values, run=run, size_bytes=size,
                linger_ms=args.linger_ms, chunk_records=args.chunk_records,
                in_flight=args.in_flight, rss=self.broker_rss))
            if "P1b" in wanted or mq_all:  # else it only wrote P2's data
                self.record(result)
        if "P2" in wanted or mq_all:
            self.record(self.runner.run(native.consume_from_start(
                self.bootstrap, bulk, len(self.values), run=run, size_bytes=size,
                max_poll_records=args.max_poll_records, rss=self.broker_rss)))
        if topics:
            self.runner.run(native.delete_topics(self.bootstrap, topics))
        if mq_all:
            self.run_peers(run)
        self.run_idempotence(run)

    def run_idempotence(self, run: int) -> None:
        """P1-idem / P1b-idem: the P1 / P1b workloads with acks=all, a plain producer
        against an idempotent one, alternating which goes first from run to run."""
        args, wanted, size = self.args, set(self.args.only), self.args.size_bytes
        modes = [("mq-plain", False), ("mq-idempotent", True)]
        for workload in IDEMPOTENCE_WORKLOADS:
            if workload not in wanted:
                continue
            for system, idempotent in (modes if run % 2 else modes[::-1]):
                topic = f"bench-{workload.lower()}-{system}-{self.tag}-r{run}"
                if workload == "P1-idem":
                    result = native.produce_per_record(
                        self.bootstrap, topic, self.values, run=run, size_bytes=size, linger_ms=args.linger_ms,
                        latency_every=args.latency_every, rss=self.broker_rss, acks="all",
                        enable_idempotence=idempotent, workload=workload, system=system)
                else:
                    result = native.produce_bulk(
                        self.bootstrap, topic, self.values, run=run, size_bytes=size, linger_ms=args.linger_ms,
                        chunk_records=args.chunk_records, in_flight=args.in_flight, rss=self.broker_rss,
                        acks="all", enable_idempotence=idempotent, workload=workload, system=system)
                self.record(self.runner.run(result))
                self.runner.run(native.delete_topics(self.bootstrap, [topic]))

    def run_peers(self, run: int) -> None:
        size = self.args.size_bytes
        if self.nats.child:
            subject = f"bench.r{run}"
            self.record(self.runner.run(peers.nats_produce(
                self.nats, subject, self.values, run=run, size_bytes=size,
                latency_every=self.args.latency_every)))
            self.record(self.runner.run(peers.nats_consume(
                self.nats, subject, len(self.values), run=run, size_bytes=size)))
        if self.redis.child:
            key = f"bench-r{run}"
            self.record(peers.redis_produce(self.redis, key, self.values, run=run, size_bytes=size))
            self.record(peers.redis_consume(self.redis, key, len(self.values), run=run,
                                            size_bytes=size))

    # ------------------------------------------------------------ summaries

    def _rates(self, workload: str, system: str, operation: str) -> dict[int, float]:
        return {r.run: r.rec_per_s for r in self.results
                if r.workload == workload and r.system == system and r.operation == operation}

    def summarize(self) -> None:
        groups = sorted({(r.workload, r.system, r.operation) for r in self.results},
                        key=lambda g: (WORKLOADS.index(g[0]), g[1], g[2]))
        for workload, system, operation in groups:
            rates = self._rates(workload, system, operation)
            emit({"summary": True, "workload": workload, "system": system, "operation": operation,
                  "runs": len(rates), "median_rec_per_s": round(median(list(rates.values()))),
                  "median_mb_per_s": round(median(list(rates.values())) * self.args.size_bytes
                                           / 1024 / 1024, 2)})
        for workload in IDEMPOTENCE_WORKLOADS:
            plain, idem = self._rates(workload, "mq-plain", "produce"), self._rates(workload, "mq-idempotent", "produce")
            runs = sorted(set(plain) & set(idem))
            if runs:
                ratios = [round(idem[k] / plain[k], 3) for k in runs]
                emit({"workload": workload, "ratio": "idempotent / plain produce (acks=all)", "per_run": ratios,
                      "median_ratio": round(median(ratios), 3), "target": IDEMPOTENCE_TARGET,
                      "meets_target": median(ratios) >= IDEMPOTENCE_TARGET})
        for workload, peer, operation, target in PAIRS:
            mine = self._rates(workload, "mq", operation)
            theirs = self._rates("P5", peer, operation)
            runs = sorted(set(mine) & set(theirs))
            if not runs:
                continue
            ratios = [round(mine[k] / theirs[k], 2) for k in runs]
            emit({"workload": "P5", "ratio": f"mq {workload} {operation} / {peer} {operation}",
                  "per_run": ratios, "median_ratio": round(median(ratios), 2), "target": target,
                  "meets_target": median(ratios) >= target})


def run_storage_bench(argv: Sequence[str]) -> int:
    """P8 lives with the storage engine (loadtests/bench_storage.py); arguments after
    ``--`` go to it untouched."""
    try:
        from loadtests import bench_storage
    except ImportError as error:
        print(f"P8: loadtests/bench_storage.py is not available ({error})", file=sys.stderr)
        return 2
    return int(bench_storage.main(list(argv)) or 0)


def _only(argv: Sequence[str]) -> set[str]:
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--only", default="")
    known, _ = peek.parse_known_args([a for a in argv if a != "--help" and a != "-h"])
    return {w.strip() for w in known.only.split(",") if w.strip()}


def _region_only(argv: Sequence[str]) -> bool:
    """``--only`` names region workloads alone: loadtests.bench_region takes every argument."""
    only = _only(argv)
    return bool(only) and only <= set(REGION_WORKLOADS)


def _groups_only(argv: Sequence[str]) -> bool:
    """``--only`` names group workloads alone: loadtests.bench_groups takes every argument."""
    only = _only(argv)
    return bool(only) and only <= set(GROUP_WORKLOADS)


def _geo_only(argv: Sequence[str]) -> bool:
    """``--only`` names geo workloads alone: loadtests.bench_geo takes every argument."""
    only = _only(argv)
    return bool(only) and only <= set(GEO_WORKLOADS)


def run_geo_bench(argv: Sequence[str]) -> int:
    from loadtests import bench_geo

    return int(bench_geo.main(list(argv)) or 0)


def run_groups_bench(argv: Sequence[str]) -> int:
    from loadtests import bench_groups

    return int(bench_groups.main(list(argv)) or 0)


def run_region_bench(argv: Sequence[str]) -> int:
    from loadtests import bench_region

    return int(bench_region.main(list(argv)) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _region_only(argv):
        return run_region_bench(argv)
    if _groups_only(argv):
        return run_groups_bench(argv)
    if _geo_only(argv):
        return run_geo_bench(argv)
    args = parse_args(argv)
    region = [w for w in args.only if w in REGION_WORKLOADS]
    groups = [w for w in args.only if w in GROUP_WORKLOADS]
    geo = [w for w in args.only if w in GEO_WORKLOADS]
    args.only = [w for w in args.only if w not in (*REGION_WORKLOADS, *GROUP_WORKLOADS, *GEO_WORKLOADS)]
    if not args.only:
        code = run_region_bench(["--only", ",".join(region)]) if region else 0
        code = (run_groups_bench(["--only", ",".join(groups)]) if groups else 0) or code
        return (run_geo_bench(["--only", ",".join(geo)]) if geo else 0) or code
    bench = Bench(args)
    try:
        bench.start()
        for run in range(1, args.runs + 1):
            bench.run_round(run)
        bench.summarize()
    finally:
        bench.close()
    code = 0
    if region:  # with other workloads: the shared options only (alone, every region option)
        code = run_region_bench(["--only", ",".join(region), "--runs", str(args.runs),
                                 "--records", str(args.records), "--size-bytes", str(args.size_bytes),
                                 "--seed", str(args.seed)])
    if groups:  # likewise, the shared options only
        code = run_groups_bench(["--only", ",".join(groups), "--runs", str(args.runs),
                                 "--size-bytes", str(args.size_bytes)]) or code
    if geo:  # likewise
        code = run_geo_bench(["--only", ",".join(geo), "--runs", str(args.runs),
                              "--size-bytes", str(args.size_bytes)]) or code
    if "P8" in args.only:
        return run_storage_bench(args.storage_argv) or code
    return code


if __name__ == "__main__":
    sys.exit(main())
