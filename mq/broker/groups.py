"""Consumer groups on the broker: the ``GroupCoordinator`` shards this broker runs.

A group lives in partition ``group_partition(group_id, n)`` of ``__consumer_offsets``
and is served by that partition's leader. This module connects the sans-IO
coordinator (``mq.coordinator``) to the broker:

- **Routing.** FindCoordinator names the leader (``mq.broker.offsets_topic``, which
  also creates the topic on first use). A group request goes to the shard of its
  group's partition if this broker leads it and has loaded it; else NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS while loading, COORDINATOR_NOT_AVAILABLE while the
  topic does not exist. Requests naming groups of several shards (DescribeGroups,
  DeleteGroups) are split and their answers merged; ListGroups asks every shard.
- **Shards follow leadership.** Becoming leader of an offsets partition builds a
  coordinator and replays the local log (``mq.broker.group_loader``); losing it
  unloads the shard: its parked requests and unacknowledged writes are answered
  NOT_COORDINATOR.
- **Writes.** A ``CoordinatorResult`` with records is appended as one batch by the
  leader (with its leader epoch), and its responses are held until the high
  watermark passes the batch (the acks=all wait: ``ProducePurgatory``); then
  ``coordinator.confirm`` makes its offset commits visible and the responses go out.
  When the append fails (below min.insync.replicas: COORDINATOR_NOT_AVAILABLE),
  leadership moves (NOT_COORDINATOR) or ``offsets.commit.timeout.ms`` passes
  (REQUEST_TIMED_OUT), ``coordinator.fail`` drops them and gives the error answers.
- **Timers.** ``poll`` loads shards a slice at a time and runs every coordinator's
  timers (session timeouts, rebalance deadlines, offset expiry) with the topics of
  the metadata image (internal topics excluded).

A request the coordinator parks (a JoinGroup waiting for the rebalance, a commit
waiting for replication) returns ``Pending`` from ``BrokerNode.handle``; its answer
comes out of ``take_completions`` like a long-poll fetch's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq.broker.admin import INTERNAL_TOPICS
from mq.broker.group_loader import PendingWrite, Shard
from mq.broker.group_requests import MULTI_GROUP, SINGLE_GROUP, Fanout, error_response, part_of
from mq.broker.offsets_topic import OffsetsTopicCreator, find_coordinator
from mq.broker.outbound import Pending
from mq.broker.shard_leadership import republished
from mq.broker.txn_offsets import unstable_offsets
from mq.coordinator import (
    OFFSETS_TOPIC,
    CoordinatorResult,
    GroupConfig,
    GroupCoordinator,
    group_partition,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.metadata.image import MetadataImage
from mq.protocol.group_messages import FindCoordinatorRequest, ListGroupsRequest, OffsetFetchRequest
from mq.protocol.messages import Request, Response
from mq.protocol.record_batch import build_batch
from mq.replication import ProduceCompletion
from mq.storage import LogCorruptedError

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode
    from mq.broker.replicas import PublishResult

_WRITE_FAILURES = {
    ErrorCode.NOT_LEADER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REQUEST_TIMED_OUT,
}
"""The error a client gets for a write that did not commit (Kafka maps these the same
way, except that a timeout stays REQUEST_TIMED_OUT here)."""


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """One group this broker coordinates, for metrics."""

    group_id: str
    state: str
    members: int
    offsets: dict[TopicPartition, int]


class GroupService:
    def __init__(self, node: BrokerNode, *, rng: Rng, new_op_id: Callable[[], int],
                 complete: Callable[[int, Response], None]) -> None:
        """``new_op_id``: the node's op id sequence; ``complete(op_id, response)``
        queues an answer for ``take_completions``."""
        self.node = node
        self._new_op_id = new_op_id
        self.config = GroupConfig.from_broker(node.config)
        self.creator = OffsetsTopicCreator(node)
        self._rng = rng
        self._complete = complete
        self._shards: dict[int, Shard] = {}  # offsets partition -> shard (loading or loaded)
        self._writes: dict[int, PendingWrite] = {}  # op id -> write waiting for the high watermark
        self._fanouts: dict[int, Fanout] = {}  # part request id -> the split request
        self._topics_image: MetadataImage | None = None
        self._topics: dict[str, int] = {}

    # ------------------------------------------------------------ state

    @property
    def shards(self) -> dict[int, Shard]:
        return self._shards

    def coordinator(self, partition: int) -> GroupCoordinator | None:
        """The loaded coordinator of an offsets partition (None: not here or loading)."""
        shard = self._shards.get(partition)
        return shard.coordinator if shard is not None and shard.loaded else None

    def topics(self) -> Mapping[str, int]:
        """Topic name -> partition count from the image, internal topics excluded."""
        image = self.node.image
        if image is not self._topics_image:
            self._topics_image = image
            self._topics = {name: len(t.partitions) for name, t in sorted(image.topics.items())
                            if name not in INTERNAL_TOPICS}
        return self._topics

    def snapshot(self) -> list[GroupSnapshot]:
        out = []
        for index in sorted(self._shards):
            shard = self._shards[index]
            if not shard.loaded:
                continue
            coordinator = shard.coordinator
            states = coordinator.group_states()
            offsets = coordinator.group_offsets()
            for group_id in sorted(set(states) | set(offsets)):
                group = coordinator.groups.get(group_id)
                members = 0 if group is None else len(group.members)
                out.append(GroupSnapshot(group_id, states.get(group_id, "Empty"), members,
                                         dict(sorted(offsets.get(group_id, {}).items()))))
        return out

    # ------------------------------------------------------------ requests

    def handle(self, request: Request, *, client_id: str, client_host: str, now_ms: int) -> Response | Pending:
        if isinstance(request, FindCoordinatorRequest):
            return find_coordinator(self.node, self.creator, request, now_ms=now_ms)
        op_id = self._new_op_id()
        if isinstance(request, SINGLE_GROUP):
            routed = self._route(request.group_id)
            if not isinstance(routed, Shard):
                return error_response(request, *routed)
            if isinstance(request, OffsetFetchRequest) and unstable_offsets(routed, request.group_id):
                return error_response(request, ErrorCode.UNSTABLE_OFFSET_COMMIT,
                                      f"a transaction is committing offsets of group {request.group_id!r}; retry")
            self._run(routed, request, op_id, client_id, client_host, now_ms)
        elif isinstance(request, MULTI_GROUP):
            self._fan_out(request, op_id, client_id, client_host, now_ms)
        elif isinstance(request, ListGroupsRequest):
            self._list_groups(request, op_id, client_id, client_host, now_ms)
        else:
            raise MqError(ErrorCode.UNSUPPORTED_API, f"{type(request).__name__} is not a group request")
        return Pending(op_id, None)

    def route(self, group_id: str) -> Shard | tuple[ErrorCode, str]:
        """The loaded shard of ``group_id``, or the error a request for it gets."""
        return self._route(group_id)

    def _route(self, group_id: str) -> Shard | tuple[ErrorCode, str]:
        topic = self.node.image.topic(OFFSETS_TOPIC)
        if topic is None or not topic.partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet: send FindCoordinator"
        index = group_partition(group_id, len(topic.partitions))
        shard = self._shards.get(index)
        if shard is None:
            image = topic.partitions.get(index)
            leader = -1 if image is None else image.leader
            return ErrorCode.NOT_COORDINATOR, (
                f"broker {self.node.node_id} is not the coordinator of group {group_id!r} "
                f"({OFFSETS_TOPIC}-{index} is led by {leader})")
        if not shard.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading {OFFSETS_TOPIC}-{index}; retry"
        return shard

    def _run(self, shard: Shard, request: Request, op_id: int, client_id: str, client_host: str,
             now_ms: int) -> None:
        result = shard.coordinator.handle(request, request_id=op_id, client_id=client_id, client_host=client_host,
                                          topics=self.topics(), now_ms=now_ms)
        self._write(shard, result, now_ms)

    def _fan_out(self, request: Request, op_id: int, client_id: str, client_host: str, now_ms: int) -> None:
        groups: list[str] = request.groups  # type: ignore[attr-defined]
        by_shard: dict[int, list[str]] = {}
        refused: dict[str, tuple[ErrorCode, str]] = {}
        for group_id in groups:
            routed = self._route(group_id)
            if isinstance(routed, Shard):
                by_shard.setdefault(routed.index, []).append(group_id)
            else:
                refused[group_id] = routed
        fanout = Fanout(op_id, request, set())
        for code, message in sorted(set(refused.values())):
            named = [g for g in groups if refused.get(g) == (code, message)]
            fanout.parts.append(error_response(part_of(request, named), code, message))  # type: ignore[arg-type]
        parts = {self._new_op_id(): index for index in sorted(by_shard)}
        fanout.waiting = set(parts)
        if not parts:
            self._complete(op_id, fanout.merged())
            return
        for sub_id, index in parts.items():
            self._fanouts[sub_id] = fanout
        for sub_id, index in parts.items():
            self._run(self._shards[index], part_of(request, by_shard[index]),  # type: ignore[arg-type]
                      sub_id, client_id, client_host, now_ms)

    def _list_groups(self, request: ListGroupsRequest, op_id: int, client_id: str, client_host: str,
                     now_ms: int) -> None:
        loaded = [s for _, s in sorted(self._shards.items()) if s.loaded]
        fanout = Fanout(op_id, request, set(), load_in_progress=len(loaded) < len(self._shards))
        parts = {self._new_op_id(): shard for shard in loaded}
        fanout.waiting = set(parts)
        if not parts:
            self._complete(op_id, fanout.merged())
            return
        for sub_id in parts:
            self._fanouts[sub_id] = fanout
        for sub_id, shard in parts.items():
            self._run(shard, request, sub_id, client_id, client_host, now_ms)

    def _emit(self, responses: list[tuple[int, Response]]) -> None:
        for request_id, response in responses:
            fanout = self._fanouts.pop(request_id, None)
            if fanout is None:
                self._complete(request_id, response)
                continue
            merged = fanout.add(request_id, response)
            if merged is not None:
                self._complete(fanout.op_id, merged)

    # ------------------------------------------------------------ writes

    def _write(self, shard: Shard, result: CoordinatorResult, now_ms: int) -> None:
        """Append the result's records as leader; hold its responses until committed."""
        if not result.records:
            self._emit(result.responses)
            return
        partition = shard.partition
        state = partition.leader
        if state is None or self._shards.get(shard.index) is not shard:
            self._emit(shard.coordinator.fail(result, ErrorCode.NOT_COORDINATOR))
            return
        if state.check_produce(-1) != ErrorCode.NONE:  # ISR below min.insync.replicas
            self._emit(shard.coordinator.fail(result, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        batch = build_batch([(r.key, r.value, (), now_ms) for r in result.records])
        try:
            info = partition.log.append_as_leader(batch, leader_epoch=state.leader_epoch, now_ms=now_ms)
        except MqError as err:
            self.node.stats.produce_failed(partition.tp.topic)
            self._emit(shard.coordinator.fail(result, _WRITE_FAILURES.get(err.code, err.code)))
            return
        self.node.stats.produced(partition.tp.topic, info.record_count, info.size_bytes)
        # No replay here: the coordinator applied its group records as it emitted them;
        # its offset commits it applies at ``confirm`` (``fail`` drops them).
        op_id = self._new_op_id()
        write = PendingWrite(shard, result, info.last_offset + 1)
        self._writes[op_id] = shard.writes[op_id] = write
        self.node.appended(partition, now_ms=now_ms)
        self.node.await_high_watermark(op_id, partition.tp, write.end_offset,
                                       deadline_ms=now_ms + self.node.config.offsets_commit_timeout_ms)

    def owns(self, op_id: int) -> bool:
        return op_id in self._writes

    def on_write_done(self, completion: ProduceCompletion) -> None:
        """The produce purgatory settled a write: release or fail its responses."""
        write = self._writes.pop(completion.request_id, None)
        if write is None:
            return
        write.shard.writes.pop(completion.request_id, None)
        code = next(iter(completion.errors.values()), ErrorCode.NONE)
        if code == ErrorCode.NONE:
            write.shard.coordinator.confirm(write.result)  # committed: offsets become visible
            self._emit(write.result.responses)
        else:
            self._emit(write.shard.coordinator.fail(write.result, _WRITE_FAILURES.get(code, code)))

    # ------------------------------------------------------------ leadership

    def on_publish(self, result: PublishResult, *, now_ms: int) -> None:
        """Load the shards of offsets partitions this broker now leads, unload the rest."""
        for tp, partition, unload in republished(result, OFFSETS_TOPIC, self.node.partitions, self._shards):
            if unload:
                self._unload(tp.partition)
            if partition is None:
                continue
            assert partition.leader is not None
            shard = self._shards.get(tp.partition)
            if shard is None:
                coordinator = GroupCoordinator(tp.partition, self.config, rng=self._rng.fork("shard", tp.partition))
                log = partition.log
                self._shards[tp.partition] = Shard(partition, coordinator, partition.leader.leader_epoch,
                                                   log.log_end_offset, log.log_start_offset)
            else:
                shard.leader_epoch = partition.leader.leader_epoch
        self._load(now_ms)

    def _unload(self, index: int) -> None:
        shard = self._shards.pop(index, None)
        if shard is None:
            return
        for op_id in sorted(shard.writes):
            write = self._writes.pop(op_id)
            self._emit(shard.coordinator.fail(write.result, ErrorCode.NOT_COORDINATOR))
        shard.writes.clear()
        self._emit(shard.coordinator.unload())

    def _load(self, now_ms: int) -> bool:
        """Replay a slice of every loading shard; True if some are still loading."""
        loading = False
        for index in sorted(self._shards):
            shard = self._shards[index]
            if shard.loaded:
                continue
            try:
                done = shard.load_some()
            except LogCorruptedError as err:
                self.node.report_corruption(shard.partition.tp, err)
                self._shards.pop(index)  # retried when leadership comes back
                continue
            except MqError as err:
                self.node.report_storage_error(shard.partition.tp, err)
                self._shards.pop(index)
                continue
            if done:
                self._write(shard, shard.coordinator.poll(topics=self.topics(), now_ms=now_ms), now_ms)
            else:
                loading = True
        return loading

    # ------------------------------------------------------------ periodic work

    def poll(self, *, now_ms: int) -> int | None:
        """Load, run the coordinators' timers; the next deadline (None: nothing due)."""
        deadlines: list[int] = []
        if self._load(now_ms):
            deadlines.append(now_ms)
        creation = self.creator.poll(now_ms=now_ms)
        if creation is not None:
            deadlines.append(creation)
        topics = self.topics()
        for index in sorted(self._shards):
            shard = self._shards.get(index)
            if shard is None or not shard.loaded:
                continue
            self._write(shard, shard.coordinator.poll(topics=topics, now_ms=now_ms), now_ms)
        for shard in self._shards.values():
            if shard.loaded:
                deadline = shard.coordinator.next_deadline_ms()
                if deadline is not None:
                    deadlines.append(deadline)
        return min(deadlines) if deadlines else None
