"""Consumer group benchmarks: rebalance pause, group consume throughput, coordinator fail-over.

    python -m loadtests.bench_groups [--only rebalance,group-throughput,coordinator-failover]
                                     [--runs K] [--partitions 100] [--consumers 10] ...
    mq bench --only rebalance,group-throughput,coordinator-failover ...  (the same)

Three brokers on this machine (``loadtests.region.BenchRegion``), with
``group.initial.rebalance.delay.ms=0`` and ``group.min.session.timeout.ms=500`` so
groups form at once and short sessions are allowed.

- rebalance: ``--partitions`` (100) partitions fed at ``--rate`` records/s in total
  (every partition every tick); ``--consumers`` (10) members, each a ``Consumer`` on
  its own event loop thread (``mq.lab.groups``). Once the group is stable and every
  partition is being consumed, a steady window measures what a normal gap between two
  polls of a partition looks like; then one member joins. Over the window from the
  join until the group is balanced again and every partition was consumed since (plus
  ``--tail-s``): per partition the longest gap between polls that returned its records;
  "kept consuming" = longest gap <= threshold (``max(--min-threshold-s,
  --threshold-factor x the steady median longest gap)``); "kept assigned" = some member
  owned it at every instant (the callbacks' record). Eager (``--eager-assignor``,
  ``sticky``: the same targets, so only the protocol differs) and ``cooperative-sticky``
  alternate run by run, a fresh group each run; the median of ``--runs`` is reported.
- group-throughput: ``--tp-records`` records on ``--tp-partitions`` (12) partitions,
  consumed from the start by one consumer and by a group of ``--tp-consumers`` (3),
  each consumer its own process. Every member pauses what it is assigned until the
  group is balanced, then all resume at once: the time is from then to the last
  record (joining is reported apart). Runs alternate 1, 3, 1, 3. Peer: Redis streams
  consumer groups (``XREADGROUP ... NOACK``) with the same counts, when
  ``redis-server`` is installed.
- coordinator-failover: one member commits every ``--commit-interval-ms``; SIGKILL the
  broker that coordinates its group (the leader of its ``__consumer_offsets``
  partition), time until a commit sent after the kill succeeds; restart it, wait for
  a full ISR, repeat ``--kills`` times; median and max.

Prints JSON lines like loadtests.bench; see docs/how-to/run-benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from loadtests import group_workloads as work
from loadtests.region import BenchRegion
from loadtests.stats import emit, load_average, median, versions

WORKLOADS = ("rebalance", "group-throughput", "coordinator-failover")
GROUP_CONFIGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500"}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mq bench (groups)", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(WORKLOADS), help=f"out of {', '.join(WORKLOADS)}")
    parser.add_argument("--runs", type=int, default=10, help="rebalance: joins per protocol (median)")
    parser.add_argument("--partitions", type=int, default=100, help="rebalance: partitions")
    parser.add_argument("--consumers", type=int, default=10, help="rebalance: members before the join")
    parser.add_argument("--rate", type=int, default=2000, help="rebalance: records/s over all partitions")
    parser.add_argument("--eager-assignor", default="sticky", help="rebalance: the eager run's assignor")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=250)
    parser.add_argument("--steady-s", type=float, default=1.5, help="rebalance: the steady window")
    parser.add_argument("--tail-s", type=float, default=0.5, help="rebalance: measured after settling")
    parser.add_argument("--min-threshold-s", type=float, default=0.25)
    parser.add_argument("--threshold-factor", type=float, default=3.0)
    parser.add_argument("--tp-records", type=int, default=600_000, help="group-throughput: records")
    parser.add_argument("--tp-partitions", type=int, default=12)
    parser.add_argument("--tp-consumers", type=int, default=3)
    parser.add_argument("--tp-runs", type=int, default=3, help="group-throughput: runs of each size")
    parser.add_argument("--size-bytes", type=int, default=100)
    parser.add_argument("--no-peers", action="store_true", help="group-throughput: skip Redis")
    parser.add_argument("--kills", type=int, default=5, help="coordinator-failover: coordinator kills")
    parser.add_argument("--commit-interval-ms", type=int, default=20)
    parser.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config for every broker (repeatable)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    bad = [w for w in args.only if w not in WORKLOADS]
    if bad:
        parser.error(f"unknown workload(s) {bad}; choose from {', '.join(WORKLOADS)}")
    try:
        args.broker_configs = {**GROUP_CONFIGS, **dict(item.split("=", 1) for item in args.broker_config)}
    except ValueError:
        parser.error("--broker-config takes KEY=VALUE")
    if min(args.runs, args.kills, args.tp_runs, args.tp_records, args.consumers, args.tp_consumers) < 1:
        parser.error("--runs, --kills, --tp-runs, --tp-records and the consumer counts must be at least 1")
    if args.partitions < args.consumers + 1:
        parser.error("--partitions must exceed --consumers (the joining member needs a partition)")
    return args


class GroupBench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.versions = versions()
        self.lines: list[dict[str, Any]] = []
        self.tag = f"{os.getpid()}-{int(time.time())}"

    def record(self, line: dict[str, Any]) -> None:
        line.setdefault("load_avg_1m", load_average())
        line.setdefault("versions", self.versions)
        self.lines.append(line)
        emit(line)

    def run(self) -> None:
        args = self.args
        with BenchRegion.start(configs=args.broker_configs) as region:
            if "rebalance" in args.only:
                for line in work.rebalance(region, args, tag=self.tag):
                    self.record(line)
            if "group-throughput" in args.only:
                for line in work.group_throughput(region, args, tag=self.tag):
                    self.record(line)
            if "coordinator-failover" in args.only:
                for line in work.coordinator_failover(region, args, tag=self.tag):
                    self.record(line)

    def of(self, workload: str, **match: Any) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["workload"] == workload
                and all(x.get(k) == v for k, v in match.items())]

    def summarize(self) -> None:
        pauses = {}
        for protocol in ("eager", "cooperative"):
            runs = self.of("rebalance", protocol=protocol)
            if not runs:
                continue
            kept = median([r["kept_consuming_fraction"] for r in runs])
            pauses[protocol] = {
                "protocol": protocol, "runs": len(runs),
                "median_kept_consuming_fraction": round(kept, 3),
                "median_kept_assigned_fraction": round(median([r["kept_assigned_fraction"] for r in runs]), 3),
                "median_median_gap_s": round(median([r["median_gap_s"] for r in runs]), 3),
                "median_max_gap_s": round(median([r["max_gap_s"] for r in runs]), 3),
                "max_max_gap_s": max(r["max_gap_s"] for r in runs),
                "median_settle_s": round(median([r["settle_s"] for r in runs]), 3),
                "median_moved_partitions": median([r["moved_partitions"] for r in runs]),
                "median_threshold_s": round(median([r["threshold_s"] for r in runs]), 3),
                "duplicates_total": sum(r["duplicates"] for r in runs)}
        if "cooperative" in pauses:
            p = pauses["cooperative"]
            p.update(target={"kept_consuming_fraction": 0.9},
                     meets_target=p["median_kept_consuming_fraction"] >= 0.9)
        if "eager" in pauses:
            p = pauses["eager"]
            p.update(target={"max_gap_s": 2.0}, meets_target=p["median_max_gap_s"] <= 2.0)
        for p in pauses.values():
            emit({"summary": True, "workload": "rebalance", **p})
        if len(pauses) == 2:
            emit({"workload": "rebalance", "ratio": "eager median gap / cooperative median gap",
                  "median_ratio": round(pauses["eager"]["median_median_gap_s"]
                                        / max(pauses["cooperative"]["median_median_gap_s"], 1e-9), 2)})
        rates: dict[tuple[str, int], float] = {}
        for system in ("mq", "redis-streams"):
            for n in sorted({x["consumers"] for x in self.of("group-throughput", system=system)}):
                runs = self.of("group-throughput", system=system, consumers=n)
                rates[(system, n)] = median([r["rec_per_s"] for r in runs])
                emit({"summary": True, "workload": "group-throughput", "system": system, "consumers": n,
                      "runs": len(runs), "median_rec_per_s": round(rates[(system, n)]),
                      "median_join_s": round(median([r["join_s"] for r in runs]), 3)})
        n = self.args.tp_consumers
        for system in ("mq", "redis-streams"):
            if (system, 1) in rates and (system, n) in rates:
                emit({"workload": "group-throughput", "ratio": f"{system} {n} consumers / 1 consumer",
                      "median_ratio": round(rates[(system, n)] / rates[(system, 1)], 2)})
        for k in (1, n):
            if ("mq", k) in rates and ("redis-streams", k) in rates:
                emit({"workload": "group-throughput", "ratio": f"mq / redis-streams, {k} consumer(s)",
                      "median_ratio": round(rates[("mq", k)] / rates[("redis-streams", k)], 2)})
        kills = self.of("coordinator-failover")
        if kills:
            times = [k["kill_to_commit_s"] for k in kills if k["kill_to_commit_s"] is not None]
            emit({"summary": True, "workload": "coordinator-failover", "kills": len(kills),
                  "recovered": len(times), "median_s": round(median(times), 3) if times else None,
                  "max_s": max(times, default=None), "min_s": min(times, default=None),
                  "rebalances": sum(k["generation_changed"] for k in kills),
                  "target_s": 5, "meets_target": bool(times) and len(times) == len(kills)
                  and median(times) <= 5})


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    emit({"groups_bench": True, "load_avg_1m": load_average(), "cpus": os.cpu_count(),
          "only": args.only, "runs": args.runs, "broker_configs": args.broker_configs})
    bench = GroupBench(args)
    try:
        bench.run()
    finally:
        bench.summarize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
