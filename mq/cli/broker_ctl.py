"""``mq broker kill|pause|resume|restart ID``: fault injection on a broker ``mq up`` started.

The verbs act on the processes recorded in ``<data-dir>/cluster.json`` (``--region``
names the region when several run: node ids repeat across regions) through
``mq.deploy.Launcher`` (the same methods ``mq.lab`` uses from a notebook): ``kill`` is a
crash (SIGKILL), ``pause`` a hung process (SIGSTOP), ``resume`` undoes it (SIGCONT),
``restart`` stops gracefully and starts the broker again with its recorded arguments.

``mq broker --node-id N ...`` (no verb) still runs a broker in the foreground: it is
read as ``mq broker run --node-id N ...``, see ``with_default_verb``.
"""

from __future__ import annotations

import argparse
import os

from mq.cli.common import CliError
from mq.cli.output import console

VERBS = ("kill", "pause", "resume", "restart")
FOREGROUND_VERB = "run"


def with_default_verb(argv: list[str]) -> list[str]:
    """``mq broker --node-id 1 ...`` -> ``mq broker run --node-id 1 ...``.

    The foreground form predates the verbs and is what containers and scripts run, so a
    ``broker`` followed directly by an option (other than ``--help``) means ``run``.
    """
    if argv[:1] == ["broker"] and len(argv) > 1 and argv[1].startswith("-") and argv[1] not in ("-h", "--help"):
        return ["broker", FOREGROUND_VERB, *argv[1:]]
    return argv


def register(verbs: argparse._SubParsersAction, add_data_dir) -> None:
    """Add the control verbs under ``mq broker``; ``add_data_dir`` is ``mq up``'s --data-dir."""
    helps = {
        "kill": ("crash a broker with SIGKILL",
                 ("SIGKILL broker ID (no flush, no checkpoint: a crash). Its pid file stays,\n"
                 "`mq status` shows it as not alive; start it again with `mq broker restart ID`.")),
        "pause": ("freeze a broker with SIGSTOP",
                  ("SIGSTOP broker ID: it keeps its sockets but answers nothing until\n"
                  "`mq broker resume ID`. `mq status` shows it as paused.")),
        "resume": ("continue a paused broker (SIGCONT)", "SIGCONT broker ID after `mq broker pause ID`."),
        "restart": ("stop a broker gracefully and start it again",
                    ("SIGTERM broker ID (SIGKILL after --stop-timeout) if it runs, start it again with the\n"
                    "arguments recorded in cluster.json and wait until it answers. Also starts a killed broker.")),
    }
    for verb in VERBS:
        summary, description = helps[verb]
        p = verbs.add_parser(verb, help=summary, description=description)
        p.add_argument("node_id", type=int, metavar="ID", help="the broker's node id (see `mq status`)")
        p.add_argument("--region", metavar="NAME", default=None,
                       help="the broker's region, when several run (default: $MQ_REGION)")
        add_data_dir(p)
        if verb == "restart":
            p.add_argument("--stop-timeout", type=float, default=15.0, metavar="SECONDS",
                           help="grace period after SIGTERM before SIGKILL (default: 15)")
            p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                           help="how long to wait for the broker to answer (default: 30)")
        p.set_defaults(func=run_verb, verb=verb)


def run_verb(args: argparse.Namespace) -> int:
    from mq.deploy import DeployError, Launcher

    launcher = Launcher(args.data_dir)
    region = args.region
    try:
        if region is None and os.environ.get("MQ_REGION"):  # the environment's region matters among several
            recorded = launcher.recorded()
            if recorded is not None and len(recorded.regions) > 1:
                region = os.environ["MQ_REGION"]
        if args.verb == "restart":
            result = launcher.restart(args.node_id, region=region, stop_timeout_s=args.stop_timeout,
                                      ready_timeout_s=args.timeout)
        else:
            result = getattr(launcher, args.verb)(args.node_id, region=region)
    except DeployError as exc:
        err = CliError(exc.what, exc.todo)
        if exc.log_tail:
            err.todo += "; broker log (last lines):\n  " + "\n  ".join(exc.log_tail.splitlines())
        raise err from None
    out = console()
    if result.action == "restarted":
        before = f"stopped pid {result.old_pid}, " if result.old_pid else ""
        out.print(f"restarted {result.name}: {before}new pid {result.pid}, answering after "
                  f"{result.waited_ms / 1000:.1f} s")
    else:
        out.print(f"{result.action} {result.name} (pid {result.pid})")
    return 0
