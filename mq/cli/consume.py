"""``mq consume TOPIC``: print records, like Kafka's console consumer.

Without ``--partition`` every partition of the topic is assigned (no consumer group:
positions are not committed). With ``--group G`` the consumer joins group G instead:
the coordinator assigns it partitions (start several to share the topic), it starts
at the group's committed offsets (else at the end, or at the log start with
``--from-beginning``: Kafka's ``auto.offset.reset=earliest``, which does not move
offsets the group already committed), commits every few seconds and on exit, and
leaves the group when it stops. Output is the value per line (``--format text``, raw
bytes) or one JSON object per record (``--format json``; bytes as described in
``mq.cli.records``). It stops after ``--max-messages`` records, or when
``--timeout-ms`` passes without a new record; Ctrl-C and a closed pipe end it quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from datetime import datetime
from typing import Any, BinaryIO

from mq.cli.common import EXIT_USAGE, CliError, add_bootstrap, check_partition, topic_partitions
from mq.cli.records import bytes_to_json, headers_to_json
from mq.core.types import TopicPartition


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "consume", help="print records of a topic",
        description="Print the records of a topic, by default only new ones.\n"
                    "JSON output: one object per line with topic, partition, offset, key, value,\n"
                    'timestamp (ms) and headers ([[name, value], ...]); bytes that are not UTF-8\n'
                    'appear as {"base64": "..."}.',
    )
    p.add_argument("topic", metavar="TOPIC", help="topic name")
    add_bootstrap(p)
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    start.add_argument("--offset", type=_offset, metavar="N",
                       help="start at offset N (or 'earliest' / 'latest') in each consumed partition")
    start.add_argument("--from-time", type=_iso_time_ms, metavar="ISO8601",
                       help="start at the first record with timestamp >= this, e.g. 2026-11-25T14:30:00Z "
                            "(no zone: local time)")
    p.add_argument("--partition", type=int, metavar="P", help="consume only partition P (default: all)")
    p.add_argument("--group", metavar="GROUP",
                   help="join consumer group GROUP: share the partitions with its other members, start at its "
                        "committed offsets and commit on the way (--from-beginning: where none is committed, "
                        "start at the log start)")
    p.add_argument("--assignor", default="range",
                   choices=["range", "round-robin", "sticky", "cooperative-sticky"],
                   help="with --group: how the group's partitions are shared (default: range)")
    p.add_argument("--group-instance-id", metavar="ID",
                   help="with --group: a static member id (KIP-345): a restart within the session "
                        "timeout keeps the assignment")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    p.add_argument("--timeout-ms", type=int, metavar="T", help="exit when no record arrives for T ms "
                   "(with --group: counted only while the member holds an assignment, not while it joins or "
                   "rejoins the group) "
                   "(default: wait forever)")
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help="text: the value (raw bytes) per line; json: one object per record (default: text)")
    p.add_argument("--print-key", action="store_true", help="text format: print KEY<TAB>VALUE")
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


def _check_group_args(args: argparse.Namespace) -> None:
    if not args.group.strip():
        raise CliError("--group must not be empty", "name the group, e.g. --group analytics", exit_code=EXIT_USAGE)
    for flag, value in (("--partition", args.partition), ("--offset", args.offset),
                        ("--from-time", args.from_time)):
        if value is not None:
            raise CliError(f"{flag} cannot be used with --group (the group assigns partitions and keeps "
                           "their offsets)",
                           f"drop {flag}, or move the group's offsets with `mq group reset-offsets {args.group}`",
                           exit_code=EXIT_USAGE)


class _Progress:
    def __init__(self) -> None:
        self.count = 0


def run_consume(args: argparse.Namespace) -> int:
    if args.max_messages is not None and args.max_messages < 1:
        raise CliError("--max-messages must be at least 1", "omit it to consume without a limit")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CliError("--timeout-ms must not be negative", "omit it to wait forever")
    if args.group is not None:
        _check_group_args(args)
    partitions = topic_partitions(args.bootstrap, args.topic)
    check_partition(args.topic, args.partition, partitions)
    if args.partition is not None:
        partitions = [args.partition]
    progress = _Progress()
    try:
        asyncio.run(_consume(args, partitions, sys.stdout.buffer, progress))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            pass
        print(f"Processed a total of {progress.count} messages", file=sys.stderr)
    return 0


async def _consume(args: argparse.Namespace, partitions: list[int], out: BinaryIO,
                   progress: _Progress) -> None:
    from mq.client import Consumer

    tps = [TopicPartition(args.topic, p) for p in partitions]
    reset = "earliest" if args.from_beginning else "latest"
    if args.group is None:
        consumer = Consumer(args.bootstrap, auto_offset_reset=reset, client_id="mq-console-consumer")
    else:
        consumer = Consumer(args.bootstrap, auto_offset_reset=reset, client_id="mq-console-consumer",
                            group_id=args.group, enable_auto_commit=True, assignor=args.assignor,
                            group_instance_id=args.group_instance_id)
    if args.group is not None:
        _stop_on_sigterm()
    async with consumer:
        if args.group is None:
            consumer.assign(tps)
            _seek(consumer, tps, args)  # lazy: the first poll resolves it, without delay
        else:
            consumer.subscribe([args.topic])
        try:
            await _loop(consumer, args, out, progress)
        finally:
            if args.group is not None:
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
    write = _json_writer(out) if args.format == "json" else _text_writer(out, args.print_key)
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


def _seek(consumer: Any, tps: list[TopicPartition], args: argparse.Namespace) -> None:
    if args.from_beginning or args.offset == "earliest":
        consumer.seek_to_beginning(*tps)
    elif args.from_time is not None:
        consumer.seek_to_timestamp(args.from_time, *tps)
    elif isinstance(args.offset, int):
        for tp in tps:
            consumer.seek(tp, args.offset)
    else:
        consumer.seek_to_end(*tps)


def _text_writer(out: BinaryIO, print_key: bool):
    def write(record: Any) -> None:
        value = b"null" if record.value is None else bytes(record.value)
        if print_key:
            key = b"null" if record.key is None else bytes(record.key)
            out.write(key + b"\t" + value + b"\n")
        else:
            out.write(value + b"\n")
    return write


def _json_writer(out: BinaryIO):
    def write(record: Any) -> None:
        doc = {
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "key": bytes_to_json(record.key), "value": bytes_to_json(record.value),
            "timestamp": record.timestamp, "headers": headers_to_json(record.headers),
        }
        out.write(json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n")
    return write
