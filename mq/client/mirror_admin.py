"""The client side of mirror topics: raw fetches from a source region, MirrorAppend and
MirrorTruncate on a target region (``Admin`` delegates here, as it does for groups).

A mirror copies without decoding: ``fetch_raw_many`` returns each partition leader's
stored batches as bytes (below the high watermark, like a consumer fetch), and
``mirror_append`` hands the same bytes to the target partition's leader, which appends
them at their source offsets. Both route by metadata to partition leaders. One
``fetch_raw_many`` call sends one Fetch per leader for all the partitions it leads
(a long poll when ``max_wait_ms`` > 0), on a connection lane of its own so admin
requests never queue behind it; it answers each partition with a ``RawFetch`` or the
error (a retriable one after a metadata refresh has been requested), so one slow
partition never holds up the others. ``mirror_append`` and ``mirror_truncate`` retry
retriable errors (NOT_LEADER after a leader election, NOT_ENOUGH_REPLICAS, timeouts,
lost connections) until their timeout: a retried MirrorAppend is safe, the batches
already appended come back as duplicates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from mq.client.cluster import ClusterClient
from mq.client.internals.metadata import needs_metadata_refresh
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol import messages as m
from mq.protocol.mirror_messages import (
    MirrorAppendRequest,
    MirrorAppendResponse,
    MirrorTruncateRequest,
    MirrorTruncateResponse,
)

__all__ = ["MirrorAdmin", "MirrorAppendResult", "OffsetOutOfRange", "RawFetch"]

T = TypeVar("T")

RAW_FETCH_LANE = "raw-fetch"
MAX_RAW_FETCH_WAIT_MS = 30_000
MIB = 1024 * 1024


@dataclass(frozen=True)
class RawFetch:
    """Whole record batches as the leader stores them (``records``, undecoded; empty when
    nothing is committed past the offset), the partition's high watermark and log start.
    The first batch may start before the offset asked for (it holds that offset)."""

    records: bytes
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True)
class MirrorAppendResult:
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    appended: int  # batches appended by this request
    duplicates: int  # batches already in the log (a retry), acknowledged


class OffsetOutOfRange(MqError):
    """A fetch below the log start or past the log end; carries the partition's range
    so a mirror can tell which offsets retention removed."""

    def __init__(self, message: str, *, log_start_offset: int, high_watermark: int) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


NEVER_RETRIED = frozenset({ErrorCode.CORRUPT_MESSAGE})
"""The same bytes sent again fail the same way (a CRC mismatch here is the source's
bytes, not the network's: TCP has its own checksum)."""


def _retriable(code: ErrorCode) -> bool:
    return code not in NEVER_RETRIED and (code.retriable or needs_metadata_refresh(code))


class MirrorAdmin:
    def __init__(self, cluster: ClusterClient, *, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.cluster = cluster
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        cluster.lane_timeouts_ms[RAW_FETCH_LANE] = request_timeout_ms + MAX_RAW_FETCH_WAIT_MS

    # ------------------------------------------------------------------ raw fetch

    async def fetch_raw_many(
        self, offsets: Mapping[TopicPartition, int], *, max_bytes: int = 50 * MIB,
        partition_max_bytes: int = MIB, max_wait_ms: int = 0, min_bytes: int = 1,
    ) -> dict[TopicPartition, RawFetch | MqError]:
        md = self.cluster.metadata
        md.add_topics(*dict.fromkeys(tp.topic for tp in offsets))
        if md.need_update or any(md.leader_for(tp) is None for tp in offsets):
            await self.cluster.refresh_metadata()
        results: dict[TopicPartition, RawFetch | MqError] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in offsets:
            leader = md.leader_for(tp)
            if leader is None:
                code = md.topic_error(tp.topic) or ErrorCode.LEADER_NOT_AVAILABLE
                results[tp] = MqError(code, f"{tp}: no leader known ({code.name})")
            else:
                by_leader.setdefault(leader, []).append(tp)
        wait_ms = max(0, min(max_wait_ms, MAX_RAW_FETCH_WAIT_MS))

        async def one(leader: int, tps: list[TopicPartition]) -> None:
            topics: dict[str, list[m.FetchPartition]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(m.FetchPartition(
                    tp.partition, offsets[tp], partition_max_bytes, current_leader_epoch=md.leader_epoch(tp)))
            request = m.FetchRequest([m.FetchTopic(n, p) for n, p in topics.items()], max_wait_ms=wait_ms,
                                     min_bytes=min_bytes, max_bytes=max_bytes)
            try:
                response = await self.cluster.request(leader, request, lane=RAW_FETCH_LANE)
            except MqError as exc:
                results.update({tp: MqError(exc.code, f"{tp}: {exc.message}") for tp in tps})
                return
            results.update(_parse_fetch(response, tps))  # type: ignore[arg-type]

        await asyncio.gather(*(one(leader, tps) for leader, tps in by_leader.items()))
        if any(isinstance(r, MqError) and r.retriable for r in results.values()):
            md.request_update()
        return {tp: results[tp] for tp in offsets}

    async def fetch_raw(self, tp: TopicPartition, offset: int, max_bytes: int = MIB, *,
                        max_wait_ms: int = 0) -> RawFetch:
        """One partition; retriable errors are retried until ``request_timeout_ms``."""
        async def attempt() -> RawFetch | MqError:
            return (await self.fetch_raw_many({tp: offset}, max_bytes=max_bytes, partition_max_bytes=max_bytes,
                                              max_wait_ms=max_wait_ms))[tp]

        return await self._retrying(attempt, self.request_timeout_ms)

    # ------------------------------------------------------------------ MirrorAppend / MirrorTruncate

    async def mirror_append(self, tp: TopicPartition, batches: bytes | memoryview, *, acks: int = -1,
                            start_offset: int = -1, timeout_ms: int = 30_000) -> MirrorAppendResult:
        deadline = self.cluster.now_ms() + timeout_ms

        async def attempt() -> MirrorAppendResult | MqError:
            wait_ms = self._server_wait_ms(deadline)
            request = MirrorAppendRequest(tp.topic, tp.partition, batches, acks=acks, start_offset=start_offset,
                                          timeout_ms=wait_ms)
            response = await self._to_leader(tp, request)
            if isinstance(response, MqError):
                return response
            assert isinstance(response, MirrorAppendResponse)
            if response.error_code != ErrorCode.NONE:
                return _error(tp, response.error_code, response.error_message)
            return MirrorAppendResult(response.log_end_offset, response.high_watermark, response.log_start_offset,
                                      response.appended_batches, response.duplicate_batches)

        return await self._retrying(attempt, timeout_ms)

    async def mirror_truncate(self, tp: TopicPartition, offset: int, *, timeout_ms: int = 30_000) -> int:
        deadline = self.cluster.now_ms() + timeout_ms

        async def attempt() -> int | MqError:
            request = MirrorTruncateRequest(tp.topic, tp.partition, offset, timeout_ms=self._server_wait_ms(deadline))
            response = await self._to_leader(tp, request)
            if isinstance(response, MqError):
                return response
            assert isinstance(response, MirrorTruncateResponse)
            if response.error_code != ErrorCode.NONE:
                return _error(tp, response.error_code, response.error_message)
            return response.log_end_offset

        return await self._retrying(attempt, timeout_ms)

    # ------------------------------------------------------------------ plumbing

    def _server_wait_ms(self, deadline_ms: int) -> int:
        """How long the broker may hold this attempt: what is left, and less than the
        connection's request timeout so its answer (even REQUEST_TIMED_OUT) arrives."""
        left = max(1, deadline_ms - self.cluster.now_ms())
        return min(left, max(1, self.request_timeout_ms - 1000))

    async def _to_leader(self, tp: TopicPartition, request: m.Request) -> m.Response | MqError:
        md = self.cluster.metadata
        if md.add_topics(tp.topic) or md.need_update or md.leader_for(tp) is None:
            try:
                await self.cluster.refresh_metadata()
            except MqError as exc:
                return exc
        leader = md.leader_for(tp)
        if leader is None:
            count = md.partition_count(tp.topic)
            if count is not None and not 0 <= tp.partition < count:  # not retried: it will not appear
                raise MqError(ErrorCode.UNKNOWN_TOPIC, f"{tp}: topic {tp.topic} has {count} partitions")
            if md.topic_error(tp.topic) == ErrorCode.UNKNOWN_TOPIC:  # retried: it may be being created
                return MqError(ErrorCode.UNKNOWN_TOPIC, f"{tp}: no such topic")
            return MqError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}: no leader right now")
        try:
            return await self.cluster.request(leader, request)
        except MqError as exc:
            return exc

    async def _retrying(self, attempt: Callable[[], Awaitable[T | MqError]], timeout_ms: int) -> T:
        deadline = self.cluster.now_ms() + timeout_ms
        while True:
            result = await attempt()
            if not isinstance(result, MqError):
                return result
            if not _retriable(result.code) or self.cluster.now_ms() >= deadline:
                raise result
            self.cluster.metadata.request_update()
            await asyncio.sleep(self.retry_backoff_ms / 1000)


def _error(tp: TopicPartition, code: int, message: str) -> MqError:
    error = _code(code)
    return MqError(error, f"{tp}: {message or error.description}")


def _parse_fetch(response: m.FetchResponse, tps: list[TopicPartition]) -> dict[TopicPartition, RawFetch | MqError]:
    out: dict[TopicPartition, RawFetch | MqError] = {}
    if response.error_code != ErrorCode.NONE:
        return {tp: _error(tp, response.error_code, "fetch refused") for tp in tps}
    for topic in response.topics:
        for part in topic.partitions:
            tp = TopicPartition(topic.name, part.partition)
            if part.error_code == ErrorCode.NONE:
                out[tp] = RawFetch(bytes(part.records), part.high_watermark, part.log_start_offset)
            elif part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                out[tp] = OffsetOutOfRange(f"{tp}: {part.error_message}", log_start_offset=part.log_start_offset,
                                           high_watermark=part.high_watermark)
            else:
                out[tp] = _error(tp, part.error_code, part.error_message)
    for tp in tps:
        out.setdefault(tp, MqError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{tp}: missing from the fetch response"))
    return out
