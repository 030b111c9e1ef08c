"""``mq topic create|list|describe|delete|alter|alter-config``: the admin side of topics.

``mq topic alter NAME --partitions N`` is Kafka's ``kafka-topics.sh --alter --topic NAME
--partitions N`` (CreatePartitions): the count only grows, and keyed records map to
other partitions afterwards.

Topic configs use Kafka's names and are checked here (``TopicConfig.from_kafka``)
before anything is sent, so a typo is reported at once and nothing is half-created;
the broker checks them again.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from mq.cli.common import (
    EXIT_USAGE,
    CliError,
    add_bootstrap,
    key_value,
    require_broker,
    unknown_topic,
)
from mq.cli.output import cell, console, print_json, print_table, table
from mq.core.config import TOPIC_KEYS_BY_NAME, TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition

CONFIG_HINT = "use Kafka's topic config names and values, e.g. --config retention.ms=86400000"


def register(sub: argparse._SubParsersAction) -> None:
    topic = sub.add_parser("topic", help="create, list, describe, delete and configure topics",
                           description="Manage topics.")
    tsub = topic.add_subparsers(dest="topic_command", metavar="COMMAND", title="commands",
                                parser_class=type(topic))
    tsub.required = True

    p = tsub.add_parser("create", help="create a topic", description="Create a topic.")
    p.add_argument("name", metavar="NAME", help="topic name: letters, digits, '.', '_', '-'")
    p.add_argument("--partitions", type=int, metavar="N", help="number of partitions (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, metavar="R",
                   help="replicas per partition (default: the broker's default.replication.factor)")
    p.add_argument("--config", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="topic config override, e.g. retention.ms=86400000 (repeatable)")
    add_bootstrap(p)
    p.set_defaults(func=run_create)

    p = tsub.add_parser("list", help="list topics", description="List topics with their partition counts.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_bootstrap(p)
    p.set_defaults(func=run_list)

    p = tsub.add_parser("describe", help="show partitions, offsets and config overrides",
                        description="Show each partition's leader, replicas, ISR and log start/end offsets,\n"
                                    "and the topic's config overrides.")
    p.add_argument("name", metavar="NAME", help="topic name")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_bootstrap(p)
    p.set_defaults(func=run_describe)

    p = tsub.add_parser("delete", help="delete a topic and its data", description="Delete a topic and its data.")
    p.add_argument("name", metavar="NAME", help="topic name")
    add_bootstrap(p)
    p.set_defaults(func=run_delete)

    p = tsub.add_parser("alter", help="add partitions to a topic",
                        description="Grow a topic to N partitions (Kafka's kafka-topics.sh --alter --partitions).\n"
                                    "Partitions are never removed. Keys map to partitions by\n"
                                    "murmur2(key) % partitions, so most keys move to another partition.")
    p.add_argument("name", metavar="NAME", help="topic name")
    p.add_argument("--partitions", type=int, metavar="N", required=True,
                   help="the new total number of partitions (more than today's)")
    p.add_argument("--validate-only", action="store_true", help="check the change, make none")
    add_bootstrap(p)
    p.set_defaults(func=run_alter)

    p = tsub.add_parser("alter-config", help="set or reset topic configs",
                        description="Change topic configs; the others keep their values.")
    p.add_argument("name", metavar="NAME", help="topic name")
    p.add_argument("--set", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="set a config (repeatable)")
    p.add_argument("--delete", action="append", default=[], metavar="KEY",
                   help="remove an override: back to the default (repeatable)")
    add_bootstrap(p)
    p.set_defaults(func=run_alter_config)


def _check_topic_configs(pairs: list[tuple[str, str]], flag: str = "--config") -> dict[str, str]:
    configs = dict(pairs)
    try:
        TopicConfig.from_kafka(configs)
    except MqError as exc:
        raise CliError(f"bad {flag}: {exc.message}", CONFIG_HINT, exit_code=EXIT_USAGE) from None
    return configs


def _admin(args: argparse.Namespace):
    from mq.client import Admin

    require_broker(args.bootstrap)
    return Admin(args.bootstrap)


def _not_found(exc: MqError, name: str) -> BaseException:
    return unknown_topic(name) if exc.code == ErrorCode.UNKNOWN_TOPIC else exc


# ---------------------------------------------------------------- create / delete / alter


def run_create(args: argparse.Namespace) -> int:
    configs = _check_topic_configs(args.config)
    partitions = -1 if args.partitions is None else args.partitions
    replication = -1 if args.replication_factor is None else args.replication_factor

    async def create() -> Any:
        async with _admin(args) as admin:
            return await admin.create_topic(args.name, partitions=partitions,
                                            replication_factor=replication, configs=configs)

    asyncio.run(create())
    count = f"{args.partitions} partition(s)" if args.partitions else "the default number of partitions"
    console().print(f"created topic {args.name} with {count}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    async def delete() -> None:
        async with _admin(args) as admin:
            try:
                await admin.delete_topics([args.name])
            except MqError as exc:
                raise _not_found(exc, args.name) from None

    asyncio.run(delete())
    console().print(f"deleted topic {args.name}")
    return 0


def run_alter(args: argparse.Namespace) -> int:
    async def alter() -> None:
        async with _admin(args) as admin:
            try:
                await admin.create_partitions(args.name, args.partitions, validate_only=args.validate_only)
            except MqError as exc:
                if exc.code == ErrorCode.INVALID_PARTITIONS:
                    raise CliError(exc.message, "partitions can only be added (records and committed offsets "
                                   "live in them); for fewer, create a new topic and copy into it",
                                   exit_code=EXIT_USAGE) from None
                if exc.code == ErrorCode.INVALID_REPLICATION_FACTOR:
                    raise CliError(exc.message, "start the missing brokers (`mq status` shows them), then retry") \
                        from None
                raise _not_found(exc, args.name) from None

    asyncio.run(alter())
    done = "would grow" if args.validate_only else "grew"
    console().print(f"{done} topic {args.name} to {args.partitions} partitions")
    return 0


def run_alter_config(args: argparse.Namespace) -> int:
    if not args.set and not args.delete:
        raise CliError("nothing to change", "pass --set KEY=VALUE and/or --delete KEY", exit_code=EXIT_USAGE)
    to_set = _check_topic_configs(args.set, "--set")
    unknown = [k for k in args.delete if k not in TOPIC_KEYS_BY_NAME]
    if unknown:
        raise CliError(f"bad --delete: unknown topic config {unknown[0]!r}", CONFIG_HINT, exit_code=EXIT_USAGE)

    async def alter() -> None:
        async with _admin(args) as admin:
            try:
                await admin.alter_configs(args.name, set=to_set, delete=list(args.delete))
            except MqError as exc:
                raise _not_found(exc, args.name) from None

    asyncio.run(alter())
    changes = [f"{k}={v}" for k, v in to_set.items()] + [f"{k} (default)" for k in args.delete]
    console().print(f"updated topic {args.name}: {', '.join(changes)}")
    return 0


# ---------------------------------------------------------------- list / describe


def run_list(args: argparse.Namespace) -> int:
    async def fetch() -> list[dict]:
        async with _admin(args) as admin:
            names = await admin.list_topics()
            if not names:
                return []
            return [{"name": t.name, "partitions": len(t.partitions),
                     "replication_factor": max((len(p.replicas) for p in t.partitions), default=0)}
                    for t in await admin.describe_topics(names)]

    topics = sorted(asyncio.run(fetch()), key=lambda t: t["name"])
    if args.json:
        print_json(topics)
        return 0
    if not topics:
        console().print("no topics yet — create one with `mq topic create NAME --partitions N`")
        return 0
    t = table("topic", "partitions", "replication factor")
    for topic in topics:
        t.add_row(topic["name"], str(topic["partitions"]), str(topic["replication_factor"]))
    print_table(t)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    doc = asyncio.run(_describe(args))
    if args.json:
        print_json(doc)
        return 0
    t = table("partition", "leader", "replicas", "isr", "log start offset", "log end offset", "records",
              title=f"topic {doc['name']}")
    for p in doc["partitions"]:
        t.add_row(str(p["partition"]), str(p["leader"]), cell(p["replicas"]), cell(p["isr"]),
                  str(p["log_start_offset"]), str(p["log_end_offset"]),
                  str(p["log_end_offset"] - p["log_start_offset"]))
    print_table(t)
    if doc["config_overrides"]:
        c = table("config", "value", title="config overrides")
        for key, value in doc["config_overrides"].items():
            c.add_row(key, value)
        print_table(c)
    else:
        console().print("config overrides: none (every config has its default)")
    return 0


async def _describe(args: argparse.Namespace) -> dict:
    async with _admin(args) as admin:
        try:
            [topic] = await admin.describe_topics([args.name])
            configs = await admin.describe_configs(args.name)
        except MqError as exc:
            raise _not_found(exc, args.name) from None
        tps = [TopicPartition(args.name, p.partition) for p in topic.partitions]
        earliest = await admin.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps})
        latest = await admin.list_offsets({tp: LATEST_TIMESTAMP for tp in tps})
    partitions = [
        {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
         "replicas": list(p.replicas), "isr": list(p.isr), "offline_replicas": list(p.offline_replicas),
         "log_start_offset": earliest[tp].offset, "log_end_offset": latest[tp].offset}
        for p, tp in zip(topic.partitions, tps)
    ]
    overrides = {c.name: c.value for c in sorted(configs, key=lambda c: c.name) if not c.is_default}
    return {"name": args.name, "partitions": partitions, "config_overrides": overrides}
