"""Several real ``BrokerNode``s in one process, deterministic: MemoryFileIO, explicit
``now_ms``, a hand-driven network and a stand-in control plane.

``StaticControl`` replaces the Raft/controller side: the test publishes metadata
images (``Cluster.publish``) and the harness plays the active controller for
AlterPartition (node id ``CONTROLLER``), a ``bump_leader_epoch`` included. ``Cluster.step`` delivers every node's
outbound requests to the destination node's ``handle`` and the answers back to
``on_response``, long-polls included (expired when the simulated time passes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.broker.node import BrokerNode, Pending
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.metadata.image import MetadataImage
from mq.metadata.records import MetadataRecord, PartitionRecord, TopicRecord
from mq.protocol import inter_broker as ib
from mq.protocol.codec import RequestHeader
from mq.protocol.messages import (
    ApiKey,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ProducePartitionData,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
    Request,
    Response,
)
from mq.protocol.record_batch import build_batch, iter_records
from mq.storage.fileio import MemoryFileIO

CONTROLLER = 100
NOW = 1_700_000_000_000


def header(api: ApiKey) -> RequestHeader:
    return RequestHeader(api, 0, 1, "test")


class StaticControl:
    """The control plane's interface, publishing what the test hands it."""

    def __init__(self, node_id: int, broker_epoch: int) -> None:
        self.node_id = node_id
        self.broker_epoch = broker_epoch
        self.controller_id: int | None = CONTROLLER
        self.controller_epoch = 1
        self.is_ready = True
        self.shutdown_complete = False
        self.image = MetadataImage()
        self._published_from = MetadataImage()
        self._pairs: list[tuple[MetadataImage, MetadataImage]] = []

    def start(self, *, now_ms: int) -> None:
        pass

    def close(self) -> None:
        pass

    def publish(self, image: MetadataImage) -> None:
        self._pairs.append((self._published_from, image))
        self._published_from = self.image = image

    def take_published(self) -> list[tuple[MetadataImage, MetadataImage]]:
        pairs, self._pairs = self._pairs, []
        return pairs

    def take_outbound(self) -> list:
        return []

    def take_completions(self) -> list:
        return []

    def poll(self, *, now_ms: int) -> int:
        return now_ms + 1000

    def handle(self, header: RequestHeader, request: Request, *, now_ms: int) -> Response | None:
        raise AssertionError(f"unexpected control request {request!r}")

    def on_response(self, tag: int, response: Response | None, *, now_ms: int) -> bool:
        return False

    def expire(self, op_id: int, *, now_ms: int) -> bool:
        return False

    def cancel(self, op_id: int) -> None:
        pass

    def begin_shutdown(self, *, now_ms: int) -> None:
        self.shutdown_complete = True

    def set_advertised(self, host: str, port: int) -> None:
        pass  # the in-process network addresses nodes by id

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        return None


@dataclass
class _Parked:
    source: int  # the node that sent the request (or -1: a test client)
    tag: int
    deadline_ms: int | None


@dataclass
class Cluster:
    ids: tuple[int, ...] = (1, 2, 3)
    configs: dict[str, str] = field(default_factory=dict)
    now: int = NOW
    auto_fsync: bool = True  # group-commit every node after each step

    def __post_init__(self) -> None:
        self.fileio = {i: MemoryFileIO() for i in self.ids}
        self.nodes: dict[int, BrokerNode] = {}
        self.down: set[int] = set()
        self.cut: set[frozenset[int]] = set()  # links that drop every message
        # Nodes cut off from the controller: their requests to it stay unanswered until
        # ``heal_controller`` fails them (as the shell's request timeout would).
        self.controller_cut: set[int] = set()
        self.controller_unanswered: list[tuple[int, int]] = []  # (node, tag)
        self.image = MetadataImage()
        self.offset = 0
        self.parked: dict[tuple[int, int], _Parked] = {}  # (node, op id) -> who waits
        self.client_results: dict[tuple[int, int], Response] = {}
        self.alter_requests: list[ib.AlterPartitionRequest] = []
        self.epochs = {i: 10 * i for i in self.ids}
        for i in self.ids:
            self.start(i)

    # ---- nodes

    def start(self, node_id: int) -> BrokerNode:
        config = BrokerConfig.from_kafka({"log.dirs": "/data", "node.id": str(node_id), **self.configs})
        self.epochs[node_id] += 1
        control = StaticControl(node_id, self.epochs[node_id])
        node = BrokerNode(config, self.fileio[node_id], rng=Rng(node_id), advertised_host="127.0.0.1",
                          advertised_port=9090 + node_id, control=control)
        node.start(now_ms=self.now)
        self.nodes[node_id] = node
        self.down.discard(node_id)
        if self.image.topics:
            control.publish(self.image)
            node.poll(now_ms=self.now)
        return node

    def kill(self, node_id: int, *, crash: bool = False) -> None:
        """Stop delivering to and from the node (``crash``: lose its unsynced bytes too)."""
        self.down.add(node_id)
        for key in [k for k in self.parked if k[0] == node_id or self.parked[k].source == node_id]:
            parked = self.parked.pop(key)
            if key[0] == node_id and parked.source in self.nodes and parked.source not in self.down:
                self.nodes[parked.source].on_response(parked.tag, None, now_ms=self.now)
        if crash:
            self.fileio[node_id].crash()

    def restart(self, node_id: int) -> BrokerNode:
        return self.start(node_id)

    def control(self, node_id: int) -> StaticControl:
        return self.nodes[node_id].control  # type: ignore[no-any-return]

    # ---- metadata

    def publish(self, records: list[MetadataRecord], *, to: tuple[int, ...] | None = None) -> None:
        self.image = self.image.apply(records, last_offset=self.offset + len(records) - 1)
        self.offset += len(records)
        for i in self.ids if to is None else to:
            if i not in self.down:
                self.control(i).publish(self.image)
                self.nodes[i].poll(now_ms=self.now)

    def create_topic(self, name: str, replicas: tuple[int, ...] = (1, 2, 3), *, partitions: int = 1,
                     leader: int | None = None) -> None:
        records: list[MetadataRecord] = [TopicRecord(name, f"id-{name}")]
        for p in range(partitions):
            records.append(PartitionRecord(name, p, replicas, replicas[0] if leader is None else leader, 0, replicas, 0))
        self.publish(records)

    def elect(self, tp: TopicPartition, leader: int, *, isr: tuple[int, ...] | None = None,
              to: tuple[int, ...] | None = None) -> None:
        """A leader change (leader epoch and partition epoch bump), as the controller would."""
        old = self.image.partition(tp)
        assert old is not None
        new_isr = old.isr if isr is None else isr
        self.publish([PartitionRecord(tp.topic, tp.partition, old.replicas, leader, old.leader_epoch + 1,
                                      new_isr, old.partition_epoch + 1)], to=to)

    def _alter_partition(self, request: ib.AlterPartitionRequest) -> ib.AlterPartitionResponse:
        self.alter_requests.append(request)
        topics = []
        for topic in request.topics:
            results = []
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                current = self.image.partition(tp)
                if current is None:
                    results.append(ib.AlterPartitionPartitionResult(part.partition_index, ErrorCode.UNKNOWN_TOPIC))
                    continue
                if request.broker_id != current.leader or part.leader_epoch != current.leader_epoch:
                    code = ErrorCode.FENCED_LEADER_EPOCH
                elif part.partition_epoch != current.partition_epoch:
                    code = ErrorCode.INVALID_UPDATE_VERSION
                else:
                    code = ErrorCode.NONE
                    epoch = current.leader_epoch + 1 if part.bump_leader_epoch else current.leader_epoch
                    self.publish([PartitionRecord(tp.topic, tp.partition, current.replicas, current.leader,
                                                  epoch, tuple(part.new_isr), current.partition_epoch + 1)])
                    current = self.image.partition(tp)
                    assert current is not None
                results.append(ib.AlterPartitionPartitionResult(
                    part.partition_index, code, current.leader, current.leader_epoch, list(current.isr),
                    current.partition_epoch))
            topics.append(ib.AlterPartitionTopicResult(topic.name, results))
        return ib.AlterPartitionResponse(topics)

    def heal_controller(self) -> None:
        self.controller_cut.clear()
        unanswered, self.controller_unanswered = self.controller_unanswered, []
        for node_id, tag in unanswered:
            if node_id not in self.down:
                self.nodes[node_id].on_response(tag, None, now_ms=self.now)

    # ---- network

    def linked(self, a: int, b: int) -> bool:
        return a not in self.down and b not in self.down and frozenset((a, b)) not in self.cut

    def step(self) -> int:
        """Deliver every outbound request and every completion once; returns how many."""
        moved = 0
        for source in self.ids:
            if source in self.down:
                continue
            for out in self.nodes[source].take_outbound():
                moved += 1
                if out.destination == CONTROLLER:
                    if source in self.controller_cut:
                        self.controller_unanswered.append((source, out.tag))
                        continue
                    response = self._alter_partition(out.request)  # type: ignore[arg-type]
                    self.nodes[source].on_response(out.tag, response, now_ms=self.now)
                    continue
                if not self.linked(source, out.destination):
                    self.nodes[source].on_response(out.tag, None, now_ms=self.now)
                    continue
                dest = self.nodes[out.destination]
                result = dest.handle(header(out.request.API_KEY), out.request, now_ms=self.now)
                if isinstance(result, Pending):
                    deadline = None if result.timeout_ms is None else self.now + result.timeout_ms
                    self.parked[(out.destination, result.op_id)] = _Parked(source, out.tag, deadline)
                elif result is not None:
                    self.nodes[source].on_response(out.tag, result, now_ms=self.now)
        for node_id in self.ids:
            if node_id in self.down:
                continue
            node = self.nodes[node_id]
            if node.needs_group_commit and self.auto_fsync:
                node.group_commit(now_ms=self.now)
            for op_id, response in node.take_completions():
                moved += 1
                self._deliver(node_id, op_id, response)
        return moved

    def _deliver(self, node_id: int, op_id: int, response: Response) -> None:
        parked = self.parked.pop((node_id, op_id), None)
        if parked is None:
            return
        if parked.source == -1:
            self.client_results[(node_id, op_id)] = response
        elif self.linked(node_id, parked.source):
            self.nodes[parked.source].on_response(parked.tag, response, now_ms=self.now)
        else:
            self.nodes[parked.source].on_response(parked.tag, None, now_ms=self.now)

    def settle(self, *, max_steps: int = 200) -> None:
        """Step until nothing moves (long-polls stay parked)."""
        for _ in range(max_steps):
            if self.step() == 0:
                return
        raise AssertionError("the cluster did not settle")

    def advance(self, ms: int) -> None:
        """Let ``ms`` pass: expire due long-polls, poll every node, settle."""
        self.now += ms
        for (node_id, op_id), parked in sorted(self.parked.items()):
            if parked.deadline_ms is not None and parked.deadline_ms <= self.now and node_id not in self.down:
                self.nodes[node_id].expire(op_id, now_ms=self.now)
        for node_id in self.ids:
            if node_id not in self.down:
                self.nodes[node_id].poll(now_ms=self.now)
        self.settle()

    def run(self, ms: int, *, tick: int = 100) -> None:
        for _ in range(ms // tick):
            self.advance(tick)

    # ---- clients

    def produce(self, node_id: int, topic: str, value: bytes, *, acks: int = -1, partition: int = 0,
                timeout_ms: int = 30_000) -> Response | Pending | None:
        records = build_batch([(None, value, (), self.now)])
        request = ProduceRequest(acks, timeout_ms, [ProduceTopicData(topic, [ProducePartitionData(partition, records)])])
        result = self.nodes[node_id].handle(header(ApiKey.PRODUCE), request, now_ms=self.now)
        if isinstance(result, Pending):
            self.parked[(node_id, result.op_id)] = _Parked(-1, -1, None)
        return result

    def result(self, node_id: int, pending: Pending) -> Response | None:
        return self.client_results.get((node_id, pending.op_id))

    def fetch(self, node_id: int, topic: str, offset: int = 0, *, partition: int = 0,
              current_leader_epoch: int = -1) -> FetchResponse:
        request = FetchRequest([FetchTopic(topic, [FetchPartition(partition, offset,
                                                                   current_leader_epoch=current_leader_epoch)])],
                               max_wait_ms=0)
        result = self.nodes[node_id].handle(header(ApiKey.FETCH), request, now_ms=self.now)
        assert isinstance(result, FetchResponse)
        return result

    def values(self, node_id: int, topic: str, partition: int = 0, *, committed_only: bool = False) -> list[bytes]:
        """Every record value in the node's log (below its high watermark if asked)."""
        p = self.nodes[node_id].partitions[TopicPartition(topic, partition)]
        end = p.high_watermark if committed_only else p.log.log_end_offset
        out: list[bytes] = []
        offset = p.log.log_start_offset
        while offset < end:
            data = p.log.read(offset, max_bytes=1 << 20, max_offset=end).records
            if not data:
                break
            for record in iter_records(data):
                if record.offset < end:
                    out.append(record.value)  # type: ignore[arg-type]
                offset = record.offset + 1
        return out


def produce_error(response: Response | Pending | None) -> int:
    assert isinstance(response, ProduceResponse), response
    return response.topics[0].partitions[0].error_code
