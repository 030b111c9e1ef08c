"""Topic discovery, the I/O half: list both regions' topics and configs, apply the plan of
``mirror.topics.plan_topics`` (create and alter mirror topics in the target), and tell
the copier which partitions to mirror. Problems are logged at WARNING once each."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mirror.flow_config import FlowConfig
from mirror.remote import ReplicationPolicy, Route
from mirror.remote_plan import RemotePlan, plan_remote_topics
from mirror.topics import HEARTBEATS_TOPIC, TopicInfo, TopicPlan, plan_topics
from mq.client import Admin
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

log = logging.getLogger("mirror")

HEARTBEATS_RETENTION_MS = 24 * 3600 * 1000


async def describe_region(admin: Admin) -> dict[str, TopicInfo]:
    """Every topic of a region with its partition count and non-default configs."""
    names = await admin.list_topics(include_internal=True)
    if not names:
        return {}
    out: dict[str, TopicInfo] = {}
    for desc in await admin.describe_topics(names):
        if desc.is_internal or desc.name.startswith("__"):
            out[desc.name] = TopicInfo(len(desc.partitions), {}, True)
            continue
        try:
            entries = await admin.describe_configs(desc.name)
        except MqError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC:
                continue  # deleted meanwhile
            raise
        configs = {e.name: e.value for e in entries if not e.is_default and e.value is not None}
        out[desc.name] = TopicInfo(len(desc.partitions), configs)
    return out


async def replication_factor(admin: Admin, configured: int) -> int:
    if configured > 0:
        return configured
    return max(1, min(3, len((await admin.cluster()).brokers)))


@dataclass
class Discovery:
    flow: FlowConfig
    source: Admin
    target: Admin
    plan: TopicPlan | RemotePlan = field(default_factory=TopicPlan)
    source_topics: dict[str, TopicInfo] = field(default_factory=dict)
    _reported: set[str] = field(default_factory=set)

    async def refresh(self) -> list[TopicPartition]:
        """One discovery pass; returns the partitions to mirror."""
        flow = self.flow
        self.source_topics = await describe_region(self.source)
        target_topics = await describe_region(self.target)
        rf = await replication_factor(self.target, flow.replication_factor)
        plan = plan_topics(self.source_topics, target_topics, topics=flow.topics,
                           source_region=flow.source_region, target_region=flow.target_region,
                           replication_factor=rf)
        await self._apply(plan)
        self.plan = plan
        return [TopicPartition(t, p) for t, n in sorted(plan.mirrored.items()) for p in range(n)]

    async def refresh_remote(self, policy: ReplicationPolicy, route: Route) -> dict[TopicPartition, str]:
        """One discovery pass of an active-active flow: source partition -> remote topic."""
        flow = self.flow
        self.source_topics = await describe_region(self.source)
        target_topics = await describe_region(self.target)
        rf = await replication_factor(self.target, flow.replication_factor)
        plan = plan_remote_topics(self.source_topics, target_topics, topics=flow.topics, policy=policy,
                                  route=route, replication_factor=rf)
        await self._apply(plan)
        self.plan = plan
        return {TopicPartition(t, p): plan.remote[t] for t, n in sorted(plan.partitions.items()) for p in range(n)}

    async def _apply(self, plan: TopicPlan | RemotePlan) -> None:
        """Create and alter the target topics of ``plan``; log each problem once."""
        flow = self.flow
        for create in plan.create:
            log.info("event=create_mirror_topic flow=%s topic=%s partitions=%d replication_factor=%d",
                     flow.name, create.name, create.partitions, create.replication_factor)
            await self.target.create_topic(create.name, create.partitions, create.replication_factor,
                                           dict(create.configs), exist_ok=True)
        for alter in plan.alter:
            log.info("event=alter_mirror_topic flow=%s topic=%s set=%s delete=%s", flow.name,
                     alter.name, dict(alter.set), list(alter.delete))
            await self.target.alter_configs(alter.name, set=dict(alter.set), delete=alter.delete)
        for grow in plan.grow:
            log.info("event=grow_mirror_topic flow=%s topic=%s partitions=%d", flow.name, grow.name,
                     grow.partitions)
            try:
                await self.target.create_partitions(grow.name, grow.partitions)
            except MqError as exc:
                if exc.code != ErrorCode.INVALID_PARTITIONS:  # raced: grown meanwhile
                    raise
        for name, why in {**plan.problems, **plan.skipped}.items():
            if why not in self._reported:
                self._reported.add(why)
                level = logging.WARNING if name in plan.problems else logging.INFO
                log.log(level, "event=topic_not_mirrored flow=%s topic=%s reason=\"%s\"", flow.name, name, why)

    async def ensure_heartbeats_topic(self) -> str:
        """Create ``heartbeats`` in the source if missing; "" if heartbeats can be written,
        else why not (the source's ``heartbeats`` is itself a mirror topic)."""
        info = self.source_topics.get(HEARTBEATS_TOPIC)
        if info is None:
            rf = await replication_factor(self.source, 0)
            await self.source.create_topic(HEARTBEATS_TOPIC, 1, rf,
                                           {"retention.ms": str(HEARTBEATS_RETENTION_MS)}, exist_ok=True)
            return ""
        if info.mirror_of:
            return (f"{HEARTBEATS_TOPIC} in {self.flow.source_region} is a mirror of region "
                    f"{info.mirror_of}: heartbeats are written by that region's flow")
        return ""
