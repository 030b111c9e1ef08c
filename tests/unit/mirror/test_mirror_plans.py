"""Topic discovery and group offset sync decisions, without a cluster."""

from __future__ import annotations

from mirror.group_sync import plan_group_sync
from mirror.topics import TopicFilter, TopicInfo, matching_groups, plan_topics
from mq.core.types import TopicPartition

MSR = "mirror.source.region"


def plan(source, target, **kw):
    kw.setdefault("topics", TopicFilter())
    return plan_topics(source, target, source_region="east", target_region="west",
                       replication_factor=kw.pop("rf", 3), **kw)


def test_a_new_source_topic_is_created_as_a_mirror_topic_with_its_partitions_and_configs() -> None:
    p = plan({"orders": TopicInfo(6, {"retention.ms": "1000", "min.insync.replicas": "2"})}, {}, rf=1)
    [create] = p.create
    assert (create.name, create.partitions, create.replication_factor) == ("orders", 6, 1)
    assert create.configs == {"retention.ms": "1000", "min.insync.replicas": "1", MSR: "east"}
    assert p.mirrored == {"orders": 6}


def test_internal_topics_never_and_heartbeats_always_and_patterns_in_between() -> None:
    source = {"__consumer_offsets": TopicInfo(50, is_internal=True), "heartbeats": TopicInfo(1),
              "orders": TopicInfo(1), "orders.tmp": TopicInfo(1), "audit": TopicInfo(1)}
    p = plan(source, {}, topics=TopicFilter(include=("orders.*",), exclude=(r".*\.tmp",)))
    assert sorted(c.name for c in p.create) == ["heartbeats", "orders"]


def test_a_target_topic_that_is_not_a_mirror_is_never_written_and_is_reported() -> None:
    p = plan({"orders": TopicInfo(3), "audit": TopicInfo(1)},
             {"orders": TopicInfo(3), "audit": TopicInfo(1, {MSR: "south"})})
    assert not p.create and not p.mirrored
    assert "not a mirror topic" in p.problems["orders"]
    assert "mirror of region south" in p.problems["audit"]


def test_config_changes_in_the_source_are_followed() -> None:
    p = plan({"orders": TopicInfo(3, {"retention.ms": "5000"})},
             {"orders": TopicInfo(3, {MSR: "east", "retention.ms": "1000", "cleanup.policy": "compact"})})
    [alter] = p.alter
    assert alter.set == {"retention.ms": "5000"} and alter.delete == ("cleanup.policy",)
    assert p.mirrored == {"orders": 3}


def test_a_mirror_topic_with_fewer_partitions_grows_to_the_sources_count() -> None:
    p = plan({"orders": TopicInfo(6)}, {"orders": TopicInfo(4, {MSR: "east"})})
    assert [(g.name, g.partitions) for g in p.grow] == [("orders", 6)]
    assert p.mirrored == {"orders": 6} and not p.problems
    same = plan({"orders": TopicInfo(4)}, {"orders": TopicInfo(4, {MSR: "east"})})
    assert not same.grow and same.mirrored == {"orders": 4}


def test_a_mirror_topic_with_more_partitions_than_the_source_is_reported_and_never_shrunk() -> None:
    p = plan({"orders": TopicInfo(4)}, {"orders": TopicInfo(6, {MSR: "east"})})
    assert not p.grow and p.mirrored == {"orders": 4}
    assert "4 partitions in east and orders 6 in west" in p.problems["orders"]
    assert "partitions 0-3 are mirrored" in p.problems["orders"]


def test_a_topic_that_is_not_a_mirror_is_never_grown() -> None:
    p = plan({"orders": TopicInfo(6)}, {"orders": TopicInfo(2)})
    assert not p.grow and "not a mirror topic" in p.problems["orders"]


def test_a_mirror_of_the_target_region_is_not_mirrored_back_unless_both_are_mirrors() -> None:
    back = plan({"orders": TopicInfo(1, {MSR: "west"})}, {"orders": TopicInfo(1)})
    assert "cycle" in back.skipped["orders"] and not back.problems
    drain = plan({"orders": TopicInfo(1, {MSR: "west"})}, {"orders": TopicInfo(1, {MSR: "east"})})
    assert drain.mirrored == {"orders": 1}


def test_group_patterns_match_whole_ids() -> None:
    assert matching_groups(["billing", "billing-2", "ops"], ["billing"]) == ["billing"]
    assert matching_groups(["billing", "billing-2", "ops"], ["billing.*"]) == ["billing", "billing-2"]


TP0, TP1, OTHER = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("x", 0)


def test_group_offsets_are_clamped_to_the_mirrored_end_and_unmirrored_ones_left_out() -> None:
    sync = plan_group_sync("billing", {TP0: 500, TP1: 100, OTHER: 9}, {TP1: 100},
                           {TP0: 300, TP1: 400})
    assert sync.offsets == {TP0: 300}  # TP1 already equal, OTHER not mirrored
    assert sync.clamped == {TP0: (500, 300)}


def test_group_offsets_are_not_synced_while_the_group_is_active_in_the_target() -> None:
    sync = plan_group_sync("billing", {TP0: 5}, {}, {TP0: 10}, target_state="Stable", target_members=2)
    assert not sync.offsets and "KIP-545" in sync.skipped
    assert plan_group_sync("billing", {TP0: 5}, {}, {TP0: 10}, target_state="Empty").offsets == {TP0: 5}
