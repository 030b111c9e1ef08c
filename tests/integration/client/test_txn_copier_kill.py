"""TESTING.md R19 with real processes: a transactional consume-transform-produce
copier is SIGKILLed at random points (seeded: the seed is printed) and restarted
with the same transactional id; a read_committed reader of the output then finds
every input value exactly once — nothing lost, nothing twice, nothing aborted."""

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

from mq.client import Admin, Consumer, Producer
from mq.core.types import TopicPartition

from ..conftest import BrokerProcess, free_port

COPIER = Path(__file__).with_name("txn_copier.py")
INPUT = 2000


@pytest.fixture(scope="module")
def copier_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("txn-kill") / "broker-1", free_port(), configs={
        "transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    proc.start()
    yield proc
    proc.stop()


def start_copier(bootstrap: str, source: str, sink: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path.cwd()), os.environ.get("PYTHONPATH", ""))
                                                       if p)}
    with log.open("a") as out:
        return subprocess.Popen([sys.executable, str(COPIER), bootstrap, source, sink, f"{source}-g",
                                 f"{source}-copier", "17"], stdout=out, stderr=subprocess.STDOUT, env=env)


async def read_committed(bootstrap: str, topic: str, want: int, timeout_s: float) -> list[bytes]:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", isolation_level="read_committed",
                        fetch_max_wait_ms=50)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got += [r.value for r in await consumer.poll(200)]
    extra_until = time.monotonic() + 0.5  # anything beyond the input would be a duplicate
    while time.monotonic() < extra_until:
        got += [r.value for r in await consumer.poll(100)]
    await consumer.close()
    return got


async def run_copier_with_kills(broker: BrokerProcess, tmp_path: Path, seed: int, kills: int) -> None:
    rng = random.Random(seed)
    print(f"seed={seed} kills={kills}")
    source, sink = f"kill-in-{seed}", f"kill-out-{seed}"
    async with Admin(broker.bootstrap) as admin:
        await admin.create_topic(source)
        await admin.create_topic(sink)
    values = [b"%d" % i for i in range(INPUT)]
    async with Producer(broker.bootstrap, acks="all") as producer:
        await producer.send_many(source, [(None, v) for v in values])
        await producer.flush()
    log = tmp_path / f"copier-{seed}.log"
    for n in range(kills):
        copier = start_copier(broker.bootstrap, source, sink, log)
        deadline = time.monotonic() + 30
        while _starts(log) <= n and time.monotonic() < deadline:  # it has fenced the last one and resumed
            await asyncio.sleep(0.02)
        # then a random point: after a random number of commits, a random fraction of a
        # transaction later (mid-send, mid-offsets, mid-commit, between transactions)
        target = _commits(log) + rng.randint(1, 25)
        while _commits(log) < target and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        await asyncio.sleep(rng.uniform(0.0, 0.01))
        copier.send_signal(signal.SIGKILL)
        copier.wait()
    copier = start_copier(broker.bootstrap, source, sink, log)
    try:
        got = await read_committed(broker.bootstrap, sink, INPUT, timeout_s=60)
    finally:
        copier.send_signal(signal.SIGKILL)
        copier.wait()
    duplicates = len(got) - len(set(got))
    missing = set(values) - set(got)
    assert duplicates == 0 and not missing and len(got) == INPUT, (
        f"seed {seed}: {len(got)} read, {duplicates} duplicates, {len(missing)} missing; copier log {log}:\n"
        + log.read_text()[-3000:])
    resumed = [int(line.split("=")[1]) for line in log.read_text().splitlines() if line.startswith("start offset=")]
    assert len(resumed) >= kills and any(0 < offset < INPUT for offset in resumed[1:]), (
        f"seed {seed}: no kill landed mid-stream (restarts at {resumed})")


def _commits(log: Path) -> int:
    return log.read_text().count("committed ") if log.exists() else 0


def _starts(log: Path) -> int:
    return log.read_text().count("start offset=") if log.exists() else 0


@pytest.mark.parametrize("seed", [1, 2])
async def test_r19_copier_killed_at_random_points_outputs_each_input_once(copier_broker, tmp_path, seed) -> None:
    await run_copier_with_kills(copier_broker, tmp_path, seed, kills=3)


@pytest.mark.nightly
@pytest.mark.parametrize("seed", range(10, 20))
async def test_r19_copier_kills_nightly(copier_broker, tmp_path, seed) -> None:
    await run_copier_with_kills(copier_broker, tmp_path, seed, kills=6)
