"""``python -m mirror``: run a flow, show its status, fail over, fail back.

``mq mirror ARGS...`` runs this with the same arguments (mq never imports mirror).
Exit codes: 0 done, 1 the operation failed (the message says why), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import gc
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence

from mirror.flow_config import (
    FETCH_DEFAULTS,
    FlowConfig,
    FlowConfigError,
    data_dir_of,
    default_cluster_path,
    fetch_settings,
    flow_dir_name,
    flow_from_cluster,
    load_cluster,
    parse_address_map,
)
from mirror.status import describe, read_status, status_paths
from mirror.topics import TopicFilter
from mq.core.errors import MqError

PROG = "python -m mirror"
GC_THRESHOLDS = (100_000, 50, 100)  # the cyclic GC per 100,000 allocations, not 700 (cmd_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=(
        "The geo-replication mirror: copies topics of one region into offset-preserving mirror "
        "topics of another, syncs consumer group offsets, fails over and back."))
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one mirror flow (mq up starts one per flow)")
    run.add_argument("--cluster", metavar="PATH", help="cluster.json written by mq up (default .mq/cluster.json)")
    run.add_argument("--flow", required=True, metavar="NAME", help="the flow's name in cluster.json, e.g. east-to-west")
    run.add_argument("--source-bootstrap", metavar="HOST:PORT,...",
                     help="the source region's brokers (instead of --cluster)")
    run.add_argument("--target-bootstrap", metavar="HOST:PORT,...",
                     help="the target region's brokers (instead of --cluster)")
    run.add_argument("--source-address-map", default="", metavar="ADVERTISED=DIAL,...",
                     help="reach each source broker through this address (its link proxy listener)")
    run.add_argument("--source-region", default="source", metavar="NAME", help="the source region's name")
    run.add_argument("--target-region", default="target", metavar="NAME", help="the target region's name")
    run.add_argument("--state-dir", metavar="DIR",
                     help="where status.json and mirror.pid go (default: the flow's dir, or .mq/mirror-NAME)")
    run.add_argument("--topics", action="append", metavar="REGEX", help="mirror topics matching (whole name)")
    run.add_argument("--exclude", action="append", metavar="REGEX", help="but not those matching")
    run.add_argument("--groups", action="append", metavar="REGEX", help="sync offsets of groups matching")
    run.add_argument("--groups-exclude", action="append", metavar="REGEX", help="but not of those matching")
    run.add_argument("--refresh-topics-interval-ms", type=int, metavar="MS",
                     help="how often topics and configs are listed (default 1000)")
    run.add_argument("--sync-group-offsets-interval-ms", type=int, metavar="MS",
                     help="how often group offsets are synced (default 5000)")
    run.add_argument("--emit-heartbeats-interval-ms", type=int, metavar="MS",
                     help="how often a heartbeat is written to the source (default 1000)")
    run.add_argument("--replication-factor", type=int, metavar="N",
                     help="of the mirror topics it creates (default min(3, brokers))")
    run.add_argument("--max-partition-fetch-bytes", type=int, metavar="BYTES",
                     help=f"most bytes a fetch asks of one partition (default {FETCH_DEFAULTS.partition_max_bytes})")
    run.add_argument("--buffer-max-bytes", type=int, metavar="BYTES",
                     help=f"the flow's memory for fetched records not yet appended, fetches in flight included "
                          f"(default {FETCH_DEFAULTS.buffer_max_bytes})")
    run.add_argument("--fetches-per-leader", type=int, metavar="N",
                     help=f"fetch requests in flight per source leader (default {FETCH_DEFAULTS.fetches_per_leader})")
    run.add_argument("--metrics-listen", default="127.0.0.1:0", metavar="HOST:PORT",
                     help="where /metrics listens (port 0: any free port, logged at start)")

    status = sub.add_parser("status", help="per flow and partition: ends, lag, latency, state")
    _cluster_args(status)
    status.add_argument("--flow", action="append", metavar="NAME", help="only this flow (repeatable)")
    status.add_argument("--json", action="store_true", help="the status documents as JSON")

    failover = sub.add_parser("failover", help="promote REGION's mirror topics and report records at risk")
    _cluster_args(failover)
    failover.add_argument("--to", required=True, metavar="REGION", help="the region that becomes the writer")
    failover.add_argument("--group", action="append", default=[], metavar="GROUP",
                          help="also sync this group's offsets, even if the flow's patterns leave it out "
                               "(with --translate: the groups to move)")
    failover.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                          help="promote only these mirror topics (default: all of the flow's)")
    failover.add_argument("--translate", action="store_true",
                          help="active-active flows: commit each --group's translated offsets on the remote "
                               "topics in REGION (the group must have no active members there); the flows "
                               "keep running and nothing is promoted")
    failover.add_argument("--json", action="store_true", help="the report as JSON (the steps go to stderr)")

    failback = sub.add_parser("failback", help="make REGION the writer again after a fail-over")
    _cluster_args(failback)
    failback.add_argument("--to", required=True, metavar="REGION", help="the original writer region")
    failback.add_argument("--catch-up-timeout-s", type=float, default=300.0, metavar="S",
                          help="give up waiting for the reverse flow after this long (run again to go on)")
    failback.add_argument("--json", action="store_true", help="the summary as JSON (the steps go to stderr)")
    return parser


def _cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="PATH", help="cluster.json written by mq up (default .mq/cluster.json)")
    parser.add_argument("--data-dir", metavar="DIR", help="the data dir holding mirror-NAME/ (default: cluster.json's)")


def _log_setup() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # The client logs every failed connect and metadata attempt; while a link is down that
    # is several lines a second. The flow's own lines (and status.json) say what matters.
    logging.getLogger("mq.client").setLevel(logging.WARNING)


def flow_from_args(args: argparse.Namespace) -> FlowConfig:
    if args.source_bootstrap or args.target_bootstrap:
        if not (args.source_bootstrap and args.target_bootstrap):
            raise FlowConfigError("give both --source-bootstrap and --target-bootstrap (or --cluster)")
        flow = FlowConfig(
            name=args.flow, source_region=args.source_region, target_region=args.target_region,
            source_bootstrap=args.source_bootstrap, target_bootstrap=args.target_bootstrap,
            state_dir=args.state_dir or os.path.join(".mq", flow_dir_name(args.flow)),
            source_address_map=parse_address_map(args.source_address_map))
    else:
        flow = flow_from_cluster(args.cluster or default_cluster_path(), args.flow)
    changes: dict = {}
    if args.state_dir:
        changes["state_dir"] = args.state_dir
    if args.topics or args.exclude:
        changes["topics"] = TopicFilter(tuple(args.topics or flow.topics.include),
                                        tuple(args.exclude or flow.topics.exclude))
    if args.groups:
        changes["groups"] = tuple(args.groups)
    if args.groups_exclude:
        changes["groups_exclude"] = tuple(args.groups_exclude)
    for key in ("refresh_topics_interval_ms", "sync_group_offsets_interval_ms",
                "emit_heartbeats_interval_ms", "replication_factor"):
        if getattr(args, key) is not None:
            changes[key] = getattr(args, key)
    fetch = (args.max_partition_fetch_bytes, args.buffer_max_bytes, args.fetches_per_leader)
    if any(value is not None for value in fetch):
        old = flow.fetch
        changes["fetch"] = fetch_settings(*(old_value if value is None else value for value, old_value in
                                            zip(fetch, (old.partition_max_bytes, old.buffer_max_bytes,
                                                        old.fetches_per_leader), strict=True)), flow=flow.name)
    if changes:
        from dataclasses import replace

        flow = replace(flow, **changes)
    return flow


def cmd_run(args: argparse.Namespace) -> int:
    from mirror.runner import FlowRunner

    flow = flow_from_args(args)
    _log_setup()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: where is it stuck?
    # A fetch decodes thousands of records (tuples of bytes, no cycles) at a time: with the
    # default threshold (700) the cyclic GC scans them again and again, 30-50% of the copy
    # path's time (loadtests AA-transform); what is loaded at start is never collected.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await FlowRunner(flow, metrics_listen=args.metrics_listen).run(stop)

    asyncio.run(main())
    return 0


def data_dir_from_args(args: argparse.Namespace) -> str:
    if args.data_dir:
        return args.data_dir
    path = args.cluster or default_cluster_path()
    if os.path.exists(path):
        return data_dir_of(load_cluster(path), path)
    return os.path.dirname(path) or "."


def cmd_status(args: argparse.Namespace) -> int:
    data_dir = data_dir_from_args(args)
    docs = [d for d in (read_status(p) for p in status_paths(data_dir, args.flow or ())) if d]
    if args.json:
        print(json.dumps(docs if not args.flow or len(args.flow) > 1 else (docs[0] if docs else None),
                         indent=2))
        return 0 if docs else 1
    if not docs:
        print(f"no mirror flow status under {data_dir} (is a mirror running? mq up starts one per flow)")
        return 1
    now = int(time.time() * 1000)
    # On a terminal the tables fit its width (columns left out say so); piped, they are whole.
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print("\n\n".join(describe(d, now_ms=now, width=width) for d in docs))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "failover":
            from mirror.failover import cmd_failover

            return cmd_failover(args)
        from mirror.failback import cmd_failback

        return cmd_failback(args)
    except FlowConfigError as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 2
    except MqError as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
