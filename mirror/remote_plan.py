"""Which topics an active-active flow copies, and what to create or alter in the target for
them (pure; the active-active counterpart of ``mirror.topics.plan_topics``).

Every refresh interval the flow lists both regions' topics and asks ``plan_remote_topics``:

* a source topic matching the flow's patterns (and the naming rules of
  ``mirror.remote.topic_route``: not internal, not come through the target, not remote
  unless the flow forwards) is copied into its *remote topic* (``east.orders``);
* a missing remote topic is **created** with the source's partition count and configs
  (``min.insync.replicas`` capped at the target's replication factor): a plain topic, not
  a read-only mirror topic, since the flow writes it with a producer;
* a remote topic whose configs differ from the source's is **altered** to match;
* a remote topic with fewer partitions than the source is **grown** to the source's
  count (CreatePartitions) and the new partitions are copied; one with more cannot
  shrink (``problems``: the partitions both sides have are copied);
* a target topic of that name that is a *mirror topic* (active-passive) is never written
  (``problems``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mirror.remote import ReplicationPolicy, Route, is_internal_topic, topic_route
from mirror.topics import (
    MIRROR_SOURCE_REGION,
    AlterTopic,
    CreateTopic,
    GrowTopic,
    TopicFilter,
    TopicInfo,
    partition_counts,
    synced_configs,
)


@dataclass(frozen=True)
class RemotePlan:
    create: tuple[CreateTopic, ...] = ()
    alter: tuple[AlterTopic, ...] = ()
    remote: Mapping[str, str] = field(default_factory=dict)  # source topic -> remote topic
    partitions: Mapping[str, int] = field(default_factory=dict)  # source topic -> partitions copied
    problems: Mapping[str, str] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    grow: tuple[GrowTopic, ...] = ()

    @property
    def mirrored(self) -> Mapping[str, int]:
        """``TopicPlan``'s name for ``partitions`` (the status file lists it as ``topics``)."""
        return self.partitions


def remote_configs(source: TopicInfo, source_region: str, replication_factor: int) -> dict[str, str]:
    configs = synced_configs(source, source_region, replication_factor)
    configs.pop(MIRROR_SOURCE_REGION, None)
    return configs


def plan_remote_topics(source: Mapping[str, TopicInfo], target: Mapping[str, TopicInfo], *,
                       topics: TopicFilter, policy: ReplicationPolicy, route: Route,
                       replication_factor: int) -> RemotePlan:
    create: list[CreateTopic] = []
    alter: list[AlterTopic] = []
    grow: list[GrowTopic] = []
    remote: dict[str, str] = {}
    partitions: dict[str, int] = {}
    problems: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in sorted(source):
        info = source[name]
        if info.is_internal or is_internal_topic(name) or not topics.matches(name):
            continue
        remote_name, why = topic_route(policy, name, route)
        if remote_name is None:
            skipped[name] = why
            continue
        if info.mirror_of is not None:
            skipped[name] = (f"{name} in {route.source_region} is a read-only mirror of {info.mirror_of} "
                             f"(active-passive): its records are copied from {info.mirror_of} directly")
            continue
        wanted = remote_configs(info, route.source_region, replication_factor)
        existing = target.get(remote_name)
        if existing is None:
            create.append(CreateTopic(remote_name, info.partitions, replication_factor, wanted))
            remote[name], partitions[name] = remote_name, info.partitions
            continue
        if existing.mirror_of is not None:
            problems[name] = (f"{remote_name} in {route.target_region} is a read-only mirror topic of "
                              f"{existing.mirror_of}: the active-active flow never writes it")
            continue
        changes = {k: v for k, v in wanted.items() if existing.configs.get(k) != v}
        removed = tuple(sorted(k for k in existing.configs if k not in wanted))
        if changes or removed:
            alter.append(AlterTopic(remote_name, changes, removed))
        remote[name] = remote_name
        partitions[name], problem = partition_counts(
            name, info.partitions, existing.partitions, route.source_region, route.target_region, grow,
            target_name=remote_name)
        if problem:
            problems[name] = problem
    return RemotePlan(tuple(create), tuple(alter), remote, partitions, problems, skipped, tuple(grow))
