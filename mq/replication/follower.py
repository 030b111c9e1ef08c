"""The follower side: fetch from the leader, append, or truncate where the logs diverge.

``FollowerPartition`` is one partition's fetch state (Kafka's ``PartitionFetchState``
plus the truncation logic of ``AbstractFetcherThread``); ``ReplicaFetcher`` groups the
partitions led by one broker into one Fetch request, as Kafka's fetcher thread does.

Each fetch names ``fetch_offset`` (our log end), ``last_fetched_epoch`` (the newest
epoch in our epoch cache) and ``current_leader_epoch`` (fencing). If our last epoch
ends below our log end on the leader, the leader answers with ``diverging_epoch =
(epoch, end_offset)`` instead of data (KIP-320's fetch-time OffsetsForLeaderEpoch).
We then look the same epoch up locally:

- we know that epoch too: both logs agree up to ``min(their end, our end)`` of it —
  truncate there, done;
- we do not: truncate to the end of *our* largest epoch below it and fetch again,
  which names an older last epoch; the walk back ends in a common epoch (KIP-279:
  after several quick leader changes one round trip is not enough).

Never is the high watermark the truncation point (KIP-101): a follower's high
watermark may lag the leader's, and truncating to it would cut records the leader
already acknowledged. If the leader has no epoch information at all (an empty
cache), the high watermark is the only safe fallback, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.batch_format import read_header
from mq.protocol.errors import ProtocolError
from mq.protocol.messages import FetchPartition, FetchRequest, FetchTopic
from mq.replication.epoch_cache import EpochEndOffset, LeaderEpochCache
from mq.replication.types import ReplicaFetchResponse, ReplicaLog

__all__ = ["FetchOutcome", "FetchStatus", "FollowerPartition", "ReplicaFetcher"]

DEFAULT_FETCH_BACKOFF_MS = 1000


class FetchStatus(Enum):
    FETCHING = "fetching"
    DELAYED = "delayed"  # a retriable error: fetch again after the backoff
    AWAITING_METADATA = "awaiting_metadata"  # fenced / not leader: wait for a new leader
    FAILED = "failed"  # the log is offline


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    error: ErrorCode = ErrorCode.NONE
    appended_bytes: int = 0
    truncated_to: int | None = None
    truncation_complete: bool = True
    # An unclean election made the new leader shorter than what we had committed:
    # records a consumer may have read are gone (reported, not hidden).
    truncated_below_high_watermark: bool = False
    high_watermark: int = 0
    discarded: bool = False
    # The leader's log start moved ours up (DeleteRecords or retention on the leader).
    log_start_moved: bool = False


class FollowerPartition:
    def __init__(
        self, tp: TopicPartition, *, log: ReplicaLog, epoch_cache: LeaderEpochCache,
        leader_id: int, leader_epoch: int, high_watermark: int = 0,
        fetch_backoff_ms: int = DEFAULT_FETCH_BACKOFF_MS,
    ) -> None:
        self.tp = tp
        self.log = log
        self.epoch_cache = epoch_cache
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.high_watermark = min(high_watermark, log.log_end_offset)
        self.fetch_backoff_ms = fetch_backoff_ms
        self.status = FetchStatus.FETCHING
        self.delayed_until_ms = 0

    def on_leader_change(self, leader_id: int, leader_epoch: int) -> None:
        """New metadata: follow ``leader_id`` at ``leader_epoch``. Divergence from the
        old leader's tail is found by the first fetch (no separate truncation phase)."""
        if leader_epoch < self.leader_epoch:
            return
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        if self.status != FetchStatus.FAILED:
            self.status = FetchStatus.FETCHING

    def is_fetchable(self, now_ms: int) -> bool:
        if self.status == FetchStatus.DELAYED and now_ms >= self.delayed_until_ms:
            self.status = FetchStatus.FETCHING
        return self.status == FetchStatus.FETCHING

    def fetch_partition(self, *, partition_max_bytes: int = 1024 * 1024) -> FetchPartition:
        return FetchPartition(
            partition=self.tp.partition,
            fetch_offset=self.log.log_end_offset,
            partition_max_bytes=partition_max_bytes,
            current_leader_epoch=self.leader_epoch,
            last_fetched_epoch=self.epoch_cache.latest_epoch,
            log_start_offset=self.log.log_start_offset,
        )

    def handle_response(
        self, response: ReplicaFetchResponse, *, request: FetchPartition, now_ms: int
    ) -> FetchOutcome:
        """Apply the leader's answer to ``request``. An answer to a request made under
        another leader epoch or from another log end is dropped (Kafka does the same):
        after a leader change or a truncation it describes a log we no longer have."""
        if (
            request.current_leader_epoch != self.leader_epoch
            or request.fetch_offset != self.log.log_end_offset
            or self.status == FetchStatus.FAILED
        ):
            return FetchOutcome(discarded=True, high_watermark=self.high_watermark)
        if response.error != ErrorCode.NONE:
            return self._on_error(response, now_ms)
        if response.diverging_epoch is not None:
            return self._truncate_on_divergence(response.diverging_epoch, now_ms=now_ms)
        appended = len(response.records)
        if appended:
            try:
                self.log.append_as_follower(response.records, now_ms=now_ms)
            except MqError as exc:
                if not self._restart_at_first_batch(response.records, exc, now_ms=now_ms):
                    return self._on_error(ReplicaFetchResponse(error=exc.code), now_ms)
            self.epoch_cache.assign_from_batches(response.records)
        self._update_high_watermark(response.high_watermark)
        try:
            moved = self._follow_log_start(response.log_start_offset)
        except MqError as exc:
            return self._on_error(ReplicaFetchResponse(error=exc.code), now_ms)
        return FetchOutcome(appended_bytes=appended, high_watermark=self.high_watermark,
                            log_start_moved=moved)

    def _follow_log_start(self, leader_log_start: int) -> bool:
        """Kafka's ``log.maybeIncrementLogStartOffset(leaderLogStartOffset,
        LeaderOffsetIncremented)`` on the follower path: DeleteRecords (or retention)
        moved the leader's log start; move ours up to it, never above our own high
        watermark (what we hold and know committed), deleting the whole segments below it
        and checkpointing the new start before returning, so that the start survives a
        restart and a leader change. True if our log start moved."""
        target = min(leader_log_start, self.high_watermark)
        if target <= self.log.log_start_offset:
            return False
        self.log.delete_records(target)
        self.epoch_cache.truncate_from_start(self.log.log_start_offset)
        return True

    def _restart_at_first_batch(self, records: bytes | memoryview, exc: MqError, *, now_ms: int) -> bool:
        """KAFKA-6975: our log was restarted empty at the leader's log start, which
        DeleteRecords may have put inside a batch; the leader then sends that whole batch,
        which begins below our log end. Restart at the batch's base and append it, as
        Kafka does; True if that was the case (``exc`` is re-raised if the retry fails)."""
        end = self.log.log_end_offset
        if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE or end != self.log.log_start_offset:
            return False
        try:
            first = read_header(records)
        except ProtocolError:
            return False
        if not first.base_offset < end <= first.last_offset:
            return False
        self.log.truncate_fully_and_start_at(first.base_offset)
        self.log.append_as_follower(records, now_ms=now_ms)
        return True

    def _update_high_watermark(self, leader_high_watermark: int) -> None:
        # Our copy of the leader's high watermark, capped by what we hold; it only
        # grows here (truncation is the one place it can be lowered).
        bounded = min(leader_high_watermark, self.log.log_end_offset)
        self.high_watermark = max(self.high_watermark, bounded)

    def _truncate_on_divergence(self, leader: EpochEndOffset, *, now_ms: int) -> FetchOutcome:
        """Kafka's ``AbstractFetcherThread.getOffsetTruncationState``."""
        log_end = self.log.log_end_offset
        complete = True
        if leader.end_offset < 0:
            target = min(self.high_watermark, log_end)  # the leader has no epochs at all
        elif leader.epoch < 0:
            target = min(leader.end_offset, log_end)
        else:
            ours = self.epoch_cache.end_offset_for(leader.epoch, log_end)
            if ours.is_undefined or ours.end_offset < 0:
                target = min(leader.end_offset, log_end)  # nothing that old here
            elif ours.epoch != leader.epoch:
                target = min(ours.end_offset, log_end)
                complete = False
            else:
                target = min(ours.end_offset, leader.end_offset, log_end)
        return self._truncate_to(target, complete=complete, now_ms=now_ms)

    def _truncate_to(self, target: int, *, complete: bool, now_ms: int) -> FetchOutcome:
        below_hw = target < self.high_watermark
        try:
            self.log.truncate_to(target)
        except MqError as exc:
            return self._on_error(ReplicaFetchResponse(error=exc.code), now_ms)
        # The log cuts whole batches, so its end may land below ``target``.
        new_end = self.log.log_end_offset
        self.epoch_cache.truncate_from_end(new_end)
        self.high_watermark = min(self.high_watermark, new_end)
        return FetchOutcome(
            truncated_to=new_end, truncation_complete=complete,
            truncated_below_high_watermark=below_hw, high_watermark=self.high_watermark,
        )

    def _on_error(self, response: ReplicaFetchResponse, now_ms: int) -> FetchOutcome:
        code = response.error
        if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER, ErrorCode.UNKNOWN_TOPIC):
            self.status = FetchStatus.AWAITING_METADATA
        elif code == ErrorCode.KAFKA_STORAGE_ERROR:
            self.status = FetchStatus.FAILED
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE and response.log_start_offset > self.log.log_end_offset:
            # We fell below the leader's log start (retention moved on): nothing of
            # ours is needed any more; restart the log where the leader's begins.
            self.log.truncate_fully_and_start_at(response.log_start_offset)
            self.epoch_cache.clear()
            self.high_watermark = min(self.high_watermark, response.log_start_offset)
            return FetchOutcome(error=code, truncated_to=response.log_start_offset, high_watermark=self.high_watermark)
        else:
            self.status = FetchStatus.DELAYED
            self.delayed_until_ms = now_ms + self.fetch_backoff_ms
        return FetchOutcome(error=code, high_watermark=self.high_watermark)


class ReplicaFetcher:
    """The partitions this broker follows from one leader, fetched together."""

    def __init__(
        self, *, replica_id: int, leader_id: int, max_wait_ms: int = 500, min_bytes: int = 1,
        max_bytes: int = 10 * 1024 * 1024, partition_max_bytes: int = 1024 * 1024,
    ) -> None:
        self.replica_id = replica_id
        self.leader_id = leader_id
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.partitions: dict[TopicPartition, FollowerPartition] = {}

    def add_partition(self, partition: FollowerPartition) -> None:
        self.partitions[partition.tp] = partition

    def remove_partition(self, tp: TopicPartition) -> FollowerPartition | None:
        return self.partitions.pop(tp, None)

    def build_fetch_request(self, now_ms: int) -> FetchRequest | None:
        """One request for every fetchable partition (sorted: deterministic), or None."""
        by_topic: dict[str, list[FetchPartition]] = {}
        for tp in sorted(self.partitions):
            partition = self.partitions[tp]
            if partition.is_fetchable(now_ms):
                by_topic.setdefault(tp.topic, []).append(
                    partition.fetch_partition(partition_max_bytes=self.partition_max_bytes)
                )
        if not by_topic:
            return None
        return FetchRequest(
            topics=[FetchTopic(name, parts) for name, parts in by_topic.items()],
            max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
            replica_id=self.replica_id,
        )

    def handle_fetch_response(
        self, request: FetchRequest, responses: Mapping[TopicPartition, ReplicaFetchResponse], *,
        now_ms: int,
    ) -> dict[TopicPartition, FetchOutcome]:
        """Dispatch each partition's answer to ``request`` (partitions removed since
        the request was built are ignored)."""
        outcomes = {}
        for topic in request.topics:
            for sent in topic.partitions:
                tp = TopicPartition(topic.name, sent.partition)
                partition = self.partitions.get(tp)
                if partition is not None and tp in responses:
                    outcomes[tp] = partition.handle_response(responses[tp], request=sent, now_ms=now_ms)
        return outcomes

    def next_deadline_ms(self) -> int | None:
        """When a delayed partition becomes fetchable again (None: nothing delayed)."""
        delayed = [
            p.delayed_until_ms for p in self.partitions.values() if p.status == FetchStatus.DELAYED
        ]
        return min(delayed) if delayed else None
