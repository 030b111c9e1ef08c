"""``Cluster`` (three BrokerNodes, StaticControl) with consumer-group helpers: the
brokers registered in the image, ``__consumer_offsets`` created by hand (or through a
stand-in control plane that records CreateTopics), group requests from a test client."""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.broker.node import BrokerNode, Pending
from mq.coordinator import OFFSETS_TOPIC, group_partition
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from mq.protocol.group_messages import (
    FindCoordinatorRequest,
    JoinGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
)
from mq.protocol.messages import Request, Response
from tests.unit.broker.broker_cluster import Cluster, StaticControl, _Parked, header

GROUP_CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "10",
}


class CreatingControl(StaticControl):
    """StaticControl that accepts CreateTopics: recorded, answered by the test."""

    def __init__(self, node_id: int, broker_epoch: int) -> None:
        super().__init__(node_id, broker_epoch)
        self.creates: dict[int, Request] = {}
        self._completions: list[tuple[int, Response]] = []
        self._next = 1_000_000 * node_id

    def handle(self, header, request, *, now_ms):  # type: ignore[override]
        self._next += 1
        self.creates[self._next] = request
        return Pending(self._next, 30_000)

    def answer(self, op_id: int, response: Response) -> None:
        self._completions.append((op_id, response))

    def take_completions(self) -> list:
        done, self._completions = self._completions, []
        return done


@dataclass
class GroupCluster(Cluster):
    configs: dict[str, str] = field(default_factory=lambda: dict(GROUP_CONFIGS))

    def __post_init__(self) -> None:
        super().__post_init__()
        self.publish([RegisterBrokerRecord(i, 10 * i, f"inc-{i}", "127.0.0.1", 9090 + i) for i in self.ids])

    def start(self, node_id: int) -> BrokerNode:
        """As ``Cluster.start``, with a control plane that accepts CreateTopics."""
        config = BrokerConfig.from_kafka({"log.dirs": "/data", "node.id": str(node_id), **self.configs})
        self.epochs[node_id] += 1
        control = CreatingControl(node_id, self.epochs[node_id])
        node = BrokerNode(config, self.fileio[node_id], rng=Rng(node_id), advertised_host="127.0.0.1",
                          advertised_port=9090 + node_id, control=control)
        node.start(now_ms=self.now)
        self.nodes[node_id] = node
        self.down.discard(node_id)
        if self.image.topics or self.image.brokers:
            control.publish(self.image)
            node.poll(now_ms=self.now)
        return node

    # ---- offsets topic

    def create_offsets_topic(self, partitions: int = 3, replicas: tuple[int, ...] = (1, 2, 3), *,
                             leaders: dict[int, int] | None = None) -> None:
        records: list[MetadataRecord] = [TopicRecord(OFFSETS_TOPIC, "id-offsets"),
                                         ConfigRecord(OFFSETS_TOPIC, "cleanup.policy", "compact")]
        for p in range(partitions):
            leader = (leaders or {}).get(p, replicas[p % len(replicas)])
            records.append(PartitionRecord(OFFSETS_TOPIC, p, replicas, leader, 0, replicas, 0))
        self.publish(records)
        self.settle()

    def offsets_tp(self, group: str) -> TopicPartition:
        topic = self.image.topic(OFFSETS_TOPIC)
        assert topic is not None
        return TopicPartition(OFFSETS_TOPIC, group_partition(group, len(topic.partitions)))

    def coordinator_of(self, group: str) -> int:
        image = self.image.partition(self.offsets_tp(group))
        assert image is not None
        return image.leader

    # ---- client requests

    def send(self, node_id: int, request: Request) -> Response | Pending:
        result = self.nodes[node_id].handle(header(request.API_KEY), request, now_ms=self.now,  # type: ignore[attr-defined]
                                            client_host="10.0.0.1")
        if isinstance(result, Pending):
            self.parked[(node_id, result.op_id)] = _Parked(-1, -1, None)
        assert result is not None
        return result

    def call(self, node_id: int, request: Request, *, max_ms: int = 0, tick: int = 10) -> Response:
        """Send, then settle (and let up to ``max_ms`` pass) until answered."""
        result = self.send(node_id, request)
        if not isinstance(result, Pending):
            return result
        self.settle()
        waited = 0
        while (node_id, result.op_id) not in self.client_results:
            assert waited < max_ms, f"{type(request).__name__} not answered after {max_ms} ms"
            self.advance(tick)
            waited += tick
        return self.client_results.pop((node_id, result.op_id))

    def answer(self, node_id: int, pending: Pending) -> Response | None:
        return self.client_results.get((node_id, pending.op_id))

    def find(self, node_id: int, group: str) -> Response:
        return self.call(node_id, FindCoordinatorRequest(group))

    def join(self, node_id: int, group: str, topics: list[str], *, member_id: str = "",
             max_ms: int = 1000) -> Response:
        """JoinGroup; a MEMBER_ID_REQUIRED answer (KIP-394) is followed as a client does."""
        response = self.call(node_id, join_request(group, topics, member_id=member_id), max_ms=max_ms)
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:  # type: ignore[attr-defined]
            response = self.call(node_id, join_request(group, topics, member_id=response.member_id),  # type: ignore[attr-defined]
                                 max_ms=max_ms)
        return response

    def member_id(self, node_id: int, group: str, topics: list[str]) -> str:
        """A pending member id (KIP-394): the JoinGroup sent with it is the one that parks."""
        required = self.call(node_id, join_request(group, topics))
        assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED, required  # type: ignore[attr-defined]
        return required.member_id  # type: ignore[attr-defined]

    def commit(self, node_id: int, group: str, offsets: dict[TopicPartition, int], *, generation: int = -1,
               member_id: str = "", max_ms: int = 0) -> Response:
        return self.call(node_id, commit_request(group, offsets, generation=generation, member_id=member_id),
                         max_ms=max_ms)

    def fetch_offsets(self, node_id: int, group: str, tps: list[TopicPartition]) -> Response:
        return self.call(node_id, fetch_request(group, tps))


def join_request(group: str, topics: list[str], *, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(group, session_timeout_ms=10_000, rebalance_timeout_ms=1000, member_id=member_id,
                            assignors=["range"], topics=topics)


def commit_request(group: str, offsets: dict[TopicPartition, int], *, generation: int = -1,
                   member_id: str = "") -> OffsetCommitRequest:
    topics: dict[str, list[OffsetCommitPartition]] = {}
    for tp, offset in sorted(offsets.items()):
        topics.setdefault(tp.topic, []).append(OffsetCommitPartition(tp.partition, offset))
    return OffsetCommitRequest(group, [OffsetCommitTopic(t, ps) for t, ps in topics.items()],
                               generation_id=generation, member_id=member_id)


def fetch_request(group: str, tps: list[TopicPartition]) -> OffsetFetchRequest:
    topics: dict[str, list[int]] = {}
    for tp in sorted(tps):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return OffsetFetchRequest(group, [OffsetFetchTopic(t, ps) for t, ps in topics.items()])


def commit_codes(response: Response) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions]  # type: ignore[attr-defined]


def fetched(response: Response) -> dict[TopicPartition, int]:
    assert response.error_code == ErrorCode.NONE, response  # type: ignore[attr-defined]
    return {TopicPartition(t.name, p.partition): p.offset
            for t in response.topics for p in t.partitions}  # type: ignore[attr-defined]
