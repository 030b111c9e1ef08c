"""One mirrored partition as a sans-IO state machine (Kafka's follower fetch state, for a
client): what to fetch next, what to append next, and what the flow knows about it.

The mirror copies ``[mirrored end, source end)`` of a source partition to the target at
the same offsets. Per partition:

* **fetch side**: ``fetch_offset`` is where the next source fetch starts: the end of what
  is fetched but not yet appended, so the next fetch is in flight while an append is
  (pipelining; bounded by ``max_buffered_bytes`` and by the flow's budget,
  ``mirror.fetch_plan``). One fetch at a time.
* **append side**: fetched ``Chunk``s wait in ``buffered``; ``next_append`` joins them (up
  to ``max_append_bytes``) into one MirrorAppend, one in flight at a time, so batches
  reach the target in offset order. A failed append is retried with the same bytes: the
  target acknowledges batches it already has (same base offset, last offset and CRC) as
  duplicates, so a retry never duplicates.
* **mirrored end**: the target's high watermark, read at start (``reset``) and taken from
  every append answer. A restarted mirror resumes there: nothing is lost, duplicated or
  reordered whatever the moment it was killed.
* **gaps**: a fetch below the source's log start (retention deleted records before they
  were mirrored) makes a *candidate*; once everything fetched is appended, the target's end
  decides: if it is the fetch offset, the exact lost range ``[target end, log start)`` is
  recorded and copying continues at the log start, the next append asking the target to
  start there (``start_offset``); if the target went further (an append of a killed
  predecessor landed after this mirror read the target's end), there is no gap from there.
  The target's end here is its *settled* end, read with an **end probe** (``END_PROBE``:
  an empty MirrorAppend, acks=-1, ``start_offset`` 0, which moves nothing and is answered
  once the leader's high watermark covers its log end), not ListOffsets: a new target
  leader's high watermark may lag the log every replica already holds (e.g. 24 while all
  hold 61), and a gap confirmed against it would claim records the target had.
  The target can start only at a batch boundary, and the source's log start may lie
  inside a batch (DeleteRecords moves it to any offset): then the whole batch holding it
  is copied and the target starts at its base (it keeps the batch's few records below the
  log start, as the source's own replicas do). A source with nothing past its log start
  still moves the target's start (an empty MirrorAppend), so the two ends agree.

The state is derived, never stored: ``blocked`` (the operator must act: the target is not
a mirror topic, or the regions diverged), else ``stalled`` (a source or target problem
being retried, e.g. the link is down), else ``waiting`` (the mirrored end is being
read), else ``running``. Time arrives as arguments: ``now_ms`` (monotonic, for timeouts)
and ``wall_ms`` (for record timestamps and latencies).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

from mirror.batches import Chunk, CorruptFetch, Misaligned, batch_start, join_chunks, split_fetched
from mirror.latency import LatencyWindow
from mirror.source_rate import SourceEndHistory, lag_estimate
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition

# Append errors after which the mirror must re-read the target's end before going on.
RESYNC_ERRORS = frozenset({ErrorCode.MIRROR_OFFSET_GAP, ErrorCode.OFFSET_OUT_OF_RANGE})
# Append errors only an operator can resolve: the flow stops writing the partition.
BLOCKING_ERRORS = {
    ErrorCode.NOT_MIRROR_TOPIC: "the target topic is not a mirror topic (promoted, or not created by the mirror)",
    ErrorCode.MIRROR_DIVERGED: "the target holds different records at these offsets (the regions diverged)",
}


class PartitionState(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    STALLED = "stalled"
    BLOCKED = "blocked"


# The end probe: an empty MirrorAppend with this start_offset (no partition ends below 0,
# so it never restarts one) and acks=-1 changes nothing and answers once the leader's high
# watermark covers its log end: the target's settled end (``on_end_probe``).
END_PROBE_START_OFFSET = 0


@dataclass(frozen=True, slots=True)
class Gap:
    """Source offsets ``[from_offset, to_offset)`` were deleted before they were mirrored."""

    tp: TopicPartition
    from_offset: int
    to_offset: int
    wall_ms: int

    @property
    def records(self) -> int:
        return self.to_offset - self.from_offset


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    records: int  # records newly mirrored by the append
    bytes: int
    batches: int
    duplicates: int
    latencies_ms: tuple[int, ...]  # per appended batch: arrival in the target - its max timestamp


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """What the status file and the metrics say about one partition."""

    topic: str
    partition: int
    state: PartitionState
    reason: str
    source_end: int | None
    source_log_start: int | None
    mirrored_end: int | None
    lag_records: int | None
    lag_seconds: float | None
    latency_p50_ms: int | None
    latency_p99_ms: int | None
    records_mirrored: int
    bytes_mirrored: int
    gap_records: int
    gaps: tuple[tuple[int, int], ...]
    source_seen_wall_ms: int | None  # when the source last answered a fetch
    # While the source is not heard (``mirror.source_rate``): ``lag_records`` is a lower
    # bound as of ``source_seen_wall_ms``, and the estimate adds rate x silence.
    source_unreachable: bool = False
    source_silent_s: float | None = None
    source_rate_per_s: float | None = None
    lag_records_estimate: int | None = None
    buffered_bytes: int = 0  # fetched, not yet appended (the append in flight included)

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]
        out["state"] = self.state.value
        out["gaps"] = [list(g) for g in self.gaps]
        return out


class PartitionMirror:
    def __init__(self, tp: TopicPartition, *, max_buffered_bytes: int = 4 * 1024 * 1024,
                 max_append_bytes: int = 4 * 1024 * 1024, retry_backoff_ms: int = 200,
                 stall_timeout_ms: int = 5_000, max_gaps_kept: int = 100) -> None:
        self.tp = tp
        self.max_buffered_bytes = max_buffered_bytes
        self.max_append_bytes = max_append_bytes
        self.retry_backoff_ms = retry_backoff_ms
        self.stall_timeout_ms = stall_timeout_ms
        self.max_gaps_kept = max_gaps_kept
        self.mirrored_end: int | None = None
        self.fetch_offset: int | None = None
        self.epoch = 0  # bumped by reset: answers to fetches sent before it are stale
        self.source_end: int | None = None
        self.source_log_start: int | None = None
        self.source_seen_wall_ms: int | None = None
        self.source_history = SourceEndHistory()
        self.source_unreachable = False  # no answer from the source (not: an error answer)
        self.buffered: deque[Chunk] = deque()
        self.buffered_bytes = 0
        self.appending: Chunk | None = None
        self.fetching_since_ms: int | None = None
        self.fetched_records_ms = -1  # when a fetch last brought records (fetch plans take turns by it)
        self.fetch_retry_at_ms = 0
        self.append_retry_at_ms = 0
        self.append_sent_ms: int | None = None
        self.pending_start_offset = -1  # the next chunk starts after a gap
        self.gap_candidate: tuple[int, int] | None = None  # (fetch offset, source log start)
        self.source_problem: str | None = None
        self.target_problem: str | None = None
        self.blocked_reason: str | None = None
        self.last_mirrored_max_ts: int | None = None
        self.latency = LatencyWindow()
        self.records_mirrored = 0
        self.bytes_mirrored = 0
        self.batches_mirrored = 0
        self.duplicate_batches = 0
        self.gaps: deque[Gap] = deque(maxlen=max_gaps_kept)
        self.gap_records = 0
        self.new_gaps: list[Gap] = []  # drained by the shell: one WARNING line and metric each

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> PartitionState:
        if self.blocked_reason is not None:
            return PartitionState.BLOCKED
        if self.source_problem is not None or self.target_problem is not None:
            return PartitionState.STALLED
        if self.mirrored_end is None:
            return PartitionState.WAITING
        return PartitionState.RUNNING

    @property
    def reason(self) -> str:
        return self.blocked_reason or self.source_problem or self.target_problem or ""

    def block(self, reason: str) -> None:
        """Stop writing this partition until the mirror restarts (the operator acts)."""
        self.blocked_reason = reason
        self.buffered.clear()
        self.buffered_bytes = 0

    def reset(self, mirrored_end: int) -> None:
        """Start (or start over) at the target's end, dropping whatever was fetched."""
        self.epoch += 1
        self.mirrored_end = mirrored_end
        self.fetch_offset = mirrored_end
        self.buffered.clear()
        self.buffered_bytes = 0
        self.appending = None
        self.append_sent_ms = None
        self.fetching_since_ms = None
        self.pending_start_offset = -1
        self.gap_candidate = None
        self.target_problem = None

    def needs_reset(self) -> bool:
        return self.mirrored_end is None and self.blocked_reason is None

    # ------------------------------------------------------------------ fetch side

    @property
    def held_bytes(self) -> int:
        """Fetched and not yet appended: what this partition holds in memory."""
        return self.buffered_bytes + (self.appending.size if self.appending else 0)

    def wants_fetch(self, now_ms: int) -> bool:
        return (self.fetch_offset is not None and self.blocked_reason is None and self.gap_candidate is None
                and self.fetching_since_ms is None and now_ms >= self.fetch_retry_at_ms
                and self.held_bytes < self.max_buffered_bytes)

    def fetch_sent(self, now_ms: int) -> tuple[int, int]:
        """Mark a fetch in flight; returns (fetch offset, epoch) to hand back with the answer."""
        assert self.fetch_offset is not None
        self.fetching_since_ms = now_ms
        return self.fetch_offset, self.epoch

    def on_fetched(self, epoch: int, records: bytes | memoryview, high_watermark: int,
                   log_start_offset: int, now_ms: int, wall_ms: int) -> None:
        if epoch != self.epoch or self.fetch_offset is None:
            return  # sent before a reset: stale
        self.fetching_since_ms = None
        self._source_heard(high_watermark, log_start_offset, wall_ms)
        self.source_problem = None
        expected = self.fetch_offset
        if self.pending_start_offset >= 0:
            # Right after a gap the log start may lie inside a batch (DeleteRecords moves it
            # to any offset): the target can start only at a batch boundary, so the whole
            # batch holding it is copied (Kafka's followers do the same, KAFKA-6975).
            base = batch_start(records, expected)
            if base is not None and base < expected:
                expected = base
        try:
            found = split_fetched(records, expected)
        except CorruptFetch as exc:
            self._source_failed(f"corrupt fetch answer, fetching again: {exc}", now_ms)
            return
        if isinstance(found, Misaligned):
            self.block(found.reason)
            return
        if found is None:
            if self.pending_start_offset < 0 or high_watermark > self.fetch_offset:
                return
            # Nothing past the gap (the source deleted all it had): still move the target's
            # start there, with an empty MirrorAppend, so the two ends agree.
            found = Chunk(b"", self.fetch_offset, self.fetch_offset, 0, wall_ms, ())
        if self.pending_start_offset >= 0:
            found = Chunk(found.data, found.base_offset, found.next_offset, found.record_count,
                          found.first_timestamp, found.max_timestamps, found.base_offset)
            self.pending_start_offset = -1
        self.buffered.append(found)
        self.buffered_bytes += found.size
        self.fetch_offset = found.next_offset
        self.fetched_records_ms = now_ms

    def on_fetch_error(self, epoch: int, code: ErrorCode, message: str, now_ms: int, wall_ms: int,
                       *, high_watermark: int = -1, log_start_offset: int = -1,
                       unanswered: bool = False) -> None:
        """A fetch failed: with an error code in the source's answer, or (``unanswered``)
        with no answer at all (connection refused or lost, request timed out)."""
        if epoch != self.epoch or self.fetch_offset is None:
            return
        self.fetching_since_ms = None
        self.source_unreachable = unanswered
        if code == ErrorCode.OFFSET_OUT_OF_RANGE and log_start_offset >= 0:
            self._source_heard(high_watermark, log_start_offset, wall_ms)
            self._out_of_range(log_start_offset, high_watermark, wall_ms)
            return
        self._source_failed(f"source fetch failed: {code.name}: {message}", now_ms)

    def _source_heard(self, high_watermark: int, log_start_offset: int, wall_ms: int) -> None:
        self.source_end = high_watermark
        self.source_log_start = log_start_offset
        self.source_seen_wall_ms = wall_ms
        self.source_history.observe(wall_ms, high_watermark)
        self.source_unreachable = False

    def seed_source(self, *, source_end: int, seen_wall_ms: int | None, rate_per_s: float | None) -> None:
        """What a previous mirror process last knew of the source (its status file), kept
        while this one has not heard the source yet."""
        if self.source_end is None:
            self.source_end = source_end
            self.source_seen_wall_ms = seen_wall_ms
            self.source_history.seed(rate_per_s)

    def _source_failed(self, reason: str, now_ms: int) -> None:
        self.source_problem = reason
        self.fetch_retry_at_ms = now_ms + self.retry_backoff_ms

    def _out_of_range(self, log_start: int, high_watermark: int, wall_ms: int) -> None:
        offset = self.fetch_offset
        assert offset is not None
        if offset < log_start:
            # Not a gap yet: the target may hold more than this mirror knows (an append of a
            # killed predecessor, still in a socket when this one read the target's end).
            # Once what is fetched is appended, the target's end decides (``confirm_gap``).
            self.gap_candidate = (offset, log_start)
            self.source_problem = None
            return
        self.block(f"the source partition ends at {high_watermark}, below the mirrored offset "
                   f"{offset}: the source lost records the target has (unclean election, or the "
                   f"topic was recreated); the target is not rewritten")

    def needs_end_check(self) -> bool:
        """A suspected gap waits for the target's end (everything fetched is appended)."""
        return (self.gap_candidate is not None and self.blocked_reason is None and not self.buffered
                and self.appending is None)

    def on_end_probe(self, *, high_watermark: int, log_end_offset: int, wall_ms: int) -> Gap | None:
        """The end probe's answer (see ``END_PROBE_START_OFFSET``). A high watermark below
        the leader's log end is not the target's end yet (a new leader's lags the log its
        replicas hold; or an append landed meanwhile): no decision, the probe is sent
        again. Otherwise the settled end confirms the gap or not (``confirm_gap``)."""
        if self.gap_candidate is None or high_watermark < log_end_offset:
            return None
        return self.confirm_gap(high_watermark, wall_ms)

    def confirm_gap(self, target_end: int, wall_ms: int) -> Gap | None:
        """Given the target's settled end (every record the target's leader holds is
        committed: ``on_end_probe``; a high watermark alone may lag, and a gap confirmed
        against it would claim records the target had): a gap exactly ``[target end,
        source log start)``, or none (the target already went further: continue from
        its end)."""
        assert self.gap_candidate is not None
        from_offset, log_start = self.gap_candidate
        self.gap_candidate = None
        if target_end != from_offset:
            self.reset(target_end)
            return None
        gap = Gap(self.tp, from_offset, log_start, wall_ms)
        self.gaps.append(gap)
        self.new_gaps.append(gap)
        self.gap_records += gap.records
        self.fetch_offset = log_start
        self.pending_start_offset = log_start
        return gap

    # ------------------------------------------------------------------ append side

    def next_append(self, now_ms: int) -> Chunk | None:
        """The chunk to append now (None: nothing, one in flight, or backing off)."""
        if self.blocked_reason is not None or now_ms < self.append_retry_at_ms:
            return None
        if self.appending is not None:
            if self.append_sent_ms is not None:
                return None  # in flight
        elif self.buffered:
            take = [self.buffered.popleft()]
            size = take[0].size
            while self.buffered and size + self.buffered[0].size <= self.max_append_bytes \
                    and self.buffered[0].start_offset < 0:
                size += self.buffered[0].size
                take.append(self.buffered.popleft())
            self.buffered_bytes -= size
            self.appending = join_chunks(take)
        else:
            return None
        self.append_sent_ms = now_ms
        return self.appending

    def on_appended(self, *, high_watermark: int, duplicates: int, now_ms: int,
                    wall_ms: int) -> AppendOutcome:
        chunk = self.appending
        if chunk is None:  # the partition started over while the append was out
            return AppendOutcome(0, 0, 0, duplicates, ())
        self.appending = None
        self.append_sent_ms = None
        self.target_problem = None
        before = self.mirrored_end if self.mirrored_end is not None else chunk.base_offset
        self.mirrored_end = max(before, high_watermark, chunk.next_offset)
        new_batches = max(0, chunk.batch_count - duplicates)
        latencies = tuple(max(0, wall_ms - ts) for ts in chunk.max_timestamps[-new_batches:]) \
            if new_batches else ()
        for latency in latencies:
            self.latency.add(wall_ms, latency)
        records = chunk.record_count if new_batches == chunk.batch_count else \
            max(0, chunk.next_offset - max(chunk.base_offset, before))
        nbytes = chunk.size if new_batches else 0
        self.records_mirrored += records
        self.bytes_mirrored += nbytes
        self.batches_mirrored += new_batches
        self.duplicate_batches += duplicates
        if chunk.max_timestamps:
            self.last_mirrored_max_ts = chunk.max_timestamps[-1]
        return AppendOutcome(records, nbytes, new_batches, duplicates, latencies)

    def on_append_error(self, code: ErrorCode, message: str, now_ms: int) -> None:
        self.append_sent_ms = None
        if code in BLOCKING_ERRORS:
            self.block(f"{code.name}: {BLOCKING_ERRORS[code]} ({message})")
            self.appending = None
            return
        if code in RESYNC_ERRORS:
            # The target's end is not where this partition thought: read it again.
            self.mirrored_end = None
            self.fetch_offset = None
            self.appending = None
            self.buffered.clear()
            self.buffered_bytes = 0
            self.epoch += 1
            self.gap_candidate = None
            self.target_problem = None
            return
        self.target_problem = f"target append failed: {code.name}: {message}"
        if not code.retriable:
            self.block(self.target_problem)
            self.appending = None
            return
        self.append_retry_at_ms = now_ms + self.retry_backoff_ms

    # ------------------------------------------------------------------ time and views

    def tick(self, now_ms: int) -> None:
        """Say ``stalled`` when a fetch or an append has been waiting too long."""
        if self.fetching_since_ms is not None and now_ms - self.fetching_since_ms > self.stall_timeout_ms:
            self.source_unreachable = True
            self.source_problem = (f"no answer from the source for {now_ms - self.fetching_since_ms} ms "
                                   f"(link down or source leader unreachable)")
        if self.append_sent_ms is not None and now_ms - self.append_sent_ms > self.stall_timeout_ms:
            self.target_problem = f"no answer from the target for {now_ms - self.append_sent_ms} ms"

    def lag_records(self) -> int | None:
        if self.source_end is None or self.mirrored_end is None:
            return None
        return max(0, self.source_end - self.mirrored_end)

    def lag_seconds(self, wall_ms: int) -> float | None:
        """Age of the oldest source record not yet in the target: known exactly when it was
        fetched; otherwise at most the age of the newest mirrored batch."""
        lag = self.lag_records()
        if lag == 0:
            # Nothing known to be unmirrored; unknown while the source is not heard.
            return None if self.source_unreachable else 0.0
        oldest = self.appending or (self.buffered[0] if self.buffered else None)
        if oldest is not None:
            return max(0.0, (wall_ms - oldest.first_timestamp) / 1000)
        if lag is not None and self.last_mirrored_max_ts is not None:
            return max(0.0, (wall_ms - self.last_mirrored_max_ts) / 1000)
        return None

    def status(self, wall_ms: int) -> PartitionStatus:
        seen = self.source_seen_wall_ms
        silent_ms = max(0, wall_ms - seen) if seen is not None else None
        rate = self.source_history.rate_per_s()
        estimate = lag_estimate(self.lag_records(), rate, silent_ms or 0) \
            if self.source_unreachable and silent_ms is not None else None
        return PartitionStatus(
            self.tp.topic, self.tp.partition, self.state, self.reason, self.source_end,
            self.source_log_start, self.mirrored_end, self.lag_records(), self.lag_seconds(wall_ms),
            self.latency.percentile(0.5, wall_ms), self.latency.percentile(0.99, wall_ms),
            self.records_mirrored, self.bytes_mirrored, self.gap_records,
            tuple((g.from_offset, g.to_offset) for g in self.gaps), self.source_seen_wall_ms,
            self.source_unreachable, None if silent_ms is None else round(silent_ms / 1000, 3),
            None if rate is None else round(rate, 1), estimate, self.held_bytes)
