"""Mirroring a compacted topic between two single-broker "regions" on loopback.

The source topic is ``cleanup.policy=compact`` with tiny segments and a fast cleaner:
keys are overwritten, the cleaner drops whole batches (holes between batches, and a
first batch past offset 0) and rebuilds others (holes inside a batch). A copier that
fetches raw batches and appends them with ``fetch_offset`` (the offset it fetched
from) gives a mirror topic with byte-identical batches at the same offsets; a consumer
reads the same (offset, key, value) sequence from both. Without ``fetch_offset`` the
same bytes are refused, and a resend of everything is acknowledged as duplicates.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mq.client import Admin, Consumer, Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.batch_format import iter_batches
from tests.integration.client.mirror_copy import copy_until_caught_up, raw_batches

TOPIC = "users"
PARTITIONS = 2
KEYS = 12
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
T0 = 1_700_000_000_000
CLEAN_TIMEOUT_S = 30.0


async def _produce(bootstrap: str) -> None:
    """Overwrites of ``KEYS`` keys per partition, mostly one record per batch (whole
    batches become removable), then bursts of several records per batch (partly kept),
    a tombstone, and a tail the cleaner leaves alone (the active segment)."""
    async with Producer(bootstrap, acks="all", linger_ms=0) as producer:
        await producer.send(TOPIC, key=b"gone", value=b"deleted later", partition=0, timestamp_ms=T0)
        for i in range(240):
            await producer.send(TOPIC, key=b"k%02d" % (i % KEYS), value=b"v%03d-" % i + b"x" * 60,
                                partition=i % PARTITIONS, timestamp_ms=T0 + i)
    async with Producer(bootstrap, acks="all", linger_ms=20) as producer:
        futures = [producer.send(TOPIC, key=b"k%02d" % (i % (2 * KEYS)), value=b"b%03d-" % i + b"y" * 40,
                                 partition=i % PARTITIONS, timestamp_ms=T0 + 1000 + i) for i in range(120)]
        futures.append(producer.send(TOPIC, key=b"gone", value=None, partition=0, timestamp_ms=T0 + 2000))
        for future in futures:
            await future
    async with Producer(bootstrap, acks="all", linger_ms=0) as producer:
        for i in range(30):
            await producer.send(TOPIC, key=b"k%02d" % (i % KEYS), value=b"t%03d-" % i + b"z" * 60,
                                partition=i % PARTITIONS, timestamp_ms=T0 + 3000 + i)


def _cleaned_to_active_segment(partition_dir: Path) -> bool:
    """The cleaner checkpoint reached the active segment: nothing more will be cleaned."""
    try:
        lines = (partition_dir / "cleaner-offset-checkpoint").read_text().split("\n")
    except FileNotFoundError:
        return False
    active = max(int(p.stem) for p in partition_dir.glob("*.log"))
    return len(lines) > 1 and lines[1].strip() == str(active)


def _wait_for_cleaning(data_dir: Path) -> None:
    dirs = [data_dir / f"{TOPIC}-{p}" for p in range(PARTITIONS)]
    deadline = time.monotonic() + CLEAN_TIMEOUT_S
    while not all(_cleaned_to_active_segment(d) for d in dirs):
        assert time.monotonic() < deadline, f"the cleaner did not reach the active segments of {dirs}"
        time.sleep(0.05)  # polling the broker's files, with a deadline


def _holes(batches: list[bytes]) -> list[tuple[int, int]]:
    """``(from, to)`` offset ranges between consecutive batches (and before the first)."""
    out, expected = [], 0
    for raw in batches:
        [(_, header)] = list(iter_batches(raw))
        if header.base_offset > expected:
            out.append((expected, header.base_offset - 1))
        expected = header.next_offset
    return out


async def _records(bootstrap: str, ends: dict[TopicPartition, int]) -> list[tuple]:
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(list(ends))
        out: list[tuple] = []
        deadline = time.monotonic() + 15
        while any([await consumer.position(tp) < end for tp, end in ends.items()]):
            assert time.monotonic() < deadline, "the consumer did not reach the log ends"
            out += [(r.partition, r.offset, r.key, r.value, r.timestamp) for r in await consumer.poll(200)]
        return sorted(out)


@pytest.fixture
def regions(broker_factory):
    """(east, west): the source region's cleaner runs every 50 ms; the mirror region's
    is off, so the copy's bytes stay as they arrived while the test compares them (its
    own cleaner would compact the copy further, as any replica's may)."""
    return broker_factory({"log.cleaner.backoff.ms": "50"}), broker_factory({"log.cleaner.enable": "false"})


async def test_a_compacted_topic_is_mirrored_with_its_holes(regions) -> None:
    east, west = regions
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    async with Admin(east.bootstrap) as source, Admin(west.bootstrap) as target:
        await source.create_topic(TOPIC, PARTITIONS, configs=COMPACTED)
        await target.create_topic(TOPIC, PARTITIONS, configs={**COMPACTED, "mirror.source.region": "east"})
        await _produce(east.bootstrap)
        _wait_for_cleaning(east.data_dir)
        source_batches = {tp: await raw_batches(source, tp) for tp in tps}
        for tp in tps:
            holes = _holes(source_batches[tp])
            assert len(holes) >= 5 and holes[0][0] == 0, (tp, holes)  # the first batches were removed too
        headers = [h for raw in source_batches[tps[0]] for _, h in iter_batches(raw)]
        assert any(h.record_count < h.last_offset_delta + 1 for h in headers)  # rebuilt: holes inside a batch

        # today's strict rule refuses the holes, and changes nothing
        for tp in tps:
            fetched = (await source.fetch_raw(tp, 0, 1 << 20)).records
            first = source_batches[tp][0]
            cases = [
                (fetched, -1, ErrorCode.INVALID_RECORD, "send fetch_offset"),  # holes between batches
                (fetched[:len(first)], -1, ErrorCode.MIRROR_OFFSET_GAP, "fetch_offset=0"),  # a first batch past 0
                (fetched, 1, ErrorCode.MIRROR_OFFSET_GAP, "offsets 0-0 were never fetched"),
            ]
            for records, fetch_offset, code, hint in cases:
                with pytest.raises(MqError) as refused:
                    await target.mirror_append(tp, records, fetch_offset=fetch_offset)
                assert refused.value.code == code and hint in refused.value.message, refused.value
        assert {info.offset for info in (await target.list_offsets({tp: -1 for tp in tps})).values()} == {0}

        # small fetches, so requests also begin in holes
        counts = await copy_until_caught_up(source, target, tps, max_bytes=700, send_fetch_offset=True)
        assert counts["past_fetch_offset"] >= PARTITIONS and counts["duplicates"] == 0, counts
        assert counts["appended"] == sum(len(b) for b in source_batches.values())
        for tp in tps:
            assert await raw_batches(target, tp) == source_batches[tp], tp
        for spec in (-2, -1):
            assert await source.list_offsets({tp: spec for tp in tps}) == await target.list_offsets(
                {tp: spec for tp in tps}), spec

        # a copier that lost its progress resends everything: all duplicates, holes and all
        for tp in tps:
            fetched = await source.fetch_raw(tp, 0, 64 << 20)
            result = await target.mirror_append(tp, fetched.records, fetch_offset=0)
            assert (result.appended, result.duplicates) == (0, len(list(iter_batches(fetched.records))))

        ends = {tp: info.offset for tp, info in (await source.list_offsets({tp: -1 for tp in tps})).items()}
        source_records = await _records(east.bootstrap, ends)
        assert source_records == await _records(west.bootstrap, ends)
        offsets = [r[1] for r in source_records if r[0] == 0]
        assert len(offsets) < ends[tps[0]] and offsets[0] > 0  # the consumer skipped holes on both sides
        assert [r[2:] for r in source_records if r[2] == b"gone"] == [(b"gone", None, T0 + 2000)]  # a tombstone
    for broker in regions:
        assert "Traceback" not in broker.stderr_text()
