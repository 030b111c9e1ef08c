"""The mirror's shell on virtual time: ``mirror.partition.PartitionMirror`` cores driven
the way ``mirror.copier.Copier`` drives them, with every request a message of the
simulated networks (so their filters can cut, drop and delay the inter-region link).

``mq`` never imports ``mirror`` and ``mirror`` never imports ``mq.sim``: this glue lives
in the tests. The mirror is a client node (``MIRROR_ID``) in both regions' networks:

- **metadata**: the partition leaders of each region come from Metadata requests to
  one of the region's brokers (not from an oracle), refreshed after NOT_LEADER, an
  unknown partition or a timeout; so the mirror works from views that may be stale;
- **resolve**: partitions that do not know the target's end read it with ListOffsets
  (the target leader's high watermark) and ``reset`` there, as the real copier does at
  start and after MIRROR_OFFSET_GAP; a suspected gap is confirmed against it the same way;
- **fetch**: the requests ``mirror.fetch_plan.FetchPlanner`` plans (up to its
  ``fetches_per_leader`` per source leader in flight, within the flow's byte budget;
  consumer fetches, so only records below the source's high watermark), long-polling
  at the source;
- **append**: one MirrorAppend (acks=-1) per partition in flight, to the target leader;
  an answer that never comes is a retriable timeout (the same bytes go again);
- **group sync** every ``sync_interval_ms``: the source group's committed offsets
  (FindCoordinator + OffsetFetch in the source), the target's (in the target), then
  ``mirror.group_sync.plan_group_sync`` with the mirrored ends and an OffsetCommit in
  the target. Nobody consumes in the target here, so the group is always empty there.

``crash`` throws all of the mirror's memory away (answers to its earlier life are
ignored, though its requests already on the wire still reach the brokers); ``start``
begins a new life that knows nothing but the region's bootstrap broker ids.

``SourceWorkload`` is the source region's traffic: a producer (acks=all, batches of 1-5
records, some compressed) and a group whose committed offsets advance over what is produced (admin-style
OffsetCommit, as a consumer of the committed records would).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mirror.fetch_plan import FetchPlanner, FetchSettings, PlannedFetch
from mirror.group_sync import plan_group_sync
from mirror.partition import END_PROBE_START_OFFSET, Gap, PartitionMirror
from mq.client.internals.metadata import needs_metadata_refresh
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import LATEST_TIMESTAMP, CompressionType, TopicPartition
from mq.protocol import group_messages as gm
from mq.protocol import messages as m
from mq.protocol.mirror_messages import MirrorAppendRequest, MirrorAppendResponse
from mq.protocol.record_batch import build_batch
from mq.sim.region import SimRegion

MIRROR_ID = 100  # the mirror's node id in both networks
GROUP_CLIENT_ID = 101  # the source group's committer
PRODUCER_ID = 102
ADMIN_ID = 103  # DeleteRecords in the source (a retention gap the mirror must report)
TICK_MS = 50
REQUEST_TIMEOUT_MS = 1_500  # the mirror's client-side timeout (plus a request's own wait)
FETCH_MAX_WAIT_MS = 200
APPEND_TIMEOUT_MS = 1_000
CODECS = (CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4,
          CompressionType.ZSTD)  # the mirror copies compressed batches without decoding them


def code_of(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


@dataclass(slots=True)
class MirrorStats:
    """Counts over all lives of the mirror, for the test's report."""

    restarts: int = 0
    fetches: int = 0
    appends: int = 0
    empty_appends: int = 0  # only moving the target's start (the source had nothing past a gap)
    append_errors: dict[str, int] = field(default_factory=dict)
    duplicate_batches: int = 0
    timeouts: int = 0
    syncs: int = 0
    synced_offsets: int = 0


class Side:
    """What the mirror knows of one region: bootstrap ids and partition leaders."""

    def __init__(self, name: str, region: SimRegion, rng: Rng) -> None:
        self.name = name
        self.region = region
        self.rng = rng
        self.leaders: dict[TopicPartition, int] = {}
        self.coordinator: int | None = None
        self.metadata_in_flight = False

    def any_broker(self) -> int:
        return self.rng.choice(list(self.region.ids))


class SimMirror:
    def __init__(self, source: SimRegion, target: SimRegion, partitions: list[TopicPartition], *,
                 group: str, rng: Rng, sync_interval_ms: int | None = 300) -> None:
        """``sync_interval_ms`` None: no group offset sync."""
        self.source_region, self.target_region = source, target
        self.scheduler = source.scheduler
        assert target.scheduler is source.scheduler, "the regions must share one clock"
        self.tps = partitions
        self.topic = partitions[0].topic
        self.group = group
        self.rng = rng
        self.sync_interval_ms = sync_interval_ms
        self.stats = MirrorStats()
        self.gaps: list[Gap] = []  # every gap any life reported (the real mirror's WARNING lines)
        self.life = 0
        self.alive = False
        self.start()

    # ------------------------------------------------------------------ lives

    def start(self) -> None:
        if self.alive:
            return
        self.life += 1
        self.alive = True
        life_rng = self.rng.fork("life", self.life)
        self.source = Side("source", self.source_region, life_rng.fork("source"))
        self.target = Side("target", self.target_region, life_rng.fork("target"))
        # Small buffers and fetches: many chunks, so pipelining and joins are exercised; a
        # small flow budget and 1-3 fetches per leader, so the fetch plan's bounds are too.
        partition_max_bytes = life_rng.randint(150, 1500)
        self.partitions = {tp: PartitionMirror(tp, max_buffered_bytes=life_rng.randint(600, 4000),
                                               max_append_bytes=life_rng.randint(300, 3000),
                                               retry_backoff_ms=100, stall_timeout_ms=1_000)
                           for tp in self.tps}
        self.planner = FetchPlanner(FetchSettings(partition_max_bytes,
                                                  buffer_max_bytes=life_rng.randint(partition_max_bytes, 8000),
                                                  fetches_per_leader=life_rng.randint(1, 3)))
        self.appending: set[TopicPartition] = set()
        self.probing: set[TopicPartition] = set()
        self.resolving = False
        self.syncing = False
        self.next_sync_ms = self.now_ms + (self.sync_interval_ms or 0)
        self._tick(self.life)

    def crash(self) -> None:
        """Kill the mirror: everything it knew is gone."""
        if self.alive:
            self.alive = False
            self.stats.restarts += 1

    @property
    def now_ms(self) -> int:
        return self.scheduler.now_ms

    def mirrored_ends(self) -> dict[TopicPartition, int]:
        return {tp: pm.mirrored_end for tp, pm in self.partitions.items() if pm.mirrored_end is not None}

    def _send(self, side: Side, destination: int, request: m.Request, on_answer: Callable[[object], None], *,
              wait_ms: int = 0) -> None:
        """Send from the mirror; answers reach ``on_answer`` only in the life that asked."""
        life = self.life

        def answered(response: object) -> None:
            if self.alive and self.life == life:
                if response is None:
                    self.stats.timeouts += 1
                on_answer(response)
                self._pump()
        side.region.request(destination, request, answered, source_id=MIRROR_ID,
                            timeout_ms=REQUEST_TIMEOUT_MS + wait_ms)

    def _tick(self, life: int) -> None:
        if not self.alive or self.life != life:
            return
        for pm in self.partitions.values():
            pm.tick(self.now_ms)
        self._pump()
        self.scheduler.schedule(self.now_ms + TICK_MS, lambda: self._tick(life))

    def _pump(self) -> None:
        """What the copier's loop does on every wake-up: send whatever the cores say is due."""
        now = self.now_ms
        self._refresh_metadata(self.source, [tp for tp, pm in self.partitions.items() if pm.wants_fetch(now)])
        self._refresh_metadata(self.target, list(self.partitions))
        self._resolve()
        self._send_fetches(now)
        self._send_appends(now)
        for pm in self.partitions.values():
            self.gaps.extend(pm.new_gaps)
            pm.new_gaps.clear()
        if self.sync_interval_ms is not None and now >= self.next_sync_ms and not self.syncing:
            self.next_sync_ms = now + self.sync_interval_ms
            self._sync_groups()

    # ------------------------------------------------------------------ metadata

    def _refresh_metadata(self, side: Side, wanted: list[TopicPartition]) -> None:
        if side.metadata_in_flight or all(tp in side.leaders for tp in wanted):
            return
        side.metadata_in_flight = True

        def answered(response: object) -> None:
            side.metadata_in_flight = False
            if not isinstance(response, m.MetadataResponse):
                return
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition)
                    if p.leader_id >= 0:
                        side.leaders[tp] = p.leader_id
                    else:
                        side.leaders.pop(tp, None)
        self._send(side, side.any_broker(), m.MetadataRequest([self.topic]), answered)

    def _forget_leader(self, side: Side, tp: TopicPartition, code: ErrorCode | None) -> None:
        if code is None or needs_metadata_refresh(code):
            side.leaders.pop(tp, None)

    # ------------------------------------------------------------------ target ends

    def _resolve(self) -> None:
        if self.resolving:
            return
        for tp, pm in self.partitions.items():
            if pm.needs_end_check() and tp in self.target.leaders and tp not in self.probing:
                self._probe_end(tp, pm)
        waiting = [tp for tp, pm in self.partitions.items() if pm.needs_reset() and tp in self.target.leaders]
        if not waiting:
            return
        leader = self.target.leaders[waiting[0]]
        tps = [tp for tp in waiting if self.target.leaders[tp] == leader]
        self.resolving = True

        def answered(response: object) -> None:
            self.resolving = False
            if not isinstance(response, m.ListOffsetsResponse):
                for tp in tps:
                    self._forget_leader(self.target, tp, None)
                return
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition)
                    pm = self.partitions[tp]
                    if p.error_code != ErrorCode.NONE:
                        self._forget_leader(self.target, tp, code_of(p.error_code))
                    elif pm.needs_reset():
                        self.reset(pm, p.offset)
        request = m.ListOffsetsRequest([m.ListOffsetsTopic(self.topic, [
            m.ListOffsetsPartition(tp.partition, LATEST_TIMESTAMP) for tp in tps])])
        self._send(self.target, leader, request, answered)

    def _probe_end(self, tp: TopicPartition, pm: PartitionMirror) -> None:
        """A suspected gap waits for the target's settled end: the end probe, as the runner."""
        self.probing.add(tp)

        def answered(response: object) -> None:
            self.probing.discard(tp)
            if not isinstance(response, MirrorAppendResponse):
                self._forget_leader(self.target, tp, None)
            elif response.error_code != ErrorCode.NONE:
                self._forget_leader(self.target, tp, code_of(response.error_code))
            elif pm.needs_end_check():
                pm.on_end_probe(high_watermark=response.high_watermark, log_end_offset=response.log_end_offset,
                                wall_ms=self.now_ms)
        request = MirrorAppendRequest(tp.topic, tp.partition, b"", acks=-1, start_offset=END_PROBE_START_OFFSET,
                                      timeout_ms=APPEND_TIMEOUT_MS)
        self._send(self.target, self.target.leaders[tp], request, answered, wait_ms=APPEND_TIMEOUT_MS)

    def reset(self, pm: PartitionMirror, target_end: int) -> None:
        """Where a new life (or a resync) starts: the target's end, as the runner does."""
        pm.reset(target_end)

    # ------------------------------------------------------------------ fetches

    def _send_fetches(self, now: int) -> None:
        fetches, _ = self.planner.plan(self.partitions, self.source.leaders.get, now)
        for fetch in fetches:
            request = m.FetchRequest([m.FetchTopic(self.topic, [
                m.FetchPartition(tp.partition, offset, partition_max_bytes=self.planner.settings.partition_max_bytes)
                for tp, offset, _ in fetch.partitions])], max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1,
                max_bytes=fetch.max_bytes)
            self.stats.fetches += 1
            self._send(self.source, fetch.leader, request,
                       lambda response, fetch=fetch: self._fetched(fetch, response), wait_ms=FETCH_MAX_WAIT_MS)

    def _fetched(self, fetch: PlannedFetch, response: object) -> None:
        self.planner.done(fetch.leader, fetch.slot)
        now = self.now_ms
        answers: dict[TopicPartition, m.FetchPartitionResponse] = {}
        if isinstance(response, m.FetchResponse):
            answers = {TopicPartition(t.name, p.partition): p for t in response.topics for p in t.partitions}
        for tp, _, epoch in fetch.partitions:
            pm = self.partitions[tp]
            p = answers.get(tp)
            if p is None:
                code = ErrorCode.REQUEST_TIMED_OUT if response is None else ErrorCode.UNKNOWN_SERVER_ERROR
                self._forget_leader(self.source, tp, None)
                pm.on_fetch_error(epoch, code, "no answer for the partition", now, now)
            elif p.error_code == ErrorCode.NONE:
                pm.on_fetched(epoch, p.records, p.high_watermark, p.log_start_offset, now, now)
            else:
                code = code_of(p.error_code)
                self._forget_leader(self.source, tp, code)
                pm.on_fetch_error(epoch, code, p.error_message, now, now,
                                  high_watermark=p.high_watermark, log_start_offset=p.log_start_offset)

    # ------------------------------------------------------------------ appends

    def _send_appends(self, now: int) -> None:
        for tp, pm in self.partitions.items():
            leader = self.target.leaders.get(tp)
            if tp in self.appending or leader is None:
                continue
            chunk = pm.next_append(now)
            if chunk is None:
                continue
            self.appending.add(tp)
            self.stats.appends += 1
            self.stats.empty_appends += not chunk.data
            request = MirrorAppendRequest(tp.topic, tp.partition, chunk.data, acks=-1,
                                          start_offset=chunk.start_offset, timeout_ms=APPEND_TIMEOUT_MS)
            self._send(self.target, leader, request,
                       lambda response, tp=tp, pm=pm: self._appended(tp, pm, response),
                       wait_ms=APPEND_TIMEOUT_MS)

    def _appended(self, tp: TopicPartition, pm: PartitionMirror, response: object) -> None:
        self.appending.discard(tp)
        now = self.now_ms
        if not isinstance(response, MirrorAppendResponse):
            self._forget_leader(self.target, tp, None)
            pm.on_append_error(ErrorCode.REQUEST_TIMED_OUT, "no answer from the target", now)
            return
        code = code_of(response.error_code)
        if code == ErrorCode.NONE:
            self.stats.duplicate_batches += response.duplicate_batches
            pm.on_appended(high_watermark=response.high_watermark, duplicates=response.duplicate_batches,
                           now_ms=now, wall_ms=now)
            return
        self.stats.append_errors[code.name] = self.stats.append_errors.get(code.name, 0) + 1
        self._forget_leader(self.target, tp, code)
        pm.on_append_error(code, response.error_message, now)

    # ------------------------------------------------------------------ group offsets

    def _sync_groups(self) -> None:
        """One round of the runner's group sync: a chain of requests, abandoned (and
        tried again next interval) at the first failure."""
        self.syncing = True
        ends = self.mirrored_ends()

        def failed(side: Side | None = None) -> None:
            self.syncing = False
            if side is not None:
                side.coordinator = None

        def with_coordinator(side: Side, then: Callable[[int], None]) -> None:
            if side.coordinator is not None:
                then(side.coordinator)
                return

            def found(response: object) -> None:
                if not isinstance(response, gm.FindCoordinatorResponse) or response.error_code != ErrorCode.NONE:
                    failed()
                    return
                side.coordinator = response.node_id
                then(response.node_id)
            self._send(side, side.any_broker(), gm.FindCoordinatorRequest(self.group), found)

        def fetch_offsets(side: Side, then: Callable[[dict[TopicPartition, int]], None]) -> None:
            def fetched(response: object) -> None:
                if not isinstance(response, gm.OffsetFetchResponse) or response.error_code != ErrorCode.NONE:
                    failed(side)
                    return
                then({TopicPartition(t.name, p.partition): p.offset for t in response.topics
                      for p in t.partitions if p.error_code == ErrorCode.NONE and p.offset >= 0})
            with_coordinator(side, lambda node: self._send(side, node, gm.OffsetFetchRequest(self.group), fetched))

        def commit(source_offsets: dict[TopicPartition, int], target_offsets: dict[TopicPartition, int]) -> None:
            plan = plan_group_sync(self.group, source_offsets, target_offsets, ends)
            if not plan.offsets or self.target.coordinator is None:
                failed()
                return
            by_topic: dict[str, list[gm.OffsetCommitPartition]] = {}
            for tp, offset in plan.offsets.items():
                by_topic.setdefault(tp.topic, []).append(gm.OffsetCommitPartition(tp.partition, offset))
            request = gm.OffsetCommitRequest(self.group, [gm.OffsetCommitTopic(t, ps) for t, ps in by_topic.items()])

            def committed(response: object) -> None:
                self.syncing = False
                if isinstance(response, gm.OffsetCommitResponse):
                    self.stats.syncs += 1
                    self.stats.synced_offsets += sum(p.error_code == ErrorCode.NONE
                                                     for t in response.topics for p in t.partitions)
                else:
                    self.target.coordinator = None
            self._send(self.target, self.target.coordinator, request, committed)

        fetch_offsets(self.source, lambda source_offsets: fetch_offsets(
            self.target, lambda target_offsets: commit(source_offsets, target_offsets)))


# ---------------------------------------------------------------------- the source's traffic


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    tp: TopicPartition
    base_offset: int
    values: tuple[bytes, ...]


class SourceWorkload:
    """A producer (acks=all) and a group committing offsets over what was produced."""

    def __init__(self, region: SimRegion, partitions: list[TopicPartition], *, group: str, rng: Rng,
                 interval_ms: int = 40, in_flight: int = 2, commit_interval_ms: int = 150) -> None:
        self.region = region
        self.tps = partitions
        self.group = group
        self.rng = rng
        self.interval_ms = interval_ms
        self.limit = in_flight
        self.commit_interval_ms = commit_interval_ms
        self.in_flight = 0
        self.sent = 0
        self.acked: list[ProducedBatch] = []
        self.committed_sent: dict[TopicPartition, int] = {}  # the highest offset ever sent in a commit
        self.coordinator: int | None = None
        self.committing = False
        self.running = True
        region.scheduler.schedule(region.now_ms + interval_ms, self._produce_tick)
        region.scheduler.schedule(region.now_ms + commit_interval_ms, self._commit_tick)

    def stop(self) -> None:
        self.running = False

    def _produce_tick(self) -> None:
        if not self.running:
            return
        while self.in_flight < self.limit:
            tp = self.tps[self.sent % len(self.tps)]
            leader = self.region.leader_of(tp)
            if leader is None or leader not in self.region.live():
                break
            count = self.rng.randint(1, 5)
            values = tuple(b"%s-%d-%d" % (tp.topic.encode(), tp.partition, self.sent * 10 + i) for i in range(count))
            batch = build_batch([(None, v, (), self.region.now_ms + i) for i, v in enumerate(values)],
                                compression=self.rng.choice(CODECS))
            request = m.ProduceRequest(-1, 1_000, [m.ProduceTopicData(tp.topic, [m.ProducePartitionData(tp.partition, batch)])])
            self.sent += 1
            self.in_flight += 1
            self.region.request(leader, request, lambda r, tp=tp, values=values: self._produced(tp, values, r),
                                source_id=PRODUCER_ID, timeout_ms=2_500)
        self.region.scheduler.schedule(self.region.now_ms + self.interval_ms, self._produce_tick)

    def _produced(self, tp: TopicPartition, values: tuple[bytes, ...], response: object) -> None:
        self.in_flight -= 1
        if isinstance(response, m.ProduceResponse):
            part = response.topics[0].partitions[0]
            if part.error_code == ErrorCode.NONE:
                self.acked.append(ProducedBatch(tp, part.base_offset, values))

    def source_high_watermark(self, tp: TopicPartition) -> int | None:
        leader = self.region.leader_of(tp)
        if leader is None or leader not in self.region.live():
            return None
        partition = self.region.node(leader).partitions.get(tp)
        return None if partition is None else partition.high_watermark

    def _commit_tick(self) -> None:
        if not self.running:
            return
        self.region.scheduler.schedule(self.region.now_ms + self.commit_interval_ms, self._commit_tick)
        if self.committing:
            return
        if self.coordinator is None:
            self.committing = True
            self.region.request(self.rng.choice(list(self.region.ids)), gm.FindCoordinatorRequest(self.group),
                                self._found, source_id=GROUP_CLIENT_ID, timeout_ms=1_500)
            return
        offsets = {}
        for tp in self.tps:
            hw = self.source_high_watermark(tp)
            if hw is None or self.rng.random() < 0.3:
                continue
            before = self.committed_sent.get(tp, 0)
            offset = min(hw, before + self.rng.randint(0, 25))  # consumed up to here
            if offset >= before:  # a new leader's high watermark may still lag: wait
                offsets[tp] = self.committed_sent[tp] = offset
        if not offsets:
            return
        request = gm.OffsetCommitRequest(self.group, [gm.OffsetCommitTopic(self.tps[0].topic, [
            gm.OffsetCommitPartition(tp.partition, offset) for tp, offset in offsets.items()])])
        self.committing = True
        self.region.request(self.coordinator, request, self._committed, source_id=GROUP_CLIENT_ID, timeout_ms=1_500)

    def _found(self, response: object) -> None:
        self.committing = False
        if isinstance(response, gm.FindCoordinatorResponse) and response.error_code == ErrorCode.NONE:
            self.coordinator = response.node_id

    def _committed(self, response: object) -> None:
        self.committing = False
        if not isinstance(response, gm.OffsetCommitResponse) or any(
                p.error_code != ErrorCode.NONE for t in response.topics for p in t.partitions):
            self.coordinator = None
