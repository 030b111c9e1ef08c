"""The producer sends each partition's records to that partition's leader, and
nowhere else: in a three-broker region whose leaders are spread, a producer that
wrote to the first bootstrap server (or to any one broker) would be caught here.
After a leader dies, it finds the new leader from metadata and resends there."""

from __future__ import annotations

import asyncio

import pytest

from mq.client import Admin, Producer
from mq.client.connection import BrokerConnection
from mq.protocol.messages import ProduceRequest

from tests.chaos.harness.region import Region

PARTITIONS = 6


@pytest.fixture()
def region(tmp_path):
    with Region(tmp_path / "region", proxy=False).start() as started:
        yield started


def _record_produce_requests(monkeypatch) -> list[tuple[int, str, int]]:
    sent: list[tuple[int, str, int]] = []
    original = BrokerConnection.send

    def send(self, request, *, expect_response=True):
        if isinstance(request, ProduceRequest):
            sent.extend((self.node_id, t.name, p.partition) for t in request.topics for p in t.partitions)
        return original(self, request, expect_response=expect_response)
    monkeypatch.setattr(BrokerConnection, "send", send)
    return sent


async def _produce(bootstrap: str, topic: str, count: int) -> None:
    async with Producer(bootstrap=bootstrap, acks="all", linger_ms=2) as producer:
        futures = [producer.send(topic, value=b"v%d" % i, key=b"k%d" % i) for i in range(count)]
        for future in futures:
            await future


def test_every_produce_request_goes_to_the_partitions_leader(region, monkeypatch) -> None:
    async def main() -> None:
        async with Admin(bootstrap=region.bootstrap) as admin:
            await admin.create_topic("routed", PARTITIONS, 3, {"min.insync.replicas": "2"})
    asyncio.run(main())
    region.wait_healthy("routed", PARTITIONS)
    leaders = {p: region.leader_of("routed", p) for p in range(PARTITIONS)}
    assert len(set(leaders.values())) == 3, leaders  # spread: one broker leads only some
    sent = _record_produce_requests(monkeypatch)
    asyncio.run(_produce(region.bootstrap, "routed", 3000))
    assert {p for _, _, p in sent} == set(range(PARTITIONS))
    wrong = [(node, p) for node, _, p in sent if node != leaders[p]]
    assert not wrong, f"produce requests sent to non-leaders: {wrong[:10]} (leaders {leaders})"
