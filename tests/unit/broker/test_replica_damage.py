"""Bytes that rot in a closed segment while a broker is stopped (TESTING.md R8).

Opening a log trusts the segments below its recovery point, so after a clean
shutdown a flipped bit there went unnoticed until the replica led and a fetch hit
it. ``Partition.open`` now reads the whole log once (``Log.first_damaged``); a
replica that becomes a follower cuts its log where the damage starts and re-fetches
the rest from the leader, while a sole replica keeps its data (only the damaged batch
is refused to readers, as before)."""

from __future__ import annotations

from mq.core.types import TopicPartition
from tests.unit.broker.broker_cluster import Cluster

TP = TopicPartition("t", 0)
SOLO = TopicPartition("solo", 0)


def _flip_in_first_segment(c: Cluster, node_id: int, tp: TopicPartition) -> None:
    log = c.nodes[node_id].partitions[tp].log
    assert len(log.segments) > 2
    c.nodes[node_id].replicas.close_all()  # a clean shutdown: recovery point = log end
    c.kill(node_id)
    path = log.segments[0].log_path
    c.fileio[node_id].files[path].data[70] ^= 0x10  # inside the first batch's CRC range


def _fill(c: Cluster, leader: int, topic: str) -> None:
    for i in range(12):
        c.produce(leader, topic, b"v%02d" % i + b"." * 200)
        c.settle()


def test_a_restarted_follower_cuts_the_damage_and_fetches_it_again():
    c = Cluster(configs={"log.segment.bytes": "1024"})
    c.create_topic("t")
    _fill(c, 1, "t")
    expected = c.values(1, "t")
    assert c.values(3, "t") == expected
    _flip_in_first_segment(c, 3, TP)
    node = c.restart(3)
    c.publish([], to=(3,))
    c.settle()
    reports = node.take_corruption_reports()
    assert [tp for tp, _ in reports] == [TP] and "cut its log at offset 0" in reports[0][1].problem
    assert node.partitions[TP].damaged is None
    assert c.values(3, "t") == expected  # re-fetched: readable and identical again
    assert node.partitions[TP].log.verify() == []


def test_a_sole_replica_keeps_its_data_when_damaged():
    c = Cluster(configs={"log.segment.bytes": "1024"})
    c.create_topic("solo", replicas=(1,))
    _fill(c, 1, "solo")
    end = c.nodes[1].partitions[SOLO].log.log_end_offset
    _flip_in_first_segment(c, 1, SOLO)
    node = c.restart(1)
    c.publish([], to=(1,))
    c.settle()
    partition = node.partitions[SOLO]
    assert partition.leader is not None and partition.log.log_end_offset == end
    assert partition.damaged is not None and partition.damaged[0] == 0
    assert node.take_corruption_reports() == []
