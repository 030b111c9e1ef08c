"""``mq mirror ARGS...``: the mirror service's own command line, ``python -m mirror ARGS...``.

``mirror`` is a separate package that mq never imports (it is a pure client of mq, as
MirrorMaker 2 is of Kafka), so ``mq mirror`` replaces itself with ``python -m mirror``
and the same arguments: same pid, same exit code, same output (``mq mirror status``,
``mq mirror failover --to west``, ``mq mirror --help``).
"""

from __future__ import annotations

import argparse
import os
import sys

from mq.cli.common import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mirror", add_help=False,
        help="the mirror service: status, failover, failback (runs `python -m mirror ARGS...`)",
        description="Run `python -m mirror` with the remaining arguments; `mq mirror --help` lists them.")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments for the mirror service (see `mq mirror --help`)")
    p.set_defaults(func=lambda args: run_mirror_argv(args.args))


def run_mirror_argv(argv: list[str]) -> int:
    from mq.deploy.services import MIRROR_MODULE, mirror_available

    if not mirror_available():
        raise CliError("the mirror service is not installed here (no `python -m mirror`)",
                       "install mq from its repository with `pip install -e .` (the mirror/ package ships beside mq/)")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", MIRROR_MODULE, *argv])
    return 1  # not reached: execv replaces this process or raises OSError
