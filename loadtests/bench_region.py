"""Region benchmarks (PERFORMANCE.md P3, P4 and fail-over), three brokers on this machine.

    python -m loadtests.bench_region [--only P3,P4,failover] [--runs K]
                                     [--flush-policies replicated,always] [--p3-configs 1x1,3x1,6x2]
    mq bench --only P3,P4,failover ...  (the same, through loadtests.bench)

- P3: RF=3, acks=all, min.insync.replicas=2, ``send_many`` of 100-byte values from
  ``producers`` processes (each its own event loop and CPU) over ``partitions``
  partitions, round-robin, ``--in-flight`` calls outstanding per producer. One line per
  configuration (``PARTITIONSxPRODUCERS``) and run; the summary names the best one.
- P4: end-to-end latency at a fixed rate (10,000 rec/s): a producer (``send()`` per
  record, ``linger_ms=0``, acks=all) stamps each value with ``time.monotonic_ns()``; a
  consumer in another process (the clock is system-wide) takes ``now - stamp`` when
  ``poll()`` returns the record. Exact nearest-rank percentiles over every record after
  the warm-up.
- failover: one RF=3 partition, a producer sending continuously (``send()``, acks=all,
  default timeouts); SIGKILL the partition's leader, time until the first record *sent
  after the kill* is acknowledged (it can only be by a new leader), restart the broker,
  wait for a full ISR, repeat. One line per kill, then the median.

Each run starts a fresh region per flush policy, policies interleaved (replicated,
always, replicated, always, ...), so drift on a noisy machine hits both alike. Prints
JSON lines like loadtests.bench; see docs/how-to/run-benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from loadtests import region_workloads as work
from loadtests.region import BenchRegion
from loadtests.stats import Result, emit, load_average, median, versions

WORKLOADS = ("P3", "P4", "failover")
POLICIES = ("replicated", "always")
MIN_INSYNC = "2"


def _configs(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        parts, _, producers = item.strip().partition("x")
        out.append((int(parts), int(producers or 1)))
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mq bench (region)", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(WORKLOADS), help=f"out of {', '.join(WORKLOADS)}")
    parser.add_argument("--runs", type=int, default=3, help="runs of each workload and policy")
    parser.add_argument("--flush-policies", default=",".join(POLICIES),
                        help="log.flush.policy values, measured side by side")
    parser.add_argument("--size-bytes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--records", type=int, default=1_000_000, help="P3: records per configuration and run")
    parser.add_argument("--p3-configs", default="1x1,3x1,6x1,6x2",
                        help="P3: PARTITIONSxPRODUCERS, comma-separated (producers are processes)")
    parser.add_argument("--chunk-records", type=int, default=10_000, help="P3: records per send_many call")
    parser.add_argument("--in-flight", type=int, default=4, help="P3: send_many calls outstanding per producer")
    parser.add_argument("--linger-ms", type=int, default=5, help="P3 producers")
    parser.add_argument("--batch-size", type=int, default=64 * 1024, help="P3 producers' batch_size (bytes)")
    parser.add_argument("--rate", type=int, default=10_000, help="P4: records per second")
    parser.add_argument("--p4-seconds", type=float, default=10.0, help="P4: measured seconds per run")
    parser.add_argument("--p4-warmup-s", type=float, default=1.0, help="P4: seconds excluded at the start")
    parser.add_argument("--kills", type=int, default=10, help="failover: leader kills (the median is reported)")
    parser.add_argument("--failover-rate", type=int, default=1000, help="failover: producer records per second")
    parser.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config for every broker (repeatable; default: the brokers' defaults)")
    parser.add_argument("--profile", metavar="DIR",
                        help="P3: py-spy record every broker and the producers during the first run "
                             "of each configuration (flame graphs and top functions in DIR)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    args.policies = [p.strip() for p in args.flush_policies.split(",") if p.strip()]
    bad = [w for w in args.only if w not in WORKLOADS]
    if bad:
        parser.error(f"unknown workload(s) {bad}; choose from {', '.join(WORKLOADS)}")
    bad = [p for p in args.policies if p not in POLICIES]
    if bad:
        parser.error(f"unknown flush policies {bad}; choose from {', '.join(POLICIES)}")
    try:
        args.configs = _configs(args.p3_configs)
    except ValueError:
        parser.error(f"--p3-configs {args.p3_configs!r}: write PARTITIONSxPRODUCERS, e.g. 6x2")
    try:
        args.broker_configs = dict(item.split("=", 1) for item in args.broker_config)
    except ValueError:
        parser.error("--broker-config takes KEY=VALUE")
    if args.runs < 1 or args.records < 1 or args.kills < 1:
        parser.error("--runs, --records and --kills must be at least 1")
    return args


class RegionBench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.versions = versions()
        self.results: list[Result] = []
        self.failovers: list[dict[str, Any]] = []
        self.tag = f"{os.getpid()}-{int(time.time())}"

    def record(self, result: Result) -> None:
        result.settings["load_avg_1m"] = load_average()
        self.results.append(result)
        emit(result.to_json(self.versions))

    def run(self) -> None:
        args = self.args
        for run in range(1, args.runs + 1 if {"P3", "P4"} & set(args.only) else 1):
            for policy in args.policies:
                with BenchRegion.start(flush_policy=policy, configs=args.broker_configs) as region:
                    if "P3" in args.only:
                        for partitions, producers in args.configs:
                            self.p3(region, run, partitions, producers)
                    if "P4" in args.only:
                        self.p4(region, run)
        if "failover" in args.only:
            with BenchRegion.start(flush_policy=args.policies[0], configs=args.broker_configs) as region:
                self.failover(region)

    def p3(self, region: BenchRegion, run: int, partitions: int, producers: int) -> None:
        args = self.args
        topic = f"p3-{self.tag}-r{run}-{region.flush_policy}-{partitions}x{producers}"
        work.create_topic(region.bootstrap, topic, partitions, MIN_INSYNC)
        region.wait_full_isr(topic, partitions)
        profile = None
        if args.profile and run == 1:
            profile = os.path.join(args.profile, f"p3-{region.flush_policy}-{partitions}x{producers}")
        result = work.p3(region.bootstrap, topic, partitions=partitions, producers=producers,
                         records=args.records, size_bytes=args.size_bytes, seed=args.seed,
                         chunk_records=args.chunk_records, in_flight=args.in_flight,
                         linger_ms=args.linger_ms, batch_size=args.batch_size, profile_dir=profile,
                         broker_pids=region.pids())
        result.run = run
        result.server_rss_mb = region.rss_mb()
        result.settings["flush_policy"] = region.flush_policy
        self.record(result)
        work.delete_topic(region.bootstrap, topic)

    def p4(self, region: BenchRegion, run: int) -> None:
        args = self.args
        topic = f"p4-{self.tag}-r{run}-{region.flush_policy}"
        work.create_topic(region.bootstrap, topic, 1, MIN_INSYNC)
        region.wait_full_isr(topic, 1)
        result = asyncio.run(work.p4(region.bootstrap, topic, rate=args.rate, seconds=args.p4_seconds,
                                     warmup_s=args.p4_warmup_s, size_bytes=args.size_bytes))
        result.run = run
        result.server_rss_mb = region.rss_mb()
        result.settings["flush_policy"] = region.flush_policy
        self.record(result)
        work.delete_topic(region.bootstrap, topic)

    def failover(self, region: BenchRegion) -> None:
        topic = f"failover-{self.tag}"
        work.create_topic(region.bootstrap, topic, 1, MIN_INSYNC)
        region.wait_full_isr(topic, 1)
        for line in asyncio.run(work.failover(region, topic, kills=self.args.kills,
                                              rate=self.args.failover_rate,
                                              size_bytes=self.args.size_bytes)):
            line.update({"flush_policy": region.flush_policy, "load_avg_1m": load_average(),
                         "versions": self.versions})
            self.failovers.append(line)
            emit(line)

    # ------------------------------------------------------------ summaries

    def summarize(self) -> None:
        p3 = sorted({(r.settings["flush_policy"], r.settings["partitions"], r.settings["producers"])
                     for r in self.results if r.workload == "P3"})
        best: dict[str, tuple[float, str]] = {}
        for policy, partitions, producers in p3:
            runs = [r for r in self.results if r.workload == "P3" and r.settings["flush_policy"] == policy
                    and (r.settings["partitions"], r.settings["producers"]) == (partitions, producers)]
            rate = median([r.rec_per_s for r in runs])
            config = f"{partitions}x{producers}"
            if rate > best.get(policy, (0.0, ""))[0]:
                best[policy] = (rate, config)
            emit({"summary": True, "workload": "P3", "flush_policy": policy, "config": config,
                  "partitions": partitions, "producers": producers, "runs": len(runs),
                  "median_rec_per_s": round(rate),
                  "median_mb_per_s": round(rate * self.args.size_bytes / 1024 / 1024, 2),
                  "load_avg_1m": [r.settings["load_avg_1m"] for r in runs]})
        for policy, (rate, config) in sorted(best.items()):
            emit({"summary": True, "workload": "P3", "flush_policy": policy, "best_config": config,
                  "median_rec_per_s": round(rate), "target": 400_000, "meets_target": rate >= 400_000})
        for policy in sorted({r.settings["flush_policy"] for r in self.results if r.workload == "P4"}):
            runs = [r for r in self.results if r.workload == "P4" and r.settings["flush_policy"] == policy]
            p50 = median([r.latency["p50_ms"] for r in runs])
            p99 = median([r.latency["p99_ms"] for r in runs])
            emit({"summary": True, "workload": "P4", "flush_policy": policy, "runs": len(runs),
                  "median_p50_ms": round(p50, 3), "median_p99_ms": round(p99, 3),
                  "median_p999_ms": round(median([r.latency["p999_ms"] for r in runs]), 3),
                  "median_achieved_rec_per_s": round(median([r.rec_per_s for r in runs])),
                  "target": {"p50_ms": 2, "p99_ms": 5}, "meets_target": p50 <= 2 and p99 <= 5,
                  "load_avg_1m": [r.settings["load_avg_1m"] for r in runs]})
        if self.failovers:
            times = [f["kill_to_first_ack_s"] for f in self.failovers if f["kill_to_first_ack_s"] is not None]
            emit({"summary": True, "workload": "failover", "kills": len(self.failovers),
                  "recovered": len(times), "median_s": round(median(times), 3) if times else None,
                  "min_s": min(times, default=None), "max_s": max(times, default=None),
                  "median_kill_to_new_leader_s": round(median(
                      [f["kill_to_new_leader_s"] for f in self.failovers
                       if f["kill_to_new_leader_s"] is not None] or [float("nan")]), 3),
                  "target_s": 3, "meets_target": bool(times) and median(times) <= 3})


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile and work.py_spy() is None:
        print("--profile needs py-spy (pip install py-spy)", file=sys.stderr)
        return 2
    emit({"region_bench": True, "load_avg_1m": load_average(), "cpus": os.cpu_count(),
          "only": args.only, "policies": args.policies, "runs": args.runs})
    bench = RegionBench(args)
    try:
        bench.run()
    finally:
        bench.summarize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
