"""A topic grown by CreatePartitions: the brokers see new partitions of an existing
topic in the metadata diff, open their logs, lead and follow them, and leave the old
partitions (and their records) as they were."""

from __future__ import annotations

from mq.broker.node import Pending
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.metadata.records import PartitionRecord
from mq.protocol.messages import ApiKey, MetadataRequest, ProduceResponse
from tests.unit.broker.broker_cluster import Cluster, header, produce_error


def _acked(c: Cluster, node_id: int, topic: str, value: bytes, partition: int) -> None:
    pending = c.produce(node_id, topic, value, partition=partition)
    assert isinstance(pending, Pending)
    c.settle()
    response = c.result(node_id, pending)
    assert isinstance(response, ProduceResponse) and produce_error(response) == ErrorCode.NONE, response


def test_new_partitions_of_an_existing_topic_are_opened_led_and_followed() -> None:
    c = Cluster()
    c.create_topic("t", partitions=1)
    _acked(c, 1, "t", b"old", 0)
    c.publish([PartitionRecord("t", 1, (2, 3, 1), 2, 0, (2, 3, 1), 0),
               PartitionRecord("t", 2, (3, 1), 3, 0, (3, 1), 0)])
    assert c.nodes[2].partitions[TopicPartition("t", 1)].leader is not None
    assert c.nodes[3].partitions[TopicPartition("t", 2)].leader is not None
    assert TopicPartition("t", 2) not in c.nodes[2].partitions  # not a replica there
    follower = c.nodes[1].partitions[TopicPartition("t", 1)].follower
    assert follower is not None and follower.leader_id == 2
    _acked(c, 2, "t", b"p1", 1)
    _acked(c, 3, "t", b"p2", 2)
    assert c.values(1, "t", 1) == c.values(3, "t", 1) == [b"p1"]
    assert c.values(1, "t", 2) == [b"p2"]
    assert [c.values(n, "t", 0) for n in (1, 2, 3)] == [[b"old"]] * 3  # the old partition is untouched
    metadata = c.nodes[1].handle(header(ApiKey.METADATA), MetadataRequest(["t"]), now_ms=c.now)
    assert [(p.partition, p.leader_id) for p in metadata.topics[0].partitions] == [(0, 1), (1, 2), (2, 3)]


def test_a_grown_topic_survives_a_restart() -> None:
    c = Cluster()
    c.create_topic("t", partitions=1)
    c.publish([PartitionRecord("t", 1, (1, 2, 3), 1, 0, (1, 2, 3), 0)])
    _acked(c, 1, "t", b"x", 1)
    c.kill(2, crash=True)
    c.restart(2)
    c.settle()
    assert c.values(2, "t", 1) == [b"x"]
