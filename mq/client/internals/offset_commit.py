"""Committed offsets: the values a consumer commits and reads back, the requests that
carry them, and the auto-commit timer (sans-IO; the shell in ``mq.client.group_consumer``
sends the requests).

Kafka's convention: a committed offset is the *next* record to read, i.e. the
consumer's position, never the offset of the last record processed. A consumer that
read records 0..N-1 commits N, and a new member of the group starts at N.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.group_messages import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
)


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed position: ``offset`` is the next record to read."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Who this consumer is in its group (Kafka's ``ConsumerGroupMetadata``)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


def to_offset_and_metadata(value: int | OffsetAndMetadata) -> OffsetAndMetadata:
    if isinstance(value, OffsetAndMetadata):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise MqError(ErrorCode.INVALID_REQUEST, f"a commit offset must be an int, not {value!r}")
    return OffsetAndMetadata(value)


def commit_request(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata], *,
                   generation_id: int, member_id: str,
                   group_instance_id: str | None) -> OffsetCommitRequest:
    """One request for every partition, topics and partitions in sorted order."""
    topics: dict[str, list[OffsetCommitPartition]] = {}
    for tp in sorted(offsets):
        om = offsets[tp]
        topics.setdefault(tp.topic, []).append(
            OffsetCommitPartition(tp.partition, om.offset, om.leader_epoch, om.metadata))
    return OffsetCommitRequest(group_id=group_id,
                               topics=[OffsetCommitTopic(n, p) for n, p in topics.items()],
                               generation_id=generation_id, member_id=member_id,
                               group_instance_id=group_instance_id)


def error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def commit_errors(response: OffsetCommitResponse) -> dict[TopicPartition, ErrorCode]:
    """The partitions that failed, with their codes (empty: all committed)."""
    return {TopicPartition(t.name, p.partition): error_code(p.error_code)
            for t in response.topics for p in t.partitions if p.error_code}


def fetch_request(group_id: str, tps: Iterable[TopicPartition] | None) -> OffsetFetchRequest:
    if tps is None:
        return OffsetFetchRequest(group_id=group_id, topics=None)
    topics: dict[str, list[int]] = {}
    for tp in sorted(set(tps)):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return OffsetFetchRequest(group_id=group_id,
                              topics=[OffsetFetchTopic(n, p) for n, p in topics.items()])


def fetch_result(response: OffsetFetchResponse
                 ) -> tuple[dict[TopicPartition, OffsetAndMetadata | None], dict[TopicPartition, ErrorCode]]:
    """(committed offsets, None where nothing is committed; partition errors). A
    top-level error is raised as ``MqError`` (retriable ones too: the caller decides)."""
    if response.error_code:
        code = error_code(response.error_code)
        raise MqError(code, response.error_message or f"offset fetch failed: {code.name}")
    found: dict[TopicPartition, OffsetAndMetadata | None] = {}
    errors: dict[TopicPartition, ErrorCode] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition)
            if p.error_code:
                errors[tp] = error_code(p.error_code)
            elif p.offset < 0:
                found[tp] = None
            else:
                found[tp] = OffsetAndMetadata(p.offset, p.metadata, p.leader_epoch)
    return found, errors


class AutoCommitTimer:
    """``enable_auto_commit``: commit positions every ``interval_ms`` (checked from poll)."""

    def __init__(self, interval_ms: int, *, now_ms: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self.interval_ms = interval_ms
        self.next_ms = now_ms + interval_ms

    def due(self, now_ms: int) -> bool:
        return self.enabled and now_ms >= self.next_ms

    def reset(self, now_ms: int) -> None:
        self.next_ms = now_ms + self.interval_ms

    def time_to_next_ms(self, now_ms: int) -> int | None:
        return max(0, self.next_ms - now_ms) if self.enabled else None
