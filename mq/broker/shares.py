"""Share groups on the broker: the ``ShareCoordinator`` shards this broker runs.

A share group lives in partition ``group_partition(group_id, n)`` of
``__share_group_state`` and is served, whole, by that partition's leader (KIP-932
splits this between the group coordinator, the partition leaders and a share
coordinator; mq keeps one owner per group so one log holds its truth). The shape is
``GroupService``'s: FindCoordinator (``key_type`` 2) names the leader and creates the
topic on first use; a shard is built by replaying the local log when leadership
arrives (``Shard`` of ``mq.broker.group_loader``) and dropped when it leaves; a
result's records are appended as one batch and its responses held until the high
watermark passes them. A write that fails reloads the shard from the log, so the
state the coordinator applied ahead of the write cannot outlive it.

The coordinator reads the records it hands out from this broker's replica of each
partition (``LocalShareLog``: leader or follower, below its high watermark); a topic
with no replica here answers SHARE_PARTITION_NOT_HOSTED. In a region whose topics
have a replica on every broker (three brokers, replication factor 3) that never
happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq.broker.group_loader import PendingWrite, Shard
from mq.broker.offsets_topic import CREATE_RETRY_BACKOFF_MS, OffsetsTopicCreator
from mq.broker.outbound import Pending
from mq.broker.shard_leadership import republished
from mq.broker.share_waits import ShareFetchWaits, answer_of
from mq.coordinator import CoordinatorResult, group_partition
from mq.coordinator.share_coordinator import ShareCoordinator, error_response
from mq.coordinator.share_group import ShareConfig
from mq.coordinator.share_partition import SharePartitionConfig
from mq.coordinator.share_records import SHARE_STATE_TOPIC
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol import share_messages as s
from mq.protocol.batch_format import iter_batches
from mq.protocol.codec import RequestHeader
from mq.protocol.group_messages import FindCoordinatorRequest, FindCoordinatorResponse
from mq.protocol.messages import ApiKey, CreatableTopic, CreateTopicsRequest, Request, Response
from mq.protocol.record_batch import build_batch
from mq.protocol.share_messages import (
    SHARE_KEY_TYPE,
    SHARE_REQUESTS,
    ListShareGroupsRequest,
    ListShareGroupsResponse,
)
from mq.replication import ProduceCompletion
from mq.storage import LogCorruptedError

if TYPE_CHECKING:
    from collections.abc import Callable

    from mq.broker.node import BrokerNode
    from mq.broker.replicas import PublishResult

SHARE_APIS = frozenset(cls.API_KEY for cls in SHARE_REQUESTS)
"""Requests the broker's ``ShareService`` serves (and FindCoordinator of key type 2)."""

_READ_BYTES = 1024 * 1024
_CREATE_HEADER = RequestHeader(ApiKey.CREATE_TOPICS, 0, 0, "share-coordinator")


def share_config(config: BrokerConfig) -> ShareConfig:
    return ShareConfig(
        partition=SharePartitionConfig(config.share_record_lock_duration_ms, config.share_delivery_attempt_limit,
                                       config.share_partition_max_record_locks),
        session_timeout_ms=config.share_session_timeout_ms, heartbeat_interval_ms=config.share_heartbeat_interval_ms,
        auto_offset_reset=config.share_auto_offset_reset)


def is_share_request(api_key: int, request: Request) -> bool:
    return api_key in SHARE_APIS or (isinstance(request, FindCoordinatorRequest) and request.key_type == SHARE_KEY_TYPE)


class ShareTopicCreator(OffsetsTopicCreator):
    """At most one CreateTopics for ``__share_group_state`` in flight."""

    def ensure(self, *, now_ms: int) -> None:
        if self.op_id is not None or now_ms < self.retry_after_ms:
            return
        config = self.node.config
        rf = max(1, min(config.share_coordinator_state_topic_replication_factor, len(self.node.image.brokers)))
        request = CreateTopicsRequest([CreatableTopic(
            SHARE_STATE_TOPIC, config.share_coordinator_state_topic_num_partitions, rf,
            {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes),
             "min.insync.replicas": "2" if rf >= 3 else "1"})])
        self.requests_sent += 1
        self.started_ms = now_ms
        outcome = self.node.control.handle(_CREATE_HEADER, request, now_ms=now_ms)
        if isinstance(outcome, Pending):
            self.op_id = outcome.op_id
        elif outcome is not None:
            self._done(outcome, now_ms)


@dataclass(frozen=True, slots=True)
class LocalShareLog:
    """The coordinator's view of this broker's replicas (``ShareLog``)."""

    node: BrokerNode

    def bounds(self, tp: TopicPartition) -> tuple[int, int] | None:
        partition = self.node.partitions.get(tp)
        if partition is None or partition.log.is_offline:
            return None
        return partition.log_start_offset, partition.high_watermark

    def scan(self, tp: TopicPartition, from_offset: int, max_bytes: int) -> tuple[list[tuple[int, int]], int]:
        """A read that fails (offset out of this replica's range, a corrupt or offline
        log) finds nothing: the coordinator hands out nothing new from here."""
        partition = self.node.partitions[tp]
        hwm = partition.high_watermark
        try:
            data = partition.log.read(from_offset, max_bytes=max(1, min(max_bytes, _READ_BYTES)),
                                      max_offset=hwm).records
        except MqError:
            return [], from_offset
        batches: list[tuple[int, int]] = []
        scanned_to = from_offset
        with memoryview(data) as view:
            for _, header in iter_batches(view):
                if header.base_offset >= hwm:
                    break
                if not header.is_control and header.last_offset >= from_offset:
                    batches.append((max(header.base_offset, from_offset), header.last_offset))
                scanned_to = max(scanned_to, header.next_offset)
        return batches, scanned_to

    def read(self, tp: TopicPartition, first_offset: int, last_offset: int) -> bytes:
        partition = self.node.partitions[tp]
        hwm = partition.high_watermark
        chunks: list[bytes] = []
        position = first_offset
        while position <= last_offset and position < hwm:
            try:
                data = partition.log.read(position, max_bytes=_READ_BYTES,
                                          max_offset=min(hwm, last_offset + 1)).records
            except MqError:  # what cannot be read is not delivered: its lock expires, it comes back
                break
            if not data:
                break
            end = 0
            with memoryview(data) as view:
                for pos, header in iter_batches(view):
                    if header.base_offset > last_offset:
                        break
                    end = pos + header.size
                    position = max(position, header.next_offset)
                chunks.append(bytes(view[:end]))
            if end == 0:
                break
        return b"".join(chunks)


@dataclass(frozen=True, slots=True)
class SharePartitionSnapshot:
    """One share-partition of a group this broker coordinates, for metrics."""

    group_id: str
    members: int
    tp: TopicPartition | None  # None: the group has no share-partition yet
    start_offset: int = 0
    end_offset: int = 0
    high_watermark: int = -1
    counts: tuple[tuple[str, int], ...] = ()


class ShareService:
    def __init__(self, node: BrokerNode, *, rng: Rng, new_op_id: Callable[[], int],
                 complete: Callable[[int, Response], None]) -> None:
        self.node = node
        self.config = share_config(node.config)
        self.creator = ShareTopicCreator(node)
        self.log = LocalShareLog(node)
        self._rng = rng
        self._new_op_id = new_op_id
        self._complete = complete
        self._shards: dict[int, Shard] = {}
        self._writes: dict[int, PendingWrite] = {}
        self.waits = ShareFetchWaits()
        self._now_ms = 0
        self._retrying = False

    @property
    def shards(self) -> dict[int, Shard]:
        return self._shards

    def snapshot(self) -> list[SharePartitionSnapshot]:
        out = []
        for index in sorted(self._shards):
            shard = self._shards[index]
            if not shard.loaded:
                continue
            groups = shard.coordinator.groups  # type: ignore[attr-defined]
            for group_id in sorted(groups):
                group = groups[group_id]
                if not group.partitions:
                    out.append(SharePartitionSnapshot(group_id, len(group.members), None))
                for tp, sp in sorted(group.partitions.items()):
                    bounds = self.log.bounds(tp)
                    out.append(SharePartitionSnapshot(group_id, len(group.members), tp, sp.start_offset, sp.end_offset,
                                                      -1 if bounds is None else bounds[1],
                                                      tuple(sorted(sp.counts().items()))))
        return out

    # ------------------------------------------------------------ requests

    def handle(self, request: Request, *, client_id: str, client_host: str, now_ms: int) -> Response | Pending:
        if isinstance(request, FindCoordinatorRequest):
            return self._find(request, now_ms)
        if isinstance(request, ListShareGroupsRequest):
            listed = []
            for _, shard in sorted(self._shards.items()):
                if shard.loaded:
                    result = shard.coordinator.handle(request, request_id=0, client_id=client_id,  # type: ignore[call-arg]
                                                      client_host=client_host, topics={}, log=self.log, now_ms=now_ms)
                    listed.extend(result.responses[0][1].groups)  # type: ignore[attr-defined]
            return ListShareGroupsResponse(ErrorCode.NONE, sorted(listed, key=lambda g: g.group_id))
        if isinstance(request, s.ShareGroupDescribeRequest):
            return self._describe(request, client_id, client_host, now_ms)
        routed = self._route(request.group_id)  # type: ignore[attr-defined]
        if not isinstance(routed, Shard):
            return error_response(request, *routed)
        op_id = self._new_op_id()
        self._now_ms = now_ms
        if isinstance(request, s.ShareFetchRequest):
            self.waits.watch(op_id, request, client_id=client_id, client_host=client_host, now_ms=now_ms)
        result = routed.coordinator.handle(request, request_id=op_id, client_id=client_id,  # type: ignore[call-arg]
                                           client_host=client_host, topics=self.node.groups.topics(), log=self.log,
                                           now_ms=now_ms)
        self._write(routed, result, now_ms)
        if self.waits.parked and not isinstance(request, s.ShareFetchRequest):
            self.retry_parked(now_ms=now_ms)  # acknowledgements may have released records
        return Pending(op_id, None)

    def _answer(self, request_id: int, response: Response) -> None:
        if self.waits.park(request_id, response, now_ms=self._now_ms):
            return
        self._complete(request_id, response)

    def retry_parked(self, *, now_ms: int) -> None:
        """Run the parked fetches again; answer those that got records or ran out of time."""
        if self._retrying:
            return  # a write below woke us again: the outer loop goes on
        self._now_ms = now_ms
        self._retrying = True
        try:
            self._retry_parked(now_ms)
        finally:
            self._retrying = False

    def _retry_parked(self, now_ms: int) -> None:
        for op_id in sorted(self.waits.parked):
            parked = self.waits.parked.get(op_id)
            if parked is None:
                continue
            routed = self._route(parked.request.group_id)
            if not isinstance(routed, Shard):
                self.waits.forget(op_id)
                self._complete(op_id, error_response(parked.request, *routed))
                continue
            result = routed.coordinator.handle(parked.request, request_id=op_id,  # type: ignore[call-arg]
                                               client_id=parked.client_id, client_host=parked.client_host,
                                               topics=self.node.groups.topics(), log=self.log, now_ms=now_ms)
            response = result.responses[0][1]
            got = isinstance(response, s.ShareFetchResponse) and (response.partitions or response.error_code)
            if not got and now_ms < parked.deadline_ms and not result.records:
                continue
            self.waits.forget(op_id)
            self._write(routed, CoordinatorResult(result.records, [(op_id, answer_of(parked, response))]),  # type: ignore[list-item]
                        now_ms)

    def _describe(self, request: s.ShareGroupDescribeRequest, client_id: str, client_host: str,
                  now_ms: int) -> Response:
        """Each group from its own shard (describing writes nothing, so every part is
        answered at once); groups this broker does not coordinate get the routing error."""
        out = []
        for group_id in request.groups:
            routed = self._route(group_id)
            if not isinstance(routed, Shard):
                out.append(s.DescribedShareGroup(group_id, routed[0], routed[1]))
                continue
            result = routed.coordinator.handle(s.ShareGroupDescribeRequest([group_id]), request_id=0,  # type: ignore[call-arg]
                                               client_id=client_id, client_host=client_host,
                                               topics=self.node.groups.topics(), log=self.log, now_ms=now_ms)
            out.extend(result.responses[0][1].groups)  # type: ignore[attr-defined]
        return s.ShareGroupDescribeResponse(out)

    def _find(self, request: FindCoordinatorRequest, now_ms: int) -> FindCoordinatorResponse:
        if not request.key:
            return FindCoordinatorResponse(ErrorCode.INVALID_GROUP_ID, error_message="the group id is empty")
        topic = self.node.image.topic(SHARE_STATE_TOPIC)
        if topic is None or not topic.partitions:
            self.creator.ensure(now_ms=now_ms)
            why = f" (last attempt failed: {self.creator.last_error})" if self.creator.last_error else ""
            return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                           error_message=f"creating {SHARE_STATE_TOPIC}{why}; retry")
        index = group_partition(request.key, len(topic.partitions))
        image = topic.partitions.get(index)
        if image is None or image.leader < 0:
            return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                           error_message=f"{SHARE_STATE_TOPIC}-{index} has no leader yet; retry")
        broker = self.node.image.broker(image.leader)
        if broker is not None:
            return FindCoordinatorResponse(ErrorCode.NONE, image.leader, broker.host, broker.port)
        if image.leader == self.node.node_id:
            return FindCoordinatorResponse(ErrorCode.NONE, image.leader, self.node.advertised_host,
                                           self.node.advertised_port)
        return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       error_message=f"the address of broker {image.leader} is unknown; retry")

    def _route(self, group_id: str) -> Shard | tuple[ErrorCode, str]:
        topic = self.node.image.topic(SHARE_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_STATE_TOPIC} does not exist yet: send FindCoordinator"
        index = group_partition(group_id, len(topic.partitions))
        shard = self._shards.get(index)
        if shard is None:
            return ErrorCode.NOT_COORDINATOR, (f"broker {self.node.node_id} is not the share coordinator of "
                                               f"{group_id!r} ({SHARE_STATE_TOPIC}-{index})")
        if not shard.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading {SHARE_STATE_TOPIC}-{index}; retry"
        return shard

    # ------------------------------------------------------------ writes

    def _write(self, shard: Shard, result: CoordinatorResult, now_ms: int) -> None:
        if not result.records:
            for request_id, response in result.responses:
                self._answer(request_id, response)
            return
        partition = shard.partition
        state = partition.leader
        code = ErrorCode.NONE
        if state is None or self._shards.get(shard.index) is not shard:
            code = ErrorCode.NOT_COORDINATOR
        elif state.check_produce(-1) != ErrorCode.NONE:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if code == ErrorCode.NONE:
            batch = build_batch([(r.key, r.value, (), now_ms) for r in result.records])
            try:
                info = partition.log.append_as_leader(batch, leader_epoch=state.leader_epoch,  # type: ignore[union-attr]
                                                      now_ms=now_ms)
            except MqError as err:
                code = ErrorCode.NOT_COORDINATOR if err.code == ErrorCode.NOT_LEADER else \
                    ErrorCode.COORDINATOR_NOT_AVAILABLE
        if code != ErrorCode.NONE:
            self._failed(shard, result, code, now_ms)
            return
        op_id = self._new_op_id()
        write = PendingWrite(shard, result, info.last_offset + 1)
        self._writes[op_id] = shard.writes[op_id] = write
        self.node.appended(partition, now_ms=now_ms)
        self.node.await_high_watermark(op_id, partition.tp, write.end_offset,
                                       deadline_ms=now_ms + self.node.config.offsets_commit_timeout_ms)

    def _failed(self, shard: Shard, result: CoordinatorResult, code: ErrorCode, now_ms: int) -> None:
        """The coordinator applied what could not be written: answer the error and
        rebuild the shard from its log (if this broker still leads it)."""
        for request_id, _ in result.responses:
            self.waits.forget(request_id)
            self._complete(request_id, _error_for(result, request_id, code))
        if self._shards.get(shard.index) is shard:
            self._unload(shard.index)
            self._maybe_load(shard.partition.tp, now_ms)

    def owns(self, op_id: int) -> bool:
        return op_id in self._writes

    def on_write_done(self, completion: ProduceCompletion) -> None:
        write = self._writes.pop(completion.request_id, None)
        if write is None:
            return
        write.shard.writes.pop(completion.request_id, None)
        code = next(iter(completion.errors.values()), ErrorCode.NONE)
        if code == ErrorCode.NONE:
            for request_id, response in write.result.responses:
                self._answer(request_id, response)
        else:
            self._failed(write.shard, write.result, ErrorCode.COORDINATOR_NOT_AVAILABLE
                         if code != ErrorCode.NOT_LEADER else ErrorCode.NOT_COORDINATOR, self.node._now_ms)

    # ------------------------------------------------------------ leadership

    def on_publish(self, result: PublishResult, *, now_ms: int) -> None:
        for tp, _, unload in republished(result, SHARE_STATE_TOPIC, self.node.partitions, self._shards):
            if unload:
                self._unload(tp.partition)
            self._maybe_load(tp, now_ms)
        self._load()

    def _maybe_load(self, tp: TopicPartition, now_ms: int) -> None:
        partition = self.node.partitions.get(tp)
        if partition is None or partition.leader is None or tp.partition in self._shards:
            return
        coordinator = ShareCoordinator(tp.partition, self.config, rng=self._rng.fork("shard", tp.partition))
        log = partition.log
        self._shards[tp.partition] = Shard(partition, coordinator, partition.leader.leader_epoch,  # type: ignore[arg-type]
                                           log.log_end_offset, log.log_start_offset)

    def _unload(self, index: int) -> None:
        shard = self._shards.pop(index, None)
        if shard is None:
            return
        for op_id in sorted(shard.writes):
            write = self._writes.pop(op_id)
            for request_id, _ in write.result.responses:
                self.waits.forget(request_id)
                self._complete(request_id, _error_for(write.result, request_id, ErrorCode.NOT_COORDINATOR))
        shard.writes.clear()

    def _load(self) -> bool:
        loading = False
        for index in sorted(self._shards):
            shard = self._shards[index]
            if shard.loaded:
                continue
            try:
                done = shard.load_some()
                if done:
                    _ = shard.coordinator.groups  # type: ignore[attr-defined]  # decode the last snapshots now
                loading |= not done
            except LogCorruptedError as err:
                self.node.report_corruption(shard.partition.tp, err)
                self._shards.pop(index)
            except MqError as err:
                self.node.report_storage_error(shard.partition.tp, err)
                self._shards.pop(index)
        return loading

    # ------------------------------------------------------------ timers

    def poll(self, *, now_ms: int) -> int | None:
        if self.waits.parked:
            self.retry_parked(now_ms=now_ms)
        deadlines: list[int] = []
        waits = self.waits.next_deadline_ms(now_ms)
        if waits is not None:
            deadlines.append(waits)
        if self._load():
            deadlines.append(now_ms)
        creation = self.creator.poll(now_ms=now_ms)
        if creation is not None:
            deadlines.append(creation)
        for index in sorted(self._shards):
            shard = self._shards.get(index)
            if shard is not None and shard.loaded:
                self._write(shard, shard.coordinator.poll(now_ms=now_ms), now_ms)  # type: ignore[call-arg]
        for shard in self._shards.values():
            if shard.loaded:
                deadline = shard.coordinator.next_deadline_ms()
                if deadline is not None:
                    deadlines.append(max(deadline, now_ms + 1))
        return min(deadlines) if deadlines else None


def _error_for(result: CoordinatorResult, request_id: int, code: ErrorCode) -> Response:
    """An error answer of the same API as the response the result held."""
    response = next(r for i, r in result.responses if i == request_id)
    message = f"the share coordinator could not write its state ({code.name}); retry"
    if isinstance(response, s.ShareGroupHeartbeatResponse):
        return s.ShareGroupHeartbeatResponse(code, message, member_id=response.member_id)
    if isinstance(response, s.ShareFetchResponse):
        return s.ShareFetchResponse(code, message)
    if isinstance(response, s.ShareAcknowledgeResponse):
        return s.ShareAcknowledgeResponse(code, message)
    if isinstance(response, s.DeleteShareGroupsResponse):
        return s.DeleteShareGroupsResponse(code, message)
    return response


__all__ = ["CREATE_RETRY_BACKOFF_MS", "SHARE_APIS", "ShareService", "is_share_request"]
