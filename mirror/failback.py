"""``python -m mirror failback --to REGION``: after a fail-over away from REGION (the *old
primary*) and once the link is healed, make REGION the writer again without dropping or
duplicating a record. For a flow ``east->west`` failed over to west, ``--to east`` runs:

1. **demote east's topics** (``mirror.source.region=west``): producers in east are refused
   from now on (``MIRROR_TOPIC_READ_ONLY``), so east's log end stops moving;
2. **save east's diverged tail**: the records east acknowledged past the promotion point
   (west's end when it was promoted, recorded by fail-over) never reached west. They are
   copied, byte for byte and at the same offsets, to ``<topic>.diverged`` in east (a normal
   topic afterwards): nothing is silently dropped; an application decides what to replay;
3. **truncate east** at the promotion point (MirrorTruncate on every replica);
4. **start the reverse flow** ``west->east`` (a mirror process with its pid file in
   ``<data_dir>/mirror-west->east/``, where ``mq down`` stops it), which fills east from
   west at the same offsets while west keeps taking writes;
5. **wait for the first catch-up**: east's high watermark reaches west's, partition by
   partition, as seen at the start of this step;
6. **fence west**: demote west's topics (``mirror.source.region=east``). From here until
   step 9, *writers must stop producing in west*: west refuses them with
   ``MIRROR_TOPIC_READ_ONLY`` naming east; they retry against east, which accepts writes
   again at step 9 (a few seconds: the time to drain what was written during step 5);
7. **caught up** means exactly: for every partition, east's high watermark equals west's
   log end after the fence. Nothing can be written anywhere then, so both regions hold the
   same records at the same offsets;
8. **final group sync** west -> east (the groups consumed in west resume in east there),
   then **stop the reverse flow**;
9. **promote east** (delete ``mirror.source.region``): east is the writer again;
10. **resume the original flow** ``east->west`` (west's topics are mirrors of east again);
    it starts at west's end, which is east's.

Progress is kept in ``<data_dir>/mirror-<flow>/failback.json``: a fail-back interrupted
after step 3 resumes at step 4 when run again (the diverged tail is never copied twice
and east is never truncated twice).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Callable

from mirror.cluster_file import add_flow, record_process, remove_flow
from mirror.failover import FAILOVER_STATE
from mirror.flow_config import (
    FlowConfig,
    FlowConfigError,
    bootstrap_of,
    data_dir_of,
    default_cluster_path,
    flow_dir_name,
    flow_from_entry,
    flows_of,
    load_cluster,
    regions_of,
    reverse_address_map,
)
from mirror.groups import flow_groups, sync_groups
from mirror.procs import LOG_FILE, running_pid, start_flow, stop_flow
from mirror.ranges import copy_range
from mirror.status import read_status, write_status
from mirror.topics import MIRROR_SOURCE_REGION
from mq.client import Admin
from mq.core.types import LATEST_TIMESTAMP, TopicPartition

FAILBACK_STATE = "failback.json"
POLL_S = 0.5


def _direct(doc: dict, region: str) -> str:
    return bootstrap_of(regions_of(doc)[region])


def reverse_flow_entry(doc: dict, path: str, entry: dict, topics: list[str]) -> dict:
    """cluster.json's entry of the reverse flow ``failback-<flow>``: the flow's settings,
    the regions swapped, only the failed-over topics, the source reached through the link."""
    name = f"failback-{entry['name']}"
    source, target = str(entry["target"]), str(entry["source"])
    amap = reverse_address_map(doc, source, target)
    state_dir = os.path.join(data_dir_of(doc, path), flow_dir_name(name))
    return {**entry, "name": name, "source": source, "target": target,
            "topics": {"include": [re.escape(t) for t in topics], "exclude": []},
            "source_bootstrap": ",".join(amap.get(a, a) for a in _direct(doc, source).split(",")),
            "source_address_map": amap, "target_bootstrap": _direct(doc, target),
            "data_dir": state_dir, "log": os.path.join(state_dir, LOG_FILE),
            "pid_file": os.path.join(state_dir, "mirror.pid"), "status_file": os.path.join(state_dir, "status.json")}


def start_recorded(path: str, flow: FlowConfig) -> int:
    """Start ``python -m mirror run --cluster PATH --flow NAME`` (the launcher's command line)
    and record it in cluster.json, where ``mq down`` finds it."""
    args = ["--cluster", os.path.abspath(path), "--flow", flow.name]
    pid = start_flow(flow, args)
    record_process(path, flow.name, pid, [sys.executable, "-m", "mirror", "run", *args],
                   os.path.join(flow.state_dir, LOG_FILE))
    return pid


async def _ends(admin: Admin, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    found = await admin.list_offsets({tp: LATEST_TIMESTAMP for tp in tps}) if tps else {}
    return {tp: info.offset for tp, info in found.items()}


async def _wait_caught_up(old: Admin, new: Admin, tps: list[TopicPartition], goal: dict[TopicPartition, int],
                          deadline: float, say: Callable[[str], None]) -> None:
    last_say = 0.0
    while True:
        have = await _ends(old, tps)
        behind = {tp: goal[tp] - have[tp] for tp in tps if have[tp] < goal[tp]}
        if not behind:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not caught up in time: {sum(behind.values())} records behind in "
                               f"{len(behind)} partition(s); the reverse flow keeps running, run "
                               f"failback again to go on")
        if time.monotonic() - last_say > 5:
            say(f"   ... {sum(behind.values())} records still to mirror in {len(behind)} partition(s)")
            last_say = time.monotonic()
        await asyncio.sleep(POLL_S)


async def _save_diverged(old: Admin, fo: dict, flow: FlowConfig, tps: list[TopicPartition],
                         say: Callable[[str], None]) -> list[dict]:
    """Copy [promotion point, old end) of each partition to <topic>.diverged; truncate there.
    Returns one entry per partition of the failed-over topics, diverged or not."""
    promoted = fo["promotion_ends"]
    ends = await _ends(old, tps)
    saved = [{"topic": tp.topic, "partition": tp.partition, "from_offset": promoted[tp.topic][tp.partition],
              "to_offset": max(ends[tp], promoted[tp.topic][tp.partition]),
              "records": max(0, ends[tp] - promoted[tp.topic][tp.partition]),
              "saved_to": f"{tp.topic}.diverged" if ends[tp] > promoted[tp.topic][tp.partition] else None}
             for tp in sorted(tps)]
    for topic in sorted({tp.topic for tp in tps}):
        parts = [tp for tp in tps if tp.topic == topic]
        tails = {tp: (promoted[topic][tp.partition], ends[tp]) for tp in parts}
        if not any(end > start for start, end in tails.values()):
            say(f"   {topic}: nothing past the promotion point in {flow.source_region}")
            continue
        diverged = f"{topic}.diverged"
        described = await old.describe_topic(topic)
        await old.create_topic(diverged, len(parts), len(described.partitions[0].replicas),
                                {MIRROR_SOURCE_REGION: flow.source_region}, exist_ok=True)
        await old.alter_configs(diverged, set={MIRROR_SOURCE_REGION: flow.source_region})
        for tp, (start, end) in sorted(tails.items()):
            if end > start:
                await copy_range(old, tp, old, TopicPartition(diverged, tp.partition), start, end)
                say(f"   {tp}: offsets [{start}, {end}) ({end - start} records) copied to {diverged}")
        await old.alter_configs(diverged, delete=[MIRROR_SOURCE_REGION])
    for tp, (start, end) in ((tp, (promoted[tp.topic][tp.partition], ends[tp])) for tp in tps):
        if end > start:
            await old.mirror_truncate(tp, start)
    return saved


def diverged_by_topic(saved: list[dict]) -> dict[str, list[int]]:
    """The summary's ``diverged`` as it always was: per topic, the records saved of each
    partition that had any, in partition order (``diverged_partitions`` names them)."""
    out: dict[str, list[int]] = {}
    for entry in saved:
        if entry["records"] > 0:
            out.setdefault(entry["topic"], []).append(entry["records"])
    return out


async def failback_flow(doc: dict, path: str, flow: FlowConfig, timeout_s: float,
                        say: Callable[[str], None]) -> dict:
    fo_path = os.path.join(flow.state_dir, FAILOVER_STATE)
    fo = read_status(fo_path)
    if fo is None:
        raise FlowConfigError(f"flow {flow.name} was not failed over ({fo_path} does not exist)")
    state_path = os.path.join(flow.state_dir, FAILBACK_STATE)
    state = read_status(state_path) or {"step": 0, "started_ms": int(time.time() * 1000)}
    topics = list(fo["topics"])
    old_r, new_r = flow.source_region, flow.target_region
    entry = reverse_flow_entry(doc, path, flows_of(doc)[flow.name], topics)
    add_flow(path, entry)
    reverse = flow_from_entry(load_cluster(path), path, entry)
    deadline = time.monotonic() + timeout_s
    async with Admin(_direct(doc, old_r), client_id="mirror-failback") as old, \
            Admin(_direct(doc, new_r), client_id="mirror-failback") as new:
        tps = [TopicPartition(t, p) for t in topics for p in range(len(fo["promotion_ends"][t]))]
        if state["step"] < 3:
            for topic in topics:
                await old.alter_configs(topic, set={MIRROR_SOURCE_REGION: new_r})
            say(f"1. {old_r}: {', '.join(topics)} demoted (mirrors of {new_r}); producers in {old_r} "
                f"are refused from now on")
            say(f"2. {old_r}: saving the records past the promotion point")
            state["diverged_partitions"] = await _save_diverged(old, fo, flow, tps, say)
            state["diverged"] = diverged_by_topic(state["diverged_partitions"])
            say(f"3. {old_r}: truncated at the promotion point")
            state["step"] = 3
            write_status(state_path, state)
        pid = running_pid(reverse.state_dir) or start_recorded(path, reverse)
        say(f"4. reverse flow {reverse.name} running (pid {pid}, status in {reverse.state_dir})")
        goal = await _ends(new, tps)
        say(f"5. waiting until {old_r} has {new_r}'s records ({sum(goal.values())} in all, "
            f"{new_r} still taking writes)")
        await _wait_caught_up(old, new, tps, goal, deadline, say)
        for topic in topics:
            await new.alter_configs(topic, set={MIRROR_SOURCE_REGION: old_r})
        say(f"6. {new_r}: {', '.join(topics)} demoted: writers must stop producing in {new_r} "
            f"now (they are refused, naming {old_r}) and move to {old_r}")
        final = await _ends(new, tps)
        await _wait_caught_up(old, new, tps, final, deadline, say)
        say(f"7. caught up: {old_r} and {new_r} end at the same offsets in every partition "
            f"({sum(final.values())} records)")
        groups = await flow_groups(new, flow, fo.get("groups", {}).keys())
        synced = await sync_groups(new, old, groups, final)
        _, stopped = stop_flow(reverse.state_dir)
        remove_flow(path, reverse.name)
        say(f"8. final offset sync of {len(synced)} group(s) {new_r} -> {old_r}; reverse flow {stopped}")
        for topic in topics:
            await old.alter_configs(topic, delete=[MIRROR_SOURCE_REGION])
        say(f"9. {old_r}: {', '.join(topics)} promoted: {old_r} is the writer again")
    pid = start_recorded(path, flow)
    say(f"10. flow {flow.name} resumed (pid {pid})")
    done_ms = int(time.time() * 1000)
    os.replace(fo_path, os.path.join(flow.state_dir, f"failover-{fo['promoted_ms']}.done.json"))
    os.remove(state_path)
    return {"flow": flow.name, "writer": old_r, "topics": topics, "diverged": state.get("diverged", {}),
            # per topic-partition: [from_offset, to_offset) of the old primary saved to saved_to
            "diverged_partitions": state.get("diverged_partitions", []),
            "ends": {str(tp): end for tp, end in sorted(final.items())}, "groups": sorted(synced),
            "reverse_flow": reverse.name, "resumed_pid": pid, "done_ms": done_ms}


def cmd_failback(args) -> int:
    path = args.cluster or default_cluster_path()
    doc = load_cluster(path)
    if args.to not in regions_of(doc):
        raise FlowConfigError(f"no region {args.to!r} in {path}")
    flows = [flow_from_entry(doc, path, f) for f in flows_of(doc).values() if f.get("source") == args.to]
    flows = [f for f in flows if os.path.exists(os.path.join(f.state_dir, FAILOVER_STATE))]
    if not flows:
        raise FlowConfigError(f"no flow out of {args.to} has been failed over (nothing to fail back)")
    say = (lambda s: print(s, file=sys.stderr)) if args.json else print
    try:
        reports = [asyncio.run(failback_flow(doc, path, f, args.catch_up_timeout_s, say)) for f in flows]
    except TimeoutError as exc:
        print(f"python -m mirror failback: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=2))
    return 0
