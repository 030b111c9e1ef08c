"""``mq link list|set|cut|heal|reset|stall``: the WAN links between the regions ``mq up`` started.

A link is a direction: ``mq link set east west --latency-ms 80`` delays the bytes
flowing from east to west (the answers to west's requests, a mirror's fetched
records); ``--both`` also changes west->east. The work is done by
``mq.deploy.links.Links``, which notebooks use too.
"""

from __future__ import annotations

import argparse

from mq.cli.common import EXIT_USAGE, CliError
from mq.cli.output import cell, console, human_bytes, print_json, print_table, table

CUT_HELP = ("blackhole (default): a WAN outage — open connections go silent and new ones hang, and what was sent "
            "is delivered on heal; refuse: a firewall REJECT — connections are reset at once")


def register(sub: argparse._SubParsersAction, add_data_dir) -> None:
    link = sub.add_parser(
        "link", help="show or change the WAN links between regions (latency, jitter, bandwidth, cuts)",
        description="The links between the regions `mq up` started: one TCP proxy per pair of regions shapes\n"
                    "every byte between them (there is no netem here). A link is a direction: SOURCE TARGET\n"
                    "means the bytes flowing from SOURCE to TARGET.")
    verbs = link.add_subparsers(dest="verb", metavar="VERB", title="verbs", parser_class=type(link))
    verbs.required = True

    p = verbs.add_parser("list", help="every link: state, settings, open connections, bytes carried")
    add_data_dir(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run_list)

    p = verbs.add_parser("set", help="change a link's latency, jitter, bandwidth or loss",
                         description="Change the link SOURCE->TARGET while it runs; unnamed settings keep their value.\n"
                                     "Example: mq link set east west --latency-ms 80 --jitter-ms 10 --bandwidth-mbit 50")
    _add_link(p, add_data_dir)
    p.add_argument("--latency-ms", type=float, metavar="MS", help="one-way delay")
    p.add_argument("--jitter-ms", type=float, metavar="MS",
                   help="each chunk's delay varies by up to ± this much (a connection's bytes never reorder)")
    p.add_argument("--bandwidth-mbit", type=float, metavar="MBIT", help="capacity in Mbit/s (0: unlimited)")
    p.add_argument("--loss", type=float, metavar="FRACTION",
                   help="share of chunks that stall one retransmission timeout, as TCP sees loss (0.01 = 1%%)")
    p.add_argument("--loss-stall-ms", type=float, metavar="MS", help="how long a lost chunk stalls (default 200)")
    p.set_defaults(func=run_set)

    p = verbs.add_parser("cut", help="cut a link (the WAN is down)", description=f"Cut SOURCE->TARGET. {CUT_HELP}.")
    _add_link(p, add_data_dir)
    p.add_argument("--mode", choices=("blackhole", "refuse"), default="blackhole", help=CUT_HELP)
    p.set_defaults(func=run_cut)

    p = verbs.add_parser("heal", help="heal a cut link (or every link)",
                         description="Heal SOURCE->TARGET, or every link when no region is named.")
    p.add_argument("source", nargs="?", metavar="SOURCE", help="region the bytes come from")
    p.add_argument("target", nargs="?", metavar="TARGET", help="region the bytes go to")
    p.add_argument("--both", action="store_true", help="also heal TARGET->SOURCE")
    add_data_dir(p)
    p.set_defaults(func=run_heal)

    p = verbs.add_parser("reset", help="reset the open connections crossing a link (it stays up)")
    _add_link(p, add_data_dir)
    p.set_defaults(func=run_reset)

    p = verbs.add_parser("stall", help="hold every byte crossing a link for a while",
                         description="Hold every byte crossing SOURCE->TARGET for MS milliseconds from now\n"
                                     "(a congested or flapping path); nothing is lost.")
    _add_link(p, add_data_dir)
    p.add_argument("ms", type=float, metavar="MS", help="how long")
    p.set_defaults(func=run_stall)


def _add_link(p: argparse.ArgumentParser, add_data_dir) -> None:
    p.add_argument("source", metavar="SOURCE", help="region the bytes come from")
    p.add_argument("target", metavar="TARGET", help="region the bytes go to")
    p.add_argument("--both", action="store_true", help="also act on TARGET->SOURCE")
    add_data_dir(p)


def _links(args: argparse.Namespace):
    from mq.deploy.links import Links

    return Links(args.data_dir)


def _guard(call):
    from mq.deploy import DeployError

    try:
        return call()
    except DeployError as exc:
        raise CliError(exc.what, exc.todo) from None


def run_list(args: argparse.Namespace) -> int:
    statuses = _guard(lambda: _links(args).list())
    if args.json:
        print_json([s.to_json() for s in statuses])
        return 0
    t = table("link", "state", "latency", "jitter", "bandwidth", "loss", "connections", "carried", "control")
    for s in statuses:
        t.add_row(s.name, _state(s), f"{s.settings.latency_ms:g} ms", f"±{s.settings.jitter_ms:g} ms",
                  _bandwidth(s.settings.bandwidth_mbit), f"{s.settings.loss * 100:g}%",
                  cell(s.connections), human_bytes(s.bytes), s.control)
    print_table(t)
    return 0


def _state(s) -> str:
    if s.state == "down":
        return "[red]process down[/]"
    if s.state == "cut":
        return f"[red]cut ({s.cut_mode})[/]"
    if s.stall_left_ms:
        return f"[yellow]stalled {s.stall_left_ms / 1000:.1f} s[/]"
    return "[green]up[/]"


def _bandwidth(mbit: float | None) -> str:
    return "unlimited" if mbit is None else f"{mbit:g} Mbit/s"


def _report(statuses, verb: str) -> int:
    out = console()
    for s in statuses:
        settings = s.settings
        out.print(f"{verb} {s.name}: {_state(s)}, latency {settings.latency_ms:g} ms ±{settings.jitter_ms:g} ms, "
                  f"bandwidth {_bandwidth(settings.bandwidth_mbit)}, loss {settings.loss * 100:g}%")
    return 0


def run_set(args: argparse.Namespace) -> int:
    names = ("latency_ms", "jitter_ms", "bandwidth_mbit", "loss", "loss_stall_ms")
    settings = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if not settings:
        raise CliError("nothing to set", "pass at least one of --latency-ms, --jitter-ms, --bandwidth-mbit, --loss",
                       exit_code=EXIT_USAGE)
    return _report(_guard(lambda: _links(args).set(args.source, args.target, both=args.both, **settings)), "set")


def run_cut(args: argparse.Namespace) -> int:
    return _report(_guard(lambda: _links(args).cut(args.source, args.target, mode=args.mode, both=args.both)), "cut")


def run_heal(args: argparse.Namespace) -> int:
    if (args.source is None) != (args.target is None):
        raise CliError("name both regions of the link (or none to heal every link)", "e.g. `mq link heal east west`",
                       exit_code=EXIT_USAGE)
    return _report(_guard(lambda: _links(args).heal(args.source, args.target, both=args.both)), "healed")


def run_reset(args: argparse.Namespace) -> int:
    return _report(_guard(lambda: _links(args).reset(args.source, args.target, both=args.both)), "reset")


def run_stall(args: argparse.Namespace) -> int:
    if args.ms < 0:
        raise CliError(f"a stall of {args.ms:g} ms", "give a duration >= 0", exit_code=EXIT_USAGE)
    return _report(_guard(lambda: _links(args).stall(args.source, args.target, args.ms, both=args.both)), "stalled")
