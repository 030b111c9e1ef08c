"""Transactions on the broker: the ``TransactionCoordinator`` shards this broker runs,
and the partition leader's side of WriteTxnMarkers.

A transactional id lives in partition ``transaction_partition(id, n)`` of
``__transaction_state`` (created on the first FindCoordinator with key type 1) and is
served by that partition's leader; becoming leader replays the partition's local log
into a new coordinator (``TransactionCoordinator.replay``), losing it drops the shard
and answers its parked requests NOT_COORDINATOR.

- **Writes.** A ``TxnResult`` record is appended by the leader and the answer held
  until the high watermark passes it (acks=all); only then does the coordinator
  replay it, so its state is always what the replicated log says.
- **Markers.** For each PrepareCommit/PrepareAbort the coordinator owes, one
  WriteTxnMarkers per partition leader (this broker's own partitions included, by
  the same path); a partition whose leader is unknown or that answered an error is
  retried after ``MARKER_RETRY_MS``; a deleted topic counts as done. They go on a
  connection of their own (``TXN_MARKER_LANE``), never behind or ahead of this
  broker's replica fetches to that leader, whose progress their answer waits for. When every
  partition holds its marker, the CompleteCommit/CompleteAbort record is written.
- **Leader side.** WriteTxnMarkers appends one control batch per partition
  (``Log.append_markers_as_leader``: a marker of a stale epoch is refused) and
  answers once replicated. A marker on ``__consumer_offsets`` also settles the
  transactional offsets held by the group coordinator (``mq.broker.txn_offsets``).
- **Timers.** ``poll`` aborts transactions past their timeout and sends markers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mq.broker.admin import INTERNAL_TOPICS
from mq.broker.offsets_topic import OffsetsTopicCreator, coordinator_address
from mq.broker.outbound import TXN_MARKER_LANE, Outbound, Pending
from mq.broker.shard_leadership import republished
from mq.broker.txn_offsets import TxnOffsets
from mq.coordinator.records import OFFSETS_TOPIC, CoordinatorRecord
from mq.coordinator.txn_coordinator import MarkerJob, TransactionCoordinator, TxnConfig, TxnResult
from mq.coordinator.txn_state import (
    TRANSACTION_STATE_TOPIC,
    decode_txn_record,
    transaction_partition,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.batch_format import iter_batches
from mq.protocol.control_batch import ControlType, build_marker
from mq.protocol.group_messages import FindCoordinatorRequest, FindCoordinatorResponse
from mq.protocol.messages import ApiKey, CreatableTopic, CreateTopicsRequest, Request, Response
from mq.protocol.producer_messages import InitProducerIdRequest, InitProducerIdResponse
from mq.protocol.record_batch import build_batch, decode_records
from mq.protocol.txn_messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnMarkerResult,
    TxnOffsetCommitRequest,
    TxnPartitionResult,
    TxnTopic,
    TxnTopicResult,
    WritableTxnMarker,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from mq.replication import ProduceCompletion

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode
    from mq.broker.partition import Partition
    from mq.broker.replicas import PublishResult

TXN_APIS = frozenset({
    ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.WRITE_TXN_MARKERS,
    ApiKey.TXN_OFFSET_COMMIT,
})
"""Requests the broker's ``TxnService`` serves (and InitProducerId with a transactional id)."""
MARKER_RETRY_MS = 200
READ_CHUNK_BYTES = 1024 * 1024
_DONE_CODES = (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC)


def txn_topic_request(node: BrokerNode) -> CreateTopicsRequest:
    config = node.config
    rf = max(1, min(config.transaction_state_log_replication_factor, len(node.image.brokers)))
    configs = {"cleanup.policy": "compact", "min.insync.replicas": "2" if rf >= 3 else "1"}
    return CreateTopicsRequest([CreatableTopic(TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions,
                                               rf, configs)])


@dataclass(slots=True)
class TxnShard:
    partition: Partition
    coordinator: TransactionCoordinator


@dataclass(slots=True)
class _Write:
    shard: TxnShard
    transactional_id: str
    result: TxnResult
    answer: Callable[[TxnResult], None] | None


@dataclass(slots=True)
class _MarkerJobState:
    job: MarkerJob
    remaining: set[TopicPartition]
    in_flight: dict[int, set[TopicPartition]] = field(default_factory=dict)
    retry_at_ms: int = 0


@dataclass(slots=True)
class _MarkerAppend:
    """A WriteTxnMarkers this broker leads: partitions waiting for the high watermark."""

    deliver: Callable[[Response], None]
    request: WriteTxnMarkersRequest
    codes: dict[tuple[int, TopicPartition], ErrorCode]
    waiting: dict[int, tuple[int, TopicPartition]]  # purgatory op id -> (marker index, tp)


class TxnService:
    def __init__(self, node: BrokerNode, *, new_op_id: Callable[[], int],
                 complete: Callable[[int, Response], None]) -> None:
        self.node = node
        self._new_op_id = new_op_id
        self._complete = complete
        self.creator = OffsetsTopicCreator(node, txn_topic_request)
        self.config = TxnConfig(max_timeout_ms=node.config.transaction_max_timeout_ms,
                                offsets_partitions=node.config.offsets_topic_num_partitions)
        self.shards: dict[int, TxnShard] = {}
        self._writes: dict[int, _Write] = {}
        self._jobs: dict[tuple[int, str, int], _MarkerJobState] = {}
        self._tags: dict[int, tuple[int, str, int]] = {}  # outbound tag -> job key
        self._outbound: list[Outbound] = []
        self._appends: dict[int, _MarkerAppend] = {}  # purgatory op id -> the append it belongs to
        self._next_expiry_ms = 0
        self.offsets = TxnOffsets(node, new_op_id=new_op_id, complete=complete)  # type: ignore[arg-type]
        self.on_offsets_marker: Callable[[TopicPartition, int, bool, int], None] | None = self.offsets.on_marker

    # ------------------------------------------------------------ routing

    def find_coordinator(self, request: FindCoordinatorRequest, *, now_ms: int) -> FindCoordinatorResponse:
        if not request.key:
            return FindCoordinatorResponse(ErrorCode.INVALID_REQUEST, error_message="the transactional id is empty")
        topic = self.node.image.topic(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.partitions:
            self.creator.ensure(now_ms=now_ms)
            why = f" (last attempt failed: {self.creator.last_error})" if self.creator.last_error else ""
            return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                           error_message=f"creating {TRANSACTION_STATE_TOPIC}{why}; retry")
        return coordinator_address(self.node, TRANSACTION_STATE_TOPIC,
                                   transaction_partition(request.key, len(topic.partitions)))

    def _route(self, transactional_id: str) -> TxnShard | tuple[ErrorCode, str]:
        topic = self.node.image.topic(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC} does not exist yet"
        index = transaction_partition(transactional_id, len(topic.partitions))
        shard = self.shards.get(index)
        if shard is None:
            return ErrorCode.NOT_COORDINATOR, (
                f"broker {self.node.node_id} is not the transaction coordinator of {transactional_id!r} "
                f"({TRANSACTION_STATE_TOPIC}-{index}); send FindCoordinator with key_type 1")
        return shard

    # ------------------------------------------------------------ requests

    def handle_for_node(self, request: Request, now_ms: int) -> Response | Pending:
        return self.handle(request, now_ms=now_ms)

    def handle(self, request: Request, *, now_ms: int) -> Response | Pending:
        op_id = self._new_op_id()
        if isinstance(request, WriteTxnMarkersRequest):
            self.write_markers(request, lambda response: self._complete(op_id, response), now_ms=now_ms)
            return Pending(op_id, None)
        if isinstance(request, TxnOffsetCommitRequest):
            answer = self.offsets.handle(request, op_id=op_id, now_ms=now_ms)
            return Pending(op_id, None) if answer is None else answer
        tid = request.transactional_id  # type: ignore[attr-defined]
        reply = _replier(request)
        routed = self._route(tid or "")
        if not isinstance(routed, TxnShard):
            return reply(TxnResult(routed[0], routed[1]))
        coordinator = routed.coordinator
        if isinstance(request, InitProducerIdRequest):
            assert tid is not None
            try:
                result = coordinator.init_producer_id(
                    tid, request.transaction_timeout_ms, now_ms=now_ms, new_producer_id=self._new_producer_id,
                    producer_id=request.producer_id, producer_epoch=request.producer_epoch)
            except MqError as err:
                result = TxnResult(err.code, err.message)
        elif isinstance(request, AddPartitionsToTxnRequest):
            tps = [TopicPartition(t.name, p) for t in request.topics for p in t.partitions]
            unknown = [tp for tp in tps if self.node.image.topic(tp.topic) is None or tp.topic in INTERNAL_TOPICS]
            if unknown:
                result = TxnResult(ErrorCode.UNKNOWN_TOPIC,
                                   f"{unknown[0].topic}: no such topic (or an internal one) to write in a transaction")
            else:
                result = coordinator.add_partitions(tid, request.producer_id, request.producer_epoch, tps,
                                                    now_ms=now_ms)
        elif isinstance(request, AddOffsetsToTxnRequest):
            result = coordinator.add_offsets(tid, request.producer_id, request.producer_epoch, request.group_id,
                                             now_ms=now_ms)
        elif isinstance(request, EndTxnRequest):
            result = coordinator.end_txn(tid, request.producer_id, request.producer_epoch, request.committed,
                                         now_ms=now_ms)
        else:
            raise MqError(ErrorCode.UNSUPPORTED_API, f"{type(request).__name__} is not a transaction request")
        if not result.records:
            return reply(result)
        self._write(routed, tid, result, lambda r: self._complete(op_id, reply(r)), now_ms)
        return Pending(op_id, None)

    def _new_producer_id(self) -> int:
        manager = self.node.producer_ids
        manager.on_registered(self.node.broker_epoch)
        return manager.generate()

    # ------------------------------------------------------------ writes to __transaction_state

    def _write(self, shard: TxnShard, tid: str, result: TxnResult, answer: Callable[[TxnResult], None] | None,
               now_ms: int) -> None:
        partition = shard.partition
        state = partition.leader
        refused = None
        if state is None or self.shards.get(partition.tp.partition) is not shard:
            refused = ErrorCode.NOT_COORDINATOR
        elif state.check_produce(-1) != ErrorCode.NONE:
            refused = ErrorCode.COORDINATOR_NOT_AVAILABLE
        info = None
        if refused is None:
            assert state is not None
            batch = build_batch([(r.key, r.value, (), now_ms) for r in result.records])
            try:
                info = partition.log.append_as_leader(batch, leader_epoch=state.leader_epoch, now_ms=now_ms)
            except MqError:
                refused = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if refused is not None or info is None:
            shard.coordinator.fail(tid)
            if answer is not None:
                answer(TxnResult(refused or ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 "the transaction log write failed; retry"))
            return
        op_id = self._new_op_id()
        self._writes[op_id] = _Write(shard, tid, result, answer)
        self.node.appended(partition, now_ms=now_ms)
        self.node.await_high_watermark(op_id, partition.tp, info.last_offset + 1,
                                       deadline_ms=now_ms + self.node.config.offsets_commit_timeout_ms)

    def owns(self, op_id: int) -> bool:
        return op_id in self._writes or op_id in self._appends or self.offsets.owns(op_id)

    def on_write_done(self, completion: ProduceCompletion) -> None:
        if self.offsets.owns(completion.request_id):
            self.offsets.on_write_done(completion)
            return
        code = next(iter(completion.errors.values()), ErrorCode.NONE)
        append = self._appends.pop(completion.request_id, None)
        if append is not None:
            self._marker_replicated(append, completion.request_id, code)
            return
        write = self._writes.pop(completion.request_id, None)
        if write is None:
            return
        if code == ErrorCode.NONE:
            write.shard.coordinator.replay_all(write.result.records)
            if write.answer is not None:
                write.answer(write.result)
            self._send_markers(self.node._now_ms)  # a Prepare* owes markers: send them now, not at the next poll
        else:
            write.shard.coordinator.fail(write.transactional_id)
            if write.answer is not None:
                write.answer(TxnResult(ErrorCode.COORDINATOR_NOT_AVAILABLE if code != ErrorCode.NOT_LEADER
                                       else ErrorCode.NOT_COORDINATOR, f"the transaction log write failed: {code.name}"))

    # ------------------------------------------------------------ markers: the coordinator's side

    def _send_markers(self, now_ms: int) -> None:
        for index in sorted(self.shards):
            shard = self.shards[index]
            for job in shard.coordinator.pending_markers():
                key = (index, job.transactional_id, job.producer_epoch)
                state = self._jobs.get(key)
                if state is None:
                    state = self._jobs[key] = _MarkerJobState(job, set(job.partitions))
                if state.in_flight or now_ms < state.retry_at_ms:
                    continue
                by_leader: dict[int, list[TopicPartition]] = {}
                for tp in sorted(state.remaining):
                    topic = self.node.image.topic(tp.topic)
                    if topic is None or tp.partition not in topic.partitions:
                        state.remaining.discard(tp)  # deleted: nothing to mark
                        continue
                    leader = topic.partitions[tp.partition].leader
                    if leader < 0:
                        state.retry_at_ms = now_ms + MARKER_RETRY_MS
                        continue
                    by_leader.setdefault(leader, []).append(tp)
                for leader, tps in sorted(by_leader.items()):
                    tag = self._new_op_id()
                    state.in_flight[tag] = set(tps)
                    self._tags[tag] = key
                    request = _markers_request(job, tps)
                    if leader == self.node.node_id:
                        self.write_markers(request, lambda r, t=tag: self.on_response(t, r, now_ms=now_ms),
                                           now_ms=now_ms)
                    else:
                        # Not on a replica fetch lane: the answer waits for our own fetches.
                        self._outbound.append(Outbound(leader, request, tag, lane=TXN_MARKER_LANE))
                self._maybe_complete(key, now_ms)

    def take_outbound(self) -> list[Outbound]:
        out, self._outbound = self._outbound, []
        return out

    def owns_tag(self, tag: int) -> bool:
        return tag in self._tags

    def on_response(self, tag: int, response: Response | None, *, now_ms: int) -> None:
        key = self._tags.pop(tag, None)
        state = None if key is None else self._jobs.get(key)
        if key is None or state is None:
            return
        sent = state.in_flight.pop(tag, set())
        done: set[TopicPartition] = set()
        if isinstance(response, WriteTxnMarkersResponse):
            for marker in response.markers:
                for topic in marker.topics:
                    for p in topic.partitions:
                        if ErrorCode(p.error_code) in _DONE_CODES:
                            done.add(TopicPartition(topic.name, p.partition))
        state.remaining -= done & sent
        if sent - done:
            state.retry_at_ms = now_ms + MARKER_RETRY_MS
        self._maybe_complete(key, now_ms)

    def _maybe_complete(self, key: tuple[int, str, int], now_ms: int) -> None:
        state = self._jobs.get(key)
        if state is None or state.remaining or state.in_flight:
            return
        del self._jobs[key]
        shard = self.shards.get(key[0])
        if shard is None:
            return
        result = shard.coordinator.markers_written(key[1], key[2], now_ms=now_ms)
        if result.records:
            self._write(shard, key[1], result, None, now_ms)

    # ------------------------------------------------------------ markers: the leader's side

    def write_markers(self, request: WriteTxnMarkersRequest, deliver: Callable[[Response], None], *,
                      now_ms: int) -> None:
        append = _MarkerAppend(deliver, request, {}, {})
        for i, marker in enumerate(request.markers):
            for topic in marker.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p)
                    append.codes[(i, tp)] = self._append_marker(append, i, tp, marker, now_ms)
        if not append.waiting:
            deliver(_markers_response(append))

    def _append_marker(self, append: _MarkerAppend, index: int, tp: TopicPartition, marker: WritableTxnMarker,
                       now_ms: int) -> ErrorCode:
        if self.node.image.topic(tp.topic) is None:
            return ErrorCode.UNKNOWN_TOPIC
        partition = self.node.partitions.get(tp)
        state = None if partition is None else partition.leader
        if partition is None or state is None:
            return ErrorCode.NOT_LEADER
        kind = ControlType.COMMIT if marker.committed else ControlType.ABORT
        batch = build_marker(marker.producer_id, marker.producer_epoch, kind,
                             coordinator_epoch=marker.coordinator_epoch, timestamp_ms=now_ms)
        try:
            info = partition.log.append_markers_as_leader(batch, leader_epoch=state.leader_epoch, now_ms=now_ms)
        except MqError as err:
            return err.code
        if self.on_offsets_marker is not None and tp.topic == OFFSETS_TOPIC:
            self.on_offsets_marker(tp, marker.producer_id, marker.committed, info.first_offset)
        op_id = self._new_op_id()
        append.waiting[op_id] = (index, tp)
        self._appends[op_id] = append
        self.node.appended(partition, now_ms=now_ms)
        self.node.await_high_watermark(op_id, tp, info.last_offset + 1,
                                       deadline_ms=now_ms + self.node.config.offsets_commit_timeout_ms)
        return ErrorCode.NONE

    def _marker_replicated(self, append: _MarkerAppend, op_id: int, code: ErrorCode) -> None:
        index, tp = append.waiting.pop(op_id)
        append.codes[(index, tp)] = code
        if not append.waiting:
            append.deliver(_markers_response(append))

    # ------------------------------------------------------------ leadership and timers

    def on_publish(self, result: PublishResult) -> None:
        for tp, partition, unload in republished(
                result, TRANSACTION_STATE_TOPIC, self.node.partitions, self.shards,
                stale=lambda shard, led: shard.coordinator.coordinator_epoch != led.leader.leader_epoch):
            if unload:
                self._unload(tp.partition)
            if partition is not None and tp.partition not in self.shards:
                assert partition.leader is not None
                coordinator = TransactionCoordinator(tp.partition, self.config,
                                                     coordinator_epoch=partition.leader.leader_epoch)
                _replay_log(partition, coordinator)
                self.shards[tp.partition] = TxnShard(partition, coordinator)

    def _unload(self, index: int) -> None:
        shard = self.shards.pop(index, None)
        if shard is None:
            return
        for op_id, write in list(self._writes.items()):
            if write.shard is shard:
                del self._writes[op_id]
                if write.answer is not None:
                    write.answer(TxnResult(ErrorCode.NOT_COORDINATOR, "the transaction coordinator moved; retry"))
        for key in [k for k in self._jobs if k[0] == index]:
            del self._jobs[key]

    def poll(self, *, now_ms: int) -> int | None:
        deadlines = []
        creation = self.creator.poll(now_ms=now_ms)
        if creation is not None:
            deadlines.append(creation)
        if now_ms >= self._next_expiry_ms:
            self._next_expiry_ms = now_ms + self.node.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            for shard in list(self.shards.values()):
                for result in shard.coordinator.expire(now_ms=now_ms):
                    tid = _tid_of(result)
                    self._write(shard, tid, result, None, now_ms)
        self._send_markers(now_ms)
        if self.shards:
            deadlines.append(self._next_expiry_ms)
        if self._jobs:
            deadlines.append(min(s.retry_at_ms for s in self._jobs.values()) if self._jobs else now_ms)
        return min(deadlines) if deadlines else None


def _tid_of(result: TxnResult) -> str:
    return decode_txn_record(result.records[0])[0]


def _replay_log(partition: Partition, coordinator: TransactionCoordinator) -> None:
    log = partition.log
    cursor, end = log.log_start_offset, log.log_end_offset
    while cursor < end:
        data = log.read(cursor, max_bytes=READ_CHUNK_BYTES).records
        if not data:
            break
        with memoryview(data) as view:
            for pos, header in iter_batches(view):
                if not header.is_control:
                    for record in decode_records(view[pos:pos + header.size]):
                        if record.offset >= cursor and record.key is not None:
                            coordinator.replay(CoordinatorRecord(bytes(record.key), record.value))
                cursor = max(cursor, header.next_offset)


def _markers_request(job: MarkerJob, tps: list[TopicPartition]) -> WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return WriteTxnMarkersRequest([WritableTxnMarker(
        job.producer_id, job.producer_epoch, job.commit, [TxnTopic(t, ps) for t, ps in sorted(by_topic.items())],
        job.coordinator_epoch)])


def _markers_response(append: _MarkerAppend) -> WriteTxnMarkersResponse:
    out = []
    for i, marker in enumerate(append.request.markers):
        topics = [TxnTopicResult(t.name, [TxnPartitionResult(p, append.codes[(i, TopicPartition(t.name, p))])
                                          for p in t.partitions]) for t in marker.topics]
        out.append(TxnMarkerResult(marker.producer_id, topics))
    return WriteTxnMarkersResponse(out)


def _replier(request: Request) -> Callable[[TxnResult], Response]:
    """How a ``TxnResult`` answers ``request``."""
    if isinstance(request, InitProducerIdRequest):
        return lambda r: InitProducerIdResponse(r.error, r.producer_id, r.producer_epoch, r.message)
    if isinstance(request, AddPartitionsToTxnRequest):
        return lambda r: AddPartitionsToTxnResponse(
            [TxnTopicResult(t.name, [TxnPartitionResult(p, r.error) for p in t.partitions]) for t in request.topics],
            r.message)
    if isinstance(request, AddOffsetsToTxnRequest):
        return lambda r: AddOffsetsToTxnResponse(r.error, r.message)
    if isinstance(request, EndTxnRequest):
        return lambda r: EndTxnResponse(r.error, r.producer_id, r.producer_epoch, r.message)
    raise MqError(ErrorCode.UNSUPPORTED_API, f"{type(request).__name__} is not a transaction request")
