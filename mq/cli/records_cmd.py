"""``mq records delete TOPIC --before-offset N``: drop the head of partitions (DeleteRecords).

As ``kafka-delete-records``: each partition's log start offset moves up to N, so the
records below N are no longer readable (segments wholly below it are deleted). N may
be at most the partition's high watermark; ``--before-offset end`` empties the
partitions. Without ``--partition`` every partition of the topic is truncated. The
command returns once every in-sync replica moved its log start (the printed offset is
the smallest of theirs).
"""

from __future__ import annotations

import argparse
import asyncio

from mq.cli.common import add_bootstrap, check_partition, topic_partitions
from mq.cli.output import print_json, print_table, table
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition


def register(sub: argparse._SubParsersAction) -> None:
    records = sub.add_parser("records", help="delete the oldest records of partitions",
                             description="Act on the records of a topic.")
    rsub = records.add_subparsers(dest="records_command", metavar="COMMAND", title="commands",
                                  parser_class=type(records))
    rsub.required = True
    p = rsub.add_parser("delete", help="delete the records before an offset",
                        description="Move the log start offset of partitions up to --before-offset: the records\n"
                                    "below it can no longer be read (like kafka-delete-records).")
    p.add_argument("topic", metavar="TOPIC", help="topic name")
    p.add_argument("-p", "--partition", type=int, action="append", metavar="P",
                   help="a partition (repeatable; default: every partition)")
    p.add_argument("--before-offset", type=_before, required=True, metavar="N",
                   help="the new log start offset (at most the high watermark), or `end` for all records")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_bootstrap(p)
    p.set_defaults(func=run_delete)


def _before(text: str) -> int:
    if text in ("end", "latest"):
        return -1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an offset (a number or `end`)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: offsets start at 0")
    return value


def run_delete(args: argparse.Namespace) -> int:
    from mq.cli.common import CliError
    from mq.client import Admin

    partitions = topic_partitions(args.bootstrap, args.topic)
    for p in args.partition or []:
        check_partition(args.topic, p, partitions)
    chosen = sorted(set(args.partition or partitions))

    async def delete() -> dict[TopicPartition, int]:
        async with Admin(args.bootstrap) as admin:
            return await admin.delete_records({TopicPartition(args.topic, p): args.before_offset for p in chosen})

    try:
        low = asyncio.run(delete())
    except MqError as exc:
        if exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
            raise CliError(f"--before-offset {args.before_offset} is past the end of a partition of "
                           f"{args.topic!r} ({exc.message})",
                           f"use an offset up to the log end (see `mq topic describe {args.topic}`) "
                           "or --before-offset end") from None
        if exc.code == ErrorCode.REQUEST_TIMED_OUT:
            raise CliError(f"not every in-sync replica of {args.topic!r} confirmed the new log start in time "
                           f"({exc.message})",
                           "the leaders already deleted the records: run the command again (a broker that "
                           "stays down leaves the ISR after replica.lag.time.max.ms; see `mq status`)") from None
        raise
    rows = [{"topic": tp.topic, "partition": tp.partition, "log_start_offset": low[tp]} for tp in sorted(low)]
    if args.json:
        print_json(rows)
        return 0
    t = table("TOPIC", "PARTITION", "LOG-START-OFFSET")
    for r in rows:
        t.add_row(r["topic"], str(r["partition"]), str(r["log_start_offset"]))
    print_table(t)
    return 0
