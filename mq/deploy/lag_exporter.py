"""The lag exporter process: ``python -m mq.deploy.lag_exporter`` (``mq lag export``; ``mq up`` starts one).

Every ``--interval`` it runs one round per region (``mq.client.lag_exporter``): the lag of
every consumer group and of every mirror flow into the region, written to the region's
``__lag_snapshots``. With ``--cluster cluster.json`` (what ``mq up`` starts) it exports
every region of the deployment and reads the mirror flows' status files
(``<data_dir>/mirror-<flow>/status.json``, written by the mirror: mq reads the JSON and
never imports the mirror); with ``--bootstrap`` it exports that one cluster.

It serves the latest snapshots and its own counters on ``/metrics`` (Prometheus text
format, ``--metrics-listen``; port 0 picks a free one, logged and written to the status
file) and rewrites ``--status-file`` after every round (temporary file, then rename)::

    {"pid": 4242, "metrics": "127.0.0.1:41234", "interval_ms": 5000, "topic": "__lag_snapshots",
     "updated_ms": ..., "regions": {"east": {"rounds": 12, "snapshots": 96, "last_round_ms": ...,
     "last_round_seconds": 0.021, "groups": 2, "flows": 0, "errors": {"produce": 1},
     "last_errors": ["produce: NOT_ENOUGH_REPLICAS: ..."]}}}

A failed step is logged (once per distinct message until it changes) and counted; the
exporter keeps running through broker restarts and region outages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mq.client.internals.lag_snapshot import SNAPSHOT_TOPIC, metrics_text
from mq.client.lag_exporter import (
    DEFAULT_PARTITIONS,
    DEFAULT_RETENTION_MS,
    ExportRound,
    LagExporter,
)
from mq.core.argtypes import duration_ms, regex
from mq.core.durations import format_duration_ms
from mq.deploy.topology import Deployment, load_cluster

log = logging.getLogger("mq.lag")

DEFAULT_INTERVAL_MS = 5000  # mq.cli.lag.DEFAULT_INTERVAL
MODULE = "mq.deploy.lag_exporter"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class RegionTarget:
    """One region to export: where its brokers are, and the status files of the flows into it."""

    region: str
    bootstrap: str
    mirror_status_paths: tuple[str, ...] = ()


def targets_of(deployment: Deployment, region: str | None = None) -> list[RegionTarget]:
    """Every region of a deployment (or the one named) with the flows that target it."""
    out = []
    for r in deployment.regions:
        if region and r.name != region:
            continue
        paths = tuple(f.status_path for f in deployment.flows if f.target == r.name)
        out.append(RegionTarget(r.name, r.bootstrap, paths))
    if region and not out:
        raise ValueError(f"no region {region!r} in the cluster file (regions: {', '.join(deployment.region_names)})")
    return out


def read_status_docs(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The mirror status documents that exist and parse (a flow not started yet has none)."""
    docs = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    return docs


@dataclass
class _Shared:
    """What the HTTP thread reads: replaced whole by the loop, never mutated."""

    text: bytes = b""
    errors_seen: dict[str, str] = field(default_factory=dict)


class _MetricsHandler(BaseHTTPRequestHandler):
    shared: _Shared

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self._answer(404, b"not found: the lag exporter serves /metrics\n", "text/plain; charset=utf-8")
            return
        self._answer(200, self.shared.text, CONTENT_TYPE)

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes are not worth a log line each


def serve_metrics(listen: str, shared: _Shared) -> tuple[ThreadingHTTPServer, str]:
    """Start ``/metrics`` on ``listen`` in a daemon thread; returns the server and its address."""
    host, port = metrics_address(listen)
    handler = type("Handler", (_MetricsHandler,), {"shared": shared})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="lag-metrics", daemon=True).start()
    return server, f"{host}:{server.server_address[1]}"


def metrics_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` with port 0 allowed (a free port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (for example 127.0.0.1:9464; port 0: any free port)")
    return host.strip("[]"), int(port)


def write_json_atomically(path: str, doc: Mapping[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


@dataclass
class ExporterOptions:
    interval_ms: int = DEFAULT_INTERVAL_MS
    topic: str = SNAPSHOT_TOPIC
    retention_ms: int = DEFAULT_RETENTION_MS
    partitions: int = DEFAULT_PARTITIONS
    groups: str = ".*"
    metrics_listen: str = "127.0.0.1:0"
    status_file: str = ""
    rounds: int = 0  # 0: until stopped


class ExporterProcess:
    """The exporters of every target, the metrics server and the status file."""

    def __init__(self, targets: Sequence[RegionTarget], options: ExporterOptions) -> None:
        self.targets = list(targets)
        self.options = options
        self.shared = _Shared()
        self.metrics_address = ""
        self.exporters = [
            LagExporter(t.bootstrap, region=t.region, topic=options.topic, retention_ms=options.retention_ms,
                        partitions=options.partitions, groups=options.groups,
                        mirror_status=lambda paths=t.mirror_status_paths: read_status_docs(paths))
            for t in self.targets]
        self.last_rounds: dict[str, ExportRound] = {}

    async def run(self, stop: asyncio.Event) -> int:
        server = None
        if self.options.metrics_listen:
            server, self.metrics_address = serve_metrics(self.options.metrics_listen, self.shared)
        for e in self.exporters:
            await e.start()
        regions = ", ".join(f"{t.region or '-'}={t.bootstrap}" for t in self.targets)
        log.info("lag exporter regions=%s interval=%s topic=%s metrics=%s", regions,
                 format_duration_ms(self.options.interval_ms), self.options.topic, self.metrics_address or "off")
        try:
            done = 0
            while not stop.is_set():
                started = time.monotonic()
                await self.round()
                done += 1
                if self.options.rounds and done >= self.options.rounds:
                    break
                left = self.options.interval_ms / 1000 - (time.monotonic() - started)
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, left))
                except TimeoutError:
                    pass
        finally:
            for e in self.exporters:
                await e.close()
            if server is not None:
                server.shutdown()
                server.server_close()
        return 0

    async def round(self) -> list[ExportRound]:
        rounds = list(await asyncio.gather(*(e.export_once() for e in self.exporters)))
        for r in rounds:
            self.last_rounds[r.region] = r
            self._log(r)
        snapshots = [s for e in self.exporters for s in e.latest]
        self.shared.text = metrics_text(snapshots, [e.stats() for e in self.exporters]).encode()
        if self.options.status_file:
            write_json_atomically(self.options.status_file, self.status_doc())
        return rounds

    def _log(self, r: ExportRound) -> None:
        groups = len({s.group for s in r.snapshots if s.kind == "group"})
        flows = len({s.flow for s in r.snapshots if s.kind == "mirror"})
        log.debug("event=lag_round region=%s groups=%d flows=%d snapshots=%d written=%s seconds=%.3f",
                  r.region, groups, flows, len(r.snapshots), r.written, r.seconds)
        key = r.region
        message = "; ".join(f"{k}: {m}" for k, m in r.errors)
        if message and self.shared.errors_seen.get(key) != message:
            log.warning("event=lag_round_failed region=%s errors=\"%s\"", r.region or "-", message)
        elif not message and self.shared.errors_seen.get(key):
            log.info("event=lag_round_recovered region=%s", r.region or "-")
        self.shared.errors_seen[key] = message

    def status_doc(self) -> dict[str, Any]:
        regions = {}
        for e in self.exporters:
            st = e.stats()
            last = self.last_rounds.get(e.region)
            regions[e.region] = {
                "rounds": st.rounds, "snapshots": st.snapshots, "last_round_ms": st.last_round_ms,
                "last_round_seconds": st.last_round_seconds, "errors": dict(st.errors or {}),
                "groups": len({s.group for s in last.snapshots if s.kind == "group"}) if last else 0,
                "flows": len({s.flow for s in last.snapshots if s.kind == "mirror"}) if last else 0,
                "last_errors": [f"{k}: {m}" for k, m in last.errors] if last else [],
            }
        return {"pid": os.getpid(), "metrics": self.metrics_address, "interval_ms": self.options.interval_ms,
                "topic": self.options.topic, "updated_ms": time.time_ns() // 1_000_000, "regions": regions}


def run(targets: Sequence[RegionTarget], options: ExporterOptions) -> int:
    """Run until SIGTERM/SIGINT (or ``options.rounds`` rounds); the exit code."""
    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        return await ExporterProcess(targets, options).run(stop)

    return asyncio.run(main())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                description="Export consumer group and mirror lag to __lag_snapshots and /metrics.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--cluster", metavar="CLUSTER_JSON", help="every region of the cluster.json `mq up` wrote")
    where.add_argument("--bootstrap", metavar="HOST:PORT[,...]", help="one cluster")
    p.add_argument("--region", default="", help="with --cluster: only this region; with --bootstrap: its name")
    p.add_argument("--mirror-status", action="append", default=[], metavar="PATH",
                   help="with --bootstrap: a mirror flow's status.json to export too (repeatable)")
    add_options(p)
    return p


def add_options(p: argparse.ArgumentParser) -> None:
    """The exporter's options (``mq lag export`` has the same, with the same defaults)."""
    p.add_argument("--interval", type=duration_ms, default=DEFAULT_INTERVAL_MS, metavar="DURATION",
                   help=f"time between rounds: 500ms, 1s, 1m (default: {format_duration_ms(DEFAULT_INTERVAL_MS)})")
    p.add_argument("--topic", default=SNAPSHOT_TOPIC, help=f"where snapshots go (default: {SNAPSHOT_TOPIC})")
    p.add_argument("--retention", type=duration_ms, default=DEFAULT_RETENTION_MS, metavar="DURATION",
                   help="retention.ms of the topic when the exporter creates it (default: 1d)")
    p.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS, metavar="N",
                   help=f"partitions of the topic when the exporter creates it (default: {DEFAULT_PARTITIONS})")
    p.add_argument("--groups", type=regex, default=".*", metavar="REGEX",
                   help="export only the groups whose whole id matches (default: every group)")
    p.add_argument("--metrics-listen", type=_listen, default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where /metrics listens (port 0: a free port, logged)")
    p.add_argument("--no-metrics", dest="metrics_listen", action="store_const", const="", help="serve no /metrics")
    p.add_argument("--status-file", default="", metavar="PATH", help="rewrite this JSON status after every round")
    p.add_argument("--rounds", type=int, default=0, metavar="N", help="stop after N rounds (default: run until stopped)")


def _listen(text: str) -> str:
    if text == "":
        return text
    try:
        metrics_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def options_of(args: argparse.Namespace) -> ExporterOptions:
    return ExporterOptions(interval_ms=args.interval, topic=args.topic, retention_ms=args.retention,
                           partitions=args.partitions, groups=args.groups, metrics_listen=args.metrics_listen,
                           status_file=args.status_file, rounds=args.rounds)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        if args.cluster:
            targets = targets_of(load_cluster(args.cluster), args.region or None)
        else:
            targets = [RegionTarget(args.region, args.bootstrap, tuple(args.mirror_status))]
    except (OSError, ValueError) as exc:
        print(f"error: {exc} — pass the cluster.json `mq up` wrote, or --bootstrap HOST:PORT", file=sys.stderr)
        return 2
    return run(targets, options_of(args))


if __name__ == "__main__":
    sys.exit(main())
