"""``mq analytics lag``: the PySpark consumer-lag job over ``__lag_snapshots``.

Which regions: ``--bootstrap`` (or $MQ_BOOTSTRAP) names one cluster; else every region of
the topology ``mq up`` started (``--region``: one of them); else localhost:9092. Spark runs
``local[*]`` here unless ``--master spark://HOST:7077``. The job (``mq.analytics.lag_report``)
writes parquet, PNG plots and summary.json under ``--out`` and this prints the summary
table and the breach windows. PySpark and Java are checked first, with how to get them.
"""

from __future__ import annotations

import argparse
import os
import re
import time

from mq.cli.common import EXIT_USAGE, CliError, data_dir_of_env, duration_ms, regex
from mq.cli.output import cell, console, print_table, table


def register(sub: argparse._SubParsersAction) -> None:
    analytics = sub.add_parser("analytics", help="PySpark analyses of mq data: `mq analytics lag`",
                               description="PySpark jobs over mq (needs the spark extra and Java).")
    verbs = analytics.add_subparsers(dest="analytics_command", metavar="COMMAND", title="commands",
                                     parser_class=type(analytics))
    verbs.required = True
    p = verbs.add_parser("lag", help="consumer lag over time, SLA breaches, skewed partitions, e2e latency",
                         description="Read the lag snapshots of the last --since (the lag exporter's\n"
                                     "__lag_snapshots) with Spark and write, under --out: lag over time per consumer\n"
                                     "group (and mirror flow) and partition, lag-in-seconds percentiles, SLA breach\n"
                                     "windows (lag above --threshold for at least --longer-than), the partitions behind\n"
                                     "them, end-to-end latency from the records' timestamps and mirror lag per flow, as\n"
                                     "parquet, PNG plots and summary.json; print the summary.")
    p.add_argument("--since", type=duration_ms, default="10m", metavar="DURATION",
                   help="how far back to look: 30s, 10m, 2h (default: 10m)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where the parquet, PNG and summary.json go (default: <data dir>/analytics)")
    p.add_argument("-b", "--bootstrap", "--bootstrap-server", dest="servers", default=None,
                   metavar="HOST:PORT[,...]", help="the cluster whose snapshots to read (default: $MQ_BOOTSTRAP, "
                                                   "else every region `mq up` started, else localhost:9092)")
    p.add_argument("--region", default=None, metavar="NAME",
                   help="only this region of the topology `mq up` started (with --bootstrap: its name)")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="where `mq up` keeps cluster.json (default: $MQ_DATA_DIR, else ./.mq)")
    p.add_argument("--master", default="local[*]", metavar="URL",
                   help="Spark master: local[*] (default), local[N], spark://HOST:7077")
    p.add_argument("--threshold", type=duration_ms, default="10s", metavar="DURATION",
                   help="lag in seconds above this is an SLA breach (default: 10s)")
    p.add_argument("--longer-than", type=duration_ms, default="30s", metavar="DURATION", dest="longer_than",
                   help="report breaches lasting at least this long (default: 30s)")
    p.add_argument("--load", action="append", default=[], metavar="DIR",
                   help="a `mq load run` directory: its locust history joins the lag plot (repeatable)")
    p.add_argument("--groups", type=regex, default=None, metavar="REGEX",
                   help="only the consumer groups whose whole id matches (mirror flows are kept)")
    p.add_argument("--no-e2e", action="store_true",
                   help="skip the end-to-end latency (it reads the groups' topics over the window)")
    p.add_argument("--topic", default="__lag_snapshots", help="where the snapshots are (default: __lag_snapshots)")
    p.set_defaults(func=run_lag)


def _sources(args: argparse.Namespace) -> list:
    from mq.analytics.lag_report import Source
    from mq.cli.lag import where_to_look

    deployment, region, bootstrap = where_to_look(args)
    if deployment is not None:
        return [Source(r.name, r.bootstrap) for r in deployment.regions if not region or r.name == region]
    return [Source(region or "", bootstrap)]


_SOURCE_ERROR = re.compile(r"\[(MQ_SOURCE_[A-Z_]+)\] ([^\n]*)")


def run_lag(args: argparse.Namespace) -> int:
    from mq.cli.common import require_broker

    try:
        from mq.analytics.session import AnalyticsUnavailable, check_requirements
    except ImportError as exc:  # pragma: no cover - mq.analytics ships with mq
        raise CliError(f"mq.analytics is not importable ({exc})", "reinstall mq") from None
    try:
        check_requirements()
    except AnalyticsUnavailable as exc:
        raise CliError(exc.what, exc.todo) from None
    sources = _sources(args)
    for source in sources:
        require_broker(source.bootstrap)
    for path in args.load:
        if not os.path.exists(path):
            raise CliError(f"--load {path}: no such file or directory", "pass a directory `mq load run` wrote "
                           "(`mq load list` shows them)", exit_code=EXIT_USAGE)
    from mq.analytics.lag_report import existing_topics

    if not any(existing_topics(source.bootstrap, [args.topic]) for source in sources):
        where = ", ".join(s.region or s.bootstrap for s in sources)
        raise CliError(f"no {args.topic} topic in {where}: no lag snapshots to analyse",
                       "the lag exporter writes them: `mq up` starts one (`mq lag status`), or run `mq lag export`")
    out_dir = args.out or os.path.join(args.data_dir or data_dir_of_env(), "analytics")
    report = _run_job(args, sources, out_dir)
    _print(report, args)
    return 0


def _run_job(args: argparse.Namespace, sources: list, out_dir: str):  # type: ignore[no-untyped-def]
    from mq.analytics import lag_report
    from mq.analytics.session import spark_session

    started = time.monotonic()
    spark = spark_session(args.master, app_name="mq-analytics-lag", config={"spark.log.level": "ERROR"})
    try:
        since_ms = time.time_ns() // 1_000_000 - args.since
        return lag_report.run(spark, sources, since_ms=since_ms, out_dir=out_dir, threshold_s=args.threshold / 1000,
                              min_duration_s=args.longer_than / 1000, e2e=not args.no_e2e, load_paths=args.load,
                              topic=args.topic, groups=args.groups)
    except lag_report.NoSnapshots as exc:
        raise CliError(str(exc), "check `mq lag status`, or look further back with --since") from None
    except Exception as exc:  # Spark wraps the source's errors: show the mq one
        found = _SOURCE_ERROR.search(str(exc))
        if found is None:
            raise
        raise CliError(f"{found.group(1)}: {found.group(2)}", "see docs/reference/spark-source.md") from None
    finally:
        spark.stop()
        console().print(f"spark job finished in {time.monotonic() - started:.1f} s", style="dim")


def _print(report, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    out = console()
    t = table("kind", "region", "name", "rounds", "max lag", "lag s p50", "lag s p99", "lag s max", "breaches",
              "breach s", "top partition", "share", "e2e p50 ms", "e2e p99 ms")
    for r in report.summary:
        t.add_row(r["kind"], r["region"] or "-", r["name"], cell(r["rounds"]), cell(r["lag_max"]),
                  _num(r["lag_seconds_p50"]), _num(r["lag_seconds_p99"]), _num(r["lag_seconds_max"]),
                  cell(r["breaches"]), _num(r["breach_seconds"]), cell(r["top_partition"]),
                  _num(r["top_partition_share"]), _num(r["e2e_p50_ms"]), _num(r["e2e_p99_ms"]))
    print_table(t)
    threshold, longer = args.threshold / 1000, args.longer_than / 1000
    if not report.breaches:
        out.print(f"no SLA breach: lag never stayed above {threshold:g} s for {longer:g} s")
    for b in report.breaches:
        state = "still open" if b["open"] else "closed"
        out.print(f"breach: {b['kind']} {b['name']} ({b['region'] or '-'}) lag above {threshold:g} s for "
                  f"{b['duration_s']:g} s from {_when(b['start_ms'])} ({state}), peak {b['peak_lag_seconds']:g} s, "
                  f"{b['peak_lag']} records")
    out.print(f"wrote {len(report.files)} files to {report.out_dir}")


def _num(value) -> str:  # type: ignore[no-untyped-def]
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _when(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + "Z"
