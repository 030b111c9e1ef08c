"""``mq_group_*`` metrics of the groups a broker coordinates: members, state,
committed offsets and lag (high watermark of a replica hosted here − committed)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from mq.aio.metrics import BrokerMetrics
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from tests.unit.broker.groups_cluster import GroupCluster, commit_codes

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def samples(node) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    metrics = BrokerMetrics()
    metrics.attach(node, None)
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            if s.name.startswith("mq_group_"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_group_metrics_on_the_coordinator():
    c = GroupCluster(configs={"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "10",
                              "offsets.topic.num.partitions": "3"})
    c.create_topic("t", partitions=2, replicas=(1, 2))  # broker 3 hosts no replica of t
    c.create_offsets_topic(3)
    node = c.coordinator_of("g")
    joined = c.join(node, "g", ["t"])
    assert joined.error_code == ErrorCode.NONE
    for value in (b"a", b"b", b"c"):
        c.produce(1, "t", value)
    c.settle()
    c.advance(1000)  # a follower learns the high watermark on its next fetch
    assert commit_codes(c.commit(node, "g", {T0: 1, T1: 0}, generation=joined.generation_id,
                                 member_id=joined.member_id)) == [ErrorCode.NONE, ErrorCode.NONE]
    got = samples(c.nodes[node])
    assert got[("mq_group_members", (("group", "g"),))] == 1
    assert got[("mq_group_state", (("group", "g"), ("state", "Stable")))] == 1
    assert got[("mq_group_state", (("group", "g"), ("state", "Empty")))] == 0
    labels = (("group", "g"), ("partition", "0"), ("topic", "t"))
    assert got[("mq_group_committed_offset", labels)] == 1
    if node in (1, 2):
        assert got[("mq_group_lag_records", labels)] == 2  # high watermark 3 − committed 1
    else:
        assert ("mq_group_lag_records", labels) not in got  # no replica of t here
    for other in (i for i in c.ids if i != node):
        assert not any(name == "mq_group_members" for name, _ in samples(c.nodes[other]))
