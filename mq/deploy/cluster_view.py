"""What ``mq status`` shows of a running region: brokers as the controller sees them,
the active controller and its epoch, and every partition's leader, ISR and high watermark.

One Metadata request to any live broker (through ``mq.client.ClusterClient``, which moves
on from a dead address to the next) gives brokers, controller and partitions; one
ListOffsets (latest: the high watermark) per partition leader gives the high watermarks.
A leader that is down or paused is not asked, and a leader that does not answer in time
leaves its partitions' high watermark unknown, so status stays quick with brokers down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mq.client.cluster import ClusterClient
from mq.core.errors import MqError
from mq.protocol.messages import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    MetadataRequest,
    MetadataResponse,
)

LATEST = -1  # ListOffsets timestamp: the high watermark


@dataclass(frozen=True)
class BrokerView:
    node_id: int
    host: str
    port: int
    fenced: bool
    rack: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "endpoint": f"{self.host}:{self.port}", "fenced": self.fenced,
                "rack": self.rack}


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    high_watermark: int | None  # None: the leader did not answer (or there is none)
    error_code: int = 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "leader": self.leader,
                "leader_epoch": self.leader_epoch, "replicas": list(self.replicas), "isr": list(self.isr),
                "high_watermark": self.high_watermark, "under_replicated": self.under_replicated,
                "offline": self.offline, "error_code": self.error_code}


@dataclass(frozen=True)
class ClusterView:
    cluster_id: str
    controller_id: int  # -1: no active controller known to the broker that answered
    controller_epoch: int
    brokers: tuple[BrokerView, ...]
    partitions: tuple[PartitionView, ...]

    def broker(self, node_id: int) -> BrokerView | None:
        for b in self.brokers:
            if b.node_id == node_id:
                return b
        return None

    def to_json(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id,
                "controller": {"id": self.controller_id, "epoch": self.controller_epoch},
                "brokers": [b.to_json() for b in self.brokers],
                "partitions": [p.to_json() for p in self.partitions]}


def view_of(meta: MetadataResponse, high_watermarks: dict[tuple[str, int], int]) -> ClusterView:
    """A ClusterView from one Metadata response and the high watermarks found (user topics
    only: internal topics such as ``__cluster_metadata`` are left out)."""
    partitions = []
    for t in sorted(meta.topics, key=lambda t: t.name):
        if t.is_internal or t.name.startswith("__"):
            continue
        for p in sorted(t.partitions, key=lambda p: p.partition):
            partitions.append(PartitionView(
                t.name, p.partition, p.leader_id, p.leader_epoch, tuple(p.replicas), tuple(p.isr),
                high_watermarks.get((t.name, p.partition)), p.error_code))
    brokers = tuple(BrokerView(b.node_id, b.host, b.port, b.fenced, b.rack)
                    for b in sorted(meta.brokers, key=lambda b: b.node_id))
    return ClusterView(meta.cluster_id, meta.controller_id, meta.controller_epoch, brokers, tuple(partitions))


def describe(addresses: Sequence[str], *, skip: Iterable[int] = (), timeout_s: float = 2.0) -> ClusterView | None:
    """Ask the first of ``addresses`` that answers; None when none does. Leaders in
    ``skip`` (known down or paused) are not asked for high watermarks."""
    if not addresses:
        return None
    return asyncio.run(_describe(list(addresses), frozenset(skip), timeout_s))


async def _describe(addresses: list[str], skip: frozenset[int], timeout_s: float) -> ClusterView | None:
    timeout_ms = max(100, int(timeout_s * 1000))
    client = ClusterClient(",".join(addresses), client_id="mq-status", request_timeout_ms=timeout_ms,
                           connect_timeout_ms=timeout_ms, seed=0)
    try:
        try:
            meta = await asyncio.wait_for(client.request_any(MetadataRequest(topics=None)),
                                          timeout_s * (len(addresses) + 1))
        except (MqError, OSError, TimeoutError):
            return None
        if not isinstance(meta, MetadataResponse):
            return None
        view = view_of(meta, {})
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for p in view.partitions:
            if p.leader >= 0 and p.leader not in skip and view.broker(p.leader) is not None:
                by_leader.setdefault(p.leader, []).append((p.topic, p.partition))
        found: dict[tuple[str, int], int] = {}
        answers = await asyncio.gather(*(_high_watermarks(client, leader, tps, timeout_s)
                                         for leader, tps in sorted(by_leader.items())))
        for answer in answers:
            found.update(answer)
        return view_of(meta, found)
    finally:
        await client.close()


async def _high_watermarks(client: ClusterClient, leader: int, tps: list[tuple[str, int]],
                           timeout_s: float) -> dict[tuple[str, int], int]:
    topics: dict[str, list[ListOffsetsPartition]] = {}
    for topic, partition in tps:
        topics.setdefault(topic, []).append(ListOffsetsPartition(partition, LATEST))
    request = ListOffsetsRequest(topics=[ListOffsetsTopic(name, parts) for name, parts in sorted(topics.items())])
    try:
        response = await asyncio.wait_for(client.request(leader, request), timeout_s)
    except (MqError, OSError, TimeoutError):
        return {}
    if not isinstance(response, ListOffsetsResponse):
        return {}
    return {(t.name, p.partition): p.offset for t in response.topics for p in t.partitions
            if p.error_code == 0 and p.offset >= 0}
