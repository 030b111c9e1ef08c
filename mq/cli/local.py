"""``mq broker``, ``mq up``, ``mq down``, ``mq status``: run brokers, links and mirrors on this machine.

``mq broker run`` (also ``mq broker --node-id ...``) runs one broker in the foreground
(what the launcher starts, what a container runs); ``mq broker kill|pause|resume|restart``
live in ``mq.cli.broker_ctl``. ``mq up`` starts the local topology in the background through
``mq.deploy.Launcher`` (``mq.cli.status`` shows it); ``mq down`` and ``mq status`` read ``<data-dir>/cluster.json``
to find what it started.
"""

from __future__ import annotations

import argparse
import os
import sys

from mq.cli import broker_ctl, status
from mq.cli.common import (
    EXIT_USAGE,
    CliError,
    data_dir_of_env,
    duration_ms,
    host_port,
    host_port_or_any,
    key_value,
    print_error,
)
from mq.cli.output import console
from mq.core.config import BrokerConfig
from mq.core.errors import MqError

DEFAULT_DATA_DIR = ".mq"
DEFAULT_LISTEN = "127.0.0.1:9092"
DOWN_TIMEOUT_S = 15.0  # mq.deploy.launcher.DOWN_TIMEOUT_S (not imported: mq.deploy loads lazily)


def register(sub: argparse._SubParsersAction) -> None:
    broker = sub.add_parser(
        "broker", help="run a broker in the foreground, or kill/pause/resume/restart one",
        description="`mq broker run` (or just `mq broker --node-id N ...`) runs one broker in the foreground;\n"
                    "the other verbs act on a broker started by `mq up`.")
    verbs = broker.add_subparsers(dest="verb", metavar="VERB", title="verbs", parser_class=type(broker))
    verbs.required = True
    p = verbs.add_parser("run", help="run one broker in the foreground (the default: `mq broker --node-id N ...`)",
                         description="Run one broker in the foreground until SIGTERM or Ctrl-C.\n"
                                     "`mq broker --node-id N ...` without a verb means the same.")
    p.add_argument("--node-id", type=int, required=True, metavar="N", help="this broker's id")
    p.add_argument("--data-dir", required=True, metavar="DIR", help="directory for its partitions and metadata log")
    p.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT", help="native protocol address")
    p.add_argument("--metrics-listen", type=host_port, metavar="HOST:PORT",
                   help="Prometheus /metrics address (default: the native port + 10000)")
    _add_config(p, "broker config override (Kafka names, e.g. log.segment.bytes=1048576)")
    p.set_defaults(func=run_broker)
    broker_ctl.register(verbs, add_data_dir)

    p = sub.add_parser("up", help="start the regions, links and mirrors of a region file (or one broker)",
                       description="Start what a region file names, in the background: the brokers of every region\n"
                                   "(all at once), one WAN link process per pair of regions and, once every region\n"
                                   "has an elected controller and every broker registered and unfenced, one mirror\n"
                                   "process per flow (when the mirror service is installed). FILE defaults to\n"
                                   "regions/default.yaml (in the current directory, else the one shipped with mq):\n"
                                   "regions east (127.0.0.1:9092-9094) and west (127.0.0.1:9192-9194), a 40 ms link\n"
                                   "pair and the flow east-to-west; regions/local.yaml is one three-broker region.\n"
                                   "--single (or --listen) starts one broker instead. Does nothing if it already runs;\n"
                                   "refuses a data directory that holds another topology.")
    p.add_argument("file", nargs="?", metavar="FILE", help="region file (default: regions/default.yaml)")
    p.add_argument("--single", action="store_true", help="start one broker (node 1) instead of a region")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="where the brokers' data, logs and cluster.json go (default: the file's data_dir, "
                        f"./{DEFAULT_DATA_DIR})")
    p.add_argument("--listen", type=host_port, metavar="HOST:PORT",
                   help="--single: native protocol address (default: 127.0.0.1:9092; implies --single)")
    p.add_argument("--metrics-listen", type=host_port, metavar="HOST:PORT",
                   help="--single: Prometheus /metrics address (default: the native port + 10000)")
    _add_config(p, "broker config for every broker (Kafka names; overrides the file's configs)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long to wait for the brokers and links to be ready (default: 30)")
    p.add_argument("--no-lag-export", action="store_true",
                   help="do not start the lag exporter (`mq lag export`: every group's and flow's lag to "
                        "__lag_snapshots and /metrics)")
    p.add_argument("--lag-interval", type=duration_ms, default=5000, metavar="DURATION",
                   help="the lag exporter's interval: 500ms, 1s, 1m (default: 5s)")
    p.add_argument("--lag-metrics-listen", type=host_port_or_any, default="127.0.0.1:0", metavar="HOST:PORT",
                   help="the lag exporter's /metrics address (default: a free port, shown by `mq lag status`)")
    p.set_defaults(func=run_up)

    p = sub.add_parser("down", help="stop everything `mq up` started (brokers, links, mirrors)",
                       description="SIGTERM the mirrors, then every broker and link started by `mq up` at once (each\n"
                                   "broker hands its leadership over, flushes and checkpoints), SIGKILL any still\n"
                                   "running after --timeout. Data is kept.")
    add_data_dir(p)
    p.add_argument("--timeout", type=float, default=DOWN_TIMEOUT_S, metavar="SECONDS",
                   help=f"grace period before SIGKILL (default: {DOWN_TIMEOUT_S:g})")
    p.set_defaults(func=run_down)

    p = sub.add_parser("status", help="show the regions, links and mirror flows started by `mq up`",
                       description="Show, per region, each broker started by `mq up` (pid, alive/paused/down, fenced,\n"
                                   "endpoints, data size), the active controller and its epoch, and every partition's\n"
                                   "leader, leader epoch, replicas, ISR and high watermark, asking any live broker;\n"
                                   "then the links between regions (state, latency, jitter, bandwidth, traffic) and\n"
                                   "the mirror flows (process, and the mirror's own status: lag). Exits 1 when no\n"
                                   "broker runs.")
    add_data_dir(p)
    p.add_argument("-b", "--bootstrap", dest="status_bootstrap", metavar="HOST:PORT[,...]", default=None,
                   help="instead: the region these brokers belong to, as they tell it (no cluster.json needed, "
                        "e.g. a compose cluster: --bootstrap 127.0.0.1:19092)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument("--watch", type=float, metavar="SECONDS", default=None,
                   help="redraw every SECONDS until Ctrl-C (watch ISRs shrink and leaders move)")
    p.set_defaults(func=status.run_status)


def add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=data_dir_of_env(), metavar="DIR",
                   help="where `mq up` keeps brokers' data, logs and cluster.json "
                        f"(default: $MQ_DATA_DIR, else ./{DEFAULT_DATA_DIR})")


def _add_config(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--config", type=key_value, action="append", default=[], metavar="KEY=VALUE", help=help_text)


def _check_broker_configs(pairs: list[tuple[str, str]]) -> None:
    try:
        BrokerConfig.from_kafka(dict(pairs))
    except MqError as exc:
        raise CliError(f"bad --config: {exc.message}",
                       "use Kafka's broker config names, e.g. --config log.segment.bytes=1048576",
                       exit_code=EXIT_USAGE) from None


def run_broker(args: argparse.Namespace) -> int:
    """Check the arguments, then become the broker process (``mq.aio.runner``).

    The CLI may not import the asyncio shell (layer rule: aiohttp and prometheus_client
    stay out of ``mq.cli``), so ``mq broker`` replaces itself with ``python -m
    mq.aio.runner`` by ``exec``: same pid, same signals, same exit code, as if
    ``runner.main(argv)`` had been called here.
    """
    _check_broker_configs(args.config)
    argv = ["--node-id", str(args.node_id), "--data-dir", args.data_dir, "--listen", args.listen]
    if args.metrics_listen:
        argv += ["--metrics-listen", args.metrics_listen]
    for key, value in args.config:
        argv += ["--config", f"{key}={value}"]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "mq.aio.runner", *argv])
    return 1  # not reached: execv replaces this process or raises OSError


def run_up(args: argparse.Namespace) -> int:
    from mq.deploy import DeployError, Deployment, Launcher, Topology
    from mq.deploy.region import default_region_file, display_path
    from mq.deploy.regions_file import load_topology

    single = bool(args.single or args.listen or args.metrics_listen)
    if single and args.file:
        raise CliError("FILE and --single/--listen/--metrics-listen exclude each other",
                       "start a region file with `mq up FILE`, or one broker with `mq up --single`",
                       exit_code=EXIT_USAGE)
    try:
        if single:
            _check_broker_configs(args.config)
            data_dir = args.data_dir or DEFAULT_DATA_DIR
            deployment = Deployment.of_region(Topology.single_broker(
                data_dir, listen=args.listen or DEFAULT_LISTEN, metrics_listen=args.metrics_listen or "",
                configs=tuple(args.config)))
            hint = "pick free ports with `mq up --listen HOST:PORT`"
        else:
            path = args.file or default_region_file()
            deployment = load_topology(path, data_dir=args.data_dir, extra_configs=args.config)
            data_dir = deployment.data_dir
            hint = f"change the ports in {display_path(path)}"
    except DeployError as exc:
        raise CliError(exc.what, exc.todo, exit_code=EXIT_USAGE) from None
    from mq.deploy.services import LagExporterSettings

    lag = None if args.no_lag_export else LagExporterSettings(args.lag_interval, args.lag_metrics_listen)
    try:
        result = Launcher(data_dir).up(deployment, ready_timeout_s=args.timeout, port_hint=hint, lag_exporter=lag)
    except DeployError as exc:
        print_error(CliError(exc.what, exc.todo))
        if exc.log_tail:
            one = len(deployment.regions) == 1 and not deployment.pairs
            print("broker log (last lines):" if one else "logs (last lines):", file=sys.stderr)
            for line in exc.log_tail.splitlines():
                print(f"  {line}", file=sys.stderr)
        return 1
    if len(result.deployment.regions) > 1:
        _print_up_regions(result, deployment)
    else:
        _print_up(args, result, deployment.regions[0])
    return 0


def _print_up(args: argparse.Namespace, result, asked) -> None:
    from mq.deploy import probe

    out = console()
    state = "already up" if result.already_running else "up"
    topology = result.topology
    data = _display_path(topology.data_dir)
    if len(result.brokers) == 1:
        broker = result.brokers[0]
        out.print(f"[bold green]mq is {state}[/]: {broker.spec.name} pid {broker.pid}, data in {data}")
    else:
        out.print(f"[bold green]mq is {state}[/]: region {topology.name}, {len(result.brokers)} brokers, "
                  f"data in {data}")
    if result.already_running and [b.listen for b in asked.brokers] != [b.listen for b in topology.brokers]:
        out.print(f"[yellow]note[/]: it listens on {topology.bootstrap}, not {asked.bootstrap} "
                  "(run `mq down` first to change addresses)")
    for b in result.brokers:
        indent = "  "
        if len(result.brokers) > 1:
            out.print(f"  {b.spec.name}  pid {b.pid}")
            indent = "    "
        out.print(f"{indent}native   {b.spec.listen}")
        out.print(f"{indent}metrics  http://{b.spec.metrics_endpoint}/metrics")
        out.print(f"{indent}log      {_display_path(b.spec.log_path)}")
    for b in result.brokers:
        try:
            meta = probe.metadata(b.spec.listen, timeout_s=1.0)
        except probe.ProbeError:
            continue
        if meta.controller_id >= 0 and len(result.brokers) > 1:
            epoch = f", epoch {meta.controller_epoch}" if meta.controller_epoch >= 0 else ""
            out.print(f"controller: broker {meta.controller_id}{epoch}; voters "
                      f"{', '.join(str(v) for v in topology.voters)}")
        break
    _print_lag_exporter(result)
    out.print(f"bootstrap: {topology.bootstrap}")
    _print_next_steps(topology.data_dir, topology.bootstrap, replicated=len(result.brokers) > 1)


def _print_up_regions(result, asked) -> None:
    """``mq up`` of several regions: per region its brokers, then the links and mirrors."""
    out = console()
    deployment = result.deployment
    state = "already up" if result.already_running else "up"
    data = _display_path(deployment.data_dir)
    out.print(f"[bold green]mq is {state}[/]: regions {', '.join(deployment.region_names)}, "
              f"{len(result.brokers)} brokers, {len(deployment.links)} links, {len(deployment.flows)} mirror "
              f"flow{'s' if len(deployment.flows) != 1 else ''}, data in {data}")
    if result.already_running and asked.to_json()["regions"] != deployment.to_json()["regions"]:
        out.print("[yellow]note[/]: it runs as first started (see `mq status`); run `mq down` first to change it")
    for region in deployment.regions:
        out.print(f"region {region.name}: bootstrap {region.bootstrap}")
        for b in (b for b in result.brokers if b.region == region.name):
            out.print(f"  {b.spec.name}  pid {b.pid}  metrics http://{b.spec.metrics_endpoint}/metrics  "
                      f"log {_display_path(b.spec.log_path)}")
    for link in result.links:
        pair = next(p for p in deployment.pairs if f"link/{p.name}" == link.service.key)
        ways = ", ".join(f"{x.name} {x.settings.latency_ms:g} ms" for x in deployment.links
                         if deployment.pair(x.source, x.target) is pair)
        out.print(f"link {pair.name}: pid {link.pid}, {ways}; control {pair.control}, "
                  f"log {_display_path(pair.log_path)}")
    for flow, mirror in zip(deployment.flows, result.mirrors, strict=True):
        running = f"pid {mirror.pid}, log {_display_path(flow.log_path)}" if mirror.alive else "[yellow]not running[/]"
        out.print(f"mirror {flow.name}: {flow.source} -> {flow.target} ({flow.mode}), {running}")
    if result.mirror_note:
        out.print(f"[yellow]note[/]: {result.mirror_note}")
    _print_lag_exporter(result)
    data_flag = "" if os.path.abspath(deployment.data_dir) == os.path.abspath(DEFAULT_DATA_DIR) else \
        f" --data-dir {data}"
    first, last = deployment.region_names[0], deployment.region_names[-1]
    out.print("next:")
    if data_flag:
        out.print(f"  export MQ_DATA_DIR={data}    # client commands find the regions there")
    out.print(f"  mq topic create orders --region {first} --partitions 3 --replication-factor 3 "
              "--config min.insync.replicas=2")
    out.print(f"  seq 1 1000 | sed 's/^/order-/' | mq produce orders --region {first}")
    if any(f.mode == "active-active" for f in deployment.flows):
        # east's orders is the remote topic east.orders in the other regions (mirror.remote's naming)
        out.print(f"  mq consume --region {last} --include '^(orders|{first}\\.orders)$' --from-beginning "
                  "--max-messages 5")
    else:
        out.print(f"  mq consume orders --region {last} --from-beginning --max-messages 5")
    if deployment.links:
        x = deployment.links[0]
        out.print(f"  mq link set {x.source} {x.target} --latency-ms 80{data_flag}    mq link list{data_flag}")
    out.print(f"  mq status{data_flag}    mq down{data_flag}")


def _print_lag_exporter(result) -> None:
    lag = result.lag_exporter
    if lag is None:
        return
    if lag.alive:
        console().print(f"lag exporter: pid {lag.pid}, snapshots to __lag_snapshots, log "
                        f"{_display_path(lag.service.log_path)} (`mq lag status`)")
    else:
        console().print(f"[yellow]lag exporter: not running[/] (see {_display_path(lag.service.log_path)})")


def _print_next_steps(data_dir: str, bootstrap: str, *, replicated: bool) -> None:
    out = console()
    data_flag = "" if os.path.abspath(data_dir) == os.path.abspath(DEFAULT_DATA_DIR) else \
        f" --data-dir {_display_path(data_dir)}"
    out.print("next:")
    if bootstrap != "127.0.0.1:9092":
        out.print(f"  export MQ_BOOTSTRAP={bootstrap}")
    if replicated:
        out.print("  mq topic create orders --partitions 3 --replication-factor 3 --config min.insync.replicas=2")
    else:
        out.print("  mq topic create orders --partitions 3")
    out.print("  seq 1 1000 | sed 's/^/order-/' | mq produce orders")
    out.print("  mq consume orders --from-beginning --max-messages 5")
    out.print(f"  mq status{data_flag}    mq down{data_flag}")


def _display_path(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def run_down(args: argparse.Namespace) -> int:
    from mq.deploy import DeployError, Launcher

    try:
        results = Launcher(args.data_dir).down(timeout_s=args.timeout)
    except DeployError as exc:
        raise CliError(exc.what, exc.todo) from None
    out = console()
    if not results:
        out.print(f"nothing to stop: nothing was started under {_display_path(os.path.abspath(args.data_dir))}")
        return 0
    for r in results:
        if r.outcome == "stopped":
            out.print(f"stopped {r.name} (pid {r.pid}) in {r.waited_ms / 1000:.1f} s")
        elif r.outcome == "killed":
            out.print(f"[yellow]{r.name} (pid {r.pid}) did not exit within {args.timeout:g} s of SIGTERM; "
                      "killed it with SIGKILL[/] (a broker recovers its log on the next start)")
        else:
            out.print(f"{r.name} was not running (stale state removed)")
    return 0
