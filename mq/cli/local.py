"""``mq broker``, ``mq up``, ``mq down``, ``mq status``: run brokers on this machine.

``mq broker run`` (also ``mq broker --node-id ...``) runs one broker in the foreground
(what the launcher starts, what a container runs); ``mq broker kill|pause|resume|restart``
live in ``mq.cli.broker_ctl``. ``mq up`` starts the local topology in the background through
``mq.deploy.Launcher``; ``mq down`` and ``mq status`` read ``<data-dir>/cluster.json``
to find what it started.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from mq.cli import broker_ctl
from mq.cli.common import EXIT_USAGE, CliError, host_port, key_value, print_error
from mq.cli.output import cell, console, human_bytes, print_json, print_table, table
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
    broker_ctl.register(verbs, _add_data_dir)

    p = sub.add_parser("up", help="start a local region (three brokers) or one broker in the background",
                       description="Start the brokers of a region file in the background, all at once, and wait\n"
                                   "until a controller is elected and every broker is registered and unfenced.\n"
                                   "FILE defaults to regions/default.yaml (in the current directory, else the one\n"
                                   "shipped with mq): three brokers on 127.0.0.1:9092-9094, each a controller voter.\n"
                                   "--single (or --listen) starts one broker instead. Does nothing if it already runs.")
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
                   help="how long to wait for the brokers to be ready (default: 30)")
    p.set_defaults(func=run_up)

    p = sub.add_parser("down", help="stop the brokers started by `mq up`",
                       description="SIGTERM every broker started by `mq up` at once (each hands its leadership\n"
                                   "over, flushes and checkpoints), SIGKILL any still running after --timeout.\n"
                                   "Data is kept.")
    _add_data_dir(p)
    p.add_argument("--timeout", type=float, default=DOWN_TIMEOUT_S, metavar="SECONDS",
                   help=f"grace period before SIGKILL (default: {DOWN_TIMEOUT_S:g})")
    p.set_defaults(func=run_down)

    p = sub.add_parser("status", help="show the brokers, controller and partitions started by `mq up`",
                       description="Show each broker started by `mq up` (pid, alive/paused/down, fenced, endpoints,\n"
                                   "data size), the active controller and its epoch, and every partition's leader,\n"
                                   "leader epoch, replicas, ISR and high watermark, asking any live broker.\n"
                                   "Exits 1 when no broker runs.")
    _add_data_dir(p)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument("--watch", type=float, metavar="SECONDS", default=None,
                   help="redraw every SECONDS until Ctrl-C (watch ISRs shrink and leaders move)")
    p.set_defaults(func=run_status)


def _add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
                   help=f"where `mq up` keeps brokers' data, logs and cluster.json (default: ./{DEFAULT_DATA_DIR})")


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
    from mq.deploy import DeployError, Launcher, Topology
    from mq.deploy.region import default_region_file, display_path, load_region

    single = bool(args.single or args.listen or args.metrics_listen)
    if single and args.file:
        raise CliError("FILE and --single/--listen/--metrics-listen exclude each other",
                       "start a region file with `mq up FILE`, or one broker with `mq up --single`",
                       exit_code=EXIT_USAGE)
    try:
        if single:
            _check_broker_configs(args.config)
            data_dir = args.data_dir or DEFAULT_DATA_DIR
            topology = Topology.single_broker(data_dir, listen=args.listen or DEFAULT_LISTEN,
                                              metrics_listen=args.metrics_listen or "",
                                              configs=tuple(args.config))
            hint = "pick free ports with `mq up --listen HOST:PORT`"
        else:
            path = args.file or default_region_file()
            topology = load_region(path, data_dir=args.data_dir, extra_configs=args.config)
            data_dir = topology.data_dir
            hint = f"change the ports in {display_path(path)}"
    except DeployError as exc:
        raise CliError(exc.what, exc.todo, exit_code=EXIT_USAGE) from None
    try:
        result = Launcher(data_dir).up(topology, ready_timeout_s=args.timeout, port_hint=hint)
    except DeployError as exc:
        print_error(CliError(exc.what, exc.todo))
        if exc.log_tail:
            print("broker log (last lines):", file=sys.stderr)
            for line in exc.log_tail.splitlines():
                print(f"  {line}", file=sys.stderr)
        return 1
    _print_up(args, result, topology)
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
    out.print(f"bootstrap: {topology.bootstrap}")
    _print_next_steps(topology.data_dir, topology.bootstrap, replicated=len(result.brokers) > 1)


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
        out.print(f"nothing to stop: no broker was started under {_display_path(os.path.abspath(args.data_dir))}")
        return 0
    for r in results:
        if r.outcome == "stopped":
            out.print(f"stopped {r.name} (pid {r.pid}) in {r.waited_ms / 1000:.1f} s")
        elif r.outcome == "killed":
            out.print(f"[yellow]{r.name} (pid {r.pid}) did not exit within {args.timeout:g} s of SIGTERM; "
                      "killed it with SIGKILL[/] (it will recover its log on the next start)")
        else:
            out.print(f"{r.name} was not running (stale state removed)")
    return 0


def run_status(args: argparse.Namespace) -> int:
    if args.watch is None or args.json:
        return _status_once(args)
    if args.watch <= 0:
        raise CliError(f"--watch {args.watch:g} is not a positive number of seconds", "try --watch 1")
    out = console()
    try:
        while True:
            out.clear()
            out.print(f"[dim]{time.strftime('%H:%M:%S')} — every {args.watch:g} s, Ctrl-C to stop[/]")
            try:
                _status_once(args)
            except CliError as err:  # the region may be down for a moment: keep watching
                out.print(f"[red]{err}[/]")
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _status_once(args: argparse.Namespace) -> int:
    from mq.deploy import Launcher
    from mq.deploy.cluster_view import describe

    launcher = Launcher(args.data_dir)
    brokers = launcher.status()
    topology = launcher.recorded_topology()
    running = any(b.alive for b in brokers)
    live = [b for b in brokers if b.alive and not b.paused]
    view = describe([b.spec.listen for b in live],
                    skip=[b.spec.node_id for b in brokers if b not in live]) if live else None
    if args.json:
        doc = {"data_dir": launcher.data_dir, "running": running,
               "region": topology.name if topology else None,
               "bootstrap": topology.bootstrap if topology else None,
               "voters": list(topology.voters) if topology else [],
               "brokers": [_broker_json(b, view) for b in brokers],
               "answered": view is not None,
               "controller": ({"id": view.controller_id, "epoch": view.controller_epoch}
                              if view is not None and view.controller_id >= 0 else None),
               "partitions": [p.to_json() for p in view.partitions] if view is not None else []}
        print_json(doc)
        return 0 if running else 1
    if not brokers:
        raise CliError(f"no broker runs under {_display_path(launcher.data_dir)}", "start one with `mq up`")
    t = table("broker", "pid", "alive", "fenced", "endpoint", "metrics", "topics", "partitions", "log size")
    for b in brokers:
        alive = ("[green]yes[/]" if b.answering else "[yellow]paused[/]" if b.paused
                 else "[yellow]starting[/]" if b.alive else "[red]no[/]")
        t.add_row(b.spec.name, str(b.pid or "-"), alive, _fenced_cell(b.spec.node_id, view), b.spec.listen,
                  b.spec.metrics_endpoint, cell(b.topics), cell(b.partitions), human_bytes(b.log_bytes))
    print_table(t)
    if not running:
        raise CliError("no broker is running (cluster.json is stale)",
                       f"see {_display_path(brokers[0].spec.log_path)}; start again with `mq up` "
                       "(or one broker with `mq broker restart ID`)")
    _print_cluster(view, live)
    return 0


def _broker_json(b, view) -> dict:
    doc = b.to_json()
    seen = view.broker(b.spec.node_id) if view is not None else None
    doc["registered"] = None if view is None else seen is not None
    doc["fenced"] = None if seen is None else seen.fenced
    doc["state"] = "alive" if b.answering else "paused" if b.paused else "starting" if b.alive else "down"
    return doc


def _fenced_cell(node_id: int, view) -> str:
    if view is None:
        return "-"
    seen = view.broker(node_id)
    if seen is None:
        return "[yellow]unregistered[/]"
    return "[red]yes[/]" if seen.fenced else "no"


def _print_cluster(view, live) -> None:
    out = console()
    if view is None:
        asked = ", ".join(b.spec.name for b in live) or "none is alive and unpaused"
        out.print(f"[yellow]no broker answered a Metadata request[/] (asked: {asked}): "
                  "controller and partitions unknown")
        return
    if view.controller_id >= 0:
        epoch = f", epoch {view.controller_epoch}" if view.controller_epoch >= 0 else ""
        out.print(f"active controller: broker {view.controller_id}{epoch}")
    else:
        out.print("[yellow]active controller: none[/] (no quorum: a majority of the voters must run)")
    if not view.partitions:
        out.print("partitions: none (create a topic with `mq topic create`)")
        return
    t = table("topic", "partition", "leader", "leader epoch", "replicas", "isr", "high watermark",
              "under-replicated", title="partitions")
    for p in view.partitions:
        leader = "[red]none[/]" if p.offline else str(p.leader)
        t.add_row(p.topic, str(p.partition), leader, str(p.leader_epoch), cell(p.replicas), cell(p.isr),
                  "-" if p.high_watermark is None else str(p.high_watermark),
                  "[red]yes[/]" if p.under_replicated else "no")
    print_table(t)
