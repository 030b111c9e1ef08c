"""Which topics a flow mirrors, and what to change in the target for them (pure).

Every refresh interval the mirror lists the topics of both regions and asks ``plan_topics``
what to do, as MirrorMaker 2's ``MirrorSourceConnector`` does on
``refresh.topics.interval``:

* a source topic matching the flow's include patterns and none of its exclude patterns
  (internal topics never; the ``heartbeats`` topic always) is mirrored into a target topic
  of the same name;
* a missing target topic is **created** with the source's partition count and configs and
  ``mirror.source.region=<source region>``: a mirror topic, read-only for producers;
* a target mirror topic whose configs differ from the source's is **altered** to match;
* a target topic of that name that is *not* a mirror of the source region is **never
  written**: the flow reports it (``problems``);
* a source topic that is itself a mirror of the flow's target region is not mirrored back
  (that would be a cycle), unless the target topic is a mirror of the source region: both
  sides are then mirrors of each other, which only happens while fail-back drains the last
  records before it reverses the direction (``skipped`` otherwise).

* a target mirror topic with fewer partitions than the source is **grown** to the
  source's count (CreatePartitions), and the new partitions are mirrored from offset 0;
  a target with *more* partitions than the source (the source topic was re-created
  smaller) cannot shrink: that is a problem, and the partitions both sides have are
  mirrored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MIRROR_SOURCE_REGION = "mirror.source.region"
HEARTBEATS_TOPIC = "heartbeats"
# Not copied: the marker itself. min.insync.replicas is copied but capped at the target's
# replication factor, or a target with fewer replicas could never acknowledge an append.
NOT_SYNCED = frozenset({MIRROR_SOURCE_REGION})


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the mirror sees it in one region."""

    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)  # non-default configs only
    is_internal: bool = False

    @property
    def mirror_of(self) -> str | None:
        region = self.configs.get(MIRROR_SOURCE_REGION)
        return region or None


@dataclass(frozen=True)
class TopicFilter:
    """Regular expressions matched against whole topic names."""

    include: tuple[str, ...] = (".*",)
    exclude: tuple[str, ...] = ()

    def matches(self, name: str) -> bool:
        if name == HEARTBEATS_TOPIC:
            return True
        if name.startswith("__"):
            return False
        return any(re.fullmatch(p, name) for p in self.include) and \
            not any(re.fullmatch(p, name) for p in self.exclude)


@dataclass(frozen=True)
class CreateTopic:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True)
class AlterTopic:
    name: str
    set: Mapping[str, str]
    delete: tuple[str, ...]


@dataclass(frozen=True)
class GrowTopic:
    """Add partitions to a target topic: ``partitions`` is the new total."""

    name: str
    partitions: int


@dataclass(frozen=True)
class TopicPlan:
    create: tuple[CreateTopic, ...] = ()
    alter: tuple[AlterTopic, ...] = ()
    mirrored: Mapping[str, int] = field(default_factory=dict)  # topic -> partitions to mirror
    problems: Mapping[str, str] = field(default_factory=dict)  # topic -> why it is not (fully) mirrored
    skipped: Mapping[str, str] = field(default_factory=dict)  # topic -> why it is left out on purpose
    grow: tuple[GrowTopic, ...] = ()


def synced_configs(source: TopicInfo, source_region: str, replication_factor: int) -> dict[str, str]:
    """The configs a mirror topic of ``source`` should have in the target."""
    out = {k: v for k, v in source.configs.items() if k not in NOT_SYNCED}
    if "min.insync.replicas" in out:
        try:
            out["min.insync.replicas"] = str(min(int(out["min.insync.replicas"]), replication_factor))
        except ValueError:
            pass
    out[MIRROR_SOURCE_REGION] = source_region
    return out


def plan_topics(source: Mapping[str, TopicInfo], target: Mapping[str, TopicInfo], *,
                topics: TopicFilter, source_region: str, target_region: str,
                replication_factor: int) -> TopicPlan:
    create: list[CreateTopic] = []
    alter: list[AlterTopic] = []
    grow: list[GrowTopic] = []
    mirrored: dict[str, int] = {}
    problems: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in sorted(source):
        info = source[name]
        if info.is_internal or not topics.matches(name):
            continue
        existing = target.get(name)
        if info.mirror_of == target_region and (existing is None or existing.mirror_of != source_region):
            skipped[name] = (f"{name} in {source_region} is a mirror of {target_region}: "
                             f"mirroring it back would be a cycle")
            continue
        wanted = synced_configs(info, source_region, replication_factor)
        if existing is None:
            create.append(CreateTopic(name, info.partitions, replication_factor, wanted))
            mirrored[name] = info.partitions  # once created
            continue
        if existing.mirror_of is None:
            problems[name] = (f"topic {name} exists in {target_region} and is not a mirror topic: "
                              f"the flow never writes it (delete it, or exclude {name} from the flow)")
            continue
        if existing.mirror_of != source_region:
            problems[name] = (f"topic {name} in {target_region} is a mirror of region "
                              f"{existing.mirror_of}, not of {source_region}: the flow never writes it")
            continue
        have = {k: v for k, v in existing.configs.items()}
        changes = {k: v for k, v in wanted.items() if have.get(k) != v}
        removed = tuple(sorted(k for k in have if k not in wanted and k not in NOT_SYNCED))
        if changes or removed:
            alter.append(AlterTopic(name, changes, removed))
        mirrored[name], problem = partition_counts(
            name, info.partitions, existing.partitions, source_region, target_region, grow)
        if problem:
            problems[name] = problem
    return TopicPlan(tuple(create), tuple(alter), mirrored, problems, skipped, tuple(grow))


def partition_counts(name: str, source: int, target: int, source_region: str, target_region: str,
                     grow: list[GrowTopic], *, target_name: str | None = None) -> tuple[int, str]:
    """How many partitions of ``name`` to copy, and the problem to report ("" if none).
    A target with fewer partitions grows to the source's count (appended to ``grow``);
    one with more cannot shrink."""
    target_name = target_name or name
    if source > target:
        grow.append(GrowTopic(target_name, source))
        return source, ""
    if source < target:
        return source, (f"topic {name} has {source} partitions in {source_region} and {target_name} "
                        f"{target} in {target_region}; partitions cannot be removed, so partitions "
                        f"0-{source - 1} are mirrored")
    return source, ""


def matching_groups(groups: Sequence[str], patterns: Sequence[str], exclude: Sequence[str] = ()) -> list[str]:
    """Groups whose id matches any of ``patterns`` and none of ``exclude`` (regular
    expressions, whole id)."""
    return sorted(g for g in groups if any(re.fullmatch(p, g) for p in patterns)
                  and not any(re.fullmatch(p, g) for p in exclude))
