"""The follower side of replication: one ``ReplicaFetcher`` per leader (Kafka's
``ReplicaFetcherManager``); each partition is in at most one Fetch in flight, and a
partition that becomes fetchable while another fetch to its leader long-polls goes in a
fetch of its own, on a connection lane of its own (``Outbound.lane``).

``take_requests`` builds a FetchRequest (``replica_id`` = this broker, ``replica_epoch``
= its broker epoch) for every leader with fetchable partitions and no fetch in flight;
``on_response`` hands the answer to the fetcher (append, or truncate by leader epoch),
fsyncs what was appended under flush policy ``always`` (the next fetch's offset is the
follower's acknowledgement, so it must be durable first) and frees the leader for the
next fetch. A failed request (``None``) backs the partitions off for
``replica.fetch.backoff.ms``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mq.broker.outbound import Outbound
from mq.broker.partition import Partition
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.types import FlushPolicy, TopicPartition
from mq.protocol.messages import FetchPartitionResponse, FetchRequest, FetchResponse, Response
from mq.replication import (
    EpochEndOffset,
    FetchOutcome,
    FetchStatus,
    FollowerPartition,
    ReplicaFetcher,
    ReplicaFetchResponse,
)

METADATA_LAG_RETRY_MS = 50
MAX_FETCH_LANES = 4
"""Connections per leader for replica fetches in flight at once (more share the last)."""
LEADER_METADATA_BEHIND = (ErrorCode.UNKNOWN_TOPIC, ErrorCode.NOT_LEADER, ErrorCode.UNKNOWN_LEADER_EPOCH)
"""Answers from a leader that has not applied the metadata naming it leader yet."""


@dataclass(frozen=True, slots=True)
class UncleanTruncation:
    """A follower cut its log below its high watermark (``from_offset``) to ``to_offset``.
    On a mirror topic (``mirror_topic``) that is how a MirrorTruncate reaches the
    followers, a deliberate cut rather than a loss (the source region holds the records)."""

    tp: TopicPartition
    from_offset: int
    to_offset: int
    mirror_topic: bool = False


@dataclass(frozen=True, slots=True)
class _InFlight:
    leader_id: int
    request: FetchRequest
    lane: int = 0


class FetcherManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._in_flight: dict[int, _InFlight] = {}  # tag -> fetch
        # Partitions in a fetch in flight: each is in at most one, so answers apply in
        # order; a partition added while a long-poll is parked goes in a fetch of its own
        # instead of waiting up to replica.fetch.wait.max.ms for the parked one.
        # (leader, partition) -> tag: a fetch to a former leader does not hold up the
        # first fetch from the new one (its late answer is dropped by epoch).
        self._fetching: dict[tuple[int, TopicPartition], int] = {}
        self.truncations: list[UncleanTruncation] = []

    # ---- membership (driven by the metadata image)

    def follow(self, partition: Partition, leader_id: int, leader_epoch: int) -> None:
        follower = partition.follower
        if follower is None:
            follower = FollowerPartition(
                partition.tp, log=partition.log, epoch_cache=partition.epoch_cache,
                leader_id=leader_id, leader_epoch=leader_epoch,
                high_watermark=partition.high_watermark,
                fetch_backoff_ms=self.config.replica_fetch_backoff_ms,
            )
            partition.follower = follower
        elif follower.leader_id != leader_id:
            old = self.fetchers.get(follower.leader_id)
            if old is not None:
                old.remove_partition(partition.tp)
                self._drop_if_empty(follower.leader_id)
        follower.on_leader_change(leader_id, leader_epoch)
        fetcher = self._fetcher_of(leader_id, create=True)
        assert fetcher is not None
        fetcher.add_partition(follower)

    def unfollow(self, partition: Partition) -> None:
        follower = partition.follower
        if follower is None:
            return
        partition.remember_high_watermark()
        partition.follower = None
        fetcher = self.fetchers.get(follower.leader_id)
        if fetcher is not None:
            fetcher.remove_partition(partition.tp)
            self._drop_if_empty(follower.leader_id)

    def _fetcher_of(self, leader_id: int, *, create: bool) -> ReplicaFetcher | None:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None and create:
            fetcher = ReplicaFetcher(
                replica_id=self.config.node_id, leader_id=leader_id,
                max_wait_ms=self.config.replica_fetch_wait_max_ms,
                min_bytes=self.config.replica_fetch_min_bytes,
                max_bytes=self.config.fetch_max_bytes,
                partition_max_bytes=self.config.replica_fetch_max_bytes,
            )
            self.fetchers[leader_id] = fetcher
        return fetcher

    def _drop_if_empty(self, leader_id: int) -> None:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is not None and not fetcher.partitions:
            del self.fetchers[leader_id]

    # ---- requests and responses

    def take_requests(self, now_ms: int, *, broker_epoch: int, new_tag: Callable[[], int]) -> list[Outbound]:
        out = []
        for leader_id in sorted(self.fetchers):
            request = self.fetchers[leader_id].build_fetch_request(now_ms)
            if request is None:
                continue
            topics = []
            for topic in request.topics:
                idle = [p for p in topic.partitions
                        if (leader_id, TopicPartition(topic.name, p.partition)) not in self._fetching]
                if idle:
                    topics.append(replace(topic, partitions=idle))
            if not topics:
                continue
            request = replace(request, topics=topics, replica_epoch=broker_epoch)
            tag = new_tag()
            lane = self._free_lane(leader_id)
            self._in_flight[tag] = _InFlight(leader_id, request, lane)
            for topic in topics:
                for part in topic.partitions:
                    self._fetching[(leader_id, TopicPartition(topic.name, part.partition))] = tag
            out.append(Outbound(leader_id, request, tag, lane=lane))
        return out

    def _free_lane(self, leader_id: int) -> int:
        """The lowest connection lane no fetch to ``leader_id`` is using: a leader answers
        a connection's requests in order, so a fetch queued behind a parked long-poll on
        the same connection would wait out its ``replica.fetch.wait.max.ms``."""
        busy = {f.lane for f in self._in_flight.values() if f.leader_id == leader_id}
        return next(lane for lane in range(MAX_FETCH_LANES) if lane not in busy) \
            if len(busy) < MAX_FETCH_LANES else MAX_FETCH_LANES - 1

    def owns(self, tag: int) -> bool:
        return tag in self._in_flight

    def on_response(
        self, tag: int, response: Response | None, *, now_ms: int,
        partitions: dict[TopicPartition, Partition],
    ) -> dict[TopicPartition, FetchOutcome]:
        sent = self._in_flight.pop(tag, None)
        if sent is None:
            return {}
        for topic in sent.request.topics:
            for part in topic.partitions:
                key = (sent.leader_id, TopicPartition(topic.name, part.partition))
                if self._fetching.get(key) == tag:
                    del self._fetching[key]
        fetcher = self.fetchers.get(sent.leader_id)
        if fetcher is None:
            return {}
        if not isinstance(response, FetchResponse) or response.error_code != ErrorCode.NONE:
            self._back_off(fetcher, sent.request, now_ms)
            return {}
        answers: dict[TopicPartition, ReplicaFetchResponse] = {}
        for topic in response.topics:
            for part in topic.partitions:
                answers[TopicPartition(topic.name, part.partition)] = to_replica_response(part)
        # Only a diverging-epoch answer truncates below the high watermark: note the
        # high watermark of just those partitions (not of every fetched one).
        high_watermarks = {tp: fetcher.partitions[tp].high_watermark for tp, a in answers.items()
                           if a.diverging_epoch is not None and tp in fetcher.partitions}
        outcomes = fetcher.handle_fetch_response(sent.request, answers, now_ms=now_ms)
        for tp in sorted(outcomes):
            outcome = outcomes[tp]
            follower = fetcher.partitions.get(tp)
            if follower is None:
                continue
            partition = partitions.get(tp)
            if outcome.truncated_below_high_watermark and outcome.truncated_to is not None:
                # Only an unclean election (or, on a mirror topic, a MirrorTruncate) makes a
                # leader shorter than what was committed: those offsets held acknowledged
                # records, now gone.
                mirror = partition is not None and bool(partition.config.mirror_source_region)
                self.truncations.append(UncleanTruncation(tp, high_watermarks.get(tp, 0), outcome.truncated_to,
                                                          mirror))
            if answers[tp].error in LEADER_METADATA_BEHIND:
                # The leader has not applied the metadata we have (a new topic, or the
                # election that made it leader): it will within milliseconds, so try
                # again soon rather than after the whole replica.fetch.backoff.ms.
                follower.status = FetchStatus.DELAYED
                follower.delayed_until_ms = now_ms + min(METADATA_LAG_RETRY_MS, follower.fetch_backoff_ms)
            elif follower.status == FetchStatus.AWAITING_METADATA:
                # Fenced: our metadata is behind; a newer image restarts the fetch, and
                # the backoff covers a leader that moved on without telling us.
                follower.status = FetchStatus.DELAYED
                follower.delayed_until_ms = now_ms + follower.fetch_backoff_ms
            if (
                outcome.appended_bytes and partition is not None
                and self.config.log_flush_policy == FlushPolicy.ALWAYS
            ):
                try:
                    partition.log.flush()
                except MqError:
                    follower.status = FetchStatus.FAILED
        return outcomes

    def _back_off(self, fetcher: ReplicaFetcher, request: FetchRequest, now_ms: int) -> None:
        for topic in request.topics:
            for sent in topic.partitions:
                follower = fetcher.partitions.get(TopicPartition(topic.name, sent.partition))
                if follower is not None and follower.status == FetchStatus.FETCHING:
                    follower.status = FetchStatus.DELAYED
                    follower.delayed_until_ms = now_ms + self.config.replica_fetch_backoff_ms

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for f in self.fetchers.values() if (d := f.next_deadline_ms()) is not None]
        return min(deadlines) if deadlines else None

    def take_truncations(self) -> list[UncleanTruncation]:
        done, self.truncations = self.truncations, []
        return done


def to_replica_response(part: FetchPartitionResponse) -> ReplicaFetchResponse:
    try:
        error = ErrorCode(part.error_code)
    except ValueError:
        error = ErrorCode.UNKNOWN_SERVER_ERROR
    diverging = None
    if part.diverging_epoch >= 0 or part.diverging_end_offset >= 0:
        diverging = EpochEndOffset(part.diverging_epoch, part.diverging_end_offset)
    return ReplicaFetchResponse(
        error=error, high_watermark=part.high_watermark, log_start_offset=part.log_start_offset,
        records=part.records, diverging_epoch=diverging,
    )


def to_fetch_response_fields(diverging: EpochEndOffset) -> dict[str, int]:
    return {"diverging_epoch": diverging.epoch, "diverging_end_offset": diverging.end_offset}
