"""``mq broker``, ``mq up``, ``mq down``, ``mq status``: run brokers on this machine.

``mq broker run`` (also ``mq broker --node-id ...``) runs one broker in the foreground
(what the launcher starts, what a container runs); ``mq broker kill|pause|resume|restart``
live in ``mq.cli.broker_ctl``. ``mq up`` starts the local topology in the background through
``mq.deploy.Launcher``; ``mq down`` and ``mq status`` read ``<data-dir>/cluster.json``
to find what it started.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mq.cli import broker_ctl
from mq.cli.common import EXIT_USAGE, CliError, host_port, key_value, print_error
from mq.cli.output import console, human_bytes, print_table, table
from mq.core.config import BrokerConfig
from mq.core.errors import MqError

DEFAULT_DATA_DIR = ".mq"


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

    p = sub.add_parser("up", help="start a local broker in the background",
                       description="Start broker 1 in the background with its data under --data-dir.\n"
                                   "Does nothing if it already runs.")
    _add_data_dir(p)
    p.add_argument("--listen", type=host_port, default="127.0.0.1:9092", metavar="HOST:PORT",
                   help="native protocol address (default: 127.0.0.1:9092)")
    p.add_argument("--metrics-listen", type=host_port, metavar="HOST:PORT",
                   help="Prometheus /metrics address (default: the native port + 10000)")
    _add_config(p, "broker config override, passed to the broker")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long to wait for the broker to answer (default: 30)")
    p.set_defaults(func=run_up)

    p = sub.add_parser("down", help="stop the brokers started by `mq up`",
                       description="SIGTERM the brokers started by `mq up` (they flush and checkpoint),\n"
                                   "SIGKILL any still running after --timeout. Data is kept.")
    _add_data_dir(p)
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="grace period before SIGKILL (default: 10)")
    p.set_defaults(func=run_down)

    p = sub.add_parser("status", help="show the brokers started by `mq up`",
                       description="Show each broker started by `mq up`: pid, alive, endpoints, topics,\n"
                                   "partitions and log size. Exits 1 when no broker runs.")
    _add_data_dir(p)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
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

    _check_broker_configs(args.config)
    topology = Topology.single_broker(args.data_dir, listen=args.listen,
                                      metrics_listen=args.metrics_listen or "",
                                      configs=tuple(args.config))
    try:
        result = Launcher(args.data_dir).up(topology, ready_timeout_s=args.timeout)
    except DeployError as exc:
        print_error(CliError(exc.what, exc.todo))
        if exc.log_tail:
            print("broker log (last lines):", file=sys.stderr)
            for line in exc.log_tail.splitlines():
                print(f"  {line}", file=sys.stderr)
        return 1
    out = console()
    broker = result.brokers[0]
    state = "already up" if result.already_running else "up"
    out.print(f"[bold green]mq is {state}[/]: {broker.spec.name} pid {broker.pid}, "
              f"data in {_display_path(result.topology.data_dir)}")
    if result.already_running and args.listen not in (b.spec.listen for b in result.brokers):
        out.print(f"[yellow]note[/]: it listens on {result.topology.bootstrap}, not {args.listen} "
                  "(run `mq down` first to change addresses)")
    for b in result.brokers:
        out.print(f"  native   {b.spec.listen}")
        out.print(f"  metrics  http://{b.spec.metrics_endpoint}/metrics")
        out.print(f"  log      {_display_path(b.spec.log_path)}")
    _print_next_steps(args, result.topology.bootstrap)
    return 0


def _print_next_steps(args: argparse.Namespace, bootstrap: str) -> None:
    out = console()
    data_flag = "" if args.data_dir == DEFAULT_DATA_DIR else f" --data-dir {args.data_dir}"
    out.print("next:")
    if bootstrap != "127.0.0.1:9092":
        out.print(f"  export MQ_BOOTSTRAP={bootstrap}")
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
    from mq.deploy import Launcher

    launcher = Launcher(args.data_dir)
    brokers = launcher.status()
    running = any(b.alive for b in brokers)
    if args.json:
        doc = {"data_dir": launcher.data_dir, "running": running, "brokers": [b.to_json() for b in brokers]}
        print(json.dumps(doc, indent=2))
        return 0 if running else 1
    if not brokers:
        raise CliError(f"no broker runs under {_display_path(launcher.data_dir)}", "start one with `mq up`")
    t = table("broker", "pid", "alive", "endpoint", "metrics", "topics", "partitions", "log size")
    for b in brokers:
        alive = ("[green]yes[/]" if b.answering else "[yellow]paused[/]" if b.paused
                 else "[yellow]starting[/]" if b.alive else "[red]no[/]")
        t.add_row(b.spec.name, str(b.pid or "-"), alive, b.spec.listen, b.spec.metrics_endpoint,
                  _count(b.topics), _count(b.partitions), human_bytes(b.log_bytes))
    print_table(t)
    if not running:
        raise CliError("no broker is running (cluster.json is stale)",
                       f"see {_display_path(brokers[0].spec.log_path)}; start again with `mq up` "
                       "(or one broker with `mq broker restart ID`)")
    return 0


def _count(n: int | None) -> str:
    return "-" if n is None else str(n)
