"""A minimal copier for the mirror topic tests: what the mirror service does, without
its bookkeeping. It fetches raw batches from the source region from the target's log
end of each partition and appends them to the target unchanged."""

from __future__ import annotations

from collections.abc import Iterable

from mq.client import Admin, RawFetch
from mq.core.errors import MqError
from mq.core.types import TopicPartition
from mq.protocol.batch_format import LEADER_EPOCH_AT, iter_batches


def next_offset(records: bytes) -> int:
    end = -1
    for _, header in iter_batches(records):
        end = header.next_offset
    return end


async def copy_until_caught_up(source: Admin, target: Admin, tps: Iterable[TopicPartition], *,
                               acks: int = -1, max_bytes: int = 256 * 1024) -> dict[str, int]:
    """Copy until every partition's target log end reached the source high watermark
    seen at the start; returns counts of batches appended and acknowledged as duplicates."""
    tps = list(tps)
    ends = await target.list_offsets({tp: -1 for tp in tps})
    positions = {tp: ends[tp].offset for tp in tps}
    goal = {tp: info.offset for tp, info in (await source.list_offsets({tp: -1 for tp in tps})).items()}
    counts = {"appended": 0, "duplicates": 0, "rounds": 0}
    while any(positions[tp] < goal[tp] for tp in tps):
        counts["rounds"] += 1
        wanted = {tp: positions[tp] for tp in tps if positions[tp] < goal[tp]}
        fetched = await source.fetch_raw_many(wanted, partition_max_bytes=max_bytes)
        for tp, answer in fetched.items():
            if isinstance(answer, MqError):
                if not answer.retriable:
                    raise answer
                continue
            if not answer.records:
                continue
            result = await target.mirror_append(tp, answer.records, acks=acks)
            counts["appended"] += result.appended
            counts["duplicates"] += result.duplicates
            positions[tp] = next_offset(answer.records)
    return counts


async def raw_batches(admin: Admin, tp: TopicPartition, *, end: int | None = None) -> list[bytes]:
    """Every stored batch of the partition below ``end`` (the high watermark), with the
    partition leader epoch blanked: the bytes a source and its mirror must share."""
    out: list[bytes] = []
    offset = (await admin.list_offsets({tp: -2}))[tp].offset
    if end is None:
        end = (await admin.list_offsets({tp: -1}))[tp].offset
    while offset < end:
        fetched: RawFetch = await admin.fetch_raw(tp, offset, 1024 * 1024)
        if not fetched.records:
            break
        for pos, header in iter_batches(fetched.records):
            raw = bytearray(fetched.records[pos:pos + header.size])
            raw[LEADER_EPOCH_AT:LEADER_EPOCH_AT + 4] = b"\xff\xff\xff\xff"
            out.append(bytes(raw))
            offset = header.next_offset
    return out
