"""The ``mq`` command: one parser, one sub-command per module, errors as one line.

Each command module has ``register(subparsers)`` (its arguments, in one place, which
``mq.cli.reference`` also renders into docs/reference/cli.md) and handlers that take
the parsed arguments and return an exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from mq.cli import (
    analytics,
    bench,
    broker_ctl,
    consume,
    docker_cmd,
    dump_log,
    group,
    lag,
    link,
    load,
    local,
    mirror_cmd,
    produce,
    records_cmd,
    share_group,
    table,
    topic,
)
from mq.cli.common import CliError, Parser, bootstrap_of, debug, explain, print_error

DESCRIPTION = """\
mq: a Kafka-class event streaming platform.

Start a broker with `mq up`, then create topics, produce and consume.
Client commands find the broker with --bootstrap (-b, --bootstrap-server), else --region NAME
(a region `mq up` started: its cluster.json in $MQ_DATA_DIR, else ./.mq), else $MQ_BOOTSTRAP,
else $MQ_REGION, else the one region `mq up` started here, else localhost:9092.
Set MQ_DEBUG=1 to see Python tracebacks."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mq", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=Parser)
    sub.required = True
    local.register(sub)
    link.register(sub, local.add_data_dir)
    topic.register(sub)
    produce.register(sub)
    consume.register(sub)
    table.register(sub)
    group.register(sub)
    share_group.register(sub)
    lag.register(sub)
    analytics.register(sub)
    load.register(sub)
    records_cmd.register(sub)
    dump_log.register(sub)
    bench.register(sub)
    mirror_cmd.register(sub)
    docker_cmd.register(sub)
    return parser


def run(argv: list[str] | None = None) -> int:
    argv = broker_ctl.with_default_verb(list(sys.argv[1:] if argv is None else argv))
    if argv[:1] == ["bench"]:
        return _guarded(lambda: bench.run_bench_argv(argv[1:]), None)
    if argv[:1] == ["mirror"]:
        return _guarded(lambda: mirror_cmd.run_mirror_argv(argv[1:]), None)
    try:
        args = build_parser().parse_args(argv)
    except CliError as err:
        print_error(err)
        return err.exit_code
    bootstrap = getattr(args, "bootstrap", None)
    if hasattr(args, "bootstrap"):
        try:
            bootstrap = bootstrap_of(args)
        except CliError as err:
            print_error(err)
            return err.exit_code
        args.bootstrap = bootstrap
    return _guarded(lambda: args.func(args), bootstrap)


def _guarded(call, bootstrap: str | None) -> int:
    """Run a command; turn every escaping exception into one error line."""
    try:
        return int(call() or 0)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the one place errors become messages
        if debug():
            traceback.print_exc()
        err = explain(exc, bootstrap)
        print_error(err)
        return err.exit_code


def _silence_stdout() -> None:
    """After a broken pipe (``mq consume ... | head``) make the exit-time flush quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
