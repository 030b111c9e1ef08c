"""Mirror topics in a three-broker target region (real broker processes): a copy with
acks=-1 survives the SIGKILL of a partition leader mid-copy (the copier's
MirrorAppends are retried at the new leader; resent batches are duplicates) and ends
byte-identical to the source on every replica; MirrorTruncate cuts all three replicas,
one of them paused meanwhile, and they converge byte-identical again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mq.client import Admin, Producer
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch
from tests.chaos.harness.region import Region, poll_until
from tests.chaos.harness.replicas import read_batches
from tests.integration.client.mirror_copy import copy_until_caught_up, raw_batches

PARTITIONS = 6
RECORDS = 12_000
T0 = 1_700_000_000_000
MIRROR = {"mirror.source.region": "east", "min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def west(tmp_path_factory: pytest.TempPathFactory):
    with Region(tmp_path_factory.mktemp("west"), proxy=False).start() as region:
        yield region


async def test_copy_survives_a_target_leader_kill_and_matches_on_every_replica(broker_factory, west) -> None:
    east = broker_factory()
    tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
    async with Admin(east.bootstrap) as source, Admin(west.bootstrap, request_timeout_ms=10_000) as target:
        await source.create_topic("orders", PARTITIONS)
        async with Producer(east.bootstrap, acks="all", linger_ms=2, batch_size=4096) as producer:
            for future in [producer.send("orders", value=b"%06d" % i + bytes(94), key=b"%d" % i,
                                         timestamp_ms=T0 + i) for i in range(RECORDS)]:
                await future
        await target.create_topic("orders", PARTITIONS, 3, configs=MIRROR)
        west.wait_healthy("orders", PARTITIONS)
        copier = asyncio.create_task(copy_until_caught_up(source, target, tps, acks=-1, max_bytes=8192))

        async def copied() -> int:
            return sum(i.offset for i in (await target.list_offsets({tp: -1 for tp in tps})).values())

        while await copied() < RECORDS // 4:
            assert not copier.done(), copier
            await asyncio.sleep(0.05)  # polling the copier's progress
        victim = west.leader_of("orders", 0)
        assert victim is not None
        west.kill(victim)
        counts = await asyncio.wait_for(copier, 120)
        assert await copied() == RECORDS
        west.start_node(victim)
        west.replica_check("orders", PARTITIONS, timeout_s=60).assert_ok()
        for tp in tps:
            assert await raw_batches(source, tp) == await raw_batches(target, tp), tp
    print(f"copy with a leader kill: {counts}")
    assert not west.stderr_tracebacks()


def _batches(base: int, sizes: list[int], tag: bytes) -> list[bytes]:
    out = []
    for size in sizes:
        out.append(build_batch([(None, tag + b"%d" % (base + i), (), T0 + base + i) for i in range(size)],
                               base_offset=base, partition_leader_epoch=9))
        base += size
    return out


def _ends(west: Region, name: str) -> dict[int, int]:
    """Each replica's next offset of the partition, read from its segment files."""
    out = {}
    for n in west.ids:
        batches = read_batches(Path(west.nodes[n].data_dir) / name)
        out[n] = batches[-1].last_offset + 1 if batches else 0
    return out


async def test_truncate_converges_on_three_replicas_one_paused(west) -> None:
    tp = TopicPartition("fallback", 0)
    async with Admin(west.bootstrap, request_timeout_ms=10_000) as target:
        await target.create_topic("fallback", 1, 3, configs=MIRROR)
        west.wait_healthy("fallback", 1)
        for batch in _batches(0, [5] * 10, b"east"):
            await target.mirror_append(tp, batch)
        leader = west.leader_of("fallback", 0)
        paused = next(n for n in west.ids if n != leader)
        west.pause(paused)
        try:
            # waits until the paused follower has left the ISR (replica.lag.time.max.ms)
            assert await target.mirror_truncate(tp, 25, timeout_ms=30_000) == 25
            live = [n for n in west.ids if n != paused]
            poll_until(lambda: all(_ends(west, "fallback-0")[n] == 25 for n in live) or None,
                       timeout_s=10, what="the live replicas cut at 25")
            assert _ends(west, "fallback-0")[paused] == 50  # it holds the cut records still
            for batch in _batches(25, [4, 6], b"west"):  # a new tail at the cut offsets
                await target.mirror_append(tp, batch, acks=1)
        finally:
            west.resume(paused)
        west.replica_check("fallback", 1, timeout_s=60).assert_ok()
        assert set(_ends(west, "fallback-0").values()) == {35}
        values = await raw_batches(target, tp)
        assert len(values) == 7 and all(b"west" in b for b in values[5:]) and b"east" in values[4]
    assert not west.stderr_tracebacks()
