"""Geo-replication benchmarks (PERFORMANCE.md P7, and fail-over), two regions on this machine.

    python -m loadtests.bench_geo [--only P7,P7-latency,geo-failover] [--runs K] ...
    mq bench --only P7,P7-latency,geo-failover ...  (the same, through loadtests.bench)

The one path of every geo workload, whatever the region size: two regions, ``east`` and
``west`` (``--brokers`` each: 3 by default, 1 for single-broker regions), the link
process between them (``--link-latency-ms`` one way, 50 by default) and the mirror flow
east -> west with its settings (``--mirror-config KEY=VALUE``): the processes ``mq up``
starts, on free ports in a temporary directory (``mq.lab.geo.GeoLab``). The mirror is
driven only through ``python -m mirror`` and its status file. Every line also carries
``bytes``, the largest broker's and the mirror's RSS, the load average, the versions, and
the mirror's fetch settings as its status file reports them (``settings.mirror_fetch``).

- P7 (throughput; ``--p7-modes``): ``--records`` 100-byte records on ``--partitions`` (6)
  partitions, RF=3, acks=all, produced by ``--producers`` processes with ``send_many``.
  ``backlog``: the mirror is stopped while the source is filled, then started; the rate
  is from its first mirrored record to the last (``rec_per_s_from_start`` includes its
  start-up). ``live``: the mirror runs while the records are produced flat out; the
  rate is over the same records, from the first one mirrored to the last, with the
  source's produce rate beside it and how long after the producers the mirror finished.
- P7-latency: ``--rate`` (50,000; a comma-separated list measures each) records/s for ``--latency-seconds`` after
  ``--warmup-s``, ``send()`` per record round-robin over the partitions (acks=all,
  ``--linger-ms``); a reader in west (its own process) takes now - the send stamp of
  every record it reads from the mirror topic. The mirror's own heartbeat latency is
  printed beside it.
- geo-failover: per ``--failover-rates`` rate and ``--failover-modes`` mode, ``--failover-runs``
  runs, each on a fresh pair of regions: produce at the rate for ``--steady-s``; at T0 the
  writers stop (``planned``), or the link is also cut both ways (``disaster``); once they
  have drained, ``mq mirror failover --to west`` runs. Fail-over time: T0 to the first
  record acknowledged in west (a writer there tries every 5 ms). Records at risk: as the
  command reports them, and the truth (what east holds past west's promotion point; of
  those, how many the writers had been told were acknowledged by T0). Planned runs then
  fail back (``mq mirror failback --to east``, timed; the diverged tail counted).

There is no peer: MirrorMaker 2 needs a Kafka distribution (Java) that cannot be
installed here (only PyPI and Debian packages); the output says so. Prints JSON lines
like loadtests.bench; see docs/how-to/run-benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from loadtests import aa_workloads as aa
from loadtests import geo_workloads as work
from loadtests.stats import emit, load_average, median, versions
from mq.core.errors import MqError
from mq.lab.active import FLOWS as AA_FLOWS
from mq.lab.active import start_active_active
from mq.lab.geo import SOURCE, TARGET, GeoLab
from mq.lab.process import rss_mb

WORKLOADS = ("P7", "P7-latency", "geo-failover", "AA", "AA-latency", "AA-transform")
AA_LOADED = ("both", "one")
P7_MODES = ("backlog", "live")
FAILOVER_MODES = ("planned", "disaster")
PEER_NOTE = {"peer": "mirrormaker2", "available": False,
             "reason": "MirrorMaker 2 runs on a Kafka distribution (Java, Maven artifacts) that cannot be "
                       "installed on this machine (PyPI and Debian packages only): no side-by-side figures"}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str, allowed: Sequence[str], parser: argparse.ArgumentParser, flag: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in allowed]
    if bad:
        parser.error(f"{flag}: unknown {bad}; choose from {', '.join(allowed)}")
    return names


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mq bench (geo)", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(WORKLOADS), help=f"out of {', '.join(WORKLOADS)}")
    parser.add_argument("--runs", type=int, default=3, help="P7 and P7-latency: runs of each (median)")
    parser.add_argument("--brokers", type=int, default=3, help="brokers per region")
    parser.add_argument("--link-latency-ms", type=float, default=50.0, help="one way, both directions")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--size-bytes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--records", type=int, default=2_000_000, help="P7: records per run")
    parser.add_argument("--producers", type=int, default=2, help="P7: producer processes")
    parser.add_argument("--chunk-records", type=int, default=10_000, help="P7: records per send_many call")
    parser.add_argument("--batch-size", type=int, default=1_000_000, help="P7 producers' batch_size (bytes)")
    parser.add_argument("--p7-modes", default=",".join(P7_MODES), help=f"out of {', '.join(P7_MODES)}")
    parser.add_argument("--rate", default="50000",
                        help="P7-latency: records per second (comma-separated: one measurement per rate)")
    parser.add_argument("--latency-seconds", type=float, default=20.0, help="P7-latency: measured seconds")
    parser.add_argument("--warmup-s", type=float, default=2.0, help="P7-latency: seconds left out at the start")
    parser.add_argument("--linger-ms", type=int, default=5, help="P7-latency producer")
    parser.add_argument("--failover-rates", default="10000,50000", help="geo-failover: records per second")
    parser.add_argument("--failover-modes", default=",".join(FAILOVER_MODES),
                        help=f"geo-failover: out of {', '.join(FAILOVER_MODES)}")
    parser.add_argument("--failover-runs", type=int, default=3, help="geo-failover: runs per rate and mode")
    parser.add_argument("--steady-s", type=float, default=5.0, help="geo-failover: seconds of load before T0")
    parser.add_argument("--no-failback", action="store_true", help="geo-failover: skip the timed fail-back")
    parser.add_argument("--aa-loaded", default=",".join(AA_LOADED),
                        help="AA: out of both (a producer in each region), one (east only)")
    parser.add_argument("--aa-modes", default="live",
                        help=f"AA: out of {', '.join(P7_MODES)} (backlog: the flows start once both regions are filled)")
    parser.add_argument("--aa-rate", type=int, default=20_000,
                        help="AA-latency: records per second into each region")
    parser.add_argument("--transform-batches", type=int, default=50,
                        help="AA-transform: source batches of 1,000 records per run")
    parser.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config for every broker of both regions (repeatable)")
    parser.add_argument("--mirror-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the mirror flow, e.g. max.partition.fetch.bytes=1048576 (repeatable)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    args.only = _names(args.only, WORKLOADS, parser, "--only")
    args.p7_modes = _names(args.p7_modes, P7_MODES, parser, "--p7-modes")
    args.failover_modes = _names(args.failover_modes, FAILOVER_MODES, parser, "--failover-modes")
    args.aa_loaded = _names(args.aa_loaded, AA_LOADED, parser, "--aa-loaded")
    args.aa_modes = _names(args.aa_modes, P7_MODES, parser, "--aa-modes")
    try:
        args.failover_rates = _ints(args.failover_rates)
        args.rates = _ints(args.rate)
        args.broker_configs = dict(item.split("=", 1) for item in args.broker_config)
        args.mirror_configs = dict(item.split("=", 1) for item in args.mirror_config)
    except ValueError:
        parser.error("--rate and --failover-rates take integers, --broker-config and --mirror-config KEY=VALUE")
    if min(args.runs, args.failover_runs, args.aa_rate, args.transform_batches, args.brokers, args.partitions, args.records, args.producers,
           *args.rates or [0], *args.failover_rates or [0]) < 1:
        parser.error("counts, rates and --failover-rates must be at least 1")
    return args


class GeoBench:
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

    def lab(self) -> GeoLab:
        return GeoLab.start(brokers=self.args.brokers, latency_ms=self.args.link_latency_ms,
                            sync_interval_ms=5000, refresh_interval_ms=1000, heartbeat_interval_ms=1000,
                            configs=self.args.broker_configs, mirror_configs=self.args.mirror_configs,
                            ready_timeout_s=120)

    def common(self, lab: GeoLab) -> dict[str, Any]:
        """The settings of every line; the mirror's fetch settings as its status file says."""
        return {"brokers_per_region": self.args.brokers, "link_latency_ms": self.args.link_latency_ms,
                "size_bytes": self.args.size_bytes, "mirror_fetch": (lab.mirror_status() or {}).get("fetch")}

    def run(self) -> None:
        args = self.args
        if {"P7", "P7-latency"} & set(args.only):
            with self.lab() as lab:
                for run in range(1, args.runs + 1):
                    if "P7" in args.only:
                        for mode in args.p7_modes:
                            self.p7(lab, run, mode)
                    if "P7-latency" in args.only:
                        for rate in args.rates:
                            self.latency(lab, run, rate)
        if {"AA", "AA-latency"} & set(args.only):
            with self.aa_lab() as lab:
                for run in range(1, args.runs + 1):
                    if "AA" in args.only:
                        for mode in args.aa_modes:
                            for loaded in args.aa_loaded:
                                self.aa(lab, run, loaded, mode)
                    if "AA-latency" in args.only:
                        self.aa_latency(lab, run)
        if "AA-transform" in args.only:
            for line in aa.transform(batches=args.transform_batches, batch_records=1_000,
                                     size_bytes=args.size_bytes, reps=max(3, args.runs)):
                self.record({"workload": "AA-transform", "system": "mq",
                             "operation": "source batches -> target batches with provenance, no I/O",
                             "size_bytes": args.size_bytes, **line})
        if "geo-failover" in args.only:
            for run in range(1, args.failover_runs + 1):  # rates and modes interleaved
                for rate in args.failover_rates:
                    for mode in args.failover_modes:
                        self.failover(run, rate, mode)

    def _drop(self, lab: GeoLab, topic: str) -> None:
        """Untimed: delete the run's topic in east, then its mirror in west (disk and page cache)."""
        for region in (SOURCE, TARGET):
            try:
                lab.admin(region).delete_topics([topic])
            except MqError as exc:
                print(f"deleting {topic} in {region}: {exc}", file=sys.stderr)

    def p7(self, lab: GeoLab, run: int, mode: str) -> None:
        args = self.args
        topic = f"p7-{mode}-{self.tag}-r{run}"
        measure = work.p7_backlog if mode == "backlog" else work.p7_live
        line = measure(lab, topic, records=args.records, partitions=args.partitions, producers=args.producers,
                       size_bytes=args.size_bytes, seed=args.seed, chunk_records=args.chunk_records,
                       batch_size=args.batch_size)
        self.record({"workload": "P7", "system": "mq", "operation": "mirror", "mode": mode, "run": run, **line,
                     **work.memory(lab), "settings": {**line["settings"], **self.common(lab)}})
        self._drop(lab, topic)

    def latency(self, lab: GeoLab, run: int, rate: int) -> None:
        args = self.args
        topic = f"p7lat-{self.tag}-r{run}-{rate}"
        line = work.p7_latency(lab, topic, rate=rate, seconds=args.latency_seconds, warmup_s=args.warmup_s,
                               partitions=args.partitions, size_bytes=args.size_bytes, linger_ms=args.linger_ms)
        self.record({"workload": "P7-latency", "system": "mq", "operation": "replication latency", "run": run,
                     **line, **work.memory(lab), "settings": {**line["settings"], **self.common(lab)}})
        self._drop(lab, topic)

    def aa_lab(self) -> GeoLab:
        return start_active_active(brokers=self.args.brokers, latency_ms=self.args.link_latency_ms,
                                   configs=self.args.broker_configs, mirror_configs=self.args.mirror_configs,
                                   refresh_interval_ms=500, ready_timeout_s=120)

    def aa_common(self, lab: GeoLab) -> dict[str, Any]:
        return {"brokers_per_region": self.args.brokers, "link_latency_ms": self.args.link_latency_ms,
                "size_bytes": self.args.size_bytes, "mirror_configs": self.args.mirror_configs}

    def _aa_memory(self, lab: GeoLab) -> dict[str, Any]:
        return {"broker_rss_mb": work.memory(lab)["broker_rss_mb"],
                "mirror_rss_mb": {flow: rss_mb(lab.mirror_pid(flow)) for flow in AA_FLOWS}}

    def aa(self, lab: GeoLab, run: int, loaded: str, mode: str) -> None:
        args = self.args
        topic = f"aa-{mode}-{loaded}-{self.tag}-r{run}"
        sources = ("east", "west") if loaded == "both" else ("east",)
        line = aa.aa_throughput(lab, topic, records=args.records, partitions=args.partitions,
                                producers=args.producers, size_bytes=args.size_bytes, seed=args.seed,
                                chunk_records=args.chunk_records, batch_size=args.batch_size, sources=sources,
                                backlog=mode == "backlog")
        self.record({"workload": "AA", "system": "mq", "operation": "active-active mirror", "run": run, **line,
                     **self._aa_memory(lab), "settings": {**line["settings"], **self.aa_common(lab)}})
        self._aa_drop(lab, topic)

    def aa_latency(self, lab: GeoLab, run: int) -> None:
        args = self.args
        topic = f"aalat-{self.tag}-r{run}"
        line = aa.aa_latency(lab, topic, rate=args.aa_rate, seconds=args.latency_seconds, warmup_s=args.warmup_s,
                             partitions=args.partitions, size_bytes=args.size_bytes, linger_ms=args.linger_ms)
        self.record({"workload": "AA-latency", "system": "mq", "operation": "active-active replication latency",
                     "run": run, **line, **self._aa_memory(lab),
                     "settings": {**line["settings"], **self.aa_common(lab)}})
        self._aa_drop(lab, topic)

    def _aa_drop(self, lab: GeoLab, topic: str) -> None:
        """Untimed: the run's topics in both regions; the flows' next refresh lets them go."""
        for region, other in (("east", "west"), ("west", "east")):
            try:
                lab.admin(region).delete_topics([topic, f"{other}.{topic}"])
            except MqError as exc:
                print(f"deleting {topic} in {region}: {exc}", file=sys.stderr)

    def failover(self, run: int, rate: int, mode: str) -> None:
        args = self.args
        with self.lab() as lab:
            line = work.failover(lab, f"failover-{self.tag}", rate=rate, mode=mode, steady_s=args.steady_s,
                                 partitions=args.partitions, size_bytes=args.size_bytes,
                                 failback=mode == "planned" and not args.no_failback)
            line.update(work.memory(lab), settings={**line["settings"], **self.common(lab)})
        self.record({"workload": "geo-failover", "system": "mq", "run": run, **line})

    # ------------------------------------------------------------ summaries

    def of(self, workload: str, **match: Any) -> list[dict[str, Any]]:
        return [x for x in self.lines if x.get("workload") == workload and not x.get("summary")
                and all(x.get(k) == v for k, v in match.items())]

    def summarize(self) -> None:
        for mode in P7_MODES:
            runs = self.of("P7", mode=mode)
            if runs:
                rate = median([r["rec_per_s"] for r in runs])
                emit({"summary": True, "workload": "P7", "mode": mode, "runs": len(runs),
                      "median_rec_per_s": round(rate), "per_run": [r["rec_per_s"] for r in runs],
                      "median_source_produce_rec_per_s": round(median([r["source_produce_rec_per_s"] for r in runs])),
                      "target": 300_000, "meets_target": rate >= 300_000})
        for rate in self.args.rates:
            runs = self.of("P7-latency", target_rec_per_s=rate)
            if not runs:
                continue
            p99 = median([r["latency"]["p99_ms"] for r in runs])
            emit({"summary": True, "workload": "P7-latency", "rate": rate, "runs": len(runs),
                  "median_p50_ms": round(median([r["latency"]["p50_ms"] for r in runs]), 1),
                  "median_p99_ms": round(p99, 1), "per_run_p99_ms": [r["latency"]["p99_ms"] for r in runs],
                  "median_send_to_ack_p99_ms": round(median([r["send_to_ack"]["p99_ms"] for r in runs
                                                             if r.get("send_to_ack")] or [float("nan")]), 1),
                  "median_achieved_rec_per_s": round(median([r["achieved_rec_per_s"] for r in runs])),
                  "target": {"p99_ms": 1000}, "meets_target": p99 <= 1000})
        for mode, loaded in [(m, x) for m in P7_MODES for x in AA_LOADED]:
            runs = self.of("AA", mode=mode, loaded="both" if loaded == "both" else "east only")
            if runs:
                rate = median([r["min_direction_rec_per_s"] for r in runs])
                emit({"summary": True, "workload": "AA", "mode": mode, "loaded": loaded, "runs": len(runs),
                      "median_min_direction_rec_per_s": round(rate),
                      "per_run": [{k: d["rec_per_s"] for k, d in r["directions"].items()} for r in runs],
                      "target": 150_000, "meets_target": rate >= 150_000})
        runs = self.of("AA-latency")
        if runs:
            p99s = [d["latency"]["p99_ms"] for r in runs for d in r["directions"].values()]
            emit({"summary": True, "workload": "AA-latency", "rate_per_direction": self.args.aa_rate,
                  "runs": len(runs), "median_p50_ms": round(median([d["latency"]["p50_ms"] for r in runs
                                                                     for d in r["directions"].values()]), 1),
                  "median_p99_ms": round(median(p99s), 1), "max_p99_ms": max(p99s)})
        for rate in self.args.failover_rates:
            for mode in FAILOVER_MODES:
                runs = self.of("geo-failover", rate=rate, mode=mode)
                if not runs:
                    continue
                times = [r["failover_s"] for r in runs if r["failover_s"] is not None]
                line = {"summary": True, "workload": "geo-failover", "rate": rate, "mode": mode, "runs": len(runs),
                        "median_failover_s": round(median(times), 3) if times else None,
                        "max_failover_s": max(times, default=None),
                        "median_command_s": round(median([r["command_s"] for r in runs]), 3),
                        "records_at_risk_reported": [r["records_at_risk_reported"] for r in runs],
                        "records_at_risk_estimate": [r.get("records_at_risk_estimate") for r in runs],
                        "records_at_risk_true": [r["records_at_risk_true"] for r in runs],
                        "records_lost_acked_by_t0": [r["records_lost_acked_by_t0"] for r in runs]}
                backs = [r["failback_s"] for r in runs if "failback_s" in r]
                if backs:
                    line.update(median_failback_s=round(median(backs), 3),
                                diverged_as_expected=all(r["diverged_records"] == r["records_at_risk_true"]
                                                         for r in runs if "failback_s" in r))
                emit(line)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    emit({"geo_bench": True, "load_avg_1m": load_average(), "cpus": os.cpu_count(), "only": args.only,
          "runs": args.runs, "brokers_per_region": args.brokers, "link_latency_ms": args.link_latency_ms})
    emit(PEER_NOTE)
    print(f"no peer: {PEER_NOTE['reason']}", file=sys.stderr)
    bench = GeoBench(args)
    try:
        bench.run()
    finally:
        bench.summarize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
