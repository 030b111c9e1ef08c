"""``python -m mirror failover --to REGION --group G --translate``: move consumer group G to
REGION when its topics reach REGION through an **active-active** flow, as remote topics
(``east.orders``) whose offsets differ from the source's.

For every active-active flow into REGION and every group G, step by step (each printed):

1. **G must be empty in REGION**: offsets are only written for a group with no active
   members there (KIP-545's rule: a running consumer's own commits are never overwritten);
   a member joining between the check and the commit fails the commit the same way;
2. **the source committed offsets**: asked of the source (through the link, as the mirror
   does; it must answer within 3 s): G's last commits there. When the source does not
   answer, the last **checkpoints** the mirror wrote in REGION
   (``<source>.checkpoints.internal``) give them instead, as of the mirror's last group sync;
3. **translate** each with the offset syncs the mirror wrote in REGION
   (``mq-offset-syncs.<source>.internal``, ``mirror.translation.translate_bounded``): the
   translated offset is never ahead of the record the commit stands for (nothing committed
   is lost), and the **re-read bound** says how many records G may read again (the
   distance to the previous sync; 0 where the copy was one-for-one);
4. **commit** the translated offsets for G on the remote topics in REGION, except where G
   already committed at or past them there (its progress in REGION is never moved back).

The flow keeps running: remote topics are plain topics in REGION, nothing is promoted, and
G reads the records the mirror copies after the fail-over as they arrive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from mirror.flow_config import FlowConfig, FlowConfigError
from mirror.offset_syncs import load_offset_syncs, read_checkpoints
from mirror.remote import Route, replication_policy, topic_route
from mirror.status import format_table
from mirror.translation import OffsetSyncStore, Translation, latest_checkpoints
from mq.client import Admin
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

SOURCE_PROBE_S = 3.0  # the source must answer within this (as mirror.failover's probe)
SOURCE_REQUEST_TIMEOUT_MS = 10_000
_RACED = (ErrorCode.NON_EMPTY_GROUP, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
          ErrorCode.ILLEGAL_GENERATION)


@dataclass(frozen=True)
class TranslatedPartition:
    source_topic: str
    remote_topic: str
    partition: int
    committed: int  # G's committed offset in the source (the next record it reads there)
    translated: int | None  # in the remote topic (None: no offset sync covers it yet)
    reread_bound: int | None  # records G may read again (None: unknown)
    exact: bool
    previous: int | None  # G's committed offset in the remote topic before this fail-over
    action: str  # "committed", "kept" (already at or past it), "untranslatable"


def _commit_plan(rows: list[TranslatedPartition]) -> dict[TopicPartition, int]:
    return {TopicPartition(r.remote_topic, r.partition): r.translated for r in rows
            if r.action == "committed" and r.translated is not None}


def plan_partitions(committed: Mapping[TopicPartition, int], store: OffsetSyncStore, remote: Mapping[str, str],
                    target_offsets: Mapping[TopicPartition, int]) -> list[TranslatedPartition]:
    """Pure: each source partition G committed on (of a topic the flow copies, ``remote``:
    source topic -> remote topic), its translation and what to do in the target."""
    rows = []
    for tp in sorted(committed, key=lambda t: (t.topic, t.partition)):
        name = remote.get(tp.topic)
        if name is None or committed[tp] < 0:
            continue
        t = store.translate_bounded(tp, committed[tp])
        if t is None and committed[tp] == 0:
            # G read nothing there (an empty partition, or nothing consumed): it starts at the
            # remote partition's beginning; no sync needed, nothing to read again
            t = Translation(0, 0, 0, True)
        previous = target_offsets.get(TopicPartition(name, tp.partition))
        if t is None:
            action = "untranslatable"
        elif previous is not None and previous >= t.offset:
            action = "kept"
        else:
            action = "committed"
        rows.append(TranslatedPartition(tp.topic, name, tp.partition, committed[tp],
                                        None if t is None else t.offset, None if t is None else t.reread_bound,
                                        bool(t and t.exact), previous, action))
    return rows


async def _source_commits(flow: FlowConfig, group: str) -> dict[TopicPartition, int]:
    source = Admin(flow.source_bootstrap, client_id=f"mirror-failover-{flow.name}",
                   address_map=dict(flow.source_address_map), request_timeout_ms=SOURCE_REQUEST_TIMEOUT_MS)
    try:
        await asyncio.wait_for(source.start(), SOURCE_PROBE_S)
        return {tp: om.offset for tp, om in (await source.list_group_offsets(group)).items()}
    finally:
        await source.close()


async def _require_empty(target: Admin, group: str, region: str) -> None:
    try:
        desc = await target.describe_group(group)
    except MqError as exc:
        if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
            return
        raise
    if desc.members:
        raise MqError(ErrorCode.NON_EMPTY_GROUP,
                      f"group {group} has {len(desc.members)} active member(s) in {region}: stop them "
                      f"first (offsets are only written for a group with no active members, KIP-545)")


async def translate_group(flow: FlowConfig, target: Admin, store: OffsetSyncStore, group: str, *,
                          say: Callable[[str], None]) -> dict:
    region = flow.target_region
    await _require_empty(target, group, region)
    say(f"1. group {group}: no active members in {region}")
    policy = replication_policy(flow.replication_policy, regions=flow.regions,
                                separator=flow.replication_policy_separator)
    route = Route(flow.source_region, region, flow.forward)
    existing = set(await target.list_topics())
    try:
        committed = await _source_commits(flow, group)
        basis = "source"
        say(f"2. source {flow.source_region} answered: {group}'s last commits there "
            f"({len(committed)} partitions)")
    except (MqError, TimeoutError, OSError) as exc:
        cps = latest_checkpoints(await read_checkpoints(target, flow.source_region), group)
        committed = {cp.tp: cp.upstream_offset for cp in cps.values()}
        basis = "checkpoint"
        say(f"2. source {flow.source_region} did not answer ({str(exc) or 'no answer within the probe timeout'}): "
            f"{group}'s commits as of the mirror's last checkpoints in {region} ({len(committed)} partitions)")
    remote = {}
    for topic in sorted({tp.topic for tp in committed}):
        name, _ = topic_route(policy, topic, route)
        if name is not None and name in existing and flow.topics.matches(topic):
            remote[topic] = name
    target_offsets = {tp: om.offset for tp, om in (await target.list_group_offsets(group)).items()}
    rows = plan_partitions(committed, store, remote, target_offsets)
    say(f"3. translated with the offset syncs in {region}: "
        f"{sum(r.translated is not None for r in rows)} of {len(rows)} partitions")
    offsets = _commit_plan(rows)
    if offsets:
        try:
            await target.alter_group_offsets(group, offsets)
        except MqError as exc:
            if exc.code in _RACED:
                raise MqError(exc.code, f"group {group} became active in {region} before its offsets were "
                                        f"committed ({exc.message}); stop its members and run again") from None
            raise
    say(f"4. committed {len(offsets)} offset(s) for {group} in {region}"
        + (f"; {sum(r.action == 'kept' for r in rows)} kept (already at or past)" if any(
            r.action == "kept" for r in rows) else ""))
    return {"flow": flow.name, "source": flow.source_region, "region": region, "group": group, "basis": basis,
            "partitions": [asdict(r) for r in rows]}


async def failover_translated(flows: list[FlowConfig], groups: list[str], *,
                              say: Callable[[str], None]) -> list[dict]:
    active = [f for f in flows if f.mode == "active-active"]
    if not active:
        names = ", ".join(f.name for f in flows)
        raise FlowConfigError(f"--translate moves groups across active-active flows; the flows into "
                              f"{flows[0].target_region} ({names}) are active-passive, whose mirror topics keep "
                              f"the source's offsets: fail over without --translate")
    if not groups:
        raise FlowConfigError("--translate needs the groups to move: give --group G (repeatable)")
    for f in flows:
        if f.mode != "active-active":
            say(f"flow {f.name} is active-passive: left alone (fail over without --translate)")
    reports = []
    for flow in active:
        async with Admin(flow.target_bootstrap, client_id=f"mirror-failover-{flow.name}") as target:
            store, bad = await load_offset_syncs(target, flow.source_region)
            say(f"flow {flow.name}: {sum(len(store.syncs(tp)) for tp in store.partitions())} offset syncs "
                f"read in {flow.target_region}" + (f" ({bad} unreadable, skipped)" if bad else ""))
            for group in groups:
                reports.append(await translate_group(flow, target, store, group, say=say))
    return reports


def _cell(value: object) -> object:
    return "-" if value is None else value


def print_translated(report: dict) -> None:
    print(f"group {report['group']} in {report['region']} (flow {report['flow']}; source committed offsets "
          f"from the {report['basis']}):")
    rows = [[p["remote_topic"], p["partition"], p["committed"], _cell(p["translated"]),
             _cell(p["reread_bound"]), "exact" if p["exact"] else ("-" if p["translated"] is None else "rewound"),
             p["action"] + ("" if p["previous"] is None or p["action"] != "kept" else f" (at {p['previous']})")]
            for p in report["partitions"]]
    print(format_table(("TOPIC", "PARTITION", "SOURCE-COMMITTED", "TRANSLATED", "RE-READ-BOUND", "KIND", "ACTION"),
                       rows))
    if not rows:
        print(f"  (no committed offsets of {report['group']} on topics this flow copies)")
    if any(p["action"] == "untranslatable" for p in report["partitions"]):
        print(f"  untranslatable: no offset sync in {report['region']} at or before the committed offset (the "
              f"flow's syncs start past it: it began copying later, or the syncs were lost); "
              f"{report['group']} gets no offset there and starts per its auto.offset.reset")
