"""``python -m mirror failover --to REGION``: make REGION's mirror topics writable.

For every flow into REGION, step by step (each step is printed):

1. **stop the flow**: SIGTERM the mirror process by its pid file (SIGKILL after 15 s), so
   nothing is appended to the topics once they are writable;
2. **read the mirrored end** of every partition of the flow's mirror topics in REGION
   (their high watermarks; the flow is stopped, so they no longer move);
3. **ask the source** (through the link, as the mirror does; it must answer within 3 s): its high
   watermarks give the records at risk exactly, ``source end - mirrored end`` (records
   acknowledged in the source that REGION does not have); and a **final group offset sync**
   copies the groups' last commits (clamped to the mirrored end). When the source does not
   answer, the records at risk are the last known figures of the flow's status file (its
   last source end minus the mirrored end), marked with their age: a **lower bound**, since
   what the source acknowledged after the mirror's last fetch is unknown in REGION; beside
   it an **estimate**: the lower bound + the source's last known produce rate (from the
   mirror's consecutive source-end observations) x the seconds since it was last heard
   (``mirror.source_rate``), per partition and in total;
4. **promote**: ``mirror.source.region`` is deleted from each topic (``heartbeats`` stays a
   mirror: it belongs to the source's flow); producers in REGION succeed from now on;
5. **record** the promotion point, each partition's end at promotion, in
   ``<data_dir>/mirror-<flow>/failover.json``: fail-back copies the old primary's records
   past that point to ``<topic>.diverged`` before it truncates there.

For active-active flows (remote topics at other offsets) ``--translate`` moves groups
instead: ``mirror.translated_failover``.

Groups resume at their synced offsets: those are already in REGION's ``__consumer_offsets``,
so a consumer of the group in REGION starts there, having re-read at most what it
committed in the last sync interval, and skipping nothing REGION has.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from mirror.discovery import describe_region
from mirror.flow_config import (
    FlowConfig,
    FlowConfigError,
    default_cluster_path,
    flow_from_entry,
    flows_of,
    load_cluster,
)
from mirror.groups import flow_groups, sync_groups
from mirror.procs import stop_flow
from mirror.source_rate import lag_estimate
from mirror.status import format_table, read_status, write_status
from mirror.topics import HEARTBEATS_TOPIC, MIRROR_SOURCE_REGION
from mq.client import Admin
from mq.core.errors import MqError
from mq.core.types import LATEST_TIMESTAMP, TopicPartition

SOURCE_PROBE_S = 3.0  # the source must answer a metadata request within this
SOURCE_REQUEST_TIMEOUT_MS = 10_000
FAILOVER_STATE = "failover.json"


@dataclass(frozen=True)
class AtRisk:
    topic: str
    partition: int
    source_end: int | None
    mirrored_end: int
    records: int | None  # exact (basis "source") or a lower bound (basis "last known ...")
    basis: str  # "source" (asked now), "last known (N s old)", or "unknown"
    # The source not answering: what the lower bound rests on, and the estimate beside it.
    records_kind: str = "exact"  # "exact", "lower bound" or "unknown"
    records_estimate: int | None = None  # lower bound + rate x silence: an estimate, not a bound
    source_rate_per_s: float | None = None  # the source's last known produce rate
    source_seen_ms: int | None = None  # when the mirror last heard the source's end (wall ms)
    source_silent_s: float | None = None  # seconds from then to this fail-over


def flows_into(path: str, region: str) -> list[FlowConfig]:
    doc = load_cluster(path)
    flows = [flow_from_entry(doc, path, f) for f in flows_of(doc).values() if f.get("target") == region]
    if not flows:
        raise FlowConfigError(f"no mirror flow into region {region!r} in {path}")
    return flows


async def _source_view(flow: FlowConfig, tps: list[TopicPartition], groups: list[str],
                       mirrored: dict[TopicPartition, int], target: Admin) -> tuple[dict, dict]:
    """Source high watermarks and the final group sync (raises if the source is silent)."""
    source = Admin(flow.source_bootstrap, client_id=f"mirror-failover-{flow.name}",
                   address_map=dict(flow.source_address_map), request_timeout_ms=SOURCE_REQUEST_TIMEOUT_MS)
    try:
        # One quick probe decides whether the source answers: a lost region must not hold
        # the fail-over up for a full request timeout per broker address.
        await asyncio.wait_for(source.start(), SOURCE_PROBE_S)
        ends = await source.list_offsets({tp: LATEST_TIMESTAMP for tp in tps}) if tps else {}
        names = await flow_groups(source, flow, groups)
        synced = await sync_groups(source, target, names, mirrored)
    finally:
        await source.close()
    return {tp: info.offset for tp, info in ends.items()}, synced


def _last_known(flow: FlowConfig, mirrored: dict[TopicPartition, int], now_ms: int) -> list[AtRisk]:
    doc = read_status(flow.status_path) or {}
    known = {TopicPartition(p["topic"], p["partition"]): p for p in doc.get("partitions", [])}
    out = []
    for tp, end in sorted(mirrored.items()):
        p = known.get(tp) or {}
        source_end = p.get("source_end")
        seen = p.get("source_seen_wall_ms") or doc.get("updated_ms")
        if source_end is None:
            out.append(AtRisk(tp.topic, tp.partition, None, end, None, "unknown", records_kind="unknown"))
            continue
        age = f"{(now_ms - seen) / 1000:.0f} s old" if seen else "age unknown"
        lower = max(0, source_end - end)
        rate = p.get("source_rate_per_s")
        silent_ms = max(0, now_ms - seen) if seen else None
        out.append(AtRisk(tp.topic, tp.partition, source_end, end, lower, f"last known ({age})",
                          records_kind="lower bound",
                          records_estimate=lag_estimate(lower, rate, silent_ms) if silent_ms is not None else None,
                          source_rate_per_s=rate, source_seen_ms=seen,
                          source_silent_s=None if silent_ms is None else round(silent_ms / 1000, 3)))
    return out


async def failover_flow(flow: FlowConfig, *, groups: list[str], topics: list[str],
                        say: Callable[[str], None]) -> dict:
    started_ms = int(time.time() * 1000)  # the estimate's silence ends here, not after our own probe
    pid, stopped = stop_flow(flow.state_dir)
    say(f"1. flow {flow.name}: mirror process {pid or '-'} {stopped}")
    async with Admin(flow.target_bootstrap, client_id=f"mirror-failover-{flow.name}") as target:
        region = await describe_region(target)
        names = sorted(n for n, info in region.items() if info.mirror_of == flow.source_region
                       and n != HEARTBEATS_TOPIC and (not topics or n in topics))
        missing = sorted(set(topics) - set(names))
        if missing:
            raise FlowConfigError(f"not mirror topics of {flow.source_region} in {flow.target_region}: "
                                  + ", ".join(missing))
        tps = [TopicPartition(n, p) for n in names for p in range(region[n].partitions)]
        ends = await target.list_offsets({tp: LATEST_TIMESTAMP for tp in tps}) if tps else {}
        mirrored = {tp: info.offset for tp, info in ends.items()}
        say(f"2. mirrored ends read in {flow.target_region}: {len(tps)} partitions of {len(names)} topics")
        synced: dict = {}
        try:
            source_ends, synced = await _source_view(flow, tps, groups, mirrored, target)
            at_risk = [AtRisk(tp.topic, tp.partition, source_ends[tp], mirrored[tp],
                              max(0, source_ends[tp] - mirrored[tp]), "source") for tp in sorted(tps)]
            say(f"3. source {flow.source_region} answered: records at risk counted exactly; "
                f"final offset sync of {len(synced)} group(s)")
        except (MqError, TimeoutError, OSError) as exc:
            at_risk = _last_known(flow, mirrored, started_ms)
            say(f"3. source {flow.source_region} did not answer ({str(exc) or 'no answer within the probe timeout'}): records at risk "
                f"are the last known figures (a lower bound) and an estimate; groups keep their last "
                f"synced offsets")
        for name in names:
            await target.alter_configs(name, delete=[MIRROR_SOURCE_REGION])
        promoted_ms = int(time.time() * 1000)
        say(f"4. promoted in {flow.target_region}: {', '.join(names) or 'no topics'} (writable now)")
        group_offsets = {}
        for group in sorted(set(synced) | set(groups)):
            committed = await target.list_group_offsets(group)
            group_offsets[group] = {str(tp): om.offset for tp, om in committed.items()}
    report = {
        "flow": flow.name, "source": flow.source_region, "promoted_region": flow.target_region,
        "promoted_ms": promoted_ms, "stopped_pid": pid, "topics": names,
        "promotion_ends": {n: [mirrored[TopicPartition(n, p)] for p in range(region[n].partitions)]
                           for n in names},
        "partitions": [asdict(r) for r in at_risk],
        "records_at_risk": sum(r.records or 0 for r in at_risk),
        # Exact when the source answered; otherwise a lower bound: records the source
        # acknowledged after the mirror's last fetch are unknown to everyone in this region.
        "records_at_risk_exact": all(r.basis == "source" for r in at_risk),
        # ... and then an estimate of them too (null when exact, or a rate is unknown).
        "records_at_risk_estimate": _total_estimate(at_risk),
        "groups": {g: {"offsets": group_offsets.get(g, {}),
                       "skipped": getattr(synced.get(g), "skipped", "")} for g in group_offsets},
    }
    write_status(f"{flow.state_dir}/{FAILOVER_STATE}", report)
    status = read_status(flow.status_path) or {"flow": flow.name, "source": flow.source_region,
                                               "target": flow.target_region, "partitions": []}
    status.update(state="failed-over", updated_ms=promoted_ms, updated_at_ms=promoted_ms, error="",
                  reason=f"{flow.target_region} promoted; {_at_risk_text(report)} records at risk")
    write_status(flow.status_path, status)
    say(f"5. promotion point recorded in {flow.state_dir}/{FAILOVER_STATE}")
    return report


def _total_estimate(at_risk: list[AtRisk]) -> int | None:
    if all(r.records_kind == "exact" for r in at_risk):
        return None
    parts = [r.records if r.records_kind == "exact" else r.records_estimate for r in at_risk]
    return None if any(x is None for x in parts) else sum(parts)  # type: ignore[misc]


def _at_risk_text(report: dict) -> str:
    if report["records_at_risk_exact"]:
        return str(report["records_at_risk"])
    estimate = report.get("records_at_risk_estimate")
    return f"at least {report['records_at_risk']}" + (f" (estimate ~{estimate})" if estimate is not None else "")


def _risk_cell(p: dict) -> str:
    if p["records"] is None:
        return "-"
    return str(p["records"]) if p.get("records_kind", "exact") == "exact" else f">={p['records']}"


def print_report(report: dict) -> None:
    rows = [[p["topic"], p["partition"], p["source_end"], p["mirrored_end"], _risk_cell(p),
             None if p.get("records_estimate") is None else f"~{p['records_estimate']}", p["basis"]]
            for p in report["partitions"]]
    print(f"records at risk in flow {report['flow']} (acknowledged in {report['source']}, "
          f"missing in {report['promoted_region']}): {_at_risk_text(report)}")
    if not report["records_at_risk_exact"]:
        rates = [p["source_rate_per_s"] for p in report["partitions"] if p.get("source_rate_per_s") is not None]
        silent = [p["source_silent_s"] for p in report["partitions"] if p.get("source_silent_s") is not None]
        print(f"  at least: the last figures the mirror saw; what {report['source']} acknowledged after "
              f"its last fetch is not known here")
        if rates and silent:
            print(f"  estimate: that + {report['source']}'s last known produce rate ({sum(rates):g} rec/s) "
                  f"x the seconds since it was last heard ({max(silent):.0f} s); an estimate, not a bound")
    print(format_table(("TOPIC", "PARTITION", "SOURCE-END", "MIRRORED-END", "AT-RISK", "ESTIMATE", "BASIS"),
                       rows))
    for group, g in sorted(report["groups"].items()):
        offsets = ", ".join(f"{tp}={o}" for tp, o in sorted(g["offsets"].items())) or "none"
        print(f"group {group} resumes in {report['promoted_region']} at: {offsets}"
              + (f" ({g['skipped']})" if g["skipped"] else ""))


def cmd_failover(args) -> int:
    path = args.cluster or default_cluster_path()
    flows = flows_into(path, args.to)
    say = (lambda s: print(s, file=sys.stderr)) if args.json else print
    if args.translate:
        from mirror.translated_failover import failover_translated, print_translated

        translated = asyncio.run(failover_translated(flows, args.group, say=say))
        if args.json:
            print(json.dumps(translated if len(translated) > 1 else translated[0], indent=2))
        else:
            for report in translated:
                print_translated(report)
        return 0
    reports = [asyncio.run(failover_flow(f, groups=args.group, topics=args.topic, say=say)) for f in flows]
    if args.json:
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=2))
    else:
        for report in reports:
            print_report(report)
    return 0
