"""One broker, sans-IO: requests in, responses out, logs on a ``FileIO``.

The shell (``mq.aio``) decodes frames and calls ``handle(header, request, now_ms)``,
which returns a response, ``None`` (acks=0: nothing to send) or ``Pending``: the
answer comes later from ``take_completions()`` — after a group commit under flush
policy ``always``, or when a long-poll fetch finds data or is expired by the shell
(``expire``). ``poll(now_ms)`` runs periodic work (retention, flush.ms, checkpoints)
and returns when it wants to be called next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mq.broker import admin
from mq.broker.fetch import DelayedFetch, FetchPurgatory, read_fetch
from mq.broker.meta import MetaProperties
from mq.broker.offsets import handle_delete_records, handle_list_offsets
from mq.broker.partition import Partition
from mq.broker.produce import DelayedProduce, handle_produce
from mq.broker.replicas import ReplicaManager
from mq.broker.stats import BrokerStats
from mq.core.config import BrokerConfig, TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import FlushPolicy, TopicPartition
from mq.metadata.controller import QuorumController
from mq.metadata.image import MetadataImage
from mq.metadata.log import MetadataLog
from mq.metadata.records import MetadataRecord
from mq.protocol.codec import RequestHeader
from mq.protocol.messages import ApiKey, FetchRequest, ProduceRequest, Request, Response
from mq.storage import LogCorruptedError
from mq.storage.fileio import FileIO

MAX_FETCH_WAIT_MS = 5 * 60 * 1000
"""A long-poll never parks longer than this, whatever ``max_wait_ms`` asks."""


@dataclass(frozen=True, slots=True)
class Pending:
    """The response to this request will come from ``take_completions``.
    ``timeout_ms``: the shell calls ``expire(op_id)`` after this long (None: never)."""

    op_id: int
    timeout_ms: int | None


class BrokerNode:
    def __init__(
        self, config: BrokerConfig, fileio: FileIO, *, rng: Rng,
        advertised_host: str, advertised_port: int,
    ) -> None:
        self.config = config
        self.fileio = fileio
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.controller = QuorumController(config, rng=rng.fork("controller"))
        self.stats = BrokerStats()
        self.replicas = ReplicaManager(fileio, config)
        self.meta = MetaProperties(fileio, config.log_dirs)
        self.purgatory = FetchPurgatory()
        self.cluster_id = ""
        self._rng = rng
        self._metadata_log: MetadataLog | None = None
        self._delayed_produces: dict[int, DelayedProduce] = {}
        self._dirty: dict[TopicPartition, Partition] = {}
        self._completions: list[tuple[int, Response]] = []
        self._storage_errors: list[tuple[TopicPartition, MqError]] = []
        # Corrupt stored batches found by reads, each reported once (keyed by file and
        # position) so a consumer retrying the same offset does not flood the log.
        self._corruptions_seen: dict[tuple[str, int], None] = {}
        self._corruption_reports: list[tuple[TopicPartition, LogCorruptedError]] = []
        self._next_op_id = 1
        self._next_retention_ms = 0
        self._next_checkpoint_ms = 0
        self._handlers: dict[ApiKey, Callable[[Request, int], Response | Pending | None]] = {
            ApiKey.API_VERSIONS: lambda r, now: admin.handle_api_versions(),
            ApiKey.METADATA: lambda r, now: admin.handle_metadata(self, r),  # type: ignore[arg-type]
            ApiKey.CREATE_TOPICS: lambda r, now: admin.handle_create_topics(self, r, now_ms=now),  # type: ignore[arg-type]
            ApiKey.DELETE_TOPICS: lambda r, now: admin.handle_delete_topics(self, r, now_ms=now),  # type: ignore[arg-type]
            ApiKey.DESCRIBE_CONFIGS: lambda r, now: admin.handle_describe_configs(self, r),  # type: ignore[arg-type]
            ApiKey.ALTER_CONFIGS: lambda r, now: admin.handle_alter_configs(self, r, now_ms=now),  # type: ignore[arg-type]
            ApiKey.LIST_OFFSETS: lambda r, now: handle_list_offsets(self, r),  # type: ignore[arg-type]
            ApiKey.DELETE_RECORDS: lambda r, now: handle_delete_records(self, r),  # type: ignore[arg-type]
            ApiKey.PRODUCE: self._produce,  # type: ignore[dict-item]
            ApiKey.FETCH: self._fetch,  # type: ignore[dict-item]
        }

    # ------------------------------------------------------------ life cycle

    def start(self, *, now_ms: int) -> None:
        """Open the metadata log, replay it, then open every hosted partition."""
        self.fileio.makedirs(self.config.log_dirs)
        self.cluster_id = self.meta.load_or_create(self.config.node_id, self._rng.fork("cluster-id"))
        self._metadata_log = MetadataLog.open(self.fileio, self.config.log_dirs, now_ms=now_ms)
        for chunk in self._metadata_log.read_committed():
            self.controller.replay(chunk.records, last_offset=chunk.last_offset)
        self.replicas.remove_orphans(self.image)
        self.replicas.publish(MetadataImage(), self.image, now_ms=now_ms)
        self._next_retention_ms = now_ms + self.config.log_retention_check_interval_ms
        self._next_checkpoint_ms = now_ms + self.config.log_flush_offset_checkpoint_interval_ms

    def shutdown(self, *, now_ms: int) -> None:
        """Flush every log, complete what waits on the flush, write checkpoints, close."""
        self.group_commit(now_ms=now_ms, flush_all=True)
        for op_id in list(self.purgatory.ops):
            self.expire(op_id, now_ms=now_ms)
        self.replicas.close_all()  # Log.close flushes and writes the checkpoints
        if self._metadata_log is not None:
            self._metadata_log.close()

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    @property
    def partitions(self) -> dict[TopicPartition, Partition]:
        return self.replicas.partitions

    def topic_config(self, topic: str) -> TopicConfig:
        image = self.image.topic(topic)
        return admin.topic_config(self.config, None if image is None else dict(image.configs))

    # ------------------------------------------------------------ requests

    def handle(self, header: RequestHeader, request: Request, *, now_ms: int) -> Response | Pending | None:
        handler = self._handlers.get(header.api_key)
        if handler is None:
            raise MqError(ErrorCode.UNSUPPORTED_API, f"{header.api_key.name} is not served by this broker yet")
        return handler(request, now_ms)

    def take_completions(self) -> list[tuple[int, Response]]:
        done, self._completions = self._completions, []
        return done

    def _new_op_id(self) -> int:
        self._next_op_id += 1
        return self._next_op_id

    def _produce(self, request: ProduceRequest, now_ms: int) -> Response | Pending | None:
        response, waits = handle_produce(self, request, now_ms=now_ms)
        if request.acks == 0:
            return None
        if not waits:
            return response
        op = DelayedProduce(self._new_op_id(), response, waits)
        self._delayed_produces[op.op_id] = op
        return Pending(op.op_id, None)

    def _fetch(self, request: FetchRequest, now_ms: int) -> Response | Pending:
        result = read_fetch(self, request)
        if result.bytes_read >= request.min_bytes or request.max_wait_ms <= 0 or result.has_error:
            return result.response
        partitions = sorted({TopicPartition(t.name, p.partition) for t in request.topics for p in t.partitions})
        wait_ms = min(request.max_wait_ms, MAX_FETCH_WAIT_MS)
        op = DelayedFetch(self._new_op_id(), request, now_ms + wait_ms, partitions)
        self.purgatory.add(op)
        return Pending(op.op_id, wait_ms)

    def expire(self, op_id: int, *, now_ms: int) -> None:
        """Max wait is over: answer the delayed fetch with whatever there is now."""
        op = self.purgatory.remove(op_id)
        if op is not None:
            self._completions.append((op_id, read_fetch(self, op.request).response))

    def cancel(self, op_id: int) -> None:
        """The client went away; drop the operation without answering."""
        self.purgatory.remove(op_id)
        self._delayed_produces.pop(op_id, None)

    # ------------------------------------------------------------ appends, flushes, wake-ups

    def appended(self, partition: Partition, *, now_ms: int) -> None:
        """Called by produce after an append: wake fetchers or queue an fsync."""
        if self.config.log_flush_policy == FlushPolicy.ALWAYS or partition.flush_due(now_ms):
            self._dirty[partition.tp] = partition
        if self.config.log_flush_policy != FlushPolicy.ALWAYS:
            self._wake_fetches(partition.tp)

    def log_start_moved(self, partition: Partition) -> None:
        self._wake_fetches(partition.tp)

    @property
    def needs_group_commit(self) -> bool:
        return bool(self._dirty)

    def group_commit(self, *, now_ms: int, flush_all: bool = False) -> None:
        """One fsync per dirty log covering every append so far, then release the
        produce responses and fetches waiting on it (the shell calls this once per
        event-loop turn)."""
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
                self._wake_fetches(partition.tp)
        for op_id in list(self._delayed_produces):
            op = self._delayed_produces[op_id]
            if failed and op.fail(failed) or op.satisfied():
                self._completions.append((op_id, self._delayed_produces.pop(op_id).response))

    def _wake_fetches(self, tp: TopicPartition) -> None:
        for op in self.purgatory.watching(tp):
            result = read_fetch(self, op.request)
            if result.bytes_read >= op.request.min_bytes or result.has_error:
                self.purgatory.remove(op.op_id)
                self._completions.append((op.op_id, result.response))

    # ------------------------------------------------------------ metadata

    def commit(self, records: list[MetadataRecord], *, now_ms: int) -> None:
        """Append controller records to the metadata log (fsynced), replay them and
        apply the difference to the hosted logs."""
        if not records:
            return
        assert self._metadata_log is not None, "start() first"
        last_offset = self._metadata_log.append(records, now_ms=now_ms)
        before = self.image
        after = self.controller.replay(records, last_offset=last_offset)
        removed = self.replicas.publish(before, after, now_ms=now_ms)
        for tp in removed:
            self._dirty.pop(tp, None)
            self._wake_fetches_removed(tp)
        for topic in sorted({tp.topic for tp in removed}):
            self.stats.forget(topic)

    def _wake_fetches_removed(self, tp: TopicPartition) -> None:
        for op in self.purgatory.watching(tp):
            self.purgatory.remove(op.op_id)
            self._completions.append((op.op_id, read_fetch(self, op.request).response))

    # ------------------------------------------------------------ periodic work

    def poll(self, *, now_ms: int) -> int:
        """Retention, ``flush.ms``/``flush.messages`` and recovery-point checkpoints;
        returns the wall time at which to call again. A partition whose log fails is
        skipped (the log takes itself offline) and reported in ``take_storage_errors``."""
        retention = now_ms >= self._next_retention_ms
        checkpoint = now_ms >= self._next_checkpoint_ms
        if retention:
            self._next_retention_ms = now_ms + self.config.log_retention_check_interval_ms
        if checkpoint:
            self._next_checkpoint_ms = now_ms + self.config.log_flush_offset_checkpoint_interval_ms
        for partition in self.partitions.values():
            if partition.log.is_offline:
                continue
            try:
                if partition.flush_due(now_ms):
                    self._dirty[partition.tp] = partition
                if retention and partition.log.apply_retention(now_ms, high_watermark=partition.high_watermark):
                    self._wake_fetches(partition.tp)
                if checkpoint:
                    partition.checkpoint()
            except MqError as err:
                self._storage_errors.append((partition.tp, err))
        return min(self._next_retention_ms, self._next_checkpoint_ms, now_ms + 1000)

    def report_corruption(self, tp: TopicPartition, err: LogCorruptedError) -> None:
        key = (err.path, err.position)
        if key not in self._corruptions_seen:
            self._corruptions_seen[key] = None
            self._corruption_reports.append((tp, err))

    def take_corruption_reports(self) -> list[tuple[TopicPartition, LogCorruptedError]]:
        """Corruptions found since the last call, for the shell to log once each."""
        reports, self._corruption_reports = self._corruption_reports, []
        return reports

    def take_storage_errors(self) -> list[tuple[TopicPartition, MqError]]:
        errors, self._storage_errors = self._storage_errors, []
        return errors
