"""The active-active copy path: the asyncio shell around ``mirror.remote`` (forwarding rule,
provenance), ``mirror.dedupe`` (start-up scan, dedupe index) and ``mirror.translation``
(offset syncs). docs/explanation/active-active.md tells the story.

One task per source partition, each a loop:

1. **start**: wait until the remote partition's end has *settled* (its high watermark
   unchanged for ``settle_ms``: a write of a previous run, or of a failed attempt, that
   the leader appended may still commit), then run the ``TailScan`` over it from the
   partition's last offset sync: the source offset to fetch from and the dedupe index;
2. **fetch** from the source (raw batches below the high watermark, through the link),
   the next fetch already in flight while the current records are written;
3. **decide** each record: the forwarding rule (``forward_copy``) and the index
   (``DedupeIndex.admit``); a record left out is counted, never written. A source batch
   whose records carry no provenance is decided whole (``Stamper.takes_fast_path``,
   ``DedupeIndex.admit_run``): see ``_decide``;
4. **write** the rest to the remote partition (same partition number, the source's
   timestamps, provenance headers) with a plain producer (``acks=all``, no retries, no
   idempotence): each write is one produce request of at most ``write_max_bytes`` (4 MiB),
   its records in batches of about ``batch_max_bytes`` (1 MiB, never more than the remote
   topic's ``max.message.bytes``) built from columns (``AppendedHeaders`` templates) and sent
   whole (``Producer.send_built_batch``); the leader appends a request's batches whole or
   not at all, and a log keeps a prefix of them at most; one write in flight per partition;
5. after the acknowledgement, feed the written ``(source offset, target offset)`` pairs to
   the ``OffsetSyncEmitter`` and write the syncs it emits.

A failed write is not retried by the producer (a retry of an append whose answer was lost
would duplicate it): the partition starts over at step 1, which finds what landed.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add

from mirror.dedupe import DedupeIndex, TailScan
from mirror.latency import LatencyWindow
from mirror.metrics import FlowMetrics
from mirror.offset_syncs import send_offset_syncs
from mirror.partition import Gap, PartitionState, PartitionStatus
from mirror.remote import Route, Stamper
from mirror.source_rate import SourceEndHistory, lag_estimate
from mirror.translation import OffsetSyncEmitter, OffsetSyncStore
from mq.client import Admin, Producer
from mq.client.cluster import cancel_tasks
from mq.client.mirror_admin import OffsetOutOfRange, RawFetch
from mq.core.clock import Clock
from mq.core.config import TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition
from mq.protocol.batch_builder import build_batch_columns
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import RecordColumns, decode_record_columns, iter_batches

log = logging.getLogger("mirror")

MIB = 1024 * 1024
DEFAULT_MAX_MESSAGE_BYTES = TopicConfig.max_message_bytes
RECORD_BYTES = 200  # a record's share of a write besides key and value: its headers, provenance included

# A fetch that failed with one of these had no answer from the source (connection refused or
# lost, request timed out): the link or the source region is down, not the partition.
UNANSWERED = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})
STALL_TIMEOUT_MS = 5_000  # a fetch unanswered this long: the source is not heard


class PartitionBlocked(Exception):
    """The partition cannot go on until an operator acts (the reason says what)."""


@dataclass
class Fetched:
    """The records of one fetch to write, as columns, in source order. ``headers``: each
    record's own headers while every record took the fast path (``Stamper.appended``
    stamps them when the write is built), else (``stamped``) each copy's whole headers."""

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[tuple[str, bytes], ...]]
    next_offset: int
    records: int  # fetched past the offset asked for
    stamped: bool = False

    @property
    def writes(self) -> int:
        return len(self.offsets)


class BatchFetcher:
    """One source fetch for every partition that wants one: a connection answers in request
    order, so a long poll per partition would hold the others' answers up. Partitions ask
    with ``fetch`` (a future); the loop sends what is asked as one ``fetch_raw_many`` (a
    request per source leader) and answers each; what is asked meanwhile goes next."""

    def __init__(self, source: Admin, *, max_wait_ms: int, partition_max_bytes: int) -> None:
        self.source = source
        self.max_wait_ms = max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self._wanted: dict[TopicPartition, tuple[int, asyncio.Future]] = {}
        self._wake = asyncio.Event()

    def fetch(self, tp: TopicPartition, offset: int) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self._wanted[tp] = (offset, future)
        self._wake.set()
        return future

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            asked = {tp: want for tp, want in self._wanted.items() if not want[1].done()}
            self._wanted.clear()
            if not asked:
                continue
            results: Mapping[TopicPartition, RawFetch | MqError]
            try:
                results = await self.source.fetch_raw_many(
                    {tp: offset for tp, (offset, _) in asked.items()},
                    partition_max_bytes=self.partition_max_bytes, max_wait_ms=self.max_wait_ms)
            except MqError as exc:
                results = {tp: exc for tp in asked}
            for tp, (_, future) in asked.items():
                if not future.done():
                    future.set_result(results[tp])


class RemotePartition:
    """What the flow knows about one source partition and its remote partition."""

    def __init__(self, tp: TopicPartition, remote_topic: str, route: Route, *, offset_lag_max: int,
                 offset_sync_interval_ms: int) -> None:
        self.tp = tp
        self.stamper = Stamper(route, tp.partition)
        self.remote_tp = TopicPartition(remote_topic, tp.partition)
        self.emitter = OffsetSyncEmitter(tp, offset_lag_max=offset_lag_max, interval_ms=offset_sync_interval_ms)
        self.index = DedupeIndex()
        self.fetch_offset: int | None = None
        self.state = PartitionState.WAITING
        self.reason = ""
        self.resume_reason = ""
        self.source_end: int | None = None
        self.source_log_start: int | None = None
        self.source_seen_wall_ms: int | None = None
        self.latency = LatencyWindow()
        self.last_ts: int | None = None
        self.records_mirrored = 0
        self.bytes_mirrored = 0
        self.not_forwarded = 0
        self.duplicates = 0
        self.restarts = 0
        self.gaps: deque[Gap] = deque(maxlen=100)
        self.gap_records = 0
        # what is known of a source that does not answer (mirror.source_rate; as PartitionMirror)
        self.source_history = SourceEndHistory()
        self.source_unreachable = False
        self.fetching_since_ms: int | None = None
        self.stall_timeout_ms = STALL_TIMEOUT_MS
        self.max_message_bytes = DEFAULT_MAX_MESSAGE_BYTES  # the remote topic's, read at each start

    # ------------------------------------------------------------------ the source, heard or not

    def fetch_asked(self, now_ms: int) -> None:
        """A fetch is asked of the source (monotonic ``now_ms``)."""
        if self.fetching_since_ms is None:
            self.fetching_since_ms = now_ms

    def source_answered(self, wall_ms: int, high_watermark: int, log_start_offset: int) -> None:
        """The source answered a fetch (records, nothing new, or out of range)."""
        self.fetching_since_ms = None
        self.source_end, self.source_log_start, self.source_seen_wall_ms = high_watermark, log_start_offset, wall_ms
        self.source_history.observe(wall_ms, high_watermark)
        self.source_unreachable = False
        if self.state == PartitionState.STALLED:  # stalled on the source, which answers again
            self.state, self.reason = PartitionState.RUNNING, ""

    def source_failed(self, error: MqError) -> None:
        """A fetch failed: with no answer at all (``UNANSWERED``), the source is not heard."""
        self.fetching_since_ms = None
        if error.code in UNANSWERED:
            self.source_unreachable = True

    def seed_source(self, *, source_end: int, seen_wall_ms: int | None, rate_per_s: float | None) -> None:
        """What a previous mirror process last knew of the source (its status file), kept
        while this one has not heard the source yet."""
        if self.source_end is None:
            self.source_end, self.source_seen_wall_ms = source_end, seen_wall_ms
            self.source_history.seed(rate_per_s)

    def tick(self, now_ms: int) -> None:
        """The runner calls it before a status snapshot (``PartitionMirror``'s interface): a
        fetch unanswered for ``stall_timeout_ms`` means the source is not heard."""
        if self.fetching_since_ms is not None and now_ms - self.fetching_since_ms > self.stall_timeout_ms:
            self.source_unreachable = True
            if self.state != PartitionState.BLOCKED:
                self.state = PartitionState.STALLED
                self.reason = (f"no answer from the source for {now_ms - self.fetching_since_ms} ms "
                               f"(link down or source leader unreachable)")

    def lag_records(self) -> int | None:
        if self.source_end is None or self.fetch_offset is None:
            return None
        return max(0, self.source_end - self.fetch_offset)

    def status(self, wall_ms: int) -> PartitionStatus:
        """As ``PartitionMirror.status``: while the source is not heard, the lag is the last
        known source end minus what is copied (a lower bound as of ``source_seen_wall_ms``)
        and the estimate adds the last known produce rate x the silence."""
        lag = self.lag_records()
        if lag == 0:
            lag_s = None if self.source_unreachable else 0.0
        else:
            lag_s = (max(0.0, (wall_ms - self.last_ts) / 1000)
                     if lag is not None and self.last_ts is not None else None)
        seen = self.source_seen_wall_ms
        silent_ms = max(0, wall_ms - seen) if seen is not None else None
        rate = self.source_history.rate_per_s()
        estimate = lag_estimate(lag, rate, silent_ms) \
            if self.source_unreachable and silent_ms is not None else None
        return PartitionStatus(
            self.tp.topic, self.tp.partition, self.state, self.reason, self.source_end, self.source_log_start,
            self.fetch_offset, lag, lag_s, self.latency.percentile(0.5, wall_ms),
            self.latency.percentile(0.99, wall_ms), self.records_mirrored, self.bytes_mirrored, self.gap_records,
            tuple((g.from_offset, g.to_offset) for g in self.gaps), seen, self.source_unreachable,
            None if silent_ms is None else round(silent_ms / 1000, 3), None if rate is None else round(rate, 1),
            estimate)

    def status_json(self, wall_ms: int) -> dict:
        doc = self.status(wall_ms).to_json()
        doc.update(remote_topic=self.remote_tp.topic, not_forwarded=self.not_forwarded,
                   duplicates_dropped=self.duplicates, restarts=self.restarts, resume=self.resume_reason)
        return doc


class ActiveCopier:
    def __init__(self, flow: str, route: Route, source: Admin, target: Admin, producer: Producer,
                 metrics: FlowMetrics, clock: Clock, *, offset_lag_max: int, offset_sync_interval_ms: int,
                 fetch_max_wait_ms: int = 250, partition_max_bytes: int = 1024 * 1024,
                 write_max_bytes: int = 4 * MIB, batch_max_bytes: int = MIB, settle_ms: int = 1_000,
                 retry_backoff_ms: int = 500) -> None:
        self.flow = flow
        self.route = route
        self.source = source
        self.target = target
        self.producer = producer
        self.metrics = metrics
        self.clock = clock
        self.offset_lag_max = offset_lag_max
        self.offset_sync_interval_ms = offset_sync_interval_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self.write_max_bytes = write_max_bytes
        self.batch_max_bytes = batch_max_bytes
        self.settle_ms = settle_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.partitions: dict[TopicPartition, RemotePartition] = {}
        self.store = OffsetSyncStore()
        self.ready = asyncio.Event()  # set once the store is loaded (the runner's start step)
        self._tasks: dict[TopicPartition, asyncio.Task] = {}
        self._sync_sends: set[asyncio.Task] = set()
        self.fetcher = BatchFetcher(source, max_wait_ms=fetch_max_wait_ms, partition_max_bytes=partition_max_bytes)

    # ------------------------------------------------------------------ partitions

    def set_partitions(self, remote: Mapping[TopicPartition, str]) -> None:
        """Copy exactly these source partitions (to the remote topic named for each)."""
        for tp in sorted(set(self.partitions) - set(remote)):
            del self.partitions[tp]
            task = self._tasks.pop(tp, None)
            if task is not None:
                task.cancel()
        for tp in sorted(set(remote) - set(self.partitions)):
            rp = RemotePartition(tp, remote[tp], self.route, offset_lag_max=self.offset_lag_max,
                                 offset_sync_interval_ms=self.offset_sync_interval_ms)
            self.partitions[tp] = rp
            self._tasks[tp] = asyncio.get_running_loop().create_task(self._run_partition(rp))

    def mirrored_ends(self) -> dict[TopicPartition, int]:
        return {tp: rp.fetch_offset for tp, rp in self.partitions.items() if rp.fetch_offset is not None}

    def remote_topics(self) -> dict[str, str]:
        return {tp.topic: rp.remote_tp.topic for tp, rp in self.partitions.items()}

    async def run(self) -> None:
        """The fetcher, and idle offset syncs (``OffsetSyncEmitter.tick``), until cancelled;
        then stop every task."""
        fetcher = asyncio.get_running_loop().create_task(self.fetcher.run())
        try:
            while True:
                await asyncio.sleep(min(0.2, self.offset_sync_interval_ms / 1000 / 2 or 0.2))
                now = self.clock.monotonic_ms()
                syncs = [s for rp in self.partitions.values() if (s := rp.emitter.tick(now)) is not None]
                self._emit(syncs)
        finally:
            await cancel_tasks([fetcher, *self._tasks.values(), *self._sync_sends])

    # ------------------------------------------------------------------ one partition

    async def _run_partition(self, rp: RemotePartition) -> None:
        await self.ready.wait()
        pending: asyncio.Task | None = None
        stage = "start"
        try:
            while True:
                try:
                    if rp.fetch_offset is None:
                        stage = "start"
                        await self._start(rp)
                    assert rp.fetch_offset is not None
                    fetched = await (pending or self._fetch(rp, rp.fetch_offset))
                    pending = None
                    if fetched is None:
                        continue
                    if not fetched.writes:
                        rp.fetch_offset = fetched.next_offset
                    pending = asyncio.get_running_loop().create_task(self._fetch(rp, fetched.next_offset))
                    if fetched.writes:
                        stage = "write"
                        await self._write(rp, fetched)
                        rp.fetch_offset = fetched.next_offset
                    rp.state, rp.reason = PartitionState.RUNNING, ""
                except PartitionBlocked as exc:
                    rp.state, rp.reason = PartitionState.BLOCKED, str(exc)
                    log.warning("event=partition_blocked flow=%s topic=%s partition=%d reason=\"%s\"",
                                self.flow, rp.tp.topic, rp.tp.partition, exc)
                    return
                except MqError as exc:
                    what = "cannot start (read the target's end)" if stage == "start" else "target write failed"
                    self._restart(rp, f"{what}: {exc}")
                except Exception:  # a bug must not stop the flow; it is logged in full
                    log.exception("event=partition_crashed flow=%s topic=%s partition=%d", self.flow,
                                  rp.tp.topic, rp.tp.partition)
                    self._restart(rp, "unexpected error (see the mirror log)")
                if rp.fetch_offset is None:
                    if pending is not None:
                        pending.cancel()
                        pending = None
                    await asyncio.sleep(self.retry_backoff_ms / 1000)
        finally:
            if pending is not None:
                pending.cancel()

    def _restart(self, rp: RemotePartition, reason: str) -> None:
        self.metrics.error("append")
        rp.state, rp.reason = PartitionState.STALLED, reason
        rp.fetch_offset = None
        rp.fetching_since_ms = None  # the fetch in flight, if any, is dropped
        rp.restarts += 1
        log.info("event=partition_restart flow=%s topic=%s partition=%d reason=\"%s\"",
                 self.flow, rp.tp.topic, rp.tp.partition, reason)

    async def _start(self, rp: RemotePartition) -> None:
        """Step 1: the settled end of the remote partition, then the scan."""
        rtp = rp.remote_tp
        await self.producer.partitions_for(rtp.topic)  # metadata known: sends never wait for it
        limit = await self.target.describe_configs(rtp.topic, ["max.message.bytes"])
        rp.max_message_bytes = int(limit[0].value) if limit and limit[0].value else DEFAULT_MAX_MESSAGE_BYTES
        end = await self._settled_end(rtp)
        log_start = (await self.target.list_offsets({rtp: EARLIEST_TIMESTAMP}))[rtp].offset
        source_start = (await self.source.list_offsets({rp.tp: EARLIEST_TIMESTAMP}))[rp.tp].offset
        syncs = self.store.syncs(rp.tp)
        scan = TailScan(source_region=self.route.source_region, target_region=self.route.target_region,
                        log_start=log_start, end=end, sync=syncs[-1] if syncs else None,
                        source_log_start=source_start)
        while (window := scan.next_read()) is not None:
            start, stop = window
            offset = start
            while offset < stop:
                raw = await self.target.fetch_raw(rtp, offset, self.partition_max_bytes)
                if not raw.records:
                    break
                pairs, next_offset = _offsets_and_headers(raw.records)
                scan.feed([(o, h) for o, h in pairs if o >= offset])
                offset = max(offset + 1, next_offset)
            scan.finish_read()
        assert scan.result is not None
        rp.index, rp.fetch_offset, rp.resume_reason = scan.result.index, scan.result.fetch_offset, scan.result.reason
        rp.emitter.reset()
        rp.state, rp.reason = PartitionState.RUNNING, ""
        log.info("event=partition_start flow=%s topic=%s partition=%d remote=%s fetch_offset=%d scanned=%d "
                 "reason=\"%s\"", self.flow, rp.tp.topic, rp.tp.partition, rtp.topic, rp.fetch_offset,
                 scan.records_read, scan.result.reason)

    async def _settled_end(self, tp: TopicPartition) -> int:
        """The high watermark once it stayed put for ``settle_ms`` (at most 20 tries)."""
        end = (await self.target.list_offsets({tp: LATEST_TIMESTAMP}))[tp].offset
        for _ in range(20):
            await asyncio.sleep(self.settle_ms / 1000)
            again = (await self.target.list_offsets({tp: LATEST_TIMESTAMP}))[tp].offset
            if again == end:
                return end
            end = again
        return end

    async def _fetch(self, rp: RemotePartition, offset: int) -> Fetched | None:
        """Steps 2 and 3: fetch at ``offset`` and decide; None after a source error (backed off)."""
        rp.fetch_asked(self.clock.monotonic_ms())
        result = await self.fetcher.fetch(rp.tp, offset)
        wall = self.clock.wall_ms()
        if isinstance(result, OffsetOutOfRange):
            rp.source_answered(wall, result.high_watermark, result.log_start_offset)
            return Fetched([], [], [], [], [], self._out_of_range(rp, offset, result, wall), 0)
        if isinstance(result, MqError):
            rp.source_failed(result)
            self.metrics.error("fetch")
            rp.state, rp.reason = PartitionState.STALLED, f"source fetch failed: {result}"
            await asyncio.sleep(self.retry_backoff_ms / 1000)
            return None
        rp.source_answered(wall, result.high_watermark, result.log_start_offset)
        try:
            return self._decide(rp, result, offset)
        except ProtocolError as exc:
            self.metrics.error("fetch")
            rp.state, rp.reason = PartitionState.STALLED, f"corrupt fetch answer, fetching again: {exc}"
            await asyncio.sleep(self.retry_backoff_ms / 1000)
            return None

    def _out_of_range(self, rp: RemotePartition, offset: int, error: OffsetOutOfRange, wall: int) -> int:
        """A gap (the offset to go on from), or ``PartitionBlocked``."""
        rp.source_end, rp.source_log_start = error.high_watermark, error.log_start_offset
        if offset < error.log_start_offset:
            gap = Gap(rp.tp, offset, error.log_start_offset, wall)
            rp.gaps.append(gap)
            rp.gap_records += gap.records
            self.metrics.gap(rp.tp.topic, rp.tp.partition)
            log.warning("event=gap flow=%s topic=%s partition=%d from_offset=%d to_offset=%d records=%d "
                        "message=\"offsets [%d, %d) were deleted in the source before they were copied\"",
                        self.flow, rp.tp.topic, rp.tp.partition, offset, error.log_start_offset, gap.records,
                        offset, error.log_start_offset)
            return error.log_start_offset
        raise PartitionBlocked(f"the source partition ends at {error.high_watermark}, below offset {offset} the "
                               f"flow has copied: the source lost records (unclean election, or the topic was "
                               f"re-created); restart the mirror once the source is what it should be")

    def _decide(self, rp: RemotePartition, raw: RawFetch, offset: int) -> Fetched | None:
        """Step 3 for every record past ``offset``. A source batch whose records carry no
        provenance (written in the source: the normal case) is decided whole, in C-level
        passes: every record is forwarded, stamped from templates (``Stamper.stamp_columns``)
        and admitted by one comparison (``DedupeIndex.admit_run``); any other batch record
        by record (``Stamper.copy``, ``DedupeIndex.admit_origin``)."""
        view = memoryview(raw.records)
        out = Fetched([], [], [], [], [], offset, 0)
        stamper, index = rp.stamper, rp.index
        for pos, header in iter_batches(view):
            if header.next_offset <= offset:
                continue
            out.next_offset = max(out.next_offset, header.next_offset)
            if header.is_control:
                continue
            cols = decode_record_columns(view[pos:pos + header.size]).since(offset)
            out.records += len(cols)
            if stamper.takes_fast_path(cols.headers):
                first = index.admit_run(stamper.origin, cols.offsets)
                rp.duplicates += first
                offsets, timestamps = cols.offsets[first:], cols.timestamps[first:]
                out.offsets += offsets
                out.timestamps += timestamps
                out.keys += cols.keys[first:]
                out.values += cols.values[first:]
                own = cols.headers[first:]
                out.headers += stamper.appended.columns(own, offsets, timestamps) if out.stamped else own
            else:
                if not out.stamped:  # from here on the headers column holds whole headers
                    out.headers = stamper.appended.columns(out.headers, out.offsets, out.timestamps)
                    out.stamped = True
                _decide_each(rp, cols, out)
        if out.next_offset == offset:
            return None  # nothing new (a long poll that ended empty)
        return out

    # ------------------------------------------------------------------ writes

    async def _write(self, rp: RemotePartition, fetched: Fetched) -> None:
        """Steps 4 and 5, in writes of at most ``write_max_bytes``, each one produce request
        of batches of at most ``batch_max_bytes`` (built from the columns:
        ``AppendedHeaders.build`` from byte templates, or ``build_batch_columns`` when the
        headers are already whole), which the leader appends whole or not at all."""
        topic, partition = rp.remote_tp.topic, rp.remote_tp.partition
        ends = _cumulative_sizes(fetched.keys, fetched.values)
        for i, j in _spans(ends, 0, len(ends), self.write_max_bytes):
            size = ends[j - 1] - (ends[i - 1] if i else 0)
            batches = b"".join(self._batches(rp, fetched, ends, i, j))
            base = await self.producer.send_built_batch(topic, partition, batches, j - i, size)
            offsets, timestamps = fetched.offsets[i:j], fetched.timestamps[i:j]
            wall, now = self.clock.wall_ms(), self.clock.monotonic_ms()
            rp.records_mirrored += j - i
            rp.bytes_mirrored += size
            rp.last_ts = max(timestamps)
            latency = max(0, wall - rp.last_ts)
            rp.latency.add(wall, latency)
            self.metrics.observe_latencies(rp.tp.topic, rp.tp.partition, (latency,))
            if offsets[-1] - offsets[0] == j - i - 1:  # one-for-one: a run
                self._emit(rp.emitter.on_written_run(offsets[0], base, j - i, now))
            else:
                self._emit(rp.emitter.on_written(zip(offsets, range(base, base + j - i)), now))

    def _batches(self, rp: RemotePartition, fetched: Fetched, ends: list[int], i: int, j: int) -> Iterator[bytes]:
        """Records ``[i, j)`` as batches of about ``batch_max_bytes`` (by ``ends``, an
        estimate), each halved until it fits the remote topic's ``max.message.bytes``
        (records with large headers of their own take more than the estimate)."""
        todo = list(_spans(ends, i, j, min(self.batch_max_bytes, rp.max_message_bytes)))[::-1]
        while todo:
            a, b = todo.pop()
            batch = self._build(rp, fetched, a, b)
            if len(batch) > rp.max_message_bytes and b - a > 1:
                todo += [((a + b) // 2, b), (a, (a + b) // 2)]
                continue
            yield batch

    def _build(self, rp: RemotePartition, fetched: Fetched, i: int, j: int) -> bytes:
        """One batch of records ``[i, j)`` of ``fetched``."""
        compression = self.producer.compression
        timestamps = fetched.timestamps[i:j]
        if fetched.stamped:
            return build_batch_columns(timestamps, fetched.keys[i:j], fetched.values[i:j], fetched.headers[i:j],
                                       compression=compression)
        # origin offset and timestamp: the record's own
        return rp.stamper.appended.build(timestamps, fetched.keys[i:j], fetched.values[i:j], fetched.headers[i:j],
                                         fetched.offsets[i:j], timestamps, compression=compression)

    def _emit(self, syncs: list) -> None:
        if not syncs:
            return
        for sync in syncs:
            self.store.add(sync)
        futures = send_offset_syncs(self.producer, self.route.source_region, syncs)
        task = asyncio.get_running_loop().create_task(self._await_syncs(futures))
        self._sync_sends.add(task)
        task.add_done_callback(self._sync_sends.discard)

    async def _await_syncs(self, futures: list) -> None:
        try:
            for f in futures:
                await f
        except MqError as exc:  # a lost sync only makes translation rewind further
            self.metrics.error("offset_syncs")
            log.info("event=offset_sync_failed flow=%s error=%s", self.flow, exc)


def _decide_each(rp: RemotePartition, cols: RecordColumns, out: Fetched) -> None:
    """Step 3 record by record (``Stamper.copy``, ``DedupeIndex.admit_origin``)."""
    copy, admit = rp.stamper.copy, rp.index.admit_origin
    for o, ts, key, value, headers in zip(cols.offsets, cols.timestamps, cols.keys, cols.values,
                                          cols.headers, strict=True):
        decision, origin, origin_offset, stamped = copy(headers, o, ts)
        if not decision or origin is None:
            rp.not_forwarded += 1
            continue
        if not admit(origin, origin_offset):
            rp.duplicates += 1
            continue
        out.offsets.append(o)
        out.timestamps.append(ts)
        out.keys.append(key)
        out.values.append(value)
        out.headers.append(stamped)


def _spans(ends: list[int], start: int, stop: int, limit: int) -> Iterator[tuple[int, int]]:
    """``[i, j)`` ranges covering ``[start, stop)`` whose records (``ends``: cumulative
    sizes) take at most ``limit`` bytes, or one record each when a record alone is larger."""
    i = start
    while i < stop:
        before = ends[i - 1] if i else 0
        j = min(stop, max(i + 1, bisect_right(ends, before + limit, i)))
        yield i, j
        i = j


def _cumulative_sizes(keys: list[bytes | None], values: list[bytes | None]) -> list[int]:
    """Each record's end in a write (key, value and ``RECORD_BYTES``), summed in C."""
    sizes = map(len, values) if None not in values else (0 if v is None else len(v) for v in values)
    if keys.count(None) != len(keys):
        sizes = map(add, sizes, (0 if k is None else len(k) for k in keys))
    return list(accumulate(map(add, sizes, repeat(RECORD_BYTES))))


def _offsets_and_headers(records: bytes) -> tuple[list[tuple[int, tuple]], int]:
    """Every record's offset and headers, and the offset after the last batch."""
    view = memoryview(records)
    out: list[tuple[int, tuple]] = []
    next_offset = -1
    for pos, header in iter_batches(view):
        next_offset = header.next_offset
        if header.is_control:
            continue
        cols = decode_record_columns(view[pos:pos + header.size])
        out.extend(zip(cols.offsets, cols.headers, strict=True))
    return out, next_offset
