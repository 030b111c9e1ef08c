"""The asyncio Admin client: topics, configs, offsets, records, cluster.

Answers are plain frozen dataclasses; any error the broker reports is raised as
``MqError`` carrying the broker's code and message. Topic changes go to the active
controller (any broker until one is known); partition operations (ListOffsets,
DeleteRecords) go to each partition's leader, retried on stale-routing errors with a
metadata refresh until ``request_timeout_ms``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mq.client.cluster import ClusterClient
from mq.client.group_admin import (
    GroupAdmin,
    GroupDescription,
    GroupListing,
    MemberDescription,
    PartitionLag,
)
from mq.client.internals.metadata import needs_metadata_refresh
from mq.client.mirror_admin import MirrorAdmin, MirrorAppendResult, OffsetOutOfRange, RawFetch
from mq.client.results import OffsetAndMetadata
from mq.core.clock import Clock
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol import messages as m

__all__ = ["Admin", "BrokerDescription", "ClusterDescription", "ConfigEntry", "GroupDescription", "GroupListing",
           "MemberDescription", "MirrorAppendResult", "NewTopic", "OffsetInfo", "OffsetOutOfRange",
           "PartitionDescription", "PartitionLag", "RawFetch", "TopicDescription", "list_offsets"]

@dataclass(frozen=True)
class NewTopic:
    name: str
    partitions: int = 1
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDescription, ...]
    is_internal: bool = False
    topic_id: str = ""


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    is_default: bool
    read_only: bool = False
    documentation: str = ""


@dataclass(frozen=True)
class OffsetInfo:
    offset: int
    timestamp: int
    leader_epoch: int = -1


@dataclass(frozen=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerDescription, ...]


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _raise_all(failures: list[tuple[str, int, str]]) -> None:
    """Raise the first failure's code with every failure in the message."""
    if not failures:
        return
    code = _code(failures[0][1])
    text = "; ".join(f"{name}: {_code(c).name}: {msg or _code(c).description}"
                     for name, c, msg in failures)
    raise MqError(code, text)


DELETE_RECORDS_LANE = "delete-records"
DELETE_RECORDS_SLACK_MS = 5_000


def _delete_records_error(p: m.DeleteRecordsPartitionResult) -> str:
    if p.error_code == ErrorCode.REQUEST_TIMED_OUT:
        return (f"the leader deleted the records, but not every in-sync replica moved its log start within "
                f"the timeout (the smallest is at {p.low_watermark}); retry (a replica that stays down leaves "
                "the ISR after replica.lag.time.max.ms)")
    return ""


async def _by_leader(cluster: ClusterClient, tps: list[TopicPartition], build, parse,
                     timeout_ms: int, *, lane: str = "") -> dict:
    """Send one request per leader for ``tps``, retrying stale-routing errors with a
    metadata refresh until ``timeout_ms``. ``build(node_tps) -> request``;
    ``parse(response) -> {tp: (code, value)}`` (value: the error message for an error)."""
    deadline = cluster.now_ms() + timeout_ms
    results: dict = {}
    remaining = list(dict.fromkeys(tps))
    cluster.metadata.add_topics(*[tp.topic for tp in remaining])
    while remaining:
        md = cluster.metadata
        if md.need_update or any(md.leader_for(tp) is None for tp in remaining):
            await cluster.refresh_metadata()
        by_node: dict[int, list[TopicPartition]] = {}
        last: dict[TopicPartition, tuple[int, str]] = {}
        for tp in remaining:
            leader = md.leader_for(tp)
            if leader is None:
                count = md.partition_count(tp.topic)
                if md.topic_error(tp.topic) == ErrorCode.UNKNOWN_TOPIC or (
                        count is not None and not 0 <= tp.partition < count):
                    raise MqError(ErrorCode.UNKNOWN_TOPIC, f"{tp}: no such topic-partition")
                last[tp] = (int(md.topic_error(tp.topic) or ErrorCode.LEADER_NOT_AVAILABLE),
                            f"no leader for {tp}")
                continue
            by_node.setdefault(leader, []).append(tp)
        retry = [tp for tp in last]
        for node, node_tps in by_node.items():
            try:
                response = await cluster.request(node, build(node_tps), lane=lane)
            except MqError as exc:
                if not exc.retriable:
                    raise
                retry += node_tps
                last.update({tp: (int(exc.code), exc.message) for tp in node_tps})
                continue
            answers = parse(response)
            for tp in node_tps:
                code, value = answers.get(tp, (int(ErrorCode.UNKNOWN_SERVER_ERROR), None))
                if code == 0:
                    results[tp] = value
                elif needs_metadata_refresh(code) or _code(code).retriable:
                    retry.append(tp)
                    last[tp] = (code, str(value or ""))
                else:
                    _raise_all([(str(tp), code, str(value or ""))])
        remaining = retry
        if remaining:
            if cluster.now_ms() >= deadline:
                _raise_all([(str(tp), c, msg) for tp, (c, msg) in last.items()])
            cluster.metadata.request_update()
            await asyncio.sleep(cluster.metadata.retry_backoff_ms / 1000)
    return results


async def list_offsets(cluster: ClusterClient, timestamps: Mapping[TopicPartition, int], *,
                       timeout_ms: int) -> dict[TopicPartition, OffsetInfo]:
    """ListOffsets for each partition (-2 earliest, -1 latest, else a time in ms)."""
    def build(tps: list[TopicPartition]) -> m.ListOffsetsRequest:
        topics: dict[str, list[m.ListOffsetsPartition]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(m.ListOffsetsPartition(tp.partition, timestamps[tp]))
        return m.ListOffsetsRequest(topics=[m.ListOffsetsTopic(n, p) for n, p in topics.items()])

    def parse(response: m.ListOffsetsResponse) -> dict:
        return {TopicPartition(t.name, p.partition):
                (p.error_code, OffsetInfo(p.offset, p.timestamp, p.leader_epoch)
                 if not p.error_code else "")
                for t in response.topics for p in t.partitions}

    return await _by_leader(cluster, list(timestamps), build, parse, timeout_ms)


class Admin:
    def __init__(self, bootstrap: str = "localhost:9092", *, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, client_id: str = "mq-admin",
                 clock: Clock | None = None, seed: int | None = None,
                 address_map: Mapping[str, str] | None = None) -> None:
        self._client = ClusterClient(bootstrap, client_id=client_id,
                                     request_timeout_ms=request_timeout_ms,
                                     retry_backoff_ms=retry_backoff_ms, clock=clock, seed=seed,
                                     address_map=address_map)
        self.request_timeout_ms = request_timeout_ms
        self._groups = GroupAdmin(self._client, request_timeout_ms=request_timeout_ms)
        self._mirror = MirrorAdmin(self._client, request_timeout_ms=request_timeout_ms,
                                   retry_backoff_ms=retry_backoff_ms)
        # DeleteRecords waits up to request_timeout_ms at the leader: its connection waits
        # longer, so the leader's own answer (REQUEST_TIMED_OUT) arrives.
        self._client.lane_timeouts_ms[DELETE_RECORDS_LANE] = request_timeout_ms + DELETE_RECORDS_SLACK_MS

    async def start(self) -> None:
        await self._client.refresh_metadata()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    async def _to_controller(self, request: m.Request) -> m.Response:
        """Send to the active controller (any broker forwards there); while the quorum
        elects one (``NOT_CONTROLLER`` in the answer) refresh metadata and try again
        until ``request_timeout_ms``."""
        deadline = self._client.now_ms() + self.request_timeout_ms
        while True:
            response = await self._send_to_controller(request)
            if not _names_no_controller(response) or self._client.now_ms() >= deadline:
                return response
            await asyncio.sleep(CONTROLLER_RETRY_BACKOFF_S)
            await self._client.refresh_metadata()

    async def _send_to_controller(self, request: m.Request) -> m.Response:
        md = self._client.metadata
        if md.last_refresh_ms is None:
            await self._client.refresh_metadata()
        if md.controller_id >= 0 and md.node(md.controller_id) is not None:
            try:
                return await self._client.request(md.controller_id, request)
            except MqError as exc:
                if exc.code not in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                    raise
        return await self._client.request_any(request)

    # ------------------------------------------------------------------ topics

    async def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False,
                            exist_ok: bool = False) -> None:
        request = m.CreateTopicsRequest(
            topics=[m.CreatableTopic(t.name, t.partitions, t.replication_factor,
                                     {str(k): str(v) for k, v in dict(t.configs).items()})
                    for t in topics],
            timeout_ms=self.request_timeout_ms, validate_only=validate_only)
        response = await self._to_controller(request)
        failures = [(r.name, r.error_code, r.error_message) for r in response.topics  # type: ignore[attr-defined]
                    if r.error_code and not (exist_ok and r.error_code == ErrorCode.TOPIC_ALREADY_EXISTS)]
        _raise_all(failures)
        self._client.metadata.request_update()

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None, *,
                           exist_ok: bool = False) -> None:
        await self.create_topics([NewTopic(name, partitions, replication_factor, dict(configs or {}))],
                                 exist_ok=exist_ok)

    async def create_partitions(self, topic: str, total: int, *,
                                assignments: Iterable[Iterable[int]] | None = None,
                                validate_only: bool = False) -> None:
        """Grow ``topic`` to ``total`` partitions (Kafka's ``createPartitions`` with
        ``NewPartitions.increaseTo(total)``); ``assignments``: one replica list per new
        partition, leader first (default: the controller places them). A total not
        above the current count raises ``INVALID_PARTITIONS``: partitions never go.
        Keyed records map to other partitions afterwards (``murmur2(key) % total``)."""
        new = m.CreatePartitionsTopic(
            topic, total, None if assignments is None else
            [m.CreatePartitionsAssignment([int(b) for b in a]) for a in assignments])
        response = await self._to_controller(m.CreatePartitionsRequest(
            [new], timeout_ms=self.request_timeout_ms, validate_only=validate_only))
        _raise_all([(r.name, r.error_code, r.error_message)
                    for r in response.results if r.error_code])  # type: ignore[attr-defined]
        self._client.metadata.request_update()

    async def delete_topics(self, names: Iterable[str]) -> None:
        response = await self._to_controller(
            m.DeleteTopicsRequest(topic_names=list(names), timeout_ms=self.request_timeout_ms))
        _raise_all([(r.name, r.error_code, r.error_message)
                    for r in response.topics if r.error_code])  # type: ignore[attr-defined]
        self._client.metadata.request_update()

    async def delete_topic(self, name: str) -> None:
        await self.delete_topics([name])

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        response = await self._client.request_any(m.MetadataRequest(topics=None))
        return sorted(t.name for t in response.topics  # type: ignore[attr-defined]
                      if not t.error_code and (include_internal or not t.is_internal))

    async def describe_topics(self, names: Iterable[str]) -> list[TopicDescription]:
        names = list(names)
        response = await self._client.request_any(m.MetadataRequest(topics=names))
        by_name = {t.name: t for t in response.topics}  # type: ignore[attr-defined]
        failures = []
        out = []
        for name in names:
            t = by_name.get(name)
            if t is None or t.error_code:
                failures.append((name, t.error_code if t else int(ErrorCode.UNKNOWN_TOPIC), ""))
                continue
            out.append(TopicDescription(name, tuple(
                PartitionDescription(p.partition, p.leader_id if p.leader_id >= 0 else None,
                                     p.leader_epoch, tuple(p.replicas), tuple(p.isr),
                                     tuple(p.offline_replicas))
                for p in sorted(t.partitions, key=lambda p: p.partition)), t.is_internal, t.topic_id))
        _raise_all(failures)
        return out

    async def describe_topic(self, name: str) -> TopicDescription:
        return (await self.describe_topics([name]))[0]

    # ------------------------------------------------------------------ configs

    async def describe_configs(self, topic: str, names: Iterable[str] | None = None
                               ) -> list[ConfigEntry]:
        request = m.DescribeConfigsRequest(resources=[m.ConfigResource(
            int(m.ConfigResourceType.TOPIC), topic, list(names) if names is not None else None)])
        response = await self._client.request_any(request)
        result = response.results[0]  # type: ignore[attr-defined]
        _raise_all([(topic, result.error_code, result.error_message)] if result.error_code else [])
        return [ConfigEntry(c.name, c.value, c.is_default, c.read_only, c.documentation)
                for c in result.configs]

    async def alter_configs(self, topic: str, set: Mapping[str, str] | None = None,
                            delete: Iterable[str] = (), *, validate_only: bool = False) -> None:
        """Incremental: keys in ``set`` change, keys in ``delete`` return to defaults."""
        ops = [m.AlterableConfig(k, int(m.AlterConfigOp.SET), str(v)) for k, v in (set or {}).items()]
        ops += [m.AlterableConfig(k, int(m.AlterConfigOp.DELETE)) for k in delete]
        request = m.AlterConfigsRequest(resources=[m.AlterConfigsResource(
            int(m.ConfigResourceType.TOPIC), topic, ops)], validate_only=validate_only)
        response = await self._to_controller(request)
        result = response.results[0]  # type: ignore[attr-defined]
        _raise_all([(topic, result.error_code, result.error_message)] if result.error_code else [])

    # ------------------------------------------------------------------ offsets and records

    async def list_offsets(self, timestamps: Mapping[TopicPartition, int]
                           ) -> dict[TopicPartition, OffsetInfo]:
        """Per partition: -2 → log start, -1 → high watermark, else the first offset whose
        timestamp is >= the given time (offset -1 when there is none)."""
        return await list_offsets(self._client, timestamps, timeout_ms=self.request_timeout_ms)

    async def delete_records(self, offsets: Mapping[TopicPartition, int]
                             ) -> dict[TopicPartition, int]:
        """Move each partition's log start offset up to ``offset`` (-1: the high
        watermark); returns the new low watermarks (the smallest log start of each
        partition's in-sync replicas), once every in-sync replica moved its start. An
        in-sync replica that does not within ``request_timeout_ms`` raises
        REQUEST_TIMED_OUT (the leader deleted the records all the same)."""
        def build(tps: list[TopicPartition]) -> m.DeleteRecordsRequest:
            topics: dict[str, list[m.DeleteRecordsPartition]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(m.DeleteRecordsPartition(tp.partition, offsets[tp]))
            return m.DeleteRecordsRequest(topics=[m.DeleteRecordsTopic(n, p) for n, p in topics.items()],
                                          timeout_ms=self.request_timeout_ms)

        def parse(response: m.DeleteRecordsResponse) -> dict:
            return {TopicPartition(t.name, p.partition): (p.error_code, p.low_watermark if p.error_code == 0
                                                          else _delete_records_error(p))
                    for t in response.topics for p in t.partitions}

        return await _by_leader(self._client, list(offsets), build, parse, self.request_timeout_ms,
                                lane=DELETE_RECORDS_LANE)

    # ------------------------------------------------------------------ consumer groups

    async def list_groups(self) -> list[GroupListing]:
        """Every consumer group of the cluster (each broker lists those it coordinates)."""
        return await self._groups.list_groups()

    async def describe_group(self, group_id: str) -> GroupDescription:
        """State, assignor, generation, coordinator and members (GROUP_ID_NOT_FOUND if none)."""
        return await self._groups.describe_group(group_id)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """Delete empty groups with their offsets: per group NONE, NON_EMPTY_GROUP or GROUP_ID_NOT_FOUND."""
        return await self._groups.delete_groups(group_ids)

    async def list_group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return await self._groups.list_group_offsets(group_id)

    async def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set committed offsets (the group must have no active members)."""
        await self._groups.alter_group_offsets(group_id, offsets)

    async def group_lag(self, group_id: str) -> list[PartitionLag]:
        """Per partition: owning member, committed offset, log end, lag in records and seconds."""
        return await self._groups.group_lag(group_id)

    async def describe_group_lag(self, group_id: str, *, wall_ms: int | None = None
                                 ) -> tuple[GroupDescription | None, list[PartitionLag]]:
        """``group_lag`` and the group's description (None: no such group) from one
        DescribeGroups; ``wall_ms`` is "now" for the lag in seconds."""
        return await self._groups.describe_group_lag(group_id, wall_ms=wall_ms)

    # ------------------------------------------------------------------ mirror topics

    async def fetch_raw(self, tp: TopicPartition, offset: int, max_bytes: int = 1024 * 1024, *,
                        max_wait_ms: int = 0) -> RawFetch:
        """The leader's stored batches from ``offset`` (the batch holding it first), below
        the high watermark, undecoded, with the high watermark and log start. Raises
        ``OffsetOutOfRange`` (with the range) outside the log; retries retriable errors."""
        return await self._mirror.fetch_raw(tp, offset, max_bytes, max_wait_ms=max_wait_ms)

    async def fetch_raw_many(self, offsets: Mapping[TopicPartition, int], *, max_bytes: int = 50 * 1024 * 1024,
                             partition_max_bytes: int = 1024 * 1024, max_wait_ms: int = 0,
                             min_bytes: int = 1) -> dict[TopicPartition, RawFetch | MqError]:
        """``fetch_raw`` for many partitions at once: one Fetch per leader (a long poll up to
        ``max_wait_ms`` until ``min_bytes`` are there); each partition's ``RawFetch`` or
        its error (not raised, not retried: call again)."""
        return await self._mirror.fetch_raw_many(offsets, max_bytes=max_bytes, partition_max_bytes=partition_max_bytes,
                                                 max_wait_ms=max_wait_ms, min_bytes=min_bytes)

    async def mirror_append(self, tp: TopicPartition, batches: bytes | memoryview, *, acks: int = -1,
                            start_offset: int = -1, fetch_offset: int = -1,
                            timeout_ms: int = 30_000) -> MirrorAppendResult:
        """Append record batches fetched from the source region to the mirror topic's
        partition at their own offsets (see ``mq.protocol.mirror_messages``). Pass
        ``fetch_offset``, the offset the batches were fetched from, to accept the holes
        of a compacted source (batches removed whole by its cleaner). Retries retriable
        errors until ``timeout_ms``; raises ``MqError`` with MIRROR_DIVERGED,
        MIRROR_OFFSET_GAP, NOT_MIRROR_TOPIC, CORRUPT_MESSAGE, ... otherwise."""
        return await self._mirror.mirror_append(tp, batches, acks=acks, start_offset=start_offset,
                                                fetch_offset=fetch_offset, timeout_ms=timeout_ms)

    async def mirror_truncate(self, tp: TopicPartition, offset: int, *, timeout_ms: int = 30_000) -> int:
        """Cut the mirror topic's partition at ``offset`` on every replica; returns the new
        log end (at or below ``offset``: the cut falls on a batch boundary)."""
        return await self._mirror.mirror_truncate(tp, offset, timeout_ms=timeout_ms)

    # ------------------------------------------------------------------ cluster

    async def cluster(self) -> ClusterDescription:
        """Brokers and the active controller."""
        response = await self._client.request_any(m.MetadataRequest(topics=[]))
        return ClusterDescription(
            response.cluster_id, response.controller_id,  # type: ignore[attr-defined]
            tuple(BrokerDescription(b.node_id, b.host, b.port, b.rack)
                  for b in sorted(response.brokers, key=lambda b: b.node_id)))  # type: ignore[attr-defined]


CONTROLLER_RETRY_BACKOFF_S = 0.1


def _names_no_controller(response: m.Response) -> bool:
    """Whether any result of an admin response says the controller was unavailable."""
    results = getattr(response, "topics", None) or getattr(response, "results", None) or []
    return any(getattr(r, "error_code", 0) == ErrorCode.NOT_CONTROLLER for r in results)
