"""The active-active flow's internal topics in the target, the I/O half of
``mirror.translation``: ``mq-offset-syncs.<source>.internal`` (offset syncs, read back into
an ``OffsetSyncStore`` on start) and ``<source>.checkpoints.internal`` (translated group
offsets). Both have one partition, like MirrorMaker 2's."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from mirror.discovery import replication_factor
from mirror.groups import flow_groups
from mirror.translation import (
    Checkpoint,
    OffsetSync,
    OffsetSyncStore,
    TranslationFormatError,
    checkpoints_topic,
    decode_checkpoint,
    decode_offset_sync,
    encode_checkpoint,
    encode_offset_sync,
    offset_syncs_topic,
    plan_checkpoints,
)
from mq.client import Admin, Producer
from mq.core.errors import MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition
from mq.protocol.record_batch import decode_records, iter_batches

log = logging.getLogger("mirror")

SYNCS_RETENTION_MS = 24 * 3600 * 1000
MAX_SYNCS_READ = 500_000  # the newest syncs read on start (older partitions fall back to the tail scan)
READ_BYTES = 1024 * 1024


async def ensure_internal_topics(target: Admin, source_region: str, configured_rf: int) -> None:
    rf = await replication_factor(target, configured_rf)
    await target.create_topic(offset_syncs_topic(source_region), 1, rf,
                              {"cleanup.policy": "delete", "retention.ms": str(SYNCS_RETENTION_MS)}, exist_ok=True)
    await target.create_topic(checkpoints_topic(source_region), 1, rf, {"cleanup.policy": "compact"},
                              exist_ok=True)


async def read_topic(admin: Admin, tp: TopicPartition, *, max_records: int | None = None) -> Iterable:
    """The records of ``tp`` below its high watermark (the newest ``max_records``)."""
    start = (await admin.list_offsets({tp: EARLIEST_TIMESTAMP}))[tp].offset
    end = (await admin.list_offsets({tp: LATEST_TIMESTAMP}))[tp].offset
    if max_records is not None:
        start = max(start, end - max_records)
    out = []
    offset = start
    while offset < end:
        raw = await admin.fetch_raw(tp, offset, READ_BYTES)
        if not raw.records:
            break
        view = memoryview(raw.records)
        next_offset = offset
        for pos, header in iter_batches(view):
            next_offset = max(next_offset, header.next_offset)
            if not header.is_control:
                out += [r for r in decode_records(view[pos:pos + header.size]) if offset <= r.offset < end]
        offset = max(offset + 1, next_offset, raw.log_start_offset)
    return out


async def load_offset_syncs(target: Admin, source_region: str) -> tuple[OffsetSyncStore, int]:
    """The store rebuilt from the syncs topic, and how many records could not be read."""
    store = OffsetSyncStore()
    bad = 0
    for record in await read_topic(target, TopicPartition(offset_syncs_topic(source_region), 0),
                                   max_records=MAX_SYNCS_READ):
        try:
            store.add(decode_offset_sync(record.key, record.value))
        except TranslationFormatError as exc:
            bad += 1
            if bad == 1:
                log.warning("event=bad_offset_sync offset=%d error=\"%s\"", record.offset, exc)
    return store, bad


def send_offset_syncs(producer: Producer, source_region: str, syncs: Iterable[OffsetSync]) -> list:
    topic = offset_syncs_topic(source_region)
    futures = []
    for sync in syncs:
        key, value = encode_offset_sync(sync)
        futures.append(producer.send(topic, value, key=key, partition=0))
    return futures


async def read_checkpoints(target: Admin, source_region: str) -> list[Checkpoint]:
    out = []
    for record in await read_topic(target, TopicPartition(checkpoints_topic(source_region), 0)):
        try:
            out.append(decode_checkpoint(record.key, record.value))
        except TranslationFormatError:
            continue
    return out


async def write_checkpoints(source: Admin, producer: Producer, flow, store: OffsetSyncStore,
                            remote_topics: Mapping[str, str],
                            emitted: dict[tuple[str, TopicPartition], Checkpoint]) -> dict[str, int]:
    """One checkpoint round for the flow's groups; returns checkpoints written per group."""
    committed: dict[tuple[str, TopicPartition], tuple[int, str]] = {}
    for group in await flow_groups(source, flow):
        try:
            offsets = await source.list_group_offsets(group)
        except MqError as exc:
            log.info("event=group_offsets_failed group=%s error=%s", group, exc)
            continue
        for tp, om in offsets.items():
            if tp.topic in remote_topics:
                committed[(group, tp)] = (om.offset, om.metadata or "")
    written: dict[str, int] = {}
    plan = plan_checkpoints(committed, store, remote_topics, emitted)
    futures = []
    for cp in plan:
        key, value = encode_checkpoint(cp)
        futures.append(producer.send(checkpoints_topic(flow.source_region), value, key=key, partition=0))
    for cp, future in zip(plan, futures, strict=True):
        await future
        emitted[(cp.group, cp.tp)] = cp
        written[cp.group] = written.get(cp.group, 0) + 1
    return written
