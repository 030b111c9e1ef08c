"""``mq lag export|status``: the lag exporter in the foreground, and the one ``mq up`` started.

``export`` runs ``mq.deploy.lag_exporter`` here until Ctrl-C: with ``--bootstrap`` (or
$MQ_BOOTSTRAP) one cluster; else every region of the topology ``mq up`` started under
``--data-dir`` (or only ``--region``'s), with the mirror flows into each; else
localhost:9092. ``status`` prints what the exporter ``mq up`` started last reported.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from mq.cli.common import (
    EXIT_USAGE,
    CliError,
    data_dir_of_env,
    duration_ms,
    host_port,
    host_port_or_any,
    regex,
    require_broker,
)
from mq.cli.output import console, print_table, table

# The exporter's defaults (mq.deploy.lag_exporter's, which loads the client: the command
# line does not import it to build its parser; a unit test keeps the two equal).
DEFAULT_INTERVAL = "5s"
DEFAULT_TOPIC = "__lag_snapshots"
DEFAULT_RETENTION = "1d"
DEFAULT_PARTITIONS = 3


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=duration_ms, default=DEFAULT_INTERVAL, metavar="DURATION",
                   help=f"time between rounds: 500ms, 1s, 1m (default: {DEFAULT_INTERVAL})")
    p.add_argument("--topic", default=DEFAULT_TOPIC, help=f"where snapshots go (default: {DEFAULT_TOPIC})")
    p.add_argument("--retention", type=duration_ms, default=DEFAULT_RETENTION, metavar="DURATION",
                   help=f"retention.ms of the topic when the exporter creates it (default: {DEFAULT_RETENTION})")
    p.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS, metavar="N",
                   help=f"partitions of the topic when the exporter creates it (default: {DEFAULT_PARTITIONS})")
    p.add_argument("--groups", type=regex, default=".*", metavar="REGEX",
                   help="export only the groups whose whole id matches (default: every group)")
    p.add_argument("--metrics-listen", type=host_port_or_any, default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where /metrics listens (default: a free port, logged at start)")
    p.add_argument("--no-metrics", dest="metrics_listen", action="store_const", const="",
                   help="serve no /metrics")
    p.add_argument("--status-file", default="", metavar="PATH", help="rewrite this JSON status after every round")
    p.add_argument("--rounds", type=int, default=0, metavar="N", help="stop after N rounds (default: until Ctrl-C)")


def register(sub: argparse._SubParsersAction) -> None:
    lag = sub.add_parser("lag", help="export consumer group and mirror lag to __lag_snapshots and /metrics",
                         description="The lag exporter: every interval, one snapshot per consumer group (and mirror\n"
                                     "flow) and partition — committed offset, log end, lag in records and seconds,\n"
                                     "members, region — written to __lag_snapshots and served on /metrics.\n"
                                     "`mq up` starts one (unless --no-lag-export); `mq analytics lag` reads them.")
    verbs = lag.add_subparsers(dest="lag_command", metavar="COMMAND", title="commands", parser_class=type(lag))
    verbs.required = True
    p = verbs.add_parser("export", help="run the lag exporter in the foreground until Ctrl-C",
                         description="Run the lag exporter here until Ctrl-C (or --rounds N). Which clusters:\n"
                                     "--bootstrap (or $MQ_BOOTSTRAP): that one; else every region `mq up` started\n"
                                     "under --data-dir (--region: only that one), with the mirror flows into each;\n"
                                     "else localhost:9092.")
    p.add_argument("-b", "--bootstrap", "--bootstrap-server", dest="servers", default=None,
                   metavar="HOST:PORT[,...]", help="the cluster to export (default: $MQ_BOOTSTRAP, else the regions "
                                                   "`mq up` started, else localhost:9092)")
    p.add_argument("--region", default=None, metavar="NAME",
                   help="only this region of the topology `mq up` started (with --bootstrap: the name its "
                        "snapshots carry; default: $MQ_REGION)")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="where `mq up` keeps cluster.json (default: $MQ_DATA_DIR, else ./.mq)")
    add_options(p)
    p.set_defaults(func=run_export)

    p = verbs.add_parser("status", help="show what the lag exporter `mq up` started last reported",
                         description="Per region: rounds, snapshots written, groups and flows in the last round,\n"
                                     "when it ran and its errors; the exporter's pid and /metrics address.")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="where `mq up` keeps cluster.json (default: $MQ_DATA_DIR, else ./.mq)")
    p.add_argument("--status-file", default=None, metavar="PATH",
                   help="a status file written by `mq lag export --status-file PATH` instead")
    p.set_defaults(func=run_status)


def where_to_look(args: argparse.Namespace) -> tuple[object | None, str | None, str | None]:
    """``(deployment, region, bootstrap)`` for commands that can span every region, in the
    order of ``mq.cli.common.bootstrap_of``: --bootstrap (named by --region); --region (of
    the cluster.json under the data dir); $MQ_BOOTSTRAP; $MQ_REGION; every region of
    cluster.json; localhost:9092. Exactly one of deployment and bootstrap is set."""
    from mq.deploy.topology import load_cluster

    data_dir = getattr(args, "data_dir", None) or data_dir_of_env()
    path = os.path.join(data_dir, "cluster.json")

    def recorded(region: str | None, flag: str):  # type: ignore[no-untyped-def]
        if not os.path.exists(path):
            if region is None:
                return None
            raise CliError(f"{flag} {region}: no topology runs under {data_dir} (cluster.json not found)",
                           "start one with `mq up`, pass --data-dir, or pass --bootstrap HOST:PORT",
                           exit_code=EXIT_USAGE)
        deployment = load_cluster(path)
        if region is not None and deployment.region(region) is None:
            raise CliError(f"{flag} {region}: no such region under {data_dir} (regions: "
                           f"{', '.join(deployment.region_names)})", "pick one `mq status` lists", exit_code=EXIT_USAGE)
        return deployment

    if args.servers:  # not `bootstrap`: mq.cli.main would resolve --region against $MQ_DATA_DIR first
        return None, args.region, _checked(args.servers)
    if args.region:
        return recorded(args.region, "--region"), args.region, None
    if os.environ.get("MQ_BOOTSTRAP"):
        return None, None, _checked(os.environ["MQ_BOOTSTRAP"])
    if os.environ.get("MQ_REGION"):
        return recorded(os.environ["MQ_REGION"], "MQ_REGION"), os.environ["MQ_REGION"], None
    deployment = recorded(None, "")
    return (deployment, None, None) if deployment is not None else (None, None, "localhost:9092")


def _checked(bootstrap: str) -> str:
    for address in bootstrap.split(","):
        try:
            host_port(address.strip())
        except argparse.ArgumentTypeError as exc:
            raise CliError(f"bad --bootstrap: {exc}", "pass --bootstrap HOST:PORT[,HOST:PORT...]",
                           exit_code=EXIT_USAGE) from None
    return bootstrap


def _targets(args: argparse.Namespace) -> list:
    from mq.deploy.lag_exporter import RegionTarget, targets_of

    deployment, region, bootstrap = where_to_look(args)
    if deployment is not None:
        return targets_of(deployment, region)
    return [RegionTarget(region or "", bootstrap)]


def run_export(args: argparse.Namespace) -> int:
    import logging
    import sys

    from mq.deploy.lag_exporter import options_of, run

    targets = _targets(args)
    for target in targets:
        require_broker(target.bootstrap)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return run(targets, options_of(args))


def run_status(args: argparse.Namespace) -> int:
    from mq.deploy.services import LAG_EXPORTER_KEY

    data_dir = args.data_dir or data_dir_of_env()
    path = args.status_file or os.path.join(data_dir, LAG_EXPORTER_KEY, "status.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise CliError(f"no lag exporter status at {path}",
                       "start one with `mq up` (it starts the exporter) or `mq lag export --status-file PATH`") \
            from None
    except ValueError as exc:
        raise CliError(f"{path} is not a lag exporter status file ({exc})", "pass the right --status-file") from None
    now_ms = time.time_ns() // 1_000_000
    age = (now_ms - int(doc.get("updated_ms", now_ms))) / 1000
    out = console()
    out.print(f"lag exporter pid {doc.get('pid')}: every {int(doc.get('interval_ms', 0)) / 1000:g} s to "
              f"{doc.get('topic')}, /metrics at http://{doc.get('metrics') or '-'}/metrics, updated {age:.1f} s ago")
    t = table("region", "rounds", "snapshots", "groups", "flows", "last round s", "errors")
    for region, r in sorted((doc.get("regions") or {}).items()):
        errors = ", ".join(f"{k} {n}" for k, n in sorted((r.get("errors") or {}).items())) or "-"
        t.add_row(region or "-", str(r.get("rounds")), str(r.get("snapshots")), str(r.get("groups")),
                  str(r.get("flows")), str(r.get("last_round_seconds")), errors)
    print_table(t)
    for region, r in sorted((doc.get("regions") or {}).items()):
        for line in r.get("last_errors") or []:
            out.print(f"[yellow]{region}[/]: {line}")
    if age > 3 * int(doc.get("interval_ms", 5000)) / 1000 + 5:
        out.print("[yellow]the status is old: is the exporter running?[/] (`mq status`, or its log)")
    return 0
