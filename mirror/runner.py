"""One mirror flow as a process: ``python -m mirror run``.

Composes the pieces, each an asyncio task that survives the errors of its own calls
(logged, counted in ``mq_mirror_errors_total``, retried on the next round):

* the copier (``mirror.copier``): fetch from the source, append to the target; in
  ``mode: active-active``, ``mirror.active`` instead: re-batch into remote topics with
  provenance, offset syncs, and checkpoints of the flow's groups (``mirror.offset_syncs``)
  instead of group offset sync;
* discovery every ``refresh.topics.interval.ms`` (``mirror.discovery``); when the source
  does not answer, the target's existing mirror topics of the source region keep being
  tracked, so the status still lists every partition (stalled, with the reason);
* group offset sync every ``sync.group.offsets.interval.ms`` (``mirror.groups``);
* heartbeats every ``emit.heartbeats.interval.ms`` (``mirror.heartbeats``);
* the status file and the metrics snapshot every second (``mirror.status``).

The source is reached only through ``source_address_map`` (the link proxies). SIGTERM
stops the flow cleanly: the status says ``stopped`` and the pid file is removed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from mirror.active import ActiveCopier
from mirror.copier import Copier
from mirror.discovery import Discovery, describe_region
from mirror.flow_config import FlowConfig
from mirror.groups import flow_groups, sync_groups
from mirror.heartbeats import Heartbeats
from mirror.metrics import FlowMetrics
from mirror.offset_syncs import ensure_internal_topics, load_offset_syncs, write_checkpoints
from mirror.partition import PartitionState, PartitionStatus
from mirror.remote import Route, replication_policy
from mirror.status import flow_state, read_status, write_status
from mirror.topics import HEARTBEATS_TOPIC
from mirror.translation import Checkpoint
from mq.client import Admin, Producer
from mq.client.cluster import ClusterClient, cancel_tasks
from mq.core.clock import Clock, SystemClock
from mq.core.errors import MqError
from mq.core.types import TopicPartition

log = logging.getLogger("mirror")

SOURCE_REQUEST_TIMEOUT_MS = 10_000
STATUS_INTERVAL_S = 1.0
MIB = 1024 * 1024


class FlowRunner:
    def __init__(self, flow: FlowConfig, *, metrics_listen: str = "127.0.0.1:0",
                 clock: Clock | None = None) -> None:
        self.flow = flow
        self.clock = clock or SystemClock()
        self.metrics_listen = metrics_listen
        self.metrics = FlowMetrics(flow.name)
        client_id = f"mirror-{flow.name}"
        amap = dict(flow.source_address_map)
        self.source = Admin(flow.source_bootstrap, client_id=client_id, address_map=amap,
                            request_timeout_ms=SOURCE_REQUEST_TIMEOUT_MS)
        self.target = Admin(flow.target_bootstrap, client_id=client_id)
        self.fetch_client = ClusterClient(flow.source_bootstrap, client_id=client_id, address_map=amap,
                                          request_timeout_ms=SOURCE_REQUEST_TIMEOUT_MS + 500)
        self.producer = Producer(flow.source_bootstrap, client_id=client_id, address_map=amap, acks=-1,
                                 linger_ms=0, delivery_timeout_ms=SOURCE_REQUEST_TIMEOUT_MS,
                                 request_timeout_ms=SOURCE_REQUEST_TIMEOUT_MS)
        self.active = flow.mode == "active-active"
        self.copier: Copier | ActiveCopier
        self.target_producer: Producer | None = None
        self.checkpoints: dict[tuple[str, TopicPartition], Checkpoint] = {}
        if self.active:
            self.policy = replication_policy(flow.replication_policy, regions=flow.regions,
                                             separator=flow.replication_policy_separator)
            self.route = Route(flow.source_region, flow.target_region, flow.forward)
            # No retries, no idempotence: a failed write makes its partition start over
            # from what the target holds (mirror.active); each write is one request.
            self.target_producer = Producer(flow.target_bootstrap, client_id=client_id, acks=-1, retries=0,
                                            linger_ms=0, batch_size=MIB, max_request_size=16 * MIB,
                                            buffer_memory=64 * MIB, delivery_timeout_ms=30_000,
                                            request_timeout_ms=30_000)
            self.copier = ActiveCopier(flow.name, self.route, self.source, self.target, self.target_producer,
                                       self.metrics, self.clock, offset_lag_max=flow.offset_lag_max,
                                       offset_sync_interval_ms=flow.offset_sync_interval_ms,
                                       partition_max_bytes=flow.fetch.partition_max_bytes)
        else:
            self.copier = Copier(flow.name, self.fetch_client, self.target, self.metrics, self.clock,
                                 fetch=flow.fetch)
        self.discovery = Discovery(flow, self.source, self.target)
        self.heartbeats = Heartbeats(flow, self.producer, self.clock)
        self.groups: dict[str, dict] = {}
        self.problems: dict[str, str] = {}  # "source", "target", "groups": the last failure of each
        self.started_ms = self.clock.wall_ms()
        self._last_known: dict[TopicPartition, dict] = {}
        self.metrics_address = ""
        self.state = "starting"

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        host, _, port = self.metrics_listen.rpartition(":")
        bound = self.metrics.serve(host or "127.0.0.1", int(port or 0))
        self.metrics_address = f"{host or '127.0.0.1'}:{bound}"
        self._write_pid()
        self._seed_from_last_status()
        log.info("mirror flow=%s source=%s target=%s metrics=%s status=%s", self.flow.name,
                 self.flow.source_region, self.flow.target_region, self.metrics_address,
                 self.flow.status_path)
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(coro) for coro in (
            self.copier.run(),
            self._every(self.flow.refresh_topics_interval_ms, self._discover, "source"),
            self._every(self.flow.sync_group_offsets_interval_ms, self._sync_groups, "groups"),
            self.heartbeats.run(),
            self._every(int(STATUS_INTERVAL_S * 1000), self._write_status, "status"),
        )]
        try:
            await stop.wait()
        finally:
            await cancel_tasks(tasks)
            self.state = "stopped"
            await self._write_status()
            try:
                await self.producer.close(timeout_ms=0)  # a heartbeat still queued is not worth waiting for
                if self.target_producer is not None:
                    await self.target_producer.close(timeout_ms=0)
                for client in (self.source, self.target, self.fetch_client):
                    await client.close()
            except MqError:
                pass
            self._remove_pid()
            log.info("mirror flow=%s stopped", self.flow.name)

    async def _every(self, interval_ms: int, step: Callable[[], Awaitable[None]], kind: str) -> None:
        while True:
            try:
                await step()
                self.problems.pop(kind, None)
            except MqError as exc:
                self.metrics.error(kind)
                self.problems[kind] = str(exc)
                log.info("event=%s_failed flow=%s error=%s", kind, self.flow.name, exc)
            except Exception:  # a bug must not stop the flow; it is logged in full
                self.metrics.error(kind)
                log.exception("event=%s_crashed flow=%s", kind, self.flow.name)
            await asyncio.sleep(interval_ms / 1000)

    def _write_pid(self) -> None:
        os.makedirs(self.flow.state_dir, exist_ok=True)
        with open(self.flow.pid_path, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")

    def _remove_pid(self) -> None:
        try:
            with open(self.flow.pid_path, encoding="ascii") as f:
                mine = f.read().strip() == str(os.getpid())
            if mine:
                os.remove(self.flow.pid_path)
        except OSError:
            pass

    def _seed_from_last_status(self) -> None:
        """Keep what was last known of the source (its ends, when they were seen, its
        produce rate) across a restart while the source is unreachable."""
        last = read_status(self.flow.status_path) or {}
        self._last_known = {TopicPartition(p["topic"], p["partition"]): p
                            for p in last.get("partitions", []) if p.get("source_end") is not None}

    # ------------------------------------------------------------------ steps

    async def _discover(self) -> None:
        if isinstance(self.copier, ActiveCopier):
            await self._discover_remote(self.copier)
            return
        try:
            tps = await self.discovery.refresh()
        except MqError:
            # The source (or the link) is down: keep mirroring the target's mirror topics of
            # the source region, so they are listed (stalled, with the reason) in the status.
            if not self.copier.partitions:
                target = await describe_region(self.target)
                tps = [TopicPartition(name, p) for name, info in sorted(target.items())
                       if info.mirror_of == self.flow.source_region for p in range(info.partitions)]
                self._set_partitions(tps)
            raise
        self._set_partitions(tps)
        self.heartbeats.disabled_reason = await self.discovery.ensure_heartbeats_topic()

    async def _discover_remote(self, copier: ActiveCopier) -> None:
        if not copier.ready.is_set():
            await ensure_internal_topics(self.target, self.flow.source_region, self.flow.replication_factor)
            copier.store, bad = await load_offset_syncs(self.target, self.flow.source_region)
            log.info("event=offset_syncs_loaded flow=%s partitions=%d unreadable=%d", self.flow.name,
                     len(copier.store.partitions()), bad)
            copier.ready.set()
        remote = await self.discovery.refresh_remote(self.policy, self.route)
        copier.set_partitions(remote)
        for tp, rp in copier.partitions.items():
            known = self._last_known.get(tp)
            if known is not None:
                rp.seed_source(source_end=known["source_end"], seen_wall_ms=known.get("source_seen_wall_ms"),
                               rate_per_s=known.get("source_rate_per_s"))
        self.heartbeats.disabled_reason = await self.discovery.ensure_heartbeats_topic()

    def _set_partitions(self, tps: list[TopicPartition]) -> None:
        assert isinstance(self.copier, Copier)
        self.copier.set_partitions(tps)
        for tp, pm in self.copier.partitions.items():
            known = self._last_known.get(tp)
            if known is not None:
                pm.seed_source(source_end=known["source_end"], seen_wall_ms=known.get("source_seen_wall_ms"),
                               rate_per_s=known.get("source_rate_per_s"))

    async def _sync_groups(self) -> None:
        if isinstance(self.copier, ActiveCopier):
            if self.copier.ready.is_set() and self.flow.sync_group_offsets_enabled:
                assert self.target_producer is not None
                written = await write_checkpoints(self.source, self.target_producer, self.flow, self.copier.store,
                                                  self.copier.remote_topics(), self.checkpoints)
                now = self.clock.wall_ms()
                for group, count in written.items():
                    entry = self.groups.setdefault(group, {"checkpoints": 0})
                    entry.update(checkpointed_ms=now)
                    entry["checkpoints"] = entry.get("checkpoints", 0) + count
            return
        ends = self.copier.mirrored_ends()
        if not ends or not self.flow.sync_group_offsets_enabled:
            return
        groups = await flow_groups(self.source, self.flow)
        now = self.clock.wall_ms()
        for group, sync in (await sync_groups(self.source, self.target, groups, ends)).items():
            self.metrics.synced(group, len(sync.offsets))
            entry = self.groups.setdefault(group, {"committed": 0})
            entry.update(synced_ms=now, skipped=sync.skipped, clamped=len(sync.clamped))
            entry["committed"] += len(sync.offsets)

    async def _write_status(self) -> None:
        write_status(self.flow.status_path, self.status_document())

    def status_document(self) -> dict:
        now, wall = self.clock.monotonic_ms(), self.clock.wall_ms()
        for pm in self.copier.partitions.values():
            pm.tick(now)
        snapshot = [pm.status(wall) for _, pm in sorted(self.copier.partitions.items())]
        self.metrics.snapshot = snapshot
        # fetched, not yet appended, plus what the fetches in flight may bring: within buffer.max.bytes
        # (the active-passive copier's fetch plan; an active-active flow fetches one request at a time)
        planner = self.copier.planner if isinstance(self.copier, Copier) else None
        self.metrics.buffer_used_bytes = planner.held_bytes(self.copier.partitions) if planner else 0
        states = [p.state.value for p in snapshot]
        state = self.state if self.state == "stopped" else flow_state(states)
        reason = ""
        if "source" in self.problems:
            state = "stalled" if state != "blocked" else state
            reason = f"source region {self.flow.source_region} unreachable: {self.problems['source']}"
        elif not snapshot and state != "stopped":
            state = "starting"
        unheard = _unheard_summary(snapshot, wall, "source" in self.problems)
        silent = next((p for p in snapshot if p.source_unreachable), None)
        if silent is not None and not reason and state == "stalled":
            reason = (f"source region {self.flow.source_region} unreachable: "
                      f"{silent.topic}-{silent.partition}: {silent.reason}")
        hb = next((p for p in snapshot if p.topic == HEARTBEATS_TOPIC), None)
        fetch = self.flow.fetch
        plan = self.discovery.plan
        lags = [p.lag_seconds for p in snapshot if p.lag_seconds is not None]
        p99s = [p.latency_p99_ms for p in snapshot if p.latency_p99_ms is not None]
        reason = reason or next((f"{p.topic}-{p.partition}: {p.reason}" for p in snapshot if p.reason), "")
        return {
            "flow": self.flow.name, "source": self.flow.source_region, "target": self.flow.target_region,
            "pid": os.getpid(), "state": state, "reason": reason, "updated_ms": wall,
            # the one-line summary `mq status` shows per flow
            "updated_at_ms": wall, "error": reason if state in ("stalled", "blocked") else "",
            "lag_records": sum(p.lag_records or 0 for p in snapshot),
            "lag_ms": int(max(lags) * 1000) if lags else None,
            "replication_latency_p99_ms": max(p99s) if p99s else None,
            **unheard,
            "started_ms": self.started_ms, "metrics": self.metrics_address,
            "topics": dict(plan.mirrored), "problems": dict(plan.problems), "skipped": dict(plan.skipped),
            "errors": dict(self.problems),
            "heartbeats": {"enabled": not self.heartbeats.disabled_reason,
                           "reason": self.heartbeats.disabled_reason, "sent": self.heartbeats.sent,
                           "latency_p50_ms": hb.latency_p50_ms if hb else None,
                           "latency_p99_ms": hb.latency_p99_ms if hb else None},
            "groups": self.groups,
            "fetch": {"max.partition.fetch.bytes": fetch.partition_max_bytes, "buffer.max.bytes": fetch.buffer_max_bytes,
                      "fetches.per.leader": fetch.fetches_per_leader,
                      "buffer_used_bytes": self.metrics.buffer_used_bytes,
                      "fetches_in_flight": len(planner.in_flight) if planner else None},
            "totals": {
                "records_mirrored": sum(p.records_mirrored for p in snapshot),
                "bytes_mirrored": sum(p.bytes_mirrored for p in snapshot),
                "lag_records": sum(p.lag_records or 0 for p in snapshot),
                "gap_records": sum(p.gap_records for p in snapshot),
                "stalled": sum(1 for p in snapshot if p.state == PartitionState.STALLED),
                "blocked": sum(1 for p in snapshot if p.state == PartitionState.BLOCKED),
            },
            "partitions": self._partitions_json(snapshot, wall),
            "mode": self.flow.mode,
        }

    def _partitions_json(self, snapshot: list, wall: int) -> list[dict]:
        if isinstance(self.copier, ActiveCopier):
            return [rp.status_json(wall) for _, rp in sorted(self.copier.partitions.items())]
        return [p.to_json() for p in snapshot]


def _unheard_summary(snapshot: list[PartitionStatus], wall_ms: int, discovery_failing: bool) -> dict:
    """The flow's view of a source it cannot hear (``mirror.source_rate``): while any
    partition's source is unreachable, ``lag_records`` is a lower bound as of
    ``lag_as_of_ms`` (the oldest last answer among the partitions), and the estimate adds
    each partition's last known produce rate x its silence."""
    seen = [p.source_seen_wall_ms for p in snapshot if p.source_seen_wall_ms is not None]
    unreachable = discovery_failing or any(p.source_unreachable for p in snapshot)
    rates = [p.source_rate_per_s for p in snapshot if p.source_rate_per_s is not None]
    estimate = None
    if unreachable and snapshot:
        parts = [p.lag_records_estimate if p.source_unreachable else p.lag_records for p in snapshot]
        estimate = sum(parts) if all(x is not None for x in parts) else None  # type: ignore[misc]
    return {
        "source_unreachable": unreachable,
        "source_heard_at_ms": max(seen) if seen else None,
        "source_silent_s": round(max(0, wall_ms - max(seen)) / 1000, 3) if seen else None,
        "lag_records_lower_bound": unreachable,
        "lag_as_of_ms": min(seen) if seen else None,
        "source_rate_per_s": round(sum(rates), 1) if rates else None,
        "lag_records_estimate": estimate,
    }
