"""``mq share-group list|describe|delete`` and ``mq consume --share-group``: share groups (KIP-932).

``describe`` prints the group's state and epoch, then one row per share-partition:
its start offset (SPSO: every record before it is done), end offset (the next never
handed out), the partition's high watermark, LAG (records not yet handed out) and the
in-flight records by state; ``--members`` lists the members and their partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import sys
import time
from typing import Any

from mq.cli.common import CliError, add_bootstrap
from mq.cli.output import console, print_json, print_table, table
from mq.core.errors import ErrorCode, MqError

PARTITION_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "END-OFFSET", "HIGH-WATERMARK", "LAG",
                     "ACQUIRED", "AVAILABLE", "DEAD-LETTERS")


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("share-group", help="list, describe, delete share groups (queues)",
                           description="Manage share groups: queues on topics, many consumers per partition,\n"
                                       "per-record acknowledgements and a dead-letter topic (KIP-932).")
    gsub = group.add_subparsers(dest="share_command", metavar="COMMAND", title="commands", parser_class=type(group))
    gsub.required = True
    p = gsub.add_parser("list", help="list share groups with their states and member counts")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_bootstrap(p)
    p.set_defaults(func=run_list)
    p = gsub.add_parser("describe", help="show a share group's partitions, in-flight records and members",
                        description="Per share-partition: start offset, end offset, high watermark, lag and\n"
                                    "the in-flight records by state.")
    p.add_argument("group", metavar="GROUP", help="share group id")
    p.add_argument("--members", action="store_true", help="list the members and their assignments instead")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    add_bootstrap(p)
    p.set_defaults(func=run_describe)
    p = gsub.add_parser("delete", help="delete a share group with no members, and its state")
    p.add_argument("group", metavar="GROUP", help="share group id")
    add_bootstrap(p)
    p.set_defaults(func=run_delete)


def add_consume_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--share-group", metavar="NAME",
                   help="consume as a member of share group NAME (a queue: records are shared among its members "
                        "and acknowledged one by one; see `mq share-group`)")
    p.add_argument("--share-ack", choices=("accept", "release", "reject"), default="accept",
                   help="--share-group: how each printed record is acknowledged (default accept)")
    p.add_argument("--share-reject-matching", metavar="REGEX",
                   help="--share-group: reject records whose value matches REGEX (they go to the dead-letter topic)")
    p.add_argument("--dead-letter-topic", metavar="TOPIC",
                   help="--share-group: the dead-letter topic (default GROUP.dlq)")


def _explained(group: str, coro: Any) -> Any:
    try:
        return asyncio.run(coro)
    except MqError as exc:
        if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise CliError(f"share group {group} does not exist", "see `mq share-group list`") from None
        if exc.code == ErrorCode.NON_EMPTY_GROUP:
            raise CliError(f"share group {group} still has members",
                           f"stop them first (mq share-group describe {group} --members)") from None
        raise


def _admin(args: argparse.Namespace) -> Any:
    from mq.client.share_admin import ShareGroupAdmin

    return ShareGroupAdmin(args.bootstrap)


def run_list(args: argparse.Namespace) -> int:
    async def fetch() -> list[Any]:
        async with _admin(args) as admin:
            return await admin.list_groups()

    groups = asyncio.run(fetch())
    if args.json:
        print_json([{"group_id": g.group_id, "state": g.state, "members": g.members} for g in groups])
        return 0
    if not groups:
        console().print("no share groups yet — start one with `mq consume TOPIC --share-group NAME`")
        return 0
    t = table("GROUP", "STATE", "MEMBERS")
    for g in groups:
        t.add_row(g.group_id, g.state, str(g.members))
    print_table(t)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    async def fetch() -> tuple[Any, int]:
        async with _admin(args) as admin:
            return await admin.describe_group(args.group), admin.coordinator_id

    g, coordinator = _explained(args.group, fetch())
    if args.json:
        print_json(describe_doc(g, coordinator))
        return 0
    console().print(f"share group {g.group_id}: {g.state}, epoch {g.group_epoch}, {len(g.members)} members, "
                    f"coordinator broker {coordinator}")
    if args.members:
        t = table("MEMBER", "CLIENT", "HOST", "ASSIGNMENT", "ACQUIRED")
        for m in g.members:
            t.add_row(m.member_id, m.client_id, m.client_host,
                      " ".join(f"{a.topic}:{','.join(map(str, a.partitions))}" for a in m.assignment) or "-",
                      str(m.acquired))
        print_table(t)
        return 0
    t = table(*PARTITION_COLUMNS)
    for p in g.partitions:
        t.add_row(g.group_id, p.topic, str(p.partition), str(p.start_offset), str(p.end_offset),
                  str(p.high_watermark), str(max(0, p.high_watermark - p.end_offset)), str(p.acquired),
                  str(p.available), str(p.dead_letters))
    print_table(t)
    return 0


def describe_doc(g: Any, coordinator: int) -> dict[str, Any]:
    """The JSON of `mq share-group describe --json` (schema: mq.cli.schemas_share)."""
    return {"group_id": g.group_id, "state": g.state, "group_epoch": g.group_epoch, "coordinator": coordinator,
            "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                         "assignment": [[a.topic, a.partitions] for a in m.assignment],
                         "acquired": m.acquired} for m in g.members],
            "partitions": [{"topic": p.topic, "partition": p.partition, "start_offset": p.start_offset,
                            "end_offset": p.end_offset, "high_watermark": p.high_watermark,
                            "lag": max(0, p.high_watermark - p.end_offset), "acquired": p.acquired,
                            "available": p.available, "acknowledged": p.acknowledged,
                            "archived": p.archived, "dead_letters": p.dead_letters} for p in g.partitions]}


def run_delete(args: argparse.Namespace) -> int:
    async def go() -> None:
        async with _admin(args) as admin:
            await admin.delete_group(args.group)

    _explained(args.group, go())
    console().print(f"deleted share group {args.group}")
    return 0


async def consume_share(args: argparse.Namespace, write: Any, progress: Any) -> None:
    """``mq consume TOPIC --share-group NAME``: print and acknowledge until the limits."""
    from mq.client.share_consumer import ShareConsumer

    task = asyncio.current_task()
    if task is not None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    reject = re.compile(args.share_reject_matching) if args.share_reject_matching else None
    async with ShareConsumer(args.bootstrap, group_id=args.share_group, topics=args.topics,
                             dead_letter_topic=args.dead_letter_topic,
                             auto_offset_reset="earliest" if args.from_beginning else "",
                             acknowledgement_mode="explicit") as consumer:
        last_record = time.monotonic()
        while args.max_messages is None or progress.count < args.max_messages:
            wait_ms = 500
            if args.timeout_ms is not None:
                left_ms = args.timeout_ms - (time.monotonic() - last_record) * 1000
                if left_ms <= 0:
                    break
                wait_ms = int(min(wait_ms, max(1, left_ms)))
            records = await consumer.poll(timeout_ms=wait_ms)
            if records:
                last_record = time.monotonic()
            for record in records:
                if args.max_messages is not None and progress.count >= args.max_messages:
                    consumer.acknowledge(record, "release")  # not printed: back to the group at once
                    continue
                value = record.value or b""
                if reject is not None and reject.search(value.decode("utf-8", "replace")):
                    consumer.acknowledge(record, "reject")
                    continue
                write(record)
                progress.count += 1
                consumer.acknowledge(record, args.share_ack)
            sys.stdout.flush()
        await consumer.commit()
