"""Share groups on sans-IO brokers: FindCoordinator key type 2, ShareFetch returning the
stored batches of the acquired records, the state written to ``__share_group_state``
and answered only once replicated, a fail-over of that partition's leadership (the
new coordinator replays it: accepted stays accepted, held records come back with
their delivery counts), and the ``mq_share_*`` metrics."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from mq.aio.metrics import BrokerMetrics
from mq.coordinator import group_partition
from mq.coordinator.share_records import SHARE_STATE_TOPIC
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.metadata.records import ConfigRecord, PartitionRecord, TopicRecord
from mq.protocol import share_messages as s
from mq.protocol.batch_format import iter_batches
from mq.protocol.group_messages import FindCoordinatorRequest
from mq.protocol.record_batch import decode_records
from tests.unit.broker.groups_cluster import GroupCluster

GROUP = "workers"
TP = TopicPartition("jobs", 0)
CONFIGS = {"share.record.lock.duration.ms": "5000", "share.auto.offset.reset": "earliest",
           "share.session.timeout.ms": "60000"}


def cluster() -> GroupCluster:
    c = GroupCluster(configs=CONFIGS)
    c.create_topic("jobs", partitions=1, replicas=(1, 2, 3))
    records = [TopicRecord(SHARE_STATE_TOPIC, "id-share"), ConfigRecord(SHARE_STATE_TOPIC, "cleanup.policy", "compact")]
    for p in range(3):
        records.append(PartitionRecord(SHARE_STATE_TOPIC, p, (1, 2, 3), (p % 3) + 1, 0, (1, 2, 3), 0))
    c.publish(records)
    c.settle()
    for i in range(10):
        c.produce(1, "jobs", b"job-%d" % i)
    c.settle()
    c.advance(1000)  # the followers learn the high watermark
    return c


def state_tp() -> TopicPartition:
    return TopicPartition(SHARE_STATE_TOPIC, group_partition(GROUP, 3))


def coordinator(c: GroupCluster) -> int:
    image = c.image.partition(state_tp())
    assert image is not None
    return image.leader


def join(c: GroupCluster, node: int) -> str:
    beat = c.call(node, s.ShareGroupHeartbeatRequest(GROUP, "", 0, ["jobs"]), max_ms=2000)
    assert beat.error_code == ErrorCode.NONE, beat
    return beat.member_id


def values(part: s.ShareFetchPartitionResponse) -> dict[int, bytes]:
    out = {}
    with memoryview(part.records) as view:
        for pos, header in iter_batches(view):
            for r in decode_records(view[pos:pos + header.size]):
                if any(a.first_offset <= r.offset <= a.last_offset for a in part.acquired):
                    out[r.offset] = bytes(r.value)
    return out


def test_share_fetch_failover_and_metrics():
    c = cluster()
    node = coordinator(c)
    found = c.call(1, FindCoordinatorRequest(GROUP, key_type=s.SHARE_KEY_TYPE))
    assert (found.error_code, found.node_id) == (ErrorCode.NONE, node)
    other = next(i for i in c.ids if i != node)
    refused = c.call(other, s.ShareGroupHeartbeatRequest(GROUP, "", 0, ["jobs"]))
    assert refused.error_code == ErrorCode.NOT_COORDINATOR

    a, b = join(c, node), join(c, node)
    first = c.call(node, s.ShareFetchRequest(GROUP, a, 4), max_ms=2000)
    assert first.error_code == ErrorCode.NONE
    [part] = first.partitions
    assert [(x.first_offset, x.last_offset, x.delivery_count) for x in part.acquired] == [(0, 3, 1)]
    assert values(part) == {i: b"job-%d" % i for i in range(4)}
    second = c.call(node, s.ShareFetchRequest(GROUP, b, 3), max_ms=2000)
    assert [(x.first_offset, x.last_offset) for x in second.partitions[0].acquired] == [(4, 6)]
    acked = c.call(node, s.ShareAcknowledgeRequest(GROUP, a, [s.PartitionAcknowledgements(
        "jobs", 0, [s.AcknowledgementBatch(0, 1, 1)])]), max_ms=2000)
    assert [r.error_code for r in acked.acknowledgements] == [ErrorCode.NONE]

    metrics = BrokerMetrics()
    metrics.attach(c.nodes[node], None)
    got = {(m.name, tuple(sorted(m.labels.items()))): m.value
           for f in text_string_to_metric_families(metrics.render().decode()) for m in f.samples
           if m.name.startswith("mq_share_")}
    labels = (("group", GROUP), ("partition", "0"), ("topic", "jobs"))
    assert got[("mq_share_group_members", (("group", GROUP),))] == 2
    assert got[("mq_share_partition_start_offset", labels)] == 2
    assert got[("mq_share_partition_lag_records", labels)] == 3  # 10 - end offset 7
    assert got[("mq_share_partition_records", tuple(sorted((*labels, ("state", "acquired")))))] == 5

    # The coordinator's broker loses leadership of the state partition: a new one replays it.
    new = other
    c.elect(state_tp(), new)
    c.settle()
    c.advance(100)
    assert c.call(node, s.ShareFetchRequest(GROUP, a, 4)).error_code == ErrorCode.NOT_COORDINATOR
    again = c.call(new, s.ShareFetchRequest(GROUP, a, 10), max_ms=3000)
    assert again.error_code == ErrorCode.NONE, again
    runs = [(x.first_offset, x.last_offset, x.delivery_count) for x in again.partitions[0].acquired]
    assert runs == [(2, 6, 2), (7, 9, 1)], "0-1 stay accepted; 2-6 were held: redelivered, counted"
    stale = c.call(new, s.ShareAcknowledgeRequest(GROUP, b, [s.PartitionAcknowledgements(
        "jobs", 0, [s.AcknowledgementBatch(4, 6, 1)])]), max_ms=2000)
    assert stale.acknowledgements[0].error_code == ErrorCode.INVALID_RECORD_STATE  # b's locks died with the old one


def test_share_fetch_long_poll_waits_for_records_and_times_out():
    c = cluster()
    node = coordinator(c)
    a = join(c, node)
    drained = c.call(node, s.ShareFetchRequest(GROUP, a, 100), max_ms=2000)
    assert sum(x.last_offset - x.first_offset + 1 for x in drained.partitions[0].acquired) == 10
    acks = [s.PartitionAcknowledgements("jobs", 0, [s.AcknowledgementBatch(0, 9, 1)])]
    parked = c.send(node, s.ShareFetchRequest(GROUP, a, 100, acknowledgements=acks, max_wait_ms=2000))
    c.settle()
    c.advance(300)
    assert c.answer(node, parked) is None, "nothing to acquire: the fetch waits"
    c.produce(1, "jobs", b"late")
    c.settle()
    c.advance(200)
    answer = c.answer(node, parked)
    assert answer is not None, "a new record wakes the waiting fetch"
    assert [(x.first_offset, x.last_offset) for x in answer.partitions[0].acquired] == [(10, 10)]
    assert [r.error_code for r in answer.acknowledgements] == [ErrorCode.NONE], "the first run's ack results"
    empty = c.send(node, s.ShareFetchRequest(GROUP, a, 100, max_wait_ms=1000))
    c.settle()
    c.advance(500)
    assert c.answer(node, empty) is None
    c.advance(600)
    timed_out = c.answer(node, empty)
    assert timed_out is not None and timed_out.error_code == ErrorCode.NONE and timed_out.partitions == []
