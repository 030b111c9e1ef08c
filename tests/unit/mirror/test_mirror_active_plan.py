"""An active-active flow's topic plan and settings, without a cluster."""

from __future__ import annotations

import json

import pytest

from mirror.flow_config import FlowConfigError, flow_from_cluster
from mirror.remote import DefaultReplicationPolicy, IdentityReplicationPolicy, Route
from mirror.remote_plan import plan_remote_topics
from mirror.topics import TopicFilter, TopicInfo

MSR = "mirror.source.region"
POLICY = DefaultReplicationPolicy(("east", "west", "south"))


def plan(source, target, *, forward=False, policy=POLICY, **kw):
    return plan_remote_topics(source, target, topics=kw.pop("topics", TopicFilter()), policy=policy,
                              route=Route("east", "west", forward), replication_factor=kw.pop("rf", 3))


def test_source_topics_become_remote_topics_created_with_their_partitions_and_configs() -> None:
    p = plan({"orders": TopicInfo(6, {"retention.ms": "1000", "min.insync.replicas": "2"}),
              "__consumer_offsets": TopicInfo(50, is_internal=True), "mq-offset-syncs.west.internal": TopicInfo(1)},
             {}, rf=1)
    [create] = p.create
    assert (create.name, create.partitions, create.replication_factor) == ("east.orders", 6, 1)
    assert create.configs == {"retention.ms": "1000", "min.insync.replicas": "1"}  # not a read-only mirror topic
    assert p.remote == {"orders": "east.orders"} and p.mirrored == {"orders": 6} and not p.skipped


def test_loops_remote_topics_without_forward_and_mirror_topics_are_left_out_with_the_reason() -> None:
    source = {"orders": TopicInfo(1), "west.orders": TopicInfo(1), "south.orders": TopicInfo(1),
              "audit": TopicInfo(1, {MSR: "south"})}
    p = plan(source, {})
    assert p.remote == {"orders": "east.orders"}
    assert "would be a loop" in p.skipped["west.orders"]
    assert "does not forward" in p.skipped["south.orders"]
    assert "read-only mirror of south" in p.skipped["audit"]
    assert plan(source, {}, forward=True).remote == {"orders": "east.orders", "south.orders": "east.south.orders"}


def test_existing_remote_topics_follow_the_source_and_mirror_topics_are_never_written() -> None:
    p = plan({"orders": TopicInfo(6, {"retention.ms": "5000"}), "audit": TopicInfo(2)},
             {"east.orders": TopicInfo(4, {"retention.ms": "1000", "cleanup.policy": "compact"}),
              "east.audit": TopicInfo(2, {MSR: "east"})})
    [alter] = p.alter
    assert (alter.name, dict(alter.set), alter.delete) == ("east.orders", {"retention.ms": "5000"},
                                                          ("cleanup.policy",))
    assert p.partitions == {"orders": 6} and [(g.name, g.partitions) for g in p.grow] == [("east.orders", 6)]
    assert "orders" not in p.problems  # the remote topic grows to the source's count
    assert "read-only mirror topic of east" in p.problems["audit"]
    assert not [g for g in p.grow if g.name == "east.audit"]  # a mirror topic is never grown


def test_a_remote_topic_with_more_partitions_than_the_source_is_reported() -> None:
    p = plan({"orders": TopicInfo(2)}, {"east.orders": TopicInfo(3)})
    assert not p.grow and p.partitions == {"orders": 2}
    assert "partitions 0-1 are mirrored" in p.problems["orders"]


def test_identity_names_keep_the_topic() -> None:
    p = plan({"orders": TopicInfo(2)}, {"orders": TopicInfo(2)}, policy=IdentityReplicationPolicy())
    assert p.remote == {"orders": "orders"} and not p.create


def cluster(tmp_path, **flow) -> str:
    doc = {"regions": {"east": {"brokers": [{"listen": "127.0.0.1:1"}]}, "west": {"brokers": [{"listen": "h:2"}]}},
           "flows": [{"name": "aa", "source": "east", "target": "west", "mode": "active-active", **flow}]}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_active_active_settings_are_read_with_their_defaults(tmp_path) -> None:
    flow = flow_from_cluster(cluster(tmp_path), "aa")
    assert (flow.mode, flow.forward, flow.replication_policy, flow.offset_lag_max,
            flow.offset_sync_interval_ms, flow.regions) == ("active-active", False, "default", 100, 1000,
                                                            ("east", "west"))
    flow = flow_from_cluster(cluster(tmp_path, forward=True, configs={
        "offset.lag.max": "20", "offset.sync.interval.ms": 50, "replication.policy": "identity"}), "aa")
    assert (flow.forward, flow.offset_lag_max, flow.offset_sync_interval_ms, flow.replication_policy) == (
        True, 20, 50, "identity")
    flow = flow_from_cluster(cluster(tmp_path, configs={"replication.policy.separator": "_"}), "aa")
    assert flow.replication_policy_separator == "_"


@pytest.mark.parametrize(("flow", "message"), [
    ({"mode": "active-ish"}, "mode 'active-ish' is not one of active-passive, active-active"),
    ({"forward": "maybe"}, "forward must be true or false, not 'maybe'"),
    ({"configs": {"replication.policy": "mm2"}}, "unknown replication.policy 'mm2'"),
    ({"configs": {"offset.lag.max": "many"}}, "offset.lag.max must be an integer"),
])
def test_bad_active_active_settings_are_refused_with_the_reason(tmp_path, flow, message) -> None:
    with pytest.raises(FlowConfigError, match=message):
        flow_from_cluster(cluster(tmp_path, **flow), "aa")


def test_a_region_name_holding_the_separator_is_refused(tmp_path) -> None:
    doc = {"regions": {"us.east": {"brokers": [{"listen": "h:1"}]}, "west": {"brokers": [{"listen": "h:2"}]}},
           "flows": [{"name": "aa", "source": "us.east", "target": "west", "mode": "active-active"}]}
    (tmp_path / "cluster.json").write_text(json.dumps(doc))
    with pytest.raises(FlowConfigError, match="contains the replication separator"):
        flow_from_cluster(str(tmp_path / "cluster.json"), "aa")
