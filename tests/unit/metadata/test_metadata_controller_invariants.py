"""Random schedules of registrations, restarts, heartbeats, silences, controlled
shutdowns and ISR changes; after every step the image keeps the controller's promises."""

from __future__ import annotations

import pytest
from metadata_harness import HEARTBEAT_MS, Harness

from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.metadata.image import MetadataImage
from mq.metadata.records import NO_LEADER, PartitionChangeRecord

BROKERS = (1, 2, 3, 4)


def check(before: MetadataImage, after: MetadataImage, records: list) -> None:
    for record in records:
        if isinstance(record, PartitionChangeRecord):
            old = before.topics[record.topic].partitions[record.partition]
            assert record.partition_epoch == old.partition_epoch + 1
            assert (record.leader_epoch == old.leader_epoch + 1) == (record.leader != old.leader)
            before = before.apply([record])
        else:
            before = before.apply([record])
    for topic in after.topics.values():
        unclean = topic.configs.get("unclean.leader.election.enable") == "true"
        for part in topic.partitions.values():
            assert part.isr, "an ISR never becomes empty"
            assert len(set(part.replicas)) == len(part.replicas)
            assert set(part.isr) <= set(part.replicas)
            if part.leader != NO_LEADER:
                assert part.leader in part.isr
                broker = after.broker(part.leader)
                assert broker is not None and not broker.fenced, "a fenced broker leads nothing"
            if len(part.isr) > 1:
                for member in part.isr:
                    broker = after.broker(member)
                    assert broker is not None and not broker.fenced, "fenced brokers leave the ISR"
            if part.leader == NO_LEADER and not unclean:
                assert not any(
                    (b := after.broker(r)) is not None and not b.fenced for r in part.isr
                ), "a live ISR member would have been elected"


def run_schedule(seed: int, steps: int) -> None:
    rng = Rng(seed)
    h = Harness.create(seed=seed)
    h.start_brokers(*BROKERS)
    h.create_topic("a", 6, 3)
    h.create_topic("b", 4, 2, {"unclean.leader.election.enable": "true"})
    silent: set[int] = set()
    restarts = 0
    for _ in range(steps):
        before = h.image
        start = len(h.log)
        action = rng.randint(0, 5)
        broker_id = rng.choice(BROKERS)
        if action == 0:
            silent.add(broker_id)
        elif action == 1:
            silent.discard(broker_id)
        elif action == 2:
            restarts += 1
            h.register(broker_id, incarnation=f"r{restarts}")
        elif action == 3 and broker_id not in silent:
            h.heartbeat(broker_id, want_shutdown=rng.random() < 0.5)
        elif action == 4:
            topic = rng.choice(["a", "b"])
            index = rng.randint(0, len(h.image.topics[topic].partitions) - 1)
            part = h.partition(topic, index)
            if part.leader != NO_LEADER:
                isr = [r for r in part.replicas if r == part.leader or rng.random() < 0.6]
                response = h.alter_isr(part.leader, topic, index, isr)
                assert response.error_code == ErrorCode.NONE
        h.now_ms += HEARTBEAT_MS
        for b in BROKERS:
            if b not in silent and h.image.broker(b) is not None:
                h.heartbeat(b)
        h.propose(h.controller.tick(h.now_ms))
        records = [r for entry in h.log[start:] for r in entry]
        check(before, h.image, records)


@pytest.mark.parametrize("seed", range(20))
def test_random_schedule_keeps_invariants(seed: int) -> None:
    run_schedule(seed, 50)


@pytest.mark.nightly
@pytest.mark.parametrize("seed", range(20, 520))
def test_random_schedule_keeps_invariants_nightly(seed: int) -> None:
    run_schedule(seed, 200)
