"""A whole region in one process: real ``BrokerNode``s (Raft, controller, replication)
on ``MemoryFileIO`` disks, talking over the seeded ``SimNetwork``.

Every broker runs exactly the code a broker process runs, minus the asyncio shell,
whose job this module does on virtual time:

- each node's outbound requests travel as ``Envelope``s through the network (which
  may drop, delay, duplicate, reorder or cut them) to the destination's ``handle``;
  answers, immediate or later from ``take_completions``, travel back the same way;
- a request whose answer never comes is failed with ``on_response(tag, None)`` after
  ``REQUEST_TIMEOUT_MS`` (the shell's request timeout), a long-poll's wait included;
- ``poll`` runs at the deadline it returns, the group commit after every event;
- ``crash`` drops a node and whatever its disk had not fsynced; ``start`` brings it
  back from that disk.

Clients are simulated by ``produce`` (acks=all to the partition's leader as some
live broker's metadata names it), which records every acknowledged value and offset,
and by ``request``: any request from a client node (an id that is no broker's), its
answer handed to a callback (None when it timed out). Several regions can share one
``EventScheduler`` (one virtual clock), each with its own network. A run depends only
on its seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mq.broker.node import BrokerNode, Pending
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol.codec import RequestHeader
from mq.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    ProducePartitionData,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
    Request,
    Response,
)
from mq.protocol.record_batch import build_batch, iter_records
from mq.sim.network import SimNetwork
from mq.sim.scheduler import EventScheduler
from mq.storage.fileio import MemoryFileIO

REQUEST_TIMEOUT_MS = 5_000
CLIENT_ID = 0  # the node id of the simulated client in the network
START_MS = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Envelope:
    source_id: int
    destination_id: int
    request: Request | None = None
    response: Response | None = None
    tag: int = 0
    one_way: bool = False
    incarnation: int = 0  # of the sender: answers to a previous life are dropped


@dataclass(slots=True)
class SimBroker:
    node_id: int
    fileio: MemoryFileIO
    node: BrokerNode | None = None
    incarnation: int = 0
    ops: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # op id -> (source, tag, incarnation)
    waiting: dict[int, int] = field(default_factory=dict)  # our tag -> timeout generation
    poll_at: int | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    tp: TopicPartition
    value: bytes
    offset: int


class SimRegion:
    def __init__(self, seed: int, *, broker_ids: Iterable[int] = (1, 2, 3), base_delay_ms: int = 1,
                 configs: dict[str, object] | None = None, scheduler: EventScheduler | None = None) -> None:
        """``scheduler``: share another region's clock (None: a new one at ``START_MS``)."""
        self.seed = seed
        self.rng = Rng(seed)
        if scheduler is None:
            scheduler = EventScheduler()
            scheduler.now_ms = START_MS
        self.scheduler = scheduler
        self.network = SimNetwork(self.scheduler, self.rng.fork("network"), self._arrive,
                                  base_delay_ms=base_delay_ms)
        self.ids = tuple(sorted(broker_ids))
        voters = ",".join(f"{i}@sim:{9000 + i}" for i in self.ids)
        overrides = {"controller_quorum_voters": voters, "broker_session_timeout_ms": 2000,
                     "broker_heartbeat_interval_ms": 500, "replica_lag_time_max_ms": 5000,
                     **(configs or {})}
        self.configs = {i: BrokerConfig(node_id=i, log_dirs=f"/broker-{i}", **overrides) for i in self.ids}  # type: ignore[arg-type]
        self.brokers = {i: SimBroker(i, MemoryFileIO()) for i in self.ids}
        self.acks: list[Ack] = []
        self.client_answers: dict[int, Response | None] = {}
        self._next_tag = 1
        self._client_waiting: dict[int, Callable[[Response | None], None]] = {}
        self.observers: list[Callable[[SimRegion], None]] = []
        for i in self.ids:
            self.start(i)

    @property
    def now_ms(self) -> int:
        return self.scheduler.now_ms

    # ------------------------------------------------------------ nodes

    def node(self, node_id: int) -> BrokerNode:
        node = self.brokers[node_id].node
        assert node is not None, f"broker {node_id} is down"
        return node

    def live(self) -> list[int]:
        return [i for i in self.ids if self.brokers[i].node is not None]

    def start(self, node_id: int) -> None:
        broker = self.brokers[node_id]
        if broker.node is not None:
            return
        broker.incarnation += 1
        broker.ops.clear()
        broker.waiting.clear()
        broker.poll_at = None
        broker.node = BrokerNode(self.configs[node_id], broker.fileio,
                                 rng=self.rng.fork("broker", node_id, broker.incarnation),
                                 advertised_host="sim", advertised_port=9000 + node_id)
        broker.node.start(now_ms=self.now_ms)
        self._after(node_id)

    def crash(self, node_id: int) -> None:
        """Kill a broker: its memory is gone and its disk keeps only what was fsynced."""
        broker = self.brokers[node_id]
        broker.node = None
        broker.fileio.crash(self.rng.fork("crash", node_id, broker.incarnation))

    # ------------------------------------------------------------ the shell's job

    def _after(self, node_id: int) -> None:
        """After any event at a node: group commit, send what it queued, answer what
        completed, and make sure ``poll`` runs at its deadline."""
        broker = self.brokers[node_id]
        node = broker.node
        if node is None:
            return
        now = self.now_ms
        deadline = node.poll(now_ms=now)  # first: what it queues goes out below
        for _ in range(100):
            if node.needs_group_commit:
                node.group_commit(now_ms=now)
            outbound = node.take_outbound()
            completions = node.take_completions()
            if not outbound and not completions:
                break
            for out in outbound:
                self.network.send(Envelope(node_id, out.destination, request=out.request, tag=out.tag,
                                           one_way=out.one_way, incarnation=broker.incarnation))
                if not out.one_way:
                    self._arm_timeout(node_id, out.tag, out.request)
            for op_id, response in completions:
                self._answer(node_id, op_id, response)
        self._schedule_poll(node_id, deadline)

    def _schedule_poll(self, node_id: int, deadline: int) -> None:
        broker = self.brokers[node_id]
        if broker.poll_at is not None and broker.poll_at <= deadline and broker.poll_at >= self.now_ms:
            return
        broker.poll_at = deadline
        incarnation = broker.incarnation

        def fire() -> None:
            if broker.node is None or broker.incarnation != incarnation or broker.poll_at != deadline:
                return
            broker.poll_at = None
            self._after(node_id)
            self._observe()
        self.scheduler.schedule(max(deadline, self.now_ms + 1), fire)

    def _arm_timeout(self, node_id: int, tag: int, request: Request) -> None:
        broker = self.brokers[node_id]
        generation = broker.incarnation
        broker.waiting[tag] = generation
        wait = getattr(request, "max_wait_ms", 0) or 0

        def expire() -> None:
            if broker.node is not None and broker.incarnation == generation and tag in broker.waiting:
                del broker.waiting[tag]
                broker.node.on_response(tag, None, now_ms=self.now_ms)
                self._after(node_id)
        self.scheduler.schedule(self.now_ms + REQUEST_TIMEOUT_MS + wait, expire)

    def _answer(self, node_id: int, op_id: int, response: Response) -> None:
        origin = self.brokers[node_id].ops.pop(op_id, None)
        if origin is None:
            return
        source, tag, incarnation = origin
        self.network.send(Envelope(node_id, source, response=response, tag=tag, incarnation=incarnation))

    def _arrive(self, envelope: Envelope) -> None:
        if envelope.destination_id not in self.brokers:  # a client node
            callback = self._client_waiting.pop(envelope.tag, None)
            if callback is not None:
                callback(envelope.response)
            self._observe()
            return
        broker = self.brokers[envelope.destination_id]
        node = broker.node
        if node is None:
            return  # the sender's timeout fails the request
        if envelope.request is None:  # an answer to one of our requests
            if envelope.incarnation == broker.incarnation and broker.waiting.pop(envelope.tag, None) is not None:
                node.on_response(envelope.tag, envelope.response, now_ms=self.now_ms)
        else:
            header = RequestHeader(type(envelope.request).API_KEY, 0, 0, f"node-{envelope.source_id}")  # type: ignore[attr-defined]
            outcome = node.handle(header, envelope.request, now_ms=self.now_ms)
            if isinstance(outcome, Pending):
                broker.ops[outcome.op_id] = (envelope.source_id, envelope.tag, envelope.incarnation)
                if outcome.timeout_ms is not None:
                    self._expire_later(envelope.destination_id, outcome.op_id, outcome.timeout_ms)
            elif outcome is not None and not envelope.one_way:
                self.network.send(Envelope(envelope.destination_id, envelope.source_id, response=outcome,
                                           tag=envelope.tag, incarnation=envelope.incarnation))
        self._after(envelope.destination_id)
        self._observe()

    def _expire_later(self, node_id: int, op_id: int, timeout_ms: int) -> None:
        broker = self.brokers[node_id]
        incarnation = broker.incarnation

        def fire() -> None:
            if broker.node is not None and broker.incarnation == incarnation and op_id in broker.ops:
                broker.node.expire(op_id, now_ms=self.now_ms)
                self._after(node_id)
        self.scheduler.schedule(self.now_ms + timeout_ms, fire)

    def _observe(self) -> None:
        for observer in self.observers:
            observer(self)

    # ------------------------------------------------------------ clients

    def request(self, destination: int, request: Request, callback: Callable[[Response | None], None], *,
                source_id: int = CLIENT_ID, timeout_ms: int | None = None) -> None:
        """Send ``request`` from the client node ``source_id`` to broker ``destination``;
        ``callback`` gets the answer, or None after ``timeout_ms`` (default: the shell's
        request timeout plus the request's own ``timeout_ms``) if none came."""
        assert source_id not in self.brokers, f"client node {source_id} is a broker's id"
        tag = self._next_tag
        self._next_tag += 1
        self._client_waiting[tag] = callback
        self.network.send(Envelope(source_id, destination, request=request, tag=tag))

        def expire() -> None:
            pending = self._client_waiting.pop(tag, None)
            if pending is not None:
                pending(None)
        if timeout_ms is None:
            timeout_ms = REQUEST_TIMEOUT_MS + (getattr(request, "timeout_ms", 0) or 0)
        self.scheduler.schedule(self.now_ms + timeout_ms, expire)

    def _client_send(self, destination: int, request: Request, callback: Callable[[Response | None], None]) -> None:
        self.request(destination, request, callback)

    def controller(self) -> int | None:
        ids = {self.node(i).controller_id for i in self.live()}
        ids.discard(-1)
        ids.discard(None)  # type: ignore[arg-type]
        return ids.pop() if len(ids) == 1 else None

    def is_ready(self) -> bool:
        return all(self.node(i).is_ready for i in self.live()) and self.controller() is not None

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                     configs: dict[str, str] | None = None) -> ErrorCode:
        answers: list[Response | None] = []
        request = CreateTopicsRequest([CreatableTopic(name, partitions, replication_factor, configs or {})])
        self._client_send(self.live()[0], request, answers.append)
        self.run_until(lambda: bool(answers), timeout_ms=30_000)
        response = answers[0]
        if response is None:
            return ErrorCode.REQUEST_TIMED_OUT
        code = ErrorCode(response.topics[0].error_code)  # type: ignore[attr-defined]
        if code == ErrorCode.NONE:
            self.run_until(lambda: all(self.node(i).image.topic(name) is not None for i in self.live()),
                           timeout_ms=10_000)
        return code

    def leader_of(self, tp: TopicPartition) -> int | None:
        """The leader as the highest-epoch view among live brokers has it."""
        best = None
        for i in self.live():
            state = self.node(i).image.partition(tp)
            if state is not None and (best is None or state.leader_epoch > best.leader_epoch):
                best = state
        return None if best is None or best.leader < 0 else best.leader

    def produce(self, tp: TopicPartition, value: bytes, *, on_done: Callable[[ErrorCode], None] | None = None,
                timeout_ms: int = 10_000) -> bool:
        """Send one acks=all record to the leader; False if no leader is known."""
        leader = self.leader_of(tp)
        if leader is None or leader not in self.live():
            return False
        batch = build_batch([(None, value, (), self.now_ms)])
        request = ProduceRequest(-1, timeout_ms, [ProduceTopicData(tp.topic, [ProducePartitionData(tp.partition, batch)])])

        def done(response: Response | None) -> None:
            code = ErrorCode.REQUEST_TIMED_OUT
            if isinstance(response, ProduceResponse):
                part = response.topics[0].partitions[0]
                code = ErrorCode(part.error_code)
                if code == ErrorCode.NONE:
                    self.acks.append(Ack(tp, value, part.base_offset))
            if on_done is not None:
                on_done(code)
        self._client_send(leader, request, done)
        return True

    # ------------------------------------------------------------ running and reading

    def run_until(self, condition: Callable[[], bool], *, timeout_ms: int) -> bool:
        return self.scheduler.run_until(condition, until_ms=self.now_ms + timeout_ms)

    def run_for(self, ms: int) -> None:
        self.scheduler.run_for(ms)

    def records(self, node_id: int, tp: TopicPartition, *, below: int | None = None) -> list[tuple[int, bytes]]:
        """(offset, value) of every record the broker's log holds (below ``below``)."""
        partition = self.node(node_id).partitions.get(tp)
        if partition is None:
            return []
        log = partition.log
        end = log.log_end_offset if below is None else min(below, log.log_end_offset)
        out: list[tuple[int, bytes]] = []
        offset = log.log_start_offset
        while offset < end:
            data = log.read(offset, max_bytes=1 << 20, max_offset=end).records
            if not data:
                break
            for record in iter_records(data):
                if record.offset < end:
                    out.append((record.offset, bytes(record.value or b"")))
                offset = record.offset + 1
        return out
