"""Disk faults on a replica of a three-broker region (TESTING.md R8, R9).

R8: with the replica stopped, flip one bit inside a record of a closed segment and cut
the tail of the active segment; start it again. The CRC must catch the flip (100%):
the replica truncates at the damage and re-fetches from the leader, never leads while
dirty, and the replica check then finds every replica byte-identical below the high
watermark — a flip that went unnoticed would show up there as a divergence.

R9: crash a follower mid-write: a power loss that keeps a random part of the unsynced
tail (a torn write), flush policy ``replicated`` so followers have a lot unsynced; the
follower recovers to its last valid batch, re-fetches, rejoins the ISR, and the replica
check passes. Restarts are timed (the catalogue's bound: 5 s).

Both run the usual ``acks=all`` workload and history check (counts printed).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from mq.core.rng import Rng
from mq.protocol.record_batch import HEADER_SIZE
from mq.storage.dump import dump_segment
from mq.storage.fileio import OsFileIO

from .regionkit import region_run

R9_RESTART_S = 5.0


def _logs(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def flip_bit_in_closed_segment(partition_dir: Path, rng: random.Random) -> str:
    """Flip one bit inside the records of one batch of a closed (not the last)
    segment; returns what was done. The CRC covers those bytes."""
    closed = _logs(partition_dir)[:-1]
    assert closed, f"{partition_dir}: no closed segment to corrupt"
    segment = rng.choice(closed)
    batches = [e for e in dump_segment(OsFileIO(), str(segment))
               if e["type"] == "batch" and e["crc_ok"] and e["size"] > HEADER_SIZE]
    assert batches, f"{segment}: no batch"
    batch = rng.choice(batches)
    at = batch["position"] + rng.randrange(HEADER_SIZE, batch["size"])
    bit = rng.randrange(8)
    with open(segment, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ (1 << bit)]))
    return (f"{segment.name}: bit {bit} of byte {at} (batch {batch['base_offset']}-"
            f"{batch['last_offset']})")


def truncate_active_segment(partition_dir: Path, rng: random.Random) -> str:
    active = _logs(partition_dir)[-1]
    size = active.stat().st_size
    if size < 2:
        return f"{active.name}: empty, not cut"
    cut = rng.randint(1, min(size - 1, 500))
    os.truncate(active, size - cut)
    return f"{active.name}: cut {cut} of {size} bytes"


# ---------------------------------------------------------------------- R8


def _r08(tmp_path, *, rounds: int) -> None:
    with region_run(tmp_path, "R8", topic_configs={"segment.bytes": "16384"}) as run:
        region, topic = run.region, run.topic
        workload = run.workload()
        run.hold(5.0)  # several closed segments per partition
        corrupted: list[tuple[int, int, int]] = []  # (restart ms, node, partition)
        for i in range(rounds):
            p = i % run.partitions
            leader = run.leader(p)
            victim = run.rng.choice([n for n in region.ids if n != leader])
            node = region.node(victim)
            with run.nemesis.window(f"corrupt n{victim} {topic}-{p}"):
                node.terminate()
                pdir = node.data_dir / f"{topic}-{p}"
                flipped = flip_bit_in_closed_segment(pdir, run.rng)
                cut = truncate_active_segment(pdir, run.rng)
                node.start()
            corrupted.append((run.history.now_ms(), victim, p))
            region.wait_healthy(topic, run.partitions, timeout_s=45)
            check = region.replica_check(topic, run.partitions)
            run.note(f"n{victim} {topic}-{p} (leader n{leader}): {flipped}; {cut}; after restart "
                     f"and catch-up: {check.compared_batches} batches compared, "
                     f"{len(check.divergences)} divergences")
            check.assert_ok()
            run.hold(2.0)
        result = run.finish(workload)
        final = region.replica_check(topic, run.partitions)
        context = run.context
        final.assert_ok()
        # Never leads while dirty: after its restart, the damaged replica leads its
        # partition only once it is back in the ISR.
        for restarted_ms, victim, p in corrupted:
            back = run.monitor.first(lambda s, v=victim, q=p: (b := s.best(q)) is not None
                                     and v in b.isr, after_ms=restarted_ms)
            led = run.monitor.first(lambda s, v=victim, q=p: (b := s.best(q)) is not None
                                    and b.leader == v, after_ms=restarted_ms)
            assert led is None or (back is not None and back <= led), \
                f"{context}: n{victim} led p{p} at {led} ms before rejoining the ISR ({back} ms)"
        result.assert_ok(allow_fault_duplicates=True)
        run.assert_no_tracebacks()


def test_r08_bit_flip_and_truncation_on_a_stopped_replica(tmp_path):
    """R8: three corruptions (one per partition), each repaired from the leader."""
    _r08(tmp_path, rounds=3)


@pytest.mark.nightly
@pytest.mark.timeout(900)
def test_r08_bit_flip_and_truncation_long(tmp_path):
    _r08(tmp_path, rounds=30)


# ---------------------------------------------------------------------- R9


def _r09(tmp_path, *, iterations: int) -> None:
    with region_run(tmp_path, "R9", configs={"log.flush.policy": "replicated"}) as run:
        region, topic = run.region, run.topic
        workload = run.workload()
        run.hold(2.0)
        restarts: list[float] = []
        for i in range(iterations):
            leader = run.leader(i % run.partitions)
            victim = run.rng.choice([n for n in region.ids if n != leader])
            node = region.node(victim)
            with run.nemesis.window(f"torn power_loss n{victim}"):
                cut = node.power_loss(rng=Rng(run.rng.getrandbits(32)))
                began = time.monotonic()
                node.start()
                restarts.append(time.monotonic() - began)
            region.wait_healthy(topic, run.partitions, timeout_s=45)
            run.note(f"torn power loss #{i + 1} of n{victim}: {len(cut)} files cut; ready after "
                     f"{restarts[-1]:.2f}s; ISRs full again")
        run.hold(1.0)
        check = region.replica_check(topic, run.partitions)
        run.note(f"replica check: {check.compared_batches} batches, {len(check.divergences)} divergences; "
                 f"restart times (s): max {max(restarts):.2f}, mean {sum(restarts) / len(restarts):.2f}")
        result = run.finish(workload)
        context = run.context
        check.assert_ok()
        region.replica_check(topic, run.partitions).assert_ok()
        assert max(restarts) <= R9_RESTART_S, f"{context}: restarts took {restarts}"
        result.assert_ok(allow_fault_duplicates=True)
        run.assert_no_tracebacks()


def test_r09_torn_tail_on_a_follower(tmp_path):
    """R9 (CI): 8 torn-tail crashes of followers."""
    _r09(tmp_path, iterations=8)


@pytest.mark.nightly
@pytest.mark.timeout(3600)
def test_r09_torn_tail_on_a_follower_200(tmp_path):
    _r09(tmp_path, iterations=200)
