"""``mq consume TOPIC...``: print records, like Kafka's console consumer (and rpk's).

Without ``--group`` every partition of the named topics (and of every topic matching
``--include REGEX``, found once at the start) is assigned (no consumer group: positions
are not committed); ``--partition P`` narrows one topic to one partition. The start is
the end (new records only), or ``--from-beginning``, ``--offset earliest|latest|N`` (N
is clamped into [log start, log end] of each partition, with a note), or ``--from-time``.

With ``--group G`` the consumer joins group G instead: the coordinator assigns it
partitions of the topics (``--include``: of every topic matching the pattern, also ones
created later), it starts at the group's committed offsets (a group with none starts at
the log start, as rpk and Kafka Streams do; ``--consumer-property
auto.offset.reset=latest`` starts it at the end, as Kafka's console consumer does),
commits every few seconds and on exit,
and leaves the group when it stops. ``--assignor``, ``--group-instance-id``,
``--session-timeout-ms`` and ``--consumer-property`` (Kafka's consumer config names,
``mq.cli.client_props``) configure the member.

Output: ``mq.cli.formatter`` (Kafka's ``--property print.*``, an rpk-style format
string, or JSON). It stops after ``--max-messages`` records, or when ``--timeout-ms``
passes without a new record (a named topic that does not exist yet is waited for that
long too); Ctrl-C and a closed pipe end it quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import sys
import time
from datetime import datetime
from typing import Any, BinaryIO

from mq.cli import client_props, share_group
from mq.cli.common import (
    EXIT_USAGE,
    CliError,
    UnknownTopic,
    add_bootstrap,
    check_partition,
    key_value,
    topics_partitions,
)
from mq.cli.formatter import FORMAT_HELP, FormatError, renderer
from mq.core.types import TopicPartition


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "consume", help="print records of topics",
        description="Print the records of topics, by default only new ones.\n"
                    "JSON output: one object per line with topic, partition, offset, key, value,\n"
                    'timestamp (ms) and headers ([[name, value], ...]); bytes that are not UTF-8\n'
                    'appear as {"base64": "..."}.',
    )
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="topic name (several allowed)")
    p.add_argument("-t", "--topic", dest="topic_options", action="append", default=[], metavar="TOPIC",
                   help="a topic, as kafka-console-consumer and kcat name it (repeatable; adds to TOPIC)")
    p.add_argument("--include", metavar="REGEX",
                   help="also every topic whose whole name matches REGEX (internal __ topics never match); "
                        "with --group the coordinator follows topics created later")
    add_bootstrap(p)
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    start.add_argument("-o", "--offset", type=_offset, metavar="N",
                       help="start at offset N (clamped into [log start, log end]), or at 'earliest' / 'latest', "
                            "in each consumed partition")
    start.add_argument("--from-time", type=_iso_time_ms, metavar="ISO8601",
                       help="start at the first record with timestamp >= this, e.g. 2026-11-25T14:30:00Z "
                            "(no zone: local time)")
    p.add_argument("-p", "--partition", type=int, metavar="P",
                   help="consume only partition P of the one topic (default: all)")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default=None,
                   help="read_committed: only records of committed transactions, up to the last stable "
                        "offset (default: read_uncommitted)")
    p.add_argument("--delivery", choices=["at-most-once", "at-least-once", "exactly-once"], default=None,
                   help="with --group: at-most-once commits what it read before printing it, at-least-once "
                        "after (auto-commit), exactly-once reads committed records only (docs/explanation/"
                        "delivery-semantics.md)")
    p.add_argument("-g", "--group", metavar="GROUP",
                   help="join consumer group GROUP: share the partitions with its other members, start at its "
                        "committed offsets (none committed: the log start; --consumer-property "
                        "auto.offset.reset=latest: the end) and commit on the way")
    p.add_argument("--assignor", type=_assignors, metavar="NAME[,NAME]",
                   help=f"--group: the partition assignor(s) this member proposes, one of "
                        f"{', '.join(client_props.ASSIGNORS)} (default: range)")
    p.add_argument("--group-instance-id", metavar="ID",
                   help="--group: a static member id (KIP-345): a restart within the session timeout keeps "
                        "the partitions without a rebalance")
    p.add_argument("--session-timeout-ms", type=_non_negative, metavar="MS",
                   help="--group: how long the coordinator waits for a silent member before it rebalances "
                        "(default: 45000)")
    p.add_argument("--consumer-property", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka consumer config (repeatable): "
                        f"{client_props.names_help(client_props.CONSUMER_PROPERTIES)}")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    p.add_argument("--timeout-ms", type=int, metavar="T", help="exit when no record arrives for T ms "
                   "(with --group: counted only while the member holds an assignment, not while it joins or "
                   "rejoins the group; a named topic that does not exist yet is waited for as long) "
                   "(default: wait forever)")
    p.add_argument("-f", "--format", default="text", metavar="text|json|FORMAT", help=FORMAT_HELP.replace("%", "%%"))
    p.add_argument("--property", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="--format text: a Kafka formatter property (repeatable): print.key, print.timestamp, "
                        "print.partition, print.offset, print.headers, print.value (true/false), key.separator "
                        "(default tab), line.separator (newline), headers.separator (,), null.literal (null); "
                        "escapes \\t \\n \\r \\xNN are understood")
    p.add_argument("--print-key", action="store_true", help="--format text: print KEY<TAB>VALUE "
                   "(the same as --property print.key=true)")
    share_group.add_consume_arguments(p)
    p.set_defaults(func=run_consume)


def _offset(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an offset (a number, earliest or latest)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: offsets start at 0")
    return value


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of milliseconds")
    return int(text)


def _assignors(text: str) -> list[str]:
    try:
        return client_props.assignor_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _iso_time_ms(text: str) -> int:
    """ISO-8601 (``2026-11-25T14:30:00Z``, ``2026-11-25 14:30+01:00``, ``2026-11-25``)
    or epoch milliseconds -> epoch milliseconds. No zone means local time."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 time (for example 2026-11-25T14:30:00Z)") from None
    return int(moment.astimezone().timestamp() * 1000)


def _usage(what: str, todo: str) -> CliError:
    return CliError(what, todo, exit_code=EXIT_USAGE)


def consumer_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Consumer`` keyword arguments: dedicated flags over ``--consumer-property``."""
    props = client_props.client_kwargs(args.consumer_property, client_props.CONSUMER_PROPERTIES,
                                       "--consumer-property")
    flags = {
        "group_id": ("--group", args.group),
        "group_instance_id": ("--group-instance-id", args.group_instance_id),
        "assignor": ("--assignor", args.assignor),
        "session_timeout_ms": ("--session-timeout-ms", args.session_timeout_ms),
        "auto_offset_reset": ("--from-beginning", "earliest" if args.from_beginning else None),
        "isolation_level": ("--isolation-level", args.isolation_level),
        "delivery": ("--delivery", args.delivery),
    }
    kwargs = client_props.merge(flags, props, "--consumer-property", client_props.CONSUMER_PROPERTIES)
    # A group with nothing committed starts at the log start (rpk's default, and Kafka
    # Streams'): a named group is an application that processes the topic. Without a group
    # the console follows new records (Kafka's console consumer).
    kwargs.setdefault("auto_offset_reset", "latest" if kwargs.get("group_id") is None else "earliest")
    kwargs.setdefault("client_id", "mq-console-consumer")
    if kwargs.get("group_id") is not None and kwargs.get("delivery") is None:
        kwargs.setdefault("enable_auto_commit", True)
    return kwargs


def _check_args(args: argparse.Namespace) -> None:
    if args.max_messages is not None and args.max_messages < 1:
        raise CliError("--max-messages must be at least 1", "omit it to consume without a limit")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CliError("--timeout-ms must not be negative", "omit it to wait forever")
    args.topics = list(dict.fromkeys([*args.topics, *args.topic_options]))
    if not args.topics and args.include is None:
        raise _usage("no topic to consume", "name one (mq consume TOPIC), several, or --include REGEX")
    if args.include is not None:
        try:
            re.compile(args.include)
        except re.error as exc:
            raise _usage(f"--include {args.include!r} is not a regular expression: {exc}",
                         "use Python's syntax, e.g. --include 'orders\\..*'") from None
    if args.partition is not None and (len(args.topics) != 1 or args.include is not None):
        raise _usage("--partition needs exactly one topic", "name one topic and drop --include")
    if args.group is not None and not args.group.strip():
        raise _usage("--group must not be empty", "name the group, e.g. --group analytics")
    if args.group is None:
        for flag, value in (("--assignor", args.assignor), ("--group-instance-id", args.group_instance_id),
                            ("--session-timeout-ms", args.session_timeout_ms)):
            if value is not None:
                raise _usage(f"{flag} needs --group", f"add --group GROUP, or drop {flag}")
        return
    for flag, value in (("--partition", args.partition), ("--offset", args.offset),
                        ("--from-time", args.from_time)):
        if value is not None:
            raise _usage(f"{flag} cannot be used with --group (the group assigns partitions and keeps "
                         "their offsets)",
                         f"drop {flag}, or move the group's offsets with `mq group reset-offsets {args.group}`")


def subscription_pattern(topics: list[str], include: str) -> str:
    """One pattern for named topics plus ``--include`` (the coordinator matches whole names)."""
    return "|".join([*(re.escape(t) for t in topics), f"(?:{include})"])


def named_topics_partitions(args: argparse.Namespace) -> dict[str, list[int]]:
    """The named topics' partitions. A missing topic is an error at once, unless
    ``--timeout-ms`` is given: then it is waited for that long, with a note (the topic a
    mirror is about to create, or one a script creates a moment later)."""
    deadline = None if args.timeout_ms is None else time.monotonic() + args.timeout_ms / 1000
    noted = False
    while True:
        try:
            return topics_partitions(args.bootstrap, args.topics)
        except UnknownTopic as exc:
            if deadline is None or time.monotonic() >= deadline:
                raise
            if not noted:
                print(f"note: {exc.what}: waiting up to --timeout-ms {args.timeout_ms} for it to be created",
                      file=sys.stderr)
                noted = True
            time.sleep(0.2)


def resolve_partitions(args: argparse.Namespace) -> list[TopicPartition]:
    """Without a group: every partition to assign, named topics first, then matches."""
    named = named_topics_partitions(args) if args.topics else {}
    found = dict(named)
    if args.include is not None:
        pattern = re.compile(args.include)
        matching = {t: ps for t, ps in topics_partitions(args.bootstrap, None).items() if pattern.fullmatch(t)}
        if not matching and not named:
            raise CliError(f"no topic matches --include {args.include!r}",
                           "see the topics with `mq topic list` (the pattern must match the whole name)")
        found.update((t, ps) for t, ps in matching.items() if t not in found)
    if args.partition is not None:
        [(topic, partitions)] = found.items()
        check_partition(topic, args.partition, partitions)
        found = {topic: [args.partition]}
    return [TopicPartition(t, p) for t, ps in found.items() for p in ps]


class _Progress:
    def __init__(self) -> None:
        self.count = 0


def run_consume(args: argparse.Namespace) -> int:
    try:
        render = renderer(args.format, args.property, print_key=args.print_key)
    except FormatError as exc:
        raise _usage(f"bad --format/--property: {exc}", "see `mq consume --help`") from None
    if args.share_group is not None:
        return _run_share(args, render)
    kwargs = consumer_kwargs(args)
    args.group = kwargs.get("group_id")
    _check_args(args)
    if args.group is None:
        tps = resolve_partitions(args)
    else:
        tps = []
        if args.topics:
            named_topics_partitions(args)  # "no such topic" now, in words
    progress = _Progress()
    try:
        args.render = render
        asyncio.run(_consume(args, kwargs, tps, sys.stdout.buffer, progress))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        print(f"Processed a total of {progress.count} messages", file=sys.stderr)
    return 0


def _run_share(args: argparse.Namespace, render: Any) -> int:
    if not args.topics or args.group or args.include or args.partition is not None:
        raise _usage("--share-group takes topic names only (no --group, --include or --partition)",
                     "mq consume TOPIC --share-group NAME")
    progress = _Progress()
    args.render = render
    try:
        asyncio.run(share_group.consume_share(args, _writer(sys.stdout.buffer, render), progress))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        print(f"Processed a total of {progress.count} messages", file=sys.stderr)
    return 0


def _writer(out: BinaryIO, render):
    """``write(record)``: the rendered record to ``out``; ``%i`` counts from 1."""
    count = 0

    def write(record: Any) -> None:
        nonlocal count
        count += 1
        out.write(render(record, count))
    return write


async def _consume(args: argparse.Namespace, kwargs: dict[str, Any], tps: list[TopicPartition],
                   out: BinaryIO, progress: _Progress) -> None:
    from mq.client import Consumer

    consumer = Consumer(args.bootstrap, **kwargs)
    if args.group is not None:
        _stop_on_sigterm()
    async with consumer:
        if args.group is None:
            consumer.assign(tps)
            await _seek(consumer, tps, args)
        elif args.include is not None:
            consumer.subscribe(pattern=subscription_pattern(args.topics, args.include))
        else:
            consumer.subscribe(args.topics)
        try:
            await _loop(consumer, args, out, progress)
        finally:
            if args.group is not None and kwargs.get("enable_auto_commit", True):
                await _commit_on_exit(consumer, args.group)


def _stop_on_sigterm() -> None:
    """SIGTERM (``kill``, ``kill %1``) ends a group member like Ctrl-C: it commits and
    leaves the group, so its partitions move at once instead of after the session timeout."""
    task = asyncio.current_task()
    if task is not None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        except (NotImplementedError, RuntimeError, ValueError):
            pass


async def _commit_on_exit(consumer: Any, group: str) -> None:
    """Commit the positions of what was printed (Kafka's console consumer commits on
    close); a failed commit is reported, not raised: the records were printed."""
    from mq.core.errors import MqError

    try:
        await consumer.commit()
    except MqError as exc:
        print(f"warning: could not commit the offsets of group {group}: {exc}", file=sys.stderr)


async def _loop(consumer: Any, args: argparse.Namespace, out: BinaryIO, progress: _Progress) -> None:
    write = _writer(out, args.render)
    last_record = time.monotonic()
    while args.max_messages is None or progress.count < args.max_messages:
        wait_ms = 500
        if args.timeout_ms is not None:
            left_ms = args.timeout_ms - (time.monotonic() - last_record) * 1000
            if left_ms <= 0:
                break
            wait_ms = int(min(wait_ms, max(1, left_ms)))
        left = None if args.max_messages is None else args.max_messages - progress.count
        records = await consumer.poll(timeout_ms=wait_ms, max_records=left)
        if args.group is not None and consumer.metrics()["member_state"] != "stable":
            # The timeout counts only while the member holds an assignment: a member that
            # is joining or rejoining (its partitions revoked) has had no chance to read.
            last_record = time.monotonic()
        if not records:
            continue
        last_record = time.monotonic()
        for record in records:
            write(record)
            progress.count += 1
            if progress.count == args.max_messages:
                break
        out.flush()


async def _seek(consumer: Any, tps: list[TopicPartition], args: argparse.Namespace) -> None:
    """Where each assigned partition starts. Beginning, end and time are lazy (the first
    poll resolves them); ``--offset N`` is clamped into [log start, log end] first, so an
    offset already deleted starts at the log start and one past the end waits there for
    new records, instead of falling back to the reset policy (the end)."""
    if args.from_beginning or args.offset == "earliest":
        consumer.seek_to_beginning(*tps)
    elif args.from_time is not None:
        consumer.seek_to_timestamp(args.from_time, *tps)
    elif isinstance(args.offset, int):
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            offset = min(max(args.offset, starts[tp]), ends[tp])
            if offset != args.offset:
                held = (f"holds offsets {starts[tp]}..{ends[tp] - 1}" if ends[tp] > starts[tp]
                        else "holds no records")
                where = "log start" if args.offset < offset else "log end"
                print(f"note: {tp.topic}-{tp.partition} {held}; starting at the {where} {offset}, "
                      f"not {args.offset}", file=sys.stderr)
            consumer.seek(tp, offset)
    else:
        consumer.seek_to_end(*tps)
