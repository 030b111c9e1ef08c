"""``mq group reset-offsets``: move a group's committed offsets, dry run by default.

As ``kafka-consumer-groups --reset-offsets``: pick the partitions (``--topic T``,
``--topic T:0,2``, ``--all-topics`` = every partition the group has committed, or the
partitions of ``--from-file``), exactly one strategy, and every new offset is clamped
into [log start, log end]. Without ``--execute`` it only prints the plan (GROUP TOPIC
PARTITION CURRENT-OFFSET NEW-OFFSET); ``--execute`` commits it, which the coordinator
accepts only while the group has no members, so it is refused while consumers run.
The plan logic is ``mq.client.internals.offset_reset`` (pure, unit-tested).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

from mq.cli.common import EXIT_USAGE, CliError, add_bootstrap, unknown_topic
from mq.cli.output import print_json, print_table, table
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition

if TYPE_CHECKING:
    from mq.client.internals.offset_reset import PlannedReset, ResetSpec

# mq.client loads lazily (a third of a second): the parsers below import it when called.
DURATION_HELP = "ISO-8601 PnDTnHnMnS (P1DT2H, PT30M) or compact 1h30m, 2d, 45s, 500ms"
PLAN_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")
INACTIVE_STATES = ("Empty", "Dead")


def _arg(name: str):
    """An argparse type calling ``offset_reset.<name>``, its MqError as a usage error."""
    def convert(text: str):
        from mq.client.internals import offset_reset

        try:
            return getattr(offset_reset, name)(text)
        except MqError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None
    convert.__name__ = name
    return convert


def register(gsub: argparse._SubParsersAction) -> None:
    p = gsub.add_parser(
        "reset-offsets", help="move a group's committed offsets (dry run unless --execute)",
        description="Compute new committed offsets for the group and print them (GROUP TOPIC PARTITION\n"
                    "CURRENT-OFFSET NEW-OFFSET); with --execute, commit them. New offsets are clamped to\n"
                    "[log start, log end]. The group must have no active members to --execute: stop its\n"
                    "consumers first. Pick partitions with --topic or --all-topics (or --from-file) and\n"
                    "exactly one --to-*/--shift-by/--by-duration/--from-file strategy.")
    p.add_argument("group", metavar="GROUP", help="group id")
    which = p.add_mutually_exclusive_group()
    which.add_argument("-t", "--topic", action="append", type=_arg("parse_topic_spec"), metavar="TOPIC[:P,P]",
                       help="a topic, or some of its partitions (clicks:0,2); repeatable")
    which.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed offsets for")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    how.add_argument("--to-latest", action="store_true", help="to the log end offset (skip everything)")
    how.add_argument("--to-offset", type=int, metavar="N", help="to offset N")
    how.add_argument("--shift-by", type=int, metavar="N",
                     help="move the committed offset by N (negative: back; needs a committed offset)")
    how.add_argument("--to-datetime", type=_arg("parse_datetime_ms"), metavar="ISO8601",
                     help="to the first record at or after this time, e.g. 2026-11-25T10:00:00 "
                          "(no zone: this machine's local time; add Z or +01:00 for another)")
    how.add_argument("--by-duration", type=_arg("parse_duration_ms"), metavar="DURATION",
                     help=f"to the first record of the last DURATION: {DURATION_HELP}")
    how.add_argument("--from-file", metavar="CSV",
                     help="offsets from a file of topic,partition,offset lines (the output of --export)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    output = p.add_mutually_exclusive_group()
    output.add_argument("--export", action="store_true",
                        help="print the plan as topic,partition,offset CSV (for --from-file) instead of a table")
    output.add_argument("--json", action="store_true", help="print the plan as one JSON document")
    add_bootstrap(p)
    p.set_defaults(func=run_reset)


def spec_of(args: argparse.Namespace) -> ResetSpec:
    from mq.client.internals.offset_reset import ResetSpec, ResetStrategy, parse_offsets_csv

    if args.to_earliest:
        return ResetSpec(ResetStrategy.TO_EARLIEST)
    if args.to_latest:
        return ResetSpec(ResetStrategy.TO_LATEST)
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise CliError("--to-offset must be 0 or more", "use --to-earliest / --to-latest for the ends",
                           exit_code=EXIT_USAGE)
        return ResetSpec(ResetStrategy.TO_OFFSET, args.to_offset)
    if args.shift_by is not None:
        return ResetSpec(ResetStrategy.SHIFT_BY, args.shift_by)
    if args.to_datetime is not None:
        return ResetSpec(ResetStrategy.TO_DATETIME, args.to_datetime)
    if args.by_duration is not None:
        return ResetSpec(ResetStrategy.BY_DURATION, args.by_duration)
    try:
        with open(args.from_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise CliError(f"cannot read --from-file {args.from_file}: {exc.strerror or exc}",
                       "pass a CSV file of topic,partition,offset lines") from None
    try:
        return ResetSpec(ResetStrategy.FROM_FILE, offsets=parse_offsets_csv(text, group_id=args.group))
    except MqError as exc:
        raise CliError(f"bad --from-file {args.from_file}: {exc.message}",
                       "write one topic,partition,offset line per partition", exit_code=EXIT_USAGE) from None


async def _partitions(admin: Any, args: argparse.Namespace, spec: ResetSpec,
                      committed: dict[TopicPartition, int]) -> list[TopicPartition]:
    from mq.client.internals.offset_reset import ResetStrategy

    if spec.strategy == ResetStrategy.FROM_FILE and not args.topic:
        tps = sorted(spec.offsets or {})
    elif args.all_topics:
        tps = sorted(committed)
        if not tps:
            raise CliError(f"group {args.group} has no committed offsets, so --all-topics names nothing",
                           "name the partitions with --topic TOPIC")
    elif args.topic:
        tps = []
        for topic, parts in args.topic:
            try:
                [described] = await admin.describe_topics([topic])
            except MqError as exc:
                if exc.code == ErrorCode.UNKNOWN_TOPIC:
                    raise unknown_topic(topic) from None
                raise
            have = [p.partition for p in described.partitions]
            for part in parts or have:
                if part not in have:
                    raise CliError(f"topic {topic!r} has no partition {part} (it has {len(have)})",
                                   f"use partitions 0..{len(have) - 1}, see `mq topic describe {topic}`",
                                   exit_code=EXIT_USAGE)
                tps.append(TopicPartition(topic, part))
    else:
        raise CliError("no partitions to reset", "pass --topic TOPIC[:P,P] or --all-topics", exit_code=EXIT_USAGE)
    return sorted(set(tps))


async def _plan(args: argparse.Namespace, spec: ResetSpec) -> tuple[list[PlannedReset], Any]:
    from mq.cli.group import active_members, admin_for, describe_or_none
    from mq.client.internals.offset_reset import OffsetRange, plan_reset
    from mq.core.clock import SystemClock

    async with admin_for(args) as admin:
        description = await describe_or_none(admin, args.group)
        busy = description is not None and (description.state not in INACTIVE_STATES or description.members)
        if busy and args.execute:
            raise active_members(args.group, len(description.members))
        committed = {tp: om.offset for tp, om in (await admin.list_group_offsets(args.group)).items()}
        tps = await _partitions(admin, args, spec, committed)
        try:
            starts = await admin.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps})
            ends = await admin.list_offsets({tp: LATEST_TIMESTAMP for tp in tps})
            at_time = None
            when = spec.target_time_ms(now_ms=SystemClock().wall_ms())
            if when is not None:
                found = await admin.list_offsets({tp: when for tp in tps})
                at_time = {tp: info.offset for tp, info in found.items()}
        except MqError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC:
                raise CliError(exc.message, "check the topics with `mq topic list`") from None
            raise
        bounds = {tp: OffsetRange(starts[tp].offset, ends[tp].offset) for tp in tps}
        try:
            plan = plan_reset(tps, spec, current=committed, bounds=bounds, offsets_for_time=at_time)
        except MqError as exc:
            raise CliError(exc.message, "commit an offset first, or use another strategy") from None
        if args.execute:
            try:
                await admin.alter_group_offsets(args.group, {p.tp: p.new for p in plan})
            except MqError as exc:
                if exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.NON_EMPTY_GROUP,
                                ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                    d = await describe_or_none(admin, args.group)
                    raise active_members(args.group, len(d.members) if d else 0) from None
                raise
        return plan, description if busy else None


def plan_rows(group_id: str, plan: list[PlannedReset]) -> list[list[str]]:
    return [[group_id, p.tp.topic, str(p.tp.partition), "-" if p.current is None else str(p.current), str(p.new)]
            for p in plan]


def plan_doc(group_id: str, plan: list[PlannedReset], *, executed: bool) -> dict:
    """The document of ``mq group reset-offsets --json``."""
    return {"group_id": group_id, "executed": executed,
            "partitions": [{"topic": p.tp.topic, "partition": p.tp.partition, "current_offset": p.current,
                            "new_offset": p.new, "clamped": p.clamped} for p in plan]}


def run_reset(args: argparse.Namespace) -> int:
    from mq.client.internals.offset_reset import plan_to_csv

    spec = spec_of(args)
    plan, busy = asyncio.run(_plan(args, spec))
    if args.export:
        sys.stdout.write(plan_to_csv(plan))
    elif args.json:
        print_json(plan_doc(args.group, plan, executed=args.execute))
    else:
        t = table(*PLAN_COLUMNS)
        for row in plan_rows(args.group, plan):
            t.add_row(*row)
        print_table(t)
    clamped = [p for p in plan if p.clamped]
    if clamped:
        print(f"note: {len(clamped)} offset(s) were outside [log start, log end] and were clamped to it",
              file=sys.stderr)
    if args.execute:
        print(f"reset {len(plan)} partition(s) of group {args.group}", file=sys.stderr)
    else:
        if busy is not None:
            print(f"note: group {args.group} has {len(busy.members)} active member(s); --execute is refused "
                  f"until they stop (mq group describe {args.group})", file=sys.stderr)
        print("dry run: nothing changed; add --execute to commit these offsets", file=sys.stderr)
    return 0
