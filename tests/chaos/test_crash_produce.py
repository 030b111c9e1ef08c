"""SIGKILL the broker while a producer streams acks=1 batches (TESTING.md, issue 2).

For each flush policy: produce for about 10 s over the raw protocol with several
requests in flight, SIGKILL the broker twice along the way and restart it. Then read
the partition from offset 0 and check the history:

- every acknowledged record is present at its acknowledged offset. Under ``always``
  an ack follows an fsync; under ``replicated`` a SIGKILL of the process does not
  drop the page cache, so nothing acknowledged may be lost either (a power loss
  could; that is R7 and needs the FileIO journal);
- no value appears twice (nothing unacknowledged is duplicated: a crash never
  replays a batch);
- every value read was sent by the producer (no garbage from a torn tail).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter, deque

import pytest

from mq.protocol.messages import ProducePartitionData, ProduceRequest, ProduceTopicData
from mq.protocol.record_batch import build_batch, iter_records

from ..integration.broker.raw import RawClient
from ..integration.conftest import BrokerProcess, free_port

RUN_SECONDS = 10.0
RECORDS_PER_BATCH = 10
IN_FLIGHT = 4


def _produce_until(broker, deadline: float, incarnation: int, acked: dict, rng: random.Random) -> int:
    """Stream batches until ``deadline`` or until the broker dies; returns batches sent."""
    sent = 0
    try:
        client = RawClient.to(broker, timeout_s=5)
    except OSError:
        return 0
    inflight: deque[tuple[int, list[bytes]]] = deque()
    try:
        while time.monotonic() < deadline or inflight:
            while len(inflight) < IN_FLIGHT and time.monotonic() < deadline:
                values = [b"%d-%d-%d-" % (incarnation, sent, i) + b"v" * 80 for i in range(RECORDS_PER_BATCH)]
                now = int(time.time() * 1000)
                records = build_batch((None, v, (), now) for v in values)
                request = ProduceRequest(1, 10_000, [ProduceTopicData("crash", [ProducePartitionData(0, records)])])
                inflight.append((client.send(request), values))
                sent += 1
            if not inflight:
                break
            cid, response = client.recv(ProduceRequest)
            expected_cid, values = inflight.popleft()
            assert cid == expected_cid
            result = response.topics[0].partitions[0]
            if result.error_code == 0:
                for i, value in enumerate(values):
                    acked[result.base_offset + i] = value
    except (TimeoutError, ConnectionError, OSError):
        pass  # the broker was killed: whatever is in flight is unacknowledged
    finally:
        client.close()
    return sent


def _read_all(broker) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    with RawClient.to(broker) as c:
        offset = 0
        while True:
            fetched = c.fetch("crash", 0, offset, partition_max_bytes=4 << 20)
            assert fetched.error_code == 0
            records = [(r.offset, r.value) for r in iter_records(fetched.records) if r.offset >= offset]
            if not records:
                return out
            out.extend(records)
            offset = records[-1][0] + 1


@pytest.mark.parametrize("flush_policy", ["replicated", "always"])
def test_sigkill_during_produce_loses_no_acknowledged_record(tmp_path, flush_policy):
    seed = int(os.environ.get("MQ_SEED", time.time_ns() % 2**32))
    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path / "data", free_port(), configs={"log.flush.policy": flush_policy})
    broker.start()
    try:
        _run(broker, flush_policy, seed, rng)
    finally:
        broker.stop()


def _run(broker: BrokerProcess, flush_policy: str, seed: int, rng: random.Random) -> None:
    with RawClient.to(broker) as c:
        c.create_topic("crash", 1)
    acked: dict[int, bytes] = {}
    sent = 0
    start = time.monotonic()
    kills = sorted(start + rng.uniform(1.5, RUN_SECONDS - 2) for _ in range(2))
    for incarnation in range(len(kills) + 1):
        # The kill comes from another thread while requests are in flight.
        killer = None
        if incarnation < len(kills):
            killer = threading.Timer(max(0.0, kills[incarnation] - time.monotonic()), broker.kill)
            killer.start()
        sent += _produce_until(broker, start + RUN_SECONDS, incarnation, acked, rng)
        if killer is not None:
            killer.join()
            assert not broker.running
            broker.start()
    log = _read_all(broker)
    context = f"MQ_SEED={seed} policy={flush_policy} sent={sent} acked={len(acked)} read={len(log)}"
    assert len(acked) > 1000, context
    by_offset = dict(log)
    lost = [o for o, v in acked.items() if by_offset.get(o) != v]
    assert not lost, f"{context}: {len(lost)} acknowledged records missing or moved, first at {min(lost)}"
    duplicates = [v for v, n in Counter(v for _, v in log).items() if n > 1]
    assert not duplicates, f"{context}: duplicated values {duplicates[:3]}"
    offsets = [o for o, _ in log]
    assert offsets == list(range(len(offsets))), f"{context}: offsets not contiguous"
    assert all(v.split(b"-")[0].isdigit() and v.endswith(b"v" * 80) for _, v in log), context
    assert "Traceback" not in broker.stderr_text()

