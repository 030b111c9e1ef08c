"""The copy path: the asyncio shell around the per-partition cores (``mirror.partition``).

One loop drives every partition of the flow:

* **fetch**: FetchRequests to each source leader for the partitions that have room, as
  the flow's fetch plan says (``mirror.fetch_plan``: how many bytes per partition and
  request, up to ``fetches_per_leader`` requests in flight per leader, all within the
  flow's byte budget). As a client (``replica_id`` -1), so only records below the
  source's high watermark, i.e. acknowledged ones, are copied. A request long-polls
  ``fetch_max_wait_ms`` at the source and travels on a connection lane of its own (one
  per slot), so admin requests and the other slot never queue behind it. The source is
  reached through ``address_map``: the link proxies, never directly.
* **append**: one MirrorAppend in flight per partition (``Admin.mirror_append``, acks=-1),
  while the next fetch for that partition is already out (pipelining);
* **resolve**: partitions that do not know the target's end (at start, after a target
  error) read it with ListOffsets (the high watermark) and start there; a suspected gap is
  confirmed (or not) against the target's *settled* end, read with the end probe (an
  empty MirrorAppend, acks=-1, answered once the high watermark covers the log end: a
  new leader's high watermark may lag the records its replicas hold).

Every completion updates a core and wakes the loop, which then sends whatever the cores
say is due. The loop also wakes for the earliest retry deadline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from mirror.fetch_plan import FetchPlanner, FetchSettings, PlannedFetch
from mirror.metrics import FlowMetrics
from mirror.partition import END_PROBE_START_OFFSET, PartitionMirror
from mq.client import Admin
from mq.client.cluster import FETCH_LANE, ClusterClient, cancel_tasks
from mq.client.internals.metadata import needs_metadata_refresh
from mq.core.clock import Clock
from mq.core.errors import ErrorCode, MqError
from mq.core.types import LATEST_TIMESTAMP, TopicPartition
from mq.protocol import messages as m

log = logging.getLogger("mirror")

Sent = dict[TopicPartition, int]  # tp -> the epoch of the partition core when the fetch was sent


class Copier:
    def __init__(self, flow: str, source: ClusterClient, target: Admin, metrics: FlowMetrics,
                 clock: Clock, *, fetch_max_wait_ms: int = 500, fetch: FetchSettings | None = None,
                 append_timeout_ms: int = 30_000, stall_timeout_ms: int = 5_000) -> None:
        self.flow = flow
        self.source = source
        self.target = target
        self.metrics = metrics
        self.clock = clock
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.planner = FetchPlanner(fetch)
        self.append_timeout_ms = append_timeout_ms
        self.stall_timeout_ms = stall_timeout_ms
        self.partitions: dict[TopicPartition, PartitionMirror] = {}
        self._fetches: dict[tuple[int, int], asyncio.Task] = {}  # (leader, slot) -> its request
        self._appends: dict[TopicPartition, asyncio.Task] = {}
        self._resolving: asyncio.Task | None = None
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ partitions

    def set_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Mirror exactly ``tps`` from now on (new ones start by reading the target's end)."""
        wanted = set(tps)
        for tp in sorted(wanted - set(self.partitions)):
            fetch = self.planner.settings
            self.partitions[tp] = PartitionMirror(
                tp, max_buffered_bytes=fetch.partition_buffer_bytes, max_append_bytes=fetch.partition_max_bytes,
                stall_timeout_ms=self.stall_timeout_ms)
        for tp in sorted(set(self.partitions) - wanted):
            del self.partitions[tp]
        self.source.metadata.add_topics(*sorted({tp.topic for tp in wanted}))
        self._wake.set()

    def mirrored_ends(self) -> dict[TopicPartition, int]:
        return {tp: pm.mirrored_end for tp, pm in self.partitions.items() if pm.mirrored_end is not None}

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        try:
            while True:
                now = self.clock.monotonic_ms()
                self._resolve_ends()
                self._send_fetches(now)
                self._send_appends(now)
                self._drain_gaps()
                self._wake.clear()
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that
                    # arrives as the event is set (cpython gh-86296), and the flow never stops.
                    async with asyncio.timeout(self._idle_timeout_s(now)):
                        await self._wake.wait()
                except TimeoutError:
                    pass
        finally:
            await cancel_tasks([*self._fetches.values(), *self._appends.values(), self._resolving])

    def _idle_timeout_s(self, now: int) -> float:
        deadlines = [t for pm in self.partitions.values()
                     for t in (pm.fetch_retry_at_ms, pm.append_retry_at_ms) if t > now]
        return max(0.001, min([1000, *(t - now for t in deadlines)]) / 1000)

    def _done(self, _: object = None) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ target ends

    def _resolve_ends(self) -> None:
        if self._resolving is not None and not self._resolving.done():
            return
        waiting = [tp for tp, pm in self.partitions.items() if pm.needs_reset() or pm.needs_end_check()]
        if waiting:
            self._resolving = asyncio.get_running_loop().create_task(self._resolve(waiting))
            self._resolving.add_done_callback(self._done)

    async def _resolve(self, tps: list[TopicPartition]) -> None:
        checks = [tp for tp in tps if self.partitions[tp].needs_end_check()]
        if checks:
            await asyncio.gather(*(self._probe_end(tp) for tp in checks))
        tps = [tp for tp in tps if self.partitions[tp].needs_reset()]
        if not tps:
            return
        try:
            ends = await self.target.list_offsets({tp: LATEST_TIMESTAMP for tp in tps})
        except MqError as exc:
            self.metrics.error("target_offsets")
            log.info("event=target_offsets_failed flow=%s error=%s", self.flow, exc)
            for tp in tps:
                pm = self.partitions.get(tp)
                if pm is not None:
                    pm.target_problem = f"cannot read the target's end: {exc}"
            await asyncio.sleep(1)
            return
        for tp, info in ends.items():
            pm = self.partitions.get(tp)
            if pm is None:
                continue
            if pm.needs_reset():
                pm.reset(info.offset)
                log.info("event=partition_start flow=%s topic=%s partition=%d mirrored_end=%d",
                         self.flow, tp.topic, tp.partition, info.offset)

    async def _probe_end(self, tp: TopicPartition) -> None:
        """The target's settled end for a suspected gap (``PartitionMirror.on_end_probe``)."""
        pm = self.partitions[tp]
        try:
            result = await self.target.mirror_append(tp, b"", acks=-1, start_offset=END_PROBE_START_OFFSET,
                                                     timeout_ms=self.append_timeout_ms)
        except MqError as exc:
            self.metrics.error("target_offsets")
            log.info("event=target_end_probe_failed flow=%s topic=%s partition=%d error=%s",
                     self.flow, tp.topic, tp.partition, exc)
            pm.target_problem = f"cannot read the target's end: {exc}"
            await asyncio.sleep(1)
            return
        if pm.needs_end_check():
            pm.target_problem = None
            pm.on_end_probe(high_watermark=result.high_watermark, log_end_offset=result.log_end_offset,
                            wall_ms=self.clock.wall_ms())

    # ------------------------------------------------------------------ fetches

    def _send_fetches(self, now: int) -> None:
        fetches, missing_leader = self.planner.plan(self.partitions, self.source.metadata.leader_for, now)
        if missing_leader:
            self.source.update_metadata_soon()
        for fetch in fetches:
            task = asyncio.get_running_loop().create_task(self._fetch(fetch))
            self._fetches[(fetch.leader, fetch.slot)] = task
            task.add_done_callback(self._done)

    async def _fetch(self, fetch: PlannedFetch) -> None:
        sent: Sent = {tp: epoch for tp, _, epoch in fetch.partitions}
        topics: dict[str, list[m.FetchPartition]] = {}
        for tp, offset, _ in fetch.partitions:
            topics.setdefault(tp.topic, []).append(m.FetchPartition(
                tp.partition, offset, partition_max_bytes=self.planner.settings.partition_max_bytes))
        request = m.FetchRequest(topics=[m.FetchTopic(t, ps) for t, ps in topics.items()],
                                 max_wait_ms=self.fetch_max_wait_ms, min_bytes=1, max_bytes=fetch.max_bytes)
        lane = FETCH_LANE if fetch.slot == 0 else f"{FETCH_LANE}-{fetch.slot}"
        try:
            try:
                response = await self.source.request(fetch.leader, request, lane=lane)
            except MqError as exc:
                self.metrics.error("fetch")
                self.source.update_metadata_soon()
                now, wall = self.clock.monotonic_ms(), self.clock.wall_ms()
                for tp, epoch in sent.items():
                    pm = self.partitions.get(tp)
                    if pm is not None:  # no answer: the link or the source is down
                        pm.on_fetch_error(epoch, exc.code, exc.message, now, wall, unanswered=True)
                return
            self._on_fetch_response(response, sent)  # type: ignore[arg-type]
        finally:
            self.planner.done(fetch.leader, fetch.slot)
            self._fetches.pop((fetch.leader, fetch.slot), None)

    def _on_fetch_response(self, response: m.FetchResponse, sent: Sent) -> None:
        now, wall = self.clock.monotonic_ms(), self.clock.wall_ms()
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                pm = self.partitions.get(tp)
                if pm is None or tp not in sent:
                    continue
                answered.add(tp)
                if p.error_code == ErrorCode.NONE:
                    pm.on_fetched(sent[tp], p.records, p.high_watermark, p.log_start_offset, now, wall)
                    continue
                code = _code(p.error_code)
                self.metrics.error("fetch")
                if needs_metadata_refresh(code):
                    self.source.update_metadata_soon()
                pm.on_fetch_error(sent[tp], code, p.error_message or code.description, now, wall,
                                  high_watermark=p.high_watermark, log_start_offset=p.log_start_offset)
        for tp in sent.keys() - answered:
            pm = self.partitions.get(tp)
            if pm is not None:
                pm.on_fetch_error(sent[tp], ErrorCode.UNKNOWN_SERVER_ERROR,
                                  "the fetch answer left the partition out", now, wall)

    # ------------------------------------------------------------------ appends

    def _send_appends(self, now: int) -> None:
        for tp, pm in self.partitions.items():
            if tp in self._appends:
                continue
            chunk = pm.next_append(now)
            if chunk is None:
                continue
            task = asyncio.get_running_loop().create_task(self._append(tp, pm, chunk))
            self._appends[tp] = task
            task.add_done_callback(self._done)

    async def _append(self, tp: TopicPartition, pm: PartitionMirror, chunk) -> None:
        try:
            try:
                result = await self.target.mirror_append(
                    tp, chunk.data, acks=-1, start_offset=chunk.start_offset,
                    fetch_offset=chunk.base_offset, timeout_ms=self.append_timeout_ms)
            except MqError as exc:
                self.metrics.error("append")
                pm.on_append_error(exc.code, exc.message, self.clock.monotonic_ms())
                level = logging.WARNING if pm.blocked_reason else logging.INFO
                log.log(level, "event=append_failed flow=%s topic=%s partition=%d offset=%d error=%s",
                        self.flow, tp.topic, tp.partition, chunk.base_offset, exc)
                return
            outcome = pm.on_appended(high_watermark=result.high_watermark, duplicates=result.duplicates,
                                     now_ms=self.clock.monotonic_ms(), wall_ms=self.clock.wall_ms())
            self.metrics.observe_latencies(tp.topic, tp.partition, outcome.latencies_ms)
        finally:
            self._appends.pop(tp, None)

    # ------------------------------------------------------------------ gaps

    def _drain_gaps(self) -> None:
        for pm in self.partitions.values():
            while pm.new_gaps:
                gap = pm.new_gaps.pop(0)
                self.metrics.gap(gap.tp.topic, gap.tp.partition)
                log.warning("event=gap flow=%s topic=%s partition=%d from_offset=%d to_offset=%d "
                            "records=%d message=\"offsets [%d, %d) were deleted in the source before "
                            "they were mirrored; continuing at %d\"", self.flow, gap.tp.topic,
                            gap.tp.partition, gap.from_offset, gap.to_offset, gap.records,
                            gap.from_offset, gap.to_offset, gap.to_offset)


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
