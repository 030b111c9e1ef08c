"""FindCoordinator with the real control plane: ``__consumer_offsets`` is created
through the controller (locally on a lone broker, forwarded to the active controller
in a region of three), then the group's partition leader is named."""

from __future__ import annotations

from dataclasses import dataclass

from mq.broker.node import BrokerNode
from mq.coordinator import OFFSETS_TOPIC
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol.group_messages import FindCoordinatorRequest
from mq.protocol.messages import CreatableTopic, CreateTopicsRequest
from mq.storage.fileio import MemoryFileIO
from tests.unit.broker.broker_cluster import NOW
from tests.unit.broker.groups_cluster import GROUP_CONFIGS, GroupCluster, commit_codes, fetched

GROUP = "g"


def test_a_lone_broker_creates_the_offsets_topic_and_coordinates():
    config = BrokerConfig.from_kafka({"log.dirs": "/data", "node.id": "1", "offsets.topic.num.partitions": "2",
                                      **GROUP_CONFIGS})
    node = BrokerNode(config, MemoryFileIO(), rng=Rng(1), advertised_host="127.0.0.1", advertised_port=9092)
    now = NOW
    node.start(now_ms=now)
    while not node.is_ready:
        now += 10
        node.poll(now_ms=now)
        assert now < NOW + 10_000
    find = FindCoordinatorRequest(GROUP)
    response = node.handle(_header(find), find, now_ms=now)
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    deadline = now + 5000
    while response.error_code != ErrorCode.NONE:
        now += 10
        node.poll(now_ms=now)
        response = node.handle(_header(find), find, now_ms=now)
        assert now < deadline, response
    assert (response.node_id, response.host, response.port) == (1, "127.0.0.1", 9092)
    topic = node.image.topic(OFFSETS_TOPIC)
    assert topic is not None and len(topic.partitions) == 2
    assert topic.configs["cleanup.policy"] == "compact"
    assert node.groups.creator.requests_sent == 1
    tp = TopicPartition(OFFSETS_TOPIC, 0)
    assert node.partitions[tp].config.min_insync_replicas == 1


@dataclass
class RaftCluster(GroupCluster):
    """Three BrokerNodes with the real control plane (metadata quorum of all three)."""

    def start(self, node_id: int) -> BrokerNode:  # type: ignore[override]
        voters = ",".join(f"{i}@127.0.0.1:{9090 + i}" for i in self.ids)
        config = BrokerConfig.from_kafka({"log.dirs": "/data", "node.id": str(node_id),
                                          "controller.quorum.voters": voters, **self.configs})
        node = BrokerNode(config, self.fileio[node_id], rng=Rng(node_id), advertised_host="127.0.0.1",
                          advertised_port=9090 + node_id)
        node.start(now_ms=self.now)
        self.nodes[node_id] = node
        self.down.discard(node_id)
        return node

    def publish(self, records, *, to=None) -> None:  # the controller publishes here
        pass


def test_a_follower_broker_has_the_controller_create_the_offsets_topic():
    c = RaftCluster(configs={**GROUP_CONFIGS, "offsets.topic.num.partitions": "3"})
    c.run(3000, tick=20)
    assert all(n.is_ready for n in c.nodes.values())
    controller = c.nodes[1].controller_id
    via = next(i for i in c.ids if i != controller)
    assert c.find(via, GROUP).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    created = c.call(via, CreateTopicsRequest([CreatableTopic("t", 2, 3)]), max_ms=2000)
    assert created.topics[0].error_code == ErrorCode.NONE
    for _ in range(200):
        response = c.find(via, GROUP)
        if response.error_code == ErrorCode.NONE:
            break
        c.advance(20)
    assert response.error_code == ErrorCode.NONE
    topic = c.nodes[via].image.topic(OFFSETS_TOPIC)
    assert topic is not None and len(topic.partitions) == 3
    assert all(len(p.replicas) == 3 for p in topic.partitions.values())
    assert dict(topic.configs)["min.insync.replicas"] == "2"
    assert sum(n.groups.creator.requests_sent for n in c.nodes.values()) == 1
    leader = response.node_id
    tp = TopicPartition("t", 0)
    for _ in range(100):  # the shard loads on the leader's next poll
        committed = commit_codes(c.commit(leader, GROUP, {tp: 9}, max_ms=2000))
        if committed == [ErrorCode.NONE]:
            break
        assert committed == [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
        c.advance(20)
    assert fetched(c.fetch_offsets(leader, GROUP, [tp])) == {tp: 9}


def _header(request):
    from tests.unit.broker.broker_cluster import header

    return header(request.API_KEY)
