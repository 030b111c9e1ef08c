"""One broker, sans-IO: requests in, responses out, logs on a ``FileIO``.

The shell (``mq.aio``) decodes frames and calls ``handle(header, request, now_ms)``,
which returns a response, ``None`` (acks=0, a one-way Raft message: nothing to send)
or ``Pending``: the answer comes later from ``take_completions()`` — after a group
commit under flush policy ``always``, when the high watermark passes an ``acks=all``
batch, when a long-poll fetch finds data or is expired by the shell (``expire``), or
when the controller committed an admin request. Requests to other nodes (Raft, the
broker's registration and heartbeats, follower fetches, ISR changes) come out of
``take_outbound()``; their answers go to ``on_response(tag, response | None)``.
``poll(now_ms)`` runs periodic work (the control plane's timers, retention,
flush.ms, checkpoints, ISR shrink checks, the group coordinators' timers, log
cleaning) and returns when it wants to be called next.

Consumer group requests go to ``GroupService`` (``mq.broker.groups``): the group
coordinator shards of the ``__consumer_offsets`` partitions this broker leads. The
mirror topic APIs (MirrorAppend, MirrorTruncate) go to ``MirrorRequests``
(``mq.broker.mirror``), which parks its waits in the same purgatories as Produce.

The control plane (``mq.broker.control.ControlPlane``: Raft, the metadata log, the
controller, registration) hands over committed metadata as (before, after) image
pairs; the data plane (``ReplicaManager``) makes each hosted partition leader,
follower or neither accordingly.
"""

from __future__ import annotations

from collections.abc import Callable

from mq.broker import admin
from mq.broker.control import ControlPlane
from mq.broker.fetch import DelayedFetch, FetchPurgatory, read_fetch
from mq.broker.follower_fetch import UncleanTruncation
from mq.broker.group_requests import GROUP_APIS
from mq.broker.groups import GroupService
from mq.broker.isr import IsrChanges
from mq.broker.log_cleaner import LogCleanerManager
from mq.broker.meta import MetaProperties
from mq.broker.mirror import DelayedMirrorAppend, MirrorRequests
from mq.broker.offsets import (
    DeleteRecordsWaits,
    handle_delete_records,
    handle_list_offsets,
    handle_offsets_for_leader_epoch,
)
from mq.broker.outbound import Outbound, Pending
from mq.broker.partition import Partition
from mq.broker.produce import AcksAllWaits, DelayedProduce, handle_produce
from mq.broker.producer_ids import ProducerIdManager, handle_init_producer_id
from mq.broker.replicas import ReplicaManager
from mq.broker.shares import ShareService, is_share_request
from mq.broker.stats import BrokerStats
from mq.broker.txn_service import TXN_APIS, TxnService
from mq.core.config import BrokerConfig, TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import FlushPolicy, TopicPartition
from mq.metadata.image import MetadataImage
from mq.protocol.codec import RequestHeader
from mq.protocol.messages import (
    ApiKey,
    DeleteRecordsRequest,
    FetchRequest,
    ProduceRequest,
    Request,
    Response,
)
from mq.protocol.producer_messages import InitProducerIdRequest
from mq.replication import (
    AlterPartitionRequest,
    FollowerFetchResult,
    ProduceCompletion,
    ProducePurgatory,
)
from mq.storage import LogCorruptedError
from mq.storage.fileio import FileIO

__all__ = ["MAX_FETCH_WAIT_MS", "BrokerNode", "Outbound", "Pending"]

MAX_FETCH_WAIT_MS = 5 * 60 * 1000
"""A long-poll never parks longer than this, whatever ``max_wait_ms`` asks."""

CONTROL_APIS = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.ALTER_CONFIGS, ApiKey.CREATE_PARTITIONS,
    ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION, ApiKey.RAFT,
})
"""Requests the control plane serves (or forwards to the active controller)."""

_ALTER_PARTITION_HEADER = RequestHeader(ApiKey.ALTER_PARTITION, 0, 0, "isr")


class BrokerNode:
    def __init__(
        self, config: BrokerConfig, fileio: FileIO, *, rng: Rng,
        advertised_host: str, advertised_port: int, control: ControlPlane | None = None,
    ) -> None:
        """``control``: None builds the real ``ControlPlane``; data-plane tests pass
        one that publishes images they build by hand (the same interface)."""
        self.config = config
        self.fileio = fileio
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.stats = BrokerStats()
        self.replicas = ReplicaManager(fileio, config)
        self.meta = MetaProperties(fileio, config.log_dirs)
        self.purgatory = FetchPurgatory()
        self.produce_purgatory = ProducePurgatory()
        self.cluster_id = ""
        self._rng = rng
        self._next_op_id = 1
        if control is None:
            control = ControlPlane(config, fileio, rng=rng.fork("control"), advertised_host=advertised_host,
                                   advertised_port=advertised_port, new_op_id=self._new_op_id)
        self.control = control
        self._image = MetadataImage()
        self._published = False
        self._now_ms = 0
        self._acks_all = AcksAllWaits()
        self._delete_waits = DeleteRecordsWaits()
        self._isr = IsrChanges()
        self._local_alter_ops: dict[int, int] = {}  # control op id -> our AlterPartition tag
        self._moved: dict[TopicPartition, None] = {}  # high watermark or ISR moved: re-check waiters
        self._delayed_produces: dict[int, DelayedProduce | DelayedMirrorAppend] = {}
        self._dirty: dict[TopicPartition, Partition] = {}
        self._completions: list[tuple[int, Response]] = []
        self._unclean_truncations: list[UncleanTruncation] = []
        self._storage_errors: list[tuple[TopicPartition, MqError]] = []
        # Corrupt stored batches found by reads, each reported once (keyed by file and
        # position) so a consumer retrying the same offset does not flood the log.
        self._corruptions_seen: dict[tuple[str, int], None] = {}
        self._corruption_reports: list[tuple[TopicPartition, LogCorruptedError]] = []
        self._next_retention_ms = 0
        self._next_checkpoint_ms = 0
        self._next_isr_check_ms = 0
        self._next_producer_expiry_ms = 0
        self._produce_deadline_ms: int | None = None
        self.log_cleaner = LogCleanerManager(config)
        self.producer_ids = ProducerIdManager()
        self.groups = GroupService(self, rng=rng.fork("groups"), new_op_id=self._new_op_id,
                                   complete=lambda op_id, response: self._completions.append((op_id, response)))
        self.shares = ShareService(self, rng=rng.fork("shares"), new_op_id=self._new_op_id,
                                   complete=lambda op_id, response: self._completions.append((op_id, response)))
        self.txns = TxnService(self, new_op_id=self._new_op_id,
                               complete=lambda op_id, response: self._completions.append((op_id, response)))
        self.mirror = MirrorRequests(self, new_op_id=self._new_op_id,
                                     complete=lambda op_id, response: self._completions.append((op_id, response)))
        self._handlers: dict[ApiKey, Callable[[Request, int], Response | Pending | None]] = {
            ApiKey.API_VERSIONS: lambda r, now: admin.handle_api_versions(),
            ApiKey.METADATA: lambda r, now: admin.handle_metadata(self, r),  # type: ignore[arg-type]
            ApiKey.DESCRIBE_CONFIGS: lambda r, now: admin.handle_describe_configs(self, r),  # type: ignore[arg-type]
            ApiKey.LIST_OFFSETS: lambda r, now: handle_list_offsets(self, r),  # type: ignore[arg-type]
            ApiKey.DELETE_RECORDS: self._delete_records,  # type: ignore[dict-item]
            ApiKey.OFFSET_FOR_LEADER_EPOCH: lambda r, now: handle_offsets_for_leader_epoch(self, r),  # type: ignore[arg-type]
            ApiKey.PRODUCE: self._produce,  # type: ignore[dict-item]
            ApiKey.FETCH: self._fetch,  # type: ignore[dict-item]
            ApiKey.MIRROR_APPEND: self.mirror.append,  # type: ignore[dict-item]
            ApiKey.MIRROR_TRUNCATE: self.mirror.truncate,  # type: ignore[dict-item]
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,  # type: ignore[dict-item]
            **{key: self.txns.handle_for_node for key in TXN_APIS},  # type: ignore[dict-item]
        }

    # ------------------------------------------------------------ life cycle

    def set_advertised_port(self, port: int) -> None:
        self.advertised_port = port
        self.control.set_advertised(self.advertised_host, port)

    def start(self, *, now_ms: int) -> None:
        """Start the control plane; partitions open when it publishes the metadata."""
        self._now_ms = now_ms
        self.fileio.makedirs(self.config.log_dirs)
        self.cluster_id = self.meta.load_or_create(self.config.node_id, self._rng.fork("cluster-id"))
        self.control.start(now_ms=now_ms)
        self._next_retention_ms = now_ms + self.config.log_retention_check_interval_ms
        self._next_checkpoint_ms = now_ms + self.config.log_flush_offset_checkpoint_interval_ms
        self._next_isr_check_ms = now_ms + self._isr_check_interval_ms
        self._next_producer_expiry_ms = now_ms + self.config.producer_id_expiration_check_interval_ms
        self._after(now_ms)

    def begin_shutdown(self, *, now_ms: int) -> None:
        """Controlled shutdown: ask the controller to move leadership away."""
        self._now_ms = now_ms
        self.control.begin_shutdown(now_ms=now_ms)
        self._after(now_ms)

    @property
    def shutdown_complete(self) -> bool:
        return bool(self.control.shutdown_complete)

    def shutdown(self, *, now_ms: int) -> None:
        """Flush every log, complete what waits on the flush, write checkpoints, close."""
        self.group_commit(now_ms=now_ms, flush_all=True)
        for op_id in list(self.purgatory.ops):
            self.expire(op_id, now_ms=now_ms)
        self.replicas.close_all()  # Log.close flushes and writes the checkpoints
        self.control.close()

    # ------------------------------------------------------------ state

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def image(self) -> MetadataImage:
        """The last metadata image published to the data plane."""
        return self._image

    @property
    def is_ready(self) -> bool:
        return bool(self.control.is_ready)

    @property
    def controller_id(self) -> int:
        controller = self.control.controller_id
        return -1 if controller is None else controller

    @property
    def controller_epoch(self) -> int:
        return int(self.control.controller_epoch)

    @property
    def broker_epoch(self) -> int:
        return int(self.control.broker_epoch)

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        return self.control.address_of(node_id)  # type: ignore[no-any-return]

    @property
    def partitions(self) -> dict[TopicPartition, Partition]:
        return self.replicas.partitions

    def topic_config(self, topic: str) -> TopicConfig:
        image = self.image.topic(topic)
        return admin.topic_config(self.config, None if image is None else dict(image.configs))

    @property
    def _isr_check_interval_ms(self) -> int:
        return max(1, self.config.replica_lag_time_max_ms // 2)

    # ------------------------------------------------------------ requests

    def handle(self, header: RequestHeader, request: Request, *, now_ms: int,
               client_host: str = "") -> Response | Pending | None:
        """``client_host``: the client's address (group members are described with it)."""
        self._now_ms = now_ms
        if header.api_key in CONTROL_APIS:
            result = self.control.handle(header, request, now_ms=now_ms)
        elif is_share_request(header.api_key, request):
            result = self.shares.handle(request, client_id=header.client_id, client_host=client_host, now_ms=now_ms)
        elif header.api_key in GROUP_APIS:
            result = self.groups.handle(request, client_id=header.client_id, client_host=client_host, now_ms=now_ms)
        else:
            handler = self._handlers.get(header.api_key)
            if handler is None:
                raise MqError(ErrorCode.UNSUPPORTED_API, f"{header.api_key.name} is not served by this broker")
            result = handler(request, now_ms)
        self._after(now_ms)
        if isinstance(result, Pending):
            for i, (op_id, response) in enumerate(self._completions):
                if op_id == result.op_id:  # finished while handled (e.g. acks=all, ISR = leader)
                    del self._completions[i]
                    return response
        return result  # type: ignore[no-any-return]

    def take_completions(self) -> list[tuple[int, Response]]:
        self._pull_control(self._now_ms)
        done, self._completions = self._completions, []
        return done

    def _new_op_id(self) -> int:
        """Op ids and outbound tags, one sequence for the whole node (the control
        plane allocates from it too)."""
        self._next_op_id += 1
        return self._next_op_id

    def _init_producer_id(self, request: InitProducerIdRequest, now_ms: int) -> Response | Pending:
        if request.transactional_id is not None:  # the transaction coordinator's
            return self.txns.handle(request, now_ms=now_ms)
        return handle_init_producer_id(self, request)

    def _produce(self, request: ProduceRequest, now_ms: int) -> Response | Pending | None:
        outcome = handle_produce(self, request, now_ms=now_ms)
        if request.acks == 0:
            return None
        if request.acks == -1:
            op_id = self._new_op_id()
            self._acks_all.add(op_id, outcome.response)
            timeout_ms = max(0, request.timeout_ms)
            self.produce_purgatory.watch(op_id, outcome.required_offsets, deadline_ms=now_ms + timeout_ms,
                                         settled=outcome.settled)
            for tp in outcome.required_offsets:
                self._moved[tp] = None
            return Pending(op_id, timeout_ms)
        if not outcome.durable_waits:
            return outcome.response
        op = DelayedProduce(self._new_op_id(), outcome.response, outcome.durable_waits)
        self._delayed_produces[op.op_id] = op
        return Pending(op.op_id, None)

    def _delete_records(self, request: DeleteRecordsRequest, now_ms: int) -> Response | Pending:
        """Answered once each partition's low watermark reached its offset (see
        ``mq.broker.offsets``)."""
        outcome = handle_delete_records(self, request)
        if not outcome.required_offsets:
            return outcome.response
        op_id = self._new_op_id()
        timeout_ms = max(0, request.timeout_ms)
        self._delete_waits.park(op_id, outcome, deadline_ms=now_ms + timeout_ms)
        for tp in outcome.required_offsets:
            self._moved[tp] = None
        return Pending(op_id, timeout_ms)

    def park_acks_all(self, op_id: int, tp: TopicPartition, end_offset: int, *, deadline_ms: int,
                      finish: Callable[[ProduceCompletion], Response]) -> None:
        """An acks=all wait answered by ``finish`` (MirrorAppend)."""
        self._acks_all.add_finisher(op_id, finish)
        self.await_high_watermark(op_id, tp, end_offset, deadline_ms=deadline_ms)

    def park_until_flushed(self, op: DelayedMirrorAppend) -> None:
        """An answer held until the group commit's fsync covers it."""
        self._delayed_produces[op.op_id] = op

    def propose_isr_change(self, proposal: AlterPartitionRequest) -> None:
        self._isr.propose(proposal)

    def partition_moved(self, tp: TopicPartition) -> None:
        """The high watermark, the log or the leader state of ``tp`` changed: re-check
        what waits on it."""
        self._moved[tp] = None

    def await_high_watermark(self, op_id: int, tp: TopicPartition, end_offset: int, *, deadline_ms: int) -> None:
        """Park ``op_id`` in the produce purgatory until the high watermark of ``tp`` (led
        here) reaches ``end_offset`` (the acks=all wait; the group coordinator's writes)."""
        self.produce_purgatory.watch(op_id, {tp: end_offset}, deadline_ms=deadline_ms)
        self._moved[tp] = None

    def _fetch(self, request: FetchRequest, now_ms: int) -> Response | Pending:
        result = read_fetch(self, request, now_ms=now_ms)
        if result.bytes_read >= request.min_bytes or request.max_wait_ms <= 0 or result.has_error:
            return result.response
        partitions = sorted({TopicPartition(t.name, p.partition) for t in request.topics for p in t.partitions})
        wait_ms = min(request.max_wait_ms, MAX_FETCH_WAIT_MS)
        op = DelayedFetch(self._new_op_id(), request, now_ms + wait_ms, partitions)
        self.purgatory.add(op)
        return Pending(op.op_id, wait_ms)

    def expire(self, op_id: int, *, now_ms: int) -> None:
        """Max wait is over: answer the delayed fetch with whatever there is now (an
        acks=all produce past its timeout answers REQUEST_TIMED_OUT)."""
        self._now_ms = now_ms
        op = self.purgatory.remove(op_id)
        if op is not None:
            self._completions.append((op_id, read_fetch(self, op.request, now_ms=now_ms).response))
        elif op_id not in self._acks_all and op_id not in self._delete_waits \
                and not self.mirror.expire(op_id, now_ms=now_ms):
            self.control.expire(op_id, now_ms=now_ms)
        self._after(now_ms)

    def cancel(self, op_id: int) -> None:
        """The client went away; drop the operation without answering."""
        self.purgatory.remove(op_id)
        self._delayed_produces.pop(op_id, None)
        self._acks_all.discard(op_id)
        self._delete_waits.cancel(op_id)
        self.mirror.cancel(op_id)
        self.control.cancel(op_id)

    # ------------------------------------------------------------ the network

    def take_outbound(self) -> list[Outbound]:
        """Follower fetches (one per leader with none in flight), ISR changes to the
        active controller, and the control plane's requests."""
        now_ms = self._now_ms
        out = self.replicas.fetchers.take_requests(now_ms, broker_epoch=self.broker_epoch, new_tag=self._new_op_id)
        controller = self.control.controller_id
        for stale in self._isr.sent_elsewhere(controller):
            for tp in self._isr.on_response(stale, None, partitions=self.partitions, now_ms=now_ms):
                self._moved[tp] = None
        if self._isr.ready and controller is not None and controller != self.node_id:
            tag = self._new_op_id()
            request = self._isr.take_request(tag, broker_id=self.node_id, broker_epoch=self.broker_epoch,
                                             destination=controller)
            out.append(Outbound(controller, request, tag))
        out.extend(self.control.take_outbound())
        out.extend(self.txns.take_outbound())
        return out

    def on_response(self, tag: int, response: Response | None, *, now_ms: int) -> None:
        """The answer to an outbound request (None: it failed or timed out)."""
        self._now_ms = now_ms
        fetchers = self.replicas.fetchers
        if fetchers.owns(tag):
            fetchers.on_response(tag, response, now_ms=now_ms, partitions=self.partitions)
            for cut in fetchers.take_truncations():
                if not cut.mirror_topic:
                    self.stats.truncated_committed(cut.tp.topic, cut.from_offset - cut.to_offset)
                self._unclean_truncations.append(cut)
        elif self.txns.owns_tag(tag):
            self.txns.on_response(tag, response, now_ms=now_ms)
        elif self._isr.owns(tag):
            for tp in self._isr.on_response(tag, response, partitions=self.partitions, now_ms=now_ms):
                self._moved[tp] = None
        else:
            self.control.on_response(tag, response, now_ms=now_ms)
        self._after(now_ms)

    # ------------------------------------------------------------ appends, flushes, wake-ups

    def appended(self, partition: Partition, *, now_ms: int) -> None:
        """Called by produce after a leader append: wake followers' fetches, move the
        high watermark (an ISR of the leader alone) or queue an fsync."""
        if self.config.log_flush_policy == FlushPolicy.ALWAYS or partition.flush_due(now_ms):
            self._dirty[partition.tp] = partition
        if partition.leader is not None and partition.leader.on_leader_append():
            self._moved[partition.tp] = None
        self._wake_fetches(partition.tp)  # followers read above the high watermark

    def follower_fetched(self, partition: Partition, decision: FollowerFetchResult) -> None:
        """A follower's fetch was recorded by the leader state."""
        if decision.high_watermark_changed or decision.low_watermark_changed:
            self._moved[partition.tp] = None
        if decision.alter_partition is not None:
            self._isr.propose(decision.alter_partition)
        if self.mirror.waiting:
            self.mirror.on_partition_update(partition.tp, now_ms=self._now_ms)

    def log_start_moved(self, partition: Partition) -> None:
        partition.log_start_moved()
        self._wake_fetches(partition.tp)

    @property
    def needs_group_commit(self) -> bool:
        return bool(self._dirty)

    def group_commit(self, *, now_ms: int, flush_all: bool = False) -> None:
        """One fsync per dirty log covering every append so far, then release the
        produce responses and fetches waiting on it (the shell calls this once per
        event-loop turn)."""
        self._now_ms = now_ms
        dirty = list(self.partitions.values()) if flush_all else list(self._dirty.values())
        self._dirty.clear()
        failed: dict[TopicPartition, MqError] = {}
        for partition in dirty:
            if partition.tp not in self.partitions:
                continue
            try:
                moved = partition.flush()
            except MqError as err:  # the log is offline now: never ack from it
                failed[partition.tp] = err
                continue
            if moved:
                self._moved[partition.tp] = None
        for op_id in list(self._delayed_produces):
            op = self._delayed_produces[op_id]
            if failed and op.fail(failed) or op.satisfied():
                self._completions.append((op_id, self._delayed_produces.pop(op_id).response))
        self._after(now_ms)

    def _wake_fetches(self, tp: TopicPartition) -> None:
        if self.shares.waits.parked:  # a share fetch waiting for records
            self.shares.retry_parked(now_ms=self._now_ms)
        for op in self.purgatory.watching(tp):
            if op.op_id not in self.purgatory.ops:
                continue  # answered by a nested wake-up
            result = read_fetch(self, op.request, now_ms=self._now_ms)
            done = result.bytes_read >= op.request.min_bytes or result.has_error
            if done and self.purgatory.remove(op.op_id) is not None:
                self._completions.append((op.op_id, result.response))

    def _settle(self, now_ms: int) -> None:
        """Re-check what waits on partitions whose high watermark, low watermark or ISR
        moved, then answer the DeleteRecords and acks=all requests that are settled or
        timed out."""
        while self._moved:
            tp = next(iter(self._moved))
            del self._moved[tp]
            self._wake_fetches(tp)
            partition = self.partitions.get(tp)
            state = None if partition is None else partition.leader
            if self.mirror.waiting:
                self.mirror.on_partition_update(tp, now_ms=now_ms)
            if state is not None:
                self.produce_purgatory.on_partition_update(
                    tp, high_watermark=state.high_watermark, isr_size=len(state.isr),
                    min_insync_replicas=state.min_insync_replicas)
                self._delete_waits.purgatory.on_low_watermark(tp, state.low_watermark)
        deadlines: list[int | None] = []
        if len(self._delete_waits.purgatory):
            answers, deadline = self._delete_waits.poll(self, now_ms)
            self._completions.extend(answers)
            deadlines.append(deadline)
        if len(self.produce_purgatory):
            polled = self.produce_purgatory.poll(now_ms)
            deadlines.append(polled.next_deadline_ms)
            for completion in polled.completed:
                if self.groups.owns(completion.request_id):
                    self.groups.on_write_done(completion)
                    continue
                if self.shares.owns(completion.request_id):
                    self.shares.on_write_done(completion)
                    continue
                if self.txns.owns(completion.request_id):
                    self.txns.on_write_done(completion)
                    continue
                response = self._acks_all.complete(completion)
                if response is not None:
                    self._completions.append((completion.request_id, response))
        self._produce_deadline_ms = min((d for d in deadlines if d is not None), default=None)

    # ------------------------------------------------------------ metadata

    def _after(self, now_ms: int) -> None:
        """The common tail of every entry point: ISR changes to a local controller,
        the control plane's published images and answers, then the waiters."""
        if self._isr.ready and self.control.controller_id == self.node_id:
            tag = self._new_op_id()
            request = self._isr.take_request(tag, broker_id=self.node_id, broker_epoch=self.broker_epoch,
                                             destination=self.node_id)
            result = self.control.handle(_ALTER_PARTITION_HEADER, request, now_ms=now_ms)
            if isinstance(result, Pending):
                self._local_alter_ops[result.op_id] = tag
            else:
                for tp in self._isr.on_response(tag, result, partitions=self.partitions, now_ms=now_ms):
                    self._moved[tp] = None
        self._pull_control(now_ms)
        self._settle(now_ms)

    def _pull_control(self, now_ms: int) -> None:
        for before, after in self.control.take_published():
            self.publish(before, after, now_ms=now_ms)
        for op_id, response in self.control.take_completions():
            tag = self._local_alter_ops.pop(op_id, None)
            if tag is None and self.groups.creator.on_completion(op_id, response, now_ms=now_ms):
                continue
            if tag is None and self.shares.creator.on_completion(op_id, response, now_ms=now_ms):
                continue
            if tag is None and self.txns.creator.on_completion(op_id, response, now_ms=now_ms):
                continue
            if tag is None:
                self._completions.append((op_id, response))
            else:
                for tp in self._isr.on_response(tag, response, partitions=self.partitions, now_ms=now_ms):
                    self._moved[tp] = None
        if self._moved:
            self._settle(now_ms)

    def publish(self, before: MetadataImage, after: MetadataImage, *, now_ms: int) -> None:
        """Act on committed metadata: open, lead, follow, stop, delete."""
        if not self._published:
            self._published = True
            self.replicas.remove_orphans(after)
        result = self.replicas.publish(before, after, now_ms=now_ms)
        self._image = after
        for tp, offset, damage in result.cut_damage:  # logged by the shell, once each
            self.report_corruption(tp, LogCorruptedError(
                damage.path, damage.position, f"{damage.problem}: found on open; the follower cut its log "
                f"at offset {offset} and fetches the rest from the leader"))
        for tp in result.leadership_lost:
            self.produce_purgatory.on_leadership_lost(tp)
            self._delete_waits.purgatory.on_leadership_lost(tp)
            self.mirror.on_leadership_lost(tp)
            self._isr.forget(tp)
        for tp in result.removed:
            self._dirty.pop(tp, None)
            self._wake_fetches_removed(tp)
        for topic in sorted({tp.topic for tp in result.removed}):
            self.stats.forget(topic)
        for tp in result.changed:
            self._moved[tp] = None
            self._wake_fetches_removed(tp)  # NOT_LEADER / new epoch: clients re-route
        self.groups.on_publish(result, now_ms=now_ms)
        self.shares.on_publish(result, now_ms=now_ms)
        self.txns.on_publish(result)

    def _wake_fetches_removed(self, tp: TopicPartition) -> None:
        for op in self.purgatory.watching(tp):
            if self.purgatory.remove(op.op_id) is not None:
                self._completions.append((op.op_id, read_fetch(self, op.request, now_ms=self._now_ms).response))

    # ------------------------------------------------------------ periodic work

    def poll(self, *, now_ms: int) -> int:
        """The control plane's timers, retention, ``flush.ms``/``flush.messages``,
        recovery-point checkpoints, ISR shrink checks, the group coordinators'
        timers and a slice of log cleaning; returns the wall time at
        which to call again. A partition whose log fails is skipped (the log takes
        itself offline) and reported in ``take_storage_errors``."""
        self._now_ms = now_ms
        control_deadline = self.control.poll(now_ms=now_ms)
        self._pull_control(now_ms)
        retention = now_ms >= self._next_retention_ms
        checkpoint = now_ms >= self._next_checkpoint_ms
        if retention:
            self._next_retention_ms = now_ms + self.config.log_retention_check_interval_ms
        if checkpoint:
            self._next_checkpoint_ms = now_ms + self.config.log_flush_offset_checkpoint_interval_ms
        expiry = now_ms >= self._next_producer_expiry_ms
        if expiry:
            self._next_producer_expiry_ms = now_ms + self.config.producer_id_expiration_check_interval_ms
        for partition in self.partitions.values():
            if partition.log.is_offline:
                continue
            try:
                if partition.flush_due(now_ms):
                    self._dirty[partition.tp] = partition
                if retention and partition.log.apply_retention(now_ms, high_watermark=partition.high_watermark):
                    self.log_start_moved(partition)
                if checkpoint:
                    partition.checkpoint()
                if expiry:
                    partition.log.remove_expired_producers(now_ms, self.config.producer_id_expiration_ms)
            except MqError as err:
                self._storage_errors.append((partition.tp, err))
        if now_ms >= self._next_isr_check_ms:
            self._next_isr_check_ms = now_ms + self._isr_check_interval_ms
            self.check_isr(now_ms=now_ms)
        groups_deadline = self.groups.poll(now_ms=now_ms)
        shares_deadline = self.shares.poll(now_ms=now_ms)
        txns_deadline = self.txns.poll(now_ms=now_ms)
        cleaner_deadline = self.log_cleaner.poll(
            {tp: (p.log, p.high_watermark) for tp, p in self.partitions.items() if not p.log.is_offline},
            now_ms=now_ms)
        self._after(now_ms)
        deadlines = [self._next_retention_ms, self._next_checkpoint_ms, self._next_isr_check_ms,
                     self._next_producer_expiry_ms,
                     now_ms + 1000, control_deadline]
        for extra in (self.replicas.fetchers.next_deadline_ms(), self._produce_deadline_ms, groups_deadline,
                      cleaner_deadline, shares_deadline, txns_deadline):
            if extra is not None:
                deadlines.append(extra)
        return max(now_ms, min(deadlines))

    def check_isr(self, *, now_ms: int) -> None:
        """Propose dropping followers that lagged ``replica.lag.time.max.ms``."""
        for partition in self.replicas.leaders():
            assert partition.leader is not None
            proposal = partition.leader.maybe_shrink_isr(now_ms)
            if proposal is not None:
                self._isr.propose(proposal)

    def report_corruption(self, tp: TopicPartition, err: LogCorruptedError) -> None:
        key = (err.path, err.position)
        if key not in self._corruptions_seen:
            self._corruptions_seen[key] = None
            self._corruption_reports.append((tp, err))

    def take_corruption_reports(self) -> list[tuple[TopicPartition, LogCorruptedError]]:
        """Corruptions found since the last call, for the shell to log once each."""
        reports, self._corruption_reports = self._corruption_reports, []
        return reports

    def take_unclean_truncations(self) -> list[UncleanTruncation]:
        """Follower cuts below the high watermark since the last call, for the shell to log."""
        cuts, self._unclean_truncations = self._unclean_truncations, []
        return cuts

    def report_storage_error(self, tp: TopicPartition, err: MqError) -> None:
        self._storage_errors.append((tp, err))

    def take_storage_errors(self) -> list[tuple[TopicPartition, MqError]]:
        errors, self._storage_errors = self._storage_errors, []
        return errors
