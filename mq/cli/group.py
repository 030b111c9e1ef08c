"""``mq group list|describe|delete|reset-offsets``: consumer groups, as kafka-consumer-groups.

``describe`` prints one row per partition the group has committed or is assigned:
GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG LAG-SECONDS MEMBER CLIENT HOST
(``-`` where there is nothing: no commit yet, no owner), after a line with the state,
assignor and generation. LAG-SECONDS is the age of the next record the group will read
(now minus its timestamp). ``reset-offsets`` lives in ``mq.cli.group_reset``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from mq.cli import group_reset
from mq.cli.common import CliError, add_bootstrap, require_broker
from mq.cli.output import cell, console, print_json, print_table, table
from mq.core.errors import ErrorCode, MqError

DESCRIBE_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS",
                    "MEMBER", "CLIENT", "HOST")
MEMBER_COLUMNS = ("GROUP", "MEMBER", "INSTANCE", "CLIENT", "HOST", "#PARTITIONS", "ASSIGNMENT")


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("group", help="list, describe, delete consumer groups and reset their offsets",
                           description="Manage consumer groups (like kafka-consumer-groups).")
    gsub = group.add_subparsers(dest="group_command", metavar="COMMAND", title="commands",
                                parser_class=type(group))
    gsub.required = True

    p = gsub.add_parser("list", help="list consumer groups with their states",
                        description="List every consumer group of the cluster with its state\n"
                                    "(Empty, PreparingRebalance, Stable, Dead) and coordinator.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_bootstrap(p)
    p.set_defaults(func=run_list)

    p = gsub.add_parser("describe", help="show a group's partitions, offsets, lag and members",
                        description="Show the group's state, assignor and generation, and per partition the\n"
                                    "committed offset, log end offset, lag in records and in seconds (the age\n"
                                    "of the next unread record) and the member that owns it.")
    p.add_argument("group", metavar="GROUP", help="group id")
    p.add_argument("--members", action="store_true", help="list the members and their assignments instead")
    p.add_argument("--json", action="store_true", help="print one JSON document (state, members, partitions)")
    add_bootstrap(p)
    p.set_defaults(func=run_describe)

    p = gsub.add_parser("delete", help="delete empty groups and their committed offsets",
                        description="Delete consumer groups and their committed offsets. A group with active\n"
                                    "members cannot be deleted: stop its consumers first.")
    p.add_argument("groups", nargs="+", metavar="GROUP", help="group id (several allowed)")
    add_bootstrap(p)
    p.set_defaults(func=run_delete)

    group_reset.register(gsub)


def admin_for(args: argparse.Namespace):
    from mq.client import Admin

    require_broker(args.bootstrap)
    return Admin(args.bootstrap)


def no_such_group(group_id: str) -> CliError:
    return CliError(f"group {group_id!r} does not exist", "list groups with `mq group list`")


def active_members(group_id: str, members: int) -> CliError:
    count = f"{members} active member{'s' if members != 1 else ''}" if members else "active members"
    return CliError(f"group {group_id} has {count}",
                    f"stop them first (mq group describe {group_id})")


# ---------------------------------------------------------------- list


def run_list(args: argparse.Namespace) -> int:
    async def fetch() -> list[Any]:
        async with admin_for(args) as admin:
            return await admin.list_groups()

    groups = asyncio.run(fetch())
    if args.json:
        print_json([{"group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type,
                     "coordinator": g.coordinator_id} for g in groups])
        return 0
    if not groups:
        console().print("no consumer groups yet — start one with `mq consume TOPIC --group GROUP`")
        return 0
    t = table("GROUP", "STATE", "PROTOCOL", "COORDINATOR")
    for g in groups:
        t.add_row(g.group_id, g.state, g.protocol_type or "-", str(g.coordinator_id))
    print_table(t)
    return 0


# ---------------------------------------------------------------- describe


async def describe_or_none(admin: Any, group_id: str) -> Any:
    """``admin.describe_group``, or None when the coordinator knows no such group."""
    try:
        return await admin.describe_group(group_id)
    except MqError as exc:
        if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise
        return None


async def _describe(args: argparse.Namespace) -> dict:
    async with admin_for(args) as admin:
        description = await describe_or_none(admin, args.group)
        lags = await admin.group_lag(args.group)
    if (description is None or description.state == "Dead") and not lags:
        raise no_such_group(args.group)
    return describe_doc(args.group, description, lags)


def describe_doc(group_id: str, description: Any, lags: list[Any]) -> dict:
    """The JSON document of ``mq group describe --json`` (also what the tables show)."""
    members = description.members if description is not None else []
    by_id = {mem.member_id: mem for mem in members}
    partitions = []
    for lag in lags:
        mem = by_id.get(lag.member_id) if lag.member_id else None
        partitions.append({
            "topic": lag.tp.topic, "partition": lag.tp.partition, "current_offset": lag.committed,
            "log_end_offset": lag.log_end, "lag": lag.lag,
            "lag_seconds": None if lag.lag_seconds is None else round(lag.lag_seconds, 3),
            "member_id": lag.member_id, "client_id": mem.client_id if mem else None,
            "host": mem.host if mem else None})
    return {
        "group_id": group_id,
        "state": description.state if description is not None else "Empty",
        "assignor": description.assignor if description is not None else "",
        "generation_id": description.generation_id if description is not None else -1,
        "coordinator": description.coordinator_id if description is not None else None,
        "members": [{"member_id": mem.member_id, "group_instance_id": mem.group_instance_id,
                     "client_id": mem.client_id, "host": mem.host,
                     "assignment": [[tp.topic, tp.partition] for tp in mem.assignment]} for mem in members],
        "partitions": partitions,
    }


def partition_rows(doc: dict) -> list[list[str]]:
    """DESCRIBE_COLUMNS rows: one per partition, then one per member owning nothing."""
    rows = [[doc["group_id"], p["topic"], str(p["partition"]), cell(p["current_offset"]),
             cell(p["log_end_offset"]), cell(p["lag"]), cell(p["lag_seconds"]), cell(p["member_id"]),
             cell(p["client_id"]), cell(p["host"])] for p in doc["partitions"]]
    owning = {p["member_id"] for p in doc["partitions"]}
    rows += [[doc["group_id"], "-", "-", "-", "-", "-", "-", mem["member_id"], cell(mem["client_id"]),
              cell(mem["host"])] for mem in doc["members"] if mem["member_id"] not in owning]
    return rows


def member_rows(doc: dict) -> list[list[str]]:
    rows = []
    for mem in doc["members"]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in mem["assignment"]:
            by_topic.setdefault(topic, []).append(partition)
        assignment = " ".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(by_topic.items()))
        rows.append([doc["group_id"], mem["member_id"], cell(mem["group_instance_id"]), cell(mem["client_id"]),
                     cell(mem["host"]), str(len(mem["assignment"])), assignment or "-"])
    return rows


def summary_line(doc: dict) -> str:
    members = len(doc["members"])
    return (f"group {doc['group_id']}: state {doc['state']}, assignor {doc['assignor'] or '-'}, "
            f"generation {doc['generation_id']}, coordinator {cell(doc['coordinator'])}, "
            f"{members} member{'s' if members != 1 else ''}")


def run_describe(args: argparse.Namespace) -> int:
    doc = asyncio.run(_describe(args))
    if args.json:
        print_json(doc)
        return 0
    console().print(summary_line(doc))
    if args.members:
        t = table(*MEMBER_COLUMNS)
        rows = member_rows(doc)
    else:
        t = table(*DESCRIBE_COLUMNS)
        rows = partition_rows(doc)
    for row in rows:
        t.add_row(*row)
    if rows:
        print_table(t)
    else:
        console().print("no members and no committed offsets")
    return 0


# ---------------------------------------------------------------- delete


def run_delete(args: argparse.Namespace) -> int:
    async def delete() -> dict:
        async with admin_for(args) as admin:
            results = await admin.delete_groups(args.groups)
            descriptions = {}
            for group_id, code in results.items():
                if code == ErrorCode.NON_EMPTY_GROUP:
                    descriptions[group_id] = await describe_or_none(admin, group_id)
            return {"results": results, "descriptions": descriptions}

    out = asyncio.run(delete())
    failures: list[CliError] = []
    for group_id, code in out["results"].items():
        if code == ErrorCode.NONE:
            console().print(f"deleted group {group_id}")
        elif code == ErrorCode.NON_EMPTY_GROUP:
            d = out["descriptions"].get(group_id)
            failures.append(active_members(group_id, len(d.members) if d else 0))
        elif code == ErrorCode.GROUP_ID_NOT_FOUND:
            failures.append(no_such_group(group_id))
        else:
            failures.append(CliError(f"group {group_id}: {code.name}: {code.description}",
                                     "retry; if it persists, look at the broker log"))
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise CliError("; ".join(f.what for f in failures), failures[0].todo)
    return 0
