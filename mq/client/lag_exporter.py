"""The lag exporter of one region: every round, the lag of every consumer group (and of the
mirror flows into the region) as records of ``__lag_snapshots``.

A round lists the groups (ListGroups on every broker), computes each group's lag as
``mq group describe`` does (``Admin.describe_group_lag``: committed offsets, high
watermarks, the timestamp of the next unread record), adds the mirror flows' partitions
from their status documents (the caller reads them: mq never imports the mirror), and
writes one snapshot per group (or flow) and partition with one ``send_many``. The
snapshot format is ``mq.client.internals.lag_snapshot``. A failing step is counted by
kind and the round goes on with the rest; the next round starts afresh.

``__lag_snapshots`` is created on the first round that has something to write, with
time retention (``retention.ms``, ``cleanup.policy=delete``) and hourly segments so
retention can act, replicated like the offsets topic (up to three replicas).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Self

from mq.client.admin import Admin
from mq.client.internals.lag_snapshot import (
    SNAPSHOT_TOPIC,
    ExporterStats,
    LagSnapshot,
    group_snapshots,
    mirror_snapshots,
)
from mq.client.producer import Producer
from mq.core.clock import Clock, SystemClock
from mq.core.errors import ErrorCode, MqError

DEFAULT_RETENTION_MS = 24 * 3600 * 1000
DEFAULT_PARTITIONS = 3
SEGMENT_MS = 3600 * 1000
GROUP_CONCURRENCY = 8
REQUEST_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class ExportRound:
    """What one round did: the snapshots written and the steps that failed."""

    region: str
    now_ms: int
    snapshots: tuple[LagSnapshot, ...]
    errors: tuple[tuple[str, str], ...]  # (kind, message)
    seconds: float
    written: bool


@dataclass
class _Counters:
    rounds: int = 0
    snapshots: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    last_round_ms: int | None = None
    last_round_seconds: float | None = None


class LagExporter:
    """Exports one region's lag (see the module docstring).

    ``mirror_status`` returns the status documents of the mirror flows whose target is
    this region (``[]`` when there are none); ``groups`` is a regular expression the group
    ids must match (whole name)."""

    def __init__(self, bootstrap: str, *, region: str = "", topic: str = SNAPSHOT_TOPIC,
                 retention_ms: int = DEFAULT_RETENTION_MS, partitions: int = DEFAULT_PARTITIONS,
                 groups: str = ".*", mirror_status: Callable[[], Sequence[Mapping]] = list,
                 clock: Clock | None = None, request_timeout_ms: int = REQUEST_TIMEOUT_MS) -> None:
        self.region = region
        self.topic = topic
        self.retention_ms = retention_ms
        self.partitions = partitions
        self.groups = re.compile(groups)
        self.mirror_status = mirror_status
        self.clock = clock or SystemClock()
        self.admin = Admin(bootstrap, request_timeout_ms=request_timeout_ms, client_id="mq-lag-exporter")
        self.producer = Producer(bootstrap, acks=1, linger_ms=5, client_id="mq-lag-exporter",
                                 request_timeout_ms=request_timeout_ms, delivery_timeout_ms=3 * request_timeout_ms,
                                 max_block_ms=request_timeout_ms)
        self.counters = _Counters()
        self.latest: tuple[LagSnapshot, ...] = ()
        self._topic_ready = False

    async def start(self) -> None:
        await self.admin.start()
        await self.producer.start()

    async def close(self) -> None:
        await self.producer.close()
        await self.admin.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ one round

    async def export_once(self) -> ExportRound:
        started = time.monotonic()
        now_ms = self.clock.wall_ms()
        errors: list[tuple[str, str]] = []
        snapshots = await self._group_snapshots(now_ms, errors)
        for doc in self.mirror_status():
            try:
                snapshots += mirror_snapshots(doc, now_ms)
            except (TypeError, ValueError) as exc:
                errors.append(("mirror_status", f"flow {doc.get('flow')!r}: {exc}"))
        written = False
        if snapshots:
            try:
                await self._ensure_topic()
                await self.producer.send_many(self.topic, [(s.key, s.encode()) for s in snapshots])
                written = True
            except MqError as exc:
                errors.append(("produce", f"{exc.code.name}: {exc.message}"))
            except (TimeoutError, OSError) as exc:
                errors.append(("produce", f"{exc.__class__.__name__}: {exc}"))
        seconds = time.monotonic() - started
        self._count(now_ms, snapshots if written else [], errors, seconds)
        self.latest = tuple(snapshots)
        return ExportRound(self.region, now_ms, tuple(snapshots), tuple(errors), seconds, written)

    async def _group_snapshots(self, now_ms: int, errors: list[tuple[str, str]]) -> list[LagSnapshot]:
        try:
            listed = await self.admin.list_groups()
        except (TimeoutError, MqError, OSError) as exc:
            errors.append(("list_groups", _message(exc)))
            return []
        ids = [g.group_id for g in listed if self.groups.fullmatch(g.group_id)]
        gate = asyncio.Semaphore(GROUP_CONCURRENCY)

        async def one(group_id: str) -> list[LagSnapshot]:
            async with gate:
                try:
                    description, lags = await self.admin.describe_group_lag(group_id, wall_ms=now_ms)
                except (TimeoutError, MqError, OSError) as exc:
                    errors.append(("group", f"{group_id}: {_message(exc)}"))
                    return []
            state = description.state if description else "Dead"
            members = len(description.members) if description else 0
            return group_snapshots(self.region, group_id, state, members, lags, now_ms)

        out: list[LagSnapshot] = []
        for found in await asyncio.gather(*(one(g) for g in ids)):
            out += found
        return out

    async def _ensure_topic(self) -> None:
        if self._topic_ready:
            return
        cluster = await self.admin.cluster()
        replicas = max(1, min(3, len(cluster.brokers)))
        configs = {"retention.ms": str(self.retention_ms), "cleanup.policy": "delete",
                   "segment.ms": str(SEGMENT_MS if self.retention_ms < 0 else min(SEGMENT_MS, self.retention_ms))}
        try:
            await self.admin.create_topic(self.topic, self.partitions, replicas, configs, exist_ok=True)
        except MqError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        self._topic_ready = True

    def _count(self, now_ms: int, written: Sequence[LagSnapshot], errors: Sequence[tuple[str, str]],
               seconds: float) -> None:
        c = self.counters
        c.rounds += 1
        c.snapshots += len(written)
        for kind, _ in errors:
            c.errors[kind] = c.errors.get(kind, 0) + 1
        c.last_round_ms = now_ms
        c.last_round_seconds = round(seconds, 4)

    def stats(self) -> ExporterStats:
        c = self.counters
        return ExporterStats(self.region, c.rounds, c.snapshots, dict(c.errors), c.last_round_ms,
                             c.last_round_seconds)


def _message(exc: BaseException) -> str:
    if isinstance(exc, MqError):
        return f"{exc.code.name}: {exc.message}"
    return f"{exc.__class__.__name__}: {exc}"
