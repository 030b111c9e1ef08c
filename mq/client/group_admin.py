"""Consumer group administration for ``Admin``: list, describe, delete, offsets, lag.

Group requests go to the group's coordinator, found with FindCoordinator (any broker
answers; the coordinator is the leader of the group's ``__consumer_offsets``
partition). While the offsets topic is being created or a shard is loading, or after
the coordinator moved, the answer is COORDINATOR_NOT_AVAILABLE /
COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR (or the connection fails): look the
coordinator up again and retry until ``request_timeout_ms``. ListGroups asks every
broker (each lists the groups it coordinates) and merges the answers.

Lag, as ``kafka-consumer-groups --describe`` shows it: committed offset against the
high watermark (ListOffsets latest from each leader), and in seconds: now minus the
timestamp of the next unread record (the record at the committed offset, fetched
from the leader; 0 when the lag is 0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from mq.client.cluster import ClusterClient
from mq.client.results import OffsetAndMetadata
from mq.core.errors import ErrorCode, MqError
from mq.core.types import LATEST_TIMESTAMP, TopicPartition
from mq.protocol import group_messages as g
from mq.protocol import messages as m
from mq.protocol.record_batch import iter_records

COORDINATOR_RETRY = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                               ErrorCode.NOT_COORDINATOR})
LAG_FETCH_BYTES = 64 * 1024


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str
    coordinator_id: int


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    assignor: str
    generation_id: int
    coordinator_id: int
    members: list[MemberDescription]


@dataclass(frozen=True)
class PartitionLag:
    tp: TopicPartition
    member_id: str | None  # the member the partition is assigned to (None: unassigned)
    committed: int | None  # None: the group committed nothing for it
    log_end: int | None  # high watermark (None: the topic-partition no longer exists)
    lag: int | None  # records between the committed offset and the log end
    lag_seconds: float | None  # age of the next unread record (0 when lag is 0)


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class GroupAdmin:
    """The group half of ``Admin`` (``Admin`` delegates to one of these)."""

    def __init__(self, cluster: ClusterClient, *, request_timeout_ms: int) -> None:
        self.cluster = cluster
        self.request_timeout_ms = request_timeout_ms

    async def _backoff(self, deadline: int, code: ErrorCode, message: str) -> None:
        if self.cluster.now_ms() >= deadline:
            raise MqError(code, message)
        await asyncio.sleep(self.cluster.metadata.retry_backoff_ms / 1000)

    async def find_coordinator(self, group_id: str, *, deadline: int | None = None) -> int:
        """The node id of ``group_id``'s coordinator (retried while there is none yet)."""
        deadline = deadline if deadline is not None else self.cluster.now_ms() + self.request_timeout_ms
        while True:
            try:
                response = await self.cluster.request_any(g.FindCoordinatorRequest(key=group_id))
            except MqError as exc:
                if not exc.retriable:
                    raise
                await self._backoff(deadline, exc.code, exc.message)
                continue
            code = _code(response.error_code)  # type: ignore[attr-defined]
            if code == ErrorCode.NONE:
                node = response.node_id  # type: ignore[attr-defined]
                if self.cluster.metadata.node(node) is None:
                    self.cluster.add_node(node, response.host, response.port)  # type: ignore[attr-defined]
                return node
            if not code.retriable:
                raise MqError(code, f"group {group_id!r}: {response.error_message or code.description}")  # type: ignore[attr-defined]
            await self._backoff(deadline, code, f"no coordinator for group {group_id!r}: "
                                f"{response.error_message or code.description}")  # type: ignore[attr-defined]

    async def _to_coordinator(self, group_id: str, request: m.Request,
                              error_of: Callable[[m.Response], int]) -> tuple[int, m.Response]:
        """Send ``request`` to the group's coordinator; on coordinator errors (in the
        answer per ``error_of``, or a lost connection) find it again and retry."""
        deadline = self.cluster.now_ms() + self.request_timeout_ms
        while True:
            node = await self.find_coordinator(group_id, deadline=deadline)
            try:
                response = await self.cluster.request(node, request)
            except MqError as exc:
                if not exc.retriable:
                    raise
                await self._backoff(deadline, exc.code, exc.message)
                continue
            code = _code(error_of(response))
            if code not in COORDINATOR_RETRY:
                return node, response
            await self._backoff(deadline, code, f"group {group_id!r}: {code.description}")

    # ------------------------------------------------------------------ groups

    async def list_groups(self) -> list[GroupListing]:
        """Every group of the cluster: each broker lists those it coordinates."""
        await self.cluster.refresh_metadata()
        deadline = self.cluster.now_ms() + self.request_timeout_ms
        found: dict[str, GroupListing] = {}
        for node in sorted(self.cluster.metadata.brokers):
            while True:
                try:
                    response = await self.cluster.request(node, g.ListGroupsRequest())
                    code = _code(response.error_code)  # type: ignore[attr-defined]
                except MqError as exc:
                    if not exc.retriable:
                        raise
                    code = exc.code
                if code == ErrorCode.NONE:
                    break
                if not code.retriable:
                    raise MqError(code, f"broker {node}: {code.description}")
                await self._backoff(deadline, code, f"broker {node} did not list its groups: {code.description}")
            for listed in response.groups:  # type: ignore[attr-defined]
                found.setdefault(listed.group_id, GroupListing(listed.group_id, listed.state,
                                                               listed.protocol_type, node))
        return [found[k] for k in sorted(found)]

    async def describe_group(self, group_id: str) -> GroupDescription:
        """State, assignor, generation and members; GROUP_ID_NOT_FOUND for no such group
        (a group with only committed offsets is ``Empty``)."""
        node, response = await self._to_coordinator(
            group_id, g.DescribeGroupsRequest(groups=[group_id]),
            lambda r: r.groups[0].error_code if r.groups else 0)  # type: ignore[attr-defined]
        [described] = response.groups  # type: ignore[attr-defined]
        code = _code(described.error_code)
        if code != ErrorCode.NONE:
            raise MqError(code, f"group {group_id!r}: {code.description}")
        members = [
            MemberDescription(d.member_id, d.group_instance_id, d.client_id, d.client_host,
                              sorted(TopicPartition(a.topic, p) for a in d.assignment for p in a.partitions))
            for d in sorted(described.members, key=lambda d: d.member_id)]
        return GroupDescription(group_id, described.state, described.assignor, described.generation_id,
                                node, members)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """Delete empty groups and their offsets: per group NONE, NON_EMPTY_GROUP or
        GROUP_ID_NOT_FOUND (each group goes to its own coordinator)."""
        out: dict[str, ErrorCode] = {}
        for group_id in dict.fromkeys(group_ids):
            _, response = await self._to_coordinator(
                group_id, g.DeleteGroupsRequest(groups=[group_id]),
                lambda r: r.results[0].error_code if r.results else 0)  # type: ignore[attr-defined]
            results = {r.group_id: r.error_code for r in response.results}  # type: ignore[attr-defined]
            out[group_id] = _code(results.get(group_id, int(ErrorCode.UNKNOWN_SERVER_ERROR)))
        return out

    # ------------------------------------------------------------------ offsets

    async def list_group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of the group (empty for an unknown group)."""
        _, response = await self._to_coordinator(
            group_id, g.OffsetFetchRequest(group_id=group_id, topics=None),
            lambda r: r.error_code)  # type: ignore[attr-defined]
        code = _code(response.error_code)  # type: ignore[attr-defined]
        if code == ErrorCode.GROUP_ID_NOT_FOUND:
            return {}
        if code != ErrorCode.NONE:
            raise MqError(code, f"group {group_id!r}: {response.error_message or code.description}")  # type: ignore[attr-defined]
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        failures = []
        for t in response.topics:  # type: ignore[attr-defined]
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                if p.error_code:
                    failures.append(f"{tp}: {_code(p.error_code).name}")
                elif p.offset >= 0:
                    out[tp] = OffsetAndMetadata(p.offset, p.metadata, p.leader_epoch)
        if failures:
            raise MqError(_code(next(p.error_code for t in response.topics  # type: ignore[attr-defined]
                                     for p in t.partitions if p.error_code)), "; ".join(failures))
        return dict(sorted(out.items()))

    async def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for the group as an admin: only while the group has no
        members (else UNKNOWN_MEMBER_ID, "group has active members")."""
        topics: dict[str, list[g.OffsetCommitPartition]] = {}
        for tp, offset in sorted(offsets.items()):
            value = offset.offset if isinstance(offset, OffsetAndMetadata) else int(offset)
            topics.setdefault(tp.topic, []).append(g.OffsetCommitPartition(tp.partition, value))
        if not topics:
            return
        request = g.OffsetCommitRequest(group_id=group_id, topics=[g.OffsetCommitTopic(n, ps)
                                                                   for n, ps in topics.items()])

        def first_error(r: m.Response) -> int:
            return next((p.error_code for t in r.topics for p in t.partitions  # type: ignore[attr-defined]
                         if p.error_code), 0)

        _, response = await self._to_coordinator(group_id, request, first_error)
        failures = [(TopicPartition(t.name, p.partition), _code(p.error_code))
                    for t in response.topics for p in t.partitions if p.error_code]  # type: ignore[attr-defined]
        if failures:
            detail = getattr(response, "error_message", "") or failures[0][1].description
            raise MqError(failures[0][1], f"group {group_id!r}: " + "; ".join(
                f"{tp}: {code.name}" for tp, code in failures) + f" ({detail})")

    # ------------------------------------------------------------------ lag

    async def group_lag(self, group_id: str, *, wall_ms: int | None = None) -> list[PartitionLag]:
        """Per partition the group has committed or is assigned: committed offset, log
        end, lag in records and seconds, and the member it is assigned to."""
        _, lags = await self.describe_group_lag(group_id, wall_ms=wall_ms)
        return lags

    async def describe_group_lag(self, group_id: str, *, wall_ms: int | None = None
                                 ) -> tuple[GroupDescription | None, list[PartitionLag]]:
        """``group_lag`` with the description it was computed from (None: no such group,
        or only committed offsets are left of it) — one DescribeGroups for both."""
        from mq.client.admin import list_offsets

        description = await self.describe_group_or_none(group_id)
        owner: dict[TopicPartition, str] = {}
        for member in description.members if description else []:
            for tp in member.assignment:
                owner[tp] = member.member_id
        committed = {tp: om.offset for tp, om in (await self.list_group_offsets(group_id)).items()}
        tps = sorted(set(owner) | set(committed))
        existing = await self._existing(tps)
        ends = await list_offsets(self.cluster, {tp: LATEST_TIMESTAMP for tp in existing},
                                  timeout_ms=self.request_timeout_ms) if existing else {}
        lagging = {tp: committed[tp] for tp in existing
                   if tp in committed and ends[tp].offset > committed[tp]}
        timestamps = await self._next_record_timestamps(lagging)
        now = wall_ms if wall_ms is not None else self.cluster.clock.wall_ms()
        out = []
        for tp in tps:
            end = ends[tp].offset if tp in ends else None
            done = committed.get(tp)
            lag = max(0, end - done) if end is not None and done is not None else None
            seconds: float | None = None
            if lag == 0:
                seconds = 0.0
            elif tp in timestamps:
                seconds = max(0.0, (now - timestamps[tp]) / 1000)
            out.append(PartitionLag(tp, owner.get(tp), done, end, lag, seconds))
        return description, out

    async def describe_group_or_none(self, group_id: str) -> GroupDescription | None:
        try:
            return await self.describe_group(group_id)
        except MqError as exc:
            if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
                return None
            raise

    async def _existing(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        """The partitions of ``tps`` whose topic still exists (with that partition)."""
        if not tps:
            return []
        md = self.cluster.metadata
        if md.add_topics(*{tp.topic for tp in tps}) or md.need_update:
            await self.cluster.refresh_metadata()
        out = []
        for tp in tps:
            count = md.partition_count(tp.topic)
            if count is not None and 0 <= tp.partition < count:
                out.append(tp)
        return out

    async def _next_record_timestamps(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The timestamp of the first record at or after each offset, read from the leader.

        Partitions whose offset is no longer in the log (deleted or out of range) are left out."""
        from mq.client.admin import _by_leader

        if not offsets:
            return {}

        def build(tps: list[TopicPartition]) -> m.FetchRequest:
            topics: dict[str, list[m.FetchPartition]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(
                    m.FetchPartition(tp.partition, offsets[tp], partition_max_bytes=LAG_FETCH_BYTES))
            return m.FetchRequest(topics=[m.FetchTopic(n, ps) for n, ps in topics.items()],
                                  max_wait_ms=0, min_bytes=0, max_bytes=LAG_FETCH_BYTES * max(1, len(tps)))

        def parse(response: m.FetchResponse) -> dict:
            out: dict = {}
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition)
                    if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        out[tp] = (0, None)
                    elif p.error_code:
                        out[tp] = (p.error_code, p.error_message)
                    else:
                        out[tp] = (0, _first_timestamp(p.records, offsets.get(tp, 0)))
            return out

        found = await _by_leader(self.cluster, list(offsets), build, parse, self.request_timeout_ms)
        return {tp: ts for tp, ts in found.items() if ts is not None}


def _first_timestamp(records: bytes | memoryview, offset: int) -> int | None:
    for record in iter_records(records, verify_crc=False):
        if record.offset >= offset:
            return record.timestamp
    return None
