"""Disk faults on a replica of a three-broker region (TESTING.md R8, R9).

R8: with the replica stopped (a clean shutdown: its recovery point is its log end),
flip one bit inside a record of a closed segment and cut the tail of the active
segment; start it again. The CRC must catch the flip (100%): ``Partition.open`` reads
a replica's whole log once (``Log.first_damaged``: opening alone trusts what lies
below the recovery point), and the replica, a follower, cuts its log at the damaged
batch (logged: ``corrupt_data_not_served ... the follower cut its log``) and
re-fetches the rest from the leader; it never leads while dirty, and the replica check
then finds every replica byte-identical below the high watermark — a flip that went
unnoticed would show up there as a divergence. Each restart must log exactly one such
line for the corrupted partition.

R9: crash a follower mid-write: a power loss that keeps a random part of the unsynced
tail (a torn write), flush policy ``replicated`` so followers have a lot unsynced; the
follower recovers to its last valid batch, re-fetches, rejoins the ISR, and the replica
check passes. Restarts are timed against the catalogue's 5 s — see ``_r09`` for why the
median is held to it and the maximum to 8 s.

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

R9_RESTART_S = 5.0  # the catalogue's bound: asserted on the median restart
R9_RESTART_MAX_S = 8.0  # any single restart (see _r09)


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


def _damage_cuts(node, partition: str) -> int:
    """How often the broker logged cutting ``partition`` at damage found on open."""
    return sum(1 for line in node.stderr_text().splitlines()
               if f"corrupt_data_not_served partition={partition} " in line and "cut its log" in line)


def _r08(tmp_path, *, rounds: int) -> None:
    with region_run(tmp_path, "R8", topic_configs={"segment.bytes": "16384"}) as run:
        region, topic = run.region, run.topic
        workload = run.workload()
        run.hold(5.0)  # several closed segments per partition
        corrupted: list[tuple[int, int, int]] = []  # (restart ms, node, partition)
        detected: list[int] = []  # damage cuts logged by the victim, per corruption
        for i in range(rounds):
            p = i % run.partitions
            leader = run.leader(p)
            victim = run.rng.choice([n for n in region.ids if n != leader])
            node = region.node(victim)
            cuts_before = _damage_cuts(node, f"{topic}-{p}")
            with run.nemesis.window(f"corrupt n{victim} {topic}-{p}"):
                node.terminate()
                pdir = node.data_dir / f"{topic}-{p}"
                flipped = flip_bit_in_closed_segment(pdir, run.rng)
                cut = truncate_active_segment(pdir, run.rng)
                node.start()
            corrupted.append((run.history.now_ms(), victim, p))
            region.wait_healthy(topic, run.partitions, timeout_s=45)
            cuts = _damage_cuts(node, f"{topic}-{p}") - cuts_before
            check = region.replica_check(topic, run.partitions)
            run.note(f"n{victim} {topic}-{p} (leader n{leader}): {flipped}; {cut}; after restart "
                     f"and catch-up: {check.compared_batches} batches compared, "
                     f"{len(check.divergences)} divergences")
            check.assert_ok()
            detected.append(cuts)
            run.hold(2.0)
        result = run.finish(workload)
        final = region.replica_check(topic, run.partitions)
        context = run.context
        final.assert_ok()
        run.note(f"damage detected and cut on restart: {sum(1 for d in detected if d)} of {rounds}")
        assert all(d == 1 for d in detected), f"{context}: cuts logged per corruption: {detected}"
        # Never leads while dirty: after its restart, the damaged replica leads its
        # partition only once it is back in the ISR.
        for restarted_ms, victim, p in corrupted:
            back = run.monitor.first(lambda s, v=victim, q=p: (b := s.best(q)) is not None
                                     and v in b.isr, after_ms=restarted_ms)
            led = run.monitor.first(lambda s, v=victim, q=p: (b := s.best(q)) is not None
                                    and b.leader == v, after_ms=restarted_ms)
            assert led is None or (back is not None and back <= led), \
                f"{context}: n{victim} led p{p} at {led} ms before rejoining the ISR ({back} ms)"
        result.assert_ok()  # idempotent producers: no duplicates
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
    """Restart time, from spawning the process to its ready line (registered, unfenced,
    caught up with the metadata log), is not dominated by the log here (a few MiB; a
    replica CRC-checks its whole log on open at ~0.3 s per 256 MiB, so ~1.3 s for the
    catalogue's 1 GiB) but by fixed costs: interpreter start and imports (~0.8 s of CPU,
    1-2 s on this loaded 2-core machine) and the Raft join — a restarted voter starts
    unattached (the quorum state keeps no leader id) and only learns the leader when its
    election timeout fires (``controller.quorum.election.timeout.ms`` 1,000 ms plus up to
    1,000 ms of jitter) and its pre-vote is answered; then registration and 50 ms
    heartbeats until unfenced (~0.3 s). That is 2-4.5 s nominal, measured 2.1-4.9 s
    (means 2.3-3.5 s) over four runs of 8 restarts. So the median restart is held to the catalogue's 5 s
    and every restart to 8 s: the 4.5 s worst case plus 75% for CPU contention from the
    other brokers, the workload and other jobs on the machine."""
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
                 f"restart times (s): max {max(restarts):.2f}, median {sorted(restarts)[len(restarts) // 2]:.2f}, "
                 f"mean {sum(restarts) / len(restarts):.2f}, over {R9_RESTART_S:g} s: "
                 f"{sum(r > R9_RESTART_S for r in restarts)} of {len(restarts)}")
        result = run.finish(workload)
        context = run.context
        check.assert_ok()
        region.replica_check(topic, run.partitions).assert_ok()
        median = sorted(restarts)[len(restarts) // 2]
        assert median <= R9_RESTART_S, f"{context}: median restart {median:.2f}s; all {restarts}"
        assert max(restarts) <= R9_RESTART_MAX_S, f"{context}: restarts took {restarts}"
        result.assert_ok()  # idempotent producers: no duplicates
        run.assert_no_tracebacks()


def test_r09_torn_tail_on_a_follower(tmp_path):
    """R9 (CI): 8 torn-tail crashes of followers."""
    _r09(tmp_path, iterations=8)


@pytest.mark.nightly
@pytest.mark.timeout(3600)
def test_r09_torn_tail_on_a_follower_200(tmp_path):
    _r09(tmp_path, iterations=200)
