"""TESTING.md R19 with broker kills: a transactional consume-transform-produce copier
(tests/integration/client/txn_copier.py, its own process) copies a topic on a
3-broker region (replication factor 3, min.insync.replicas 2, __transaction_state
and __consumer_offsets replicated 3 ways) while brokers are SIGKILLed and restarted —
the output partition's leader, then the transaction coordinator, then another — and
the copier itself is killed once. A read_committed reader then finds every input
exactly once: nothing lost, nothing twice, nothing aborted. Seeded (MQ_SEED)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mq.client import Admin, Producer
from mq.coordinator.txn_state import TRANSACTION_STATE_TOPIC, transaction_partition

from ..integration.client.test_txn_copier_kill import read_committed
from .harness.region import Region
from .regionkit import seed_from_env

COPIER = Path(__file__).parents[1] / "integration" / "client" / "txn_copier.py"
INPUT = 3000
CONFIGS = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
           "transaction.state.log.replication.factor": "3", "offsets.topic.replication.factor": "3",
           "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


def _copier(bootstrap: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path.cwd()), os.environ.get("PYTHONPATH", ""))
                                                       if p)}
    with log.open("a") as out:
        return subprocess.Popen([sys.executable, str(COPIER), bootstrap, "r19-in", "r19-out", "r19-g", "r19-copier",
                                 "50"], stdout=out, stderr=subprocess.STDOUT, env=env)


def _commits(log: Path) -> int:
    return log.read_text().count("committed ") if log.exists() else 0


async def _wait_commits(log: Path, more: int, timeout_s: float = 60) -> None:
    target = _commits(log) + more
    deadline = time.monotonic() + timeout_s
    while _commits(log) < target and f"committed {INPUT}\n" not in log.read_text():  # or it is done
        assert time.monotonic() < deadline, f"the copier made no progress:\n{log.read_text()[-2000:]}"
        await asyncio.sleep(0.05)


# CI tier, ~20 s: 14 of 14 runs passed once markers got their own lane (before: 3 of 18 failed)
async def test_r19_transactional_copier_under_broker_kills(tmp_path) -> None:
    """Once flaky (3 of ~20 runs): the coordinator's WriteTxnMarkers shared the
    connection lane of its broker's replica fetches to the output's leader, and the
    leader answers it only once the markers replicate, so that broker's own fetch
    queued behind it: every transaction waited for the ISR to shrink that broker
    away (replica.lag.time.max.ms), the ISR flapped every ~4.5 s and the copier
    crawled past the reader's deadline (the DIAG fetch at 1,800 then found the log
    shorter). Markers now have a lane of their own (mq.broker.outbound.TXN_MARKER_LANE;
    tests/unit/broker/test_txn_marker_lane.py). The DIAG lines print each broker's
    view if the reader still falls short."""
    seed = seed_from_env()
    rng = random.Random(seed)
    print(f"MQ_SEED={seed}")
    region = Region(tmp_path / "region", configs=CONFIGS)
    copier = None
    log = tmp_path / "copier.log"
    try:
        region.start()
        region.wait_controller()
        region.wait_registered()
        async with Admin(region.bootstrap) as admin:
            for topic in ("r19-in", "r19-out"):
                await admin.create_topic(topic, partitions=1, replication_factor=3,
                                         configs={"min.insync.replicas": "2"})
        values = [b"%05d" % i for i in range(INPUT)]
        async with Producer(region.bootstrap, acks="all") as producer:
            await producer.send_many("r19-in", [(None, v) for v in values])
            await producer.flush()
        copier = _copier(region.bootstrap, log)
        await _wait_commits(log, 3)
        victims = [region.leader_of("r19-out", 0),
                   region.leader_of(TRANSACTION_STATE_TOPIC, transaction_partition("r19-copier", 3)),
                   rng.choice(region.ids)]
        for i, victim in enumerate(victims):
            if victim is None:
                continue
            region.kill(victim)
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            region.start_node(victim)
            if i == 1:  # and the copier once, mid-stream
                copier.send_signal(signal.SIGKILL)
                copier.wait()
                copier = _copier(region.bootstrap, log)
            await _wait_commits(log, 2)
        got = await read_committed(region.bootstrap, "r19-out", INPUT, timeout_s=90)
        if len(got) != INPUT:
            from mq.protocol.messages import FetchPartition, FetchRequest, FetchTopic

            from ..integration.broker.raw import RawClient
            for n in region.ids:
                with RawClient(region.nodes[n].host, region.nodes[n].port) as raw:
                    for iso in (0, 1):
                        r = raw.request(FetchRequest([FetchTopic("r19-out", [FetchPartition(0, 1800)])], max_wait_ms=0,
                                                     isolation_level=iso)).topics[0].partitions[0]
                        print("DIAG", n, iso, r.error_code, r.high_watermark, r.last_stable_offset)
        duplicates = len(got) - len(set(got))
        missing = set(values) - set(got)
        assert duplicates == 0 and not missing and len(got) == INPUT, (
            f"MQ_SEED={seed}: {len(got)} read, {duplicates} duplicates, {len(missing)} missing; "
            f"copier log:\n{log.read_text()[-3000:]}")
        assert not region.stderr_tracebacks()
    finally:
        if copier is not None:
            copier.send_signal(signal.SIGKILL)
            copier.wait()
        region.close()
