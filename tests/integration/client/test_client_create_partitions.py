"""A topic grown while clients run (Admin.create_partitions against a real broker
process): a producer sees the new partitions at its next metadata refresh
(``metadata_max_age_ms``) and keys move (Kafka's semantics: ``murmur2(key) % count``);
a consumer group rebalances onto the new partitions and reads everything once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mq.client import Admin, Producer, blocking
from mq.client.internals.partitioner import KeyPartitioner
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from tests.integration.client.test_client_groups import (
    CONFIGS,
    Member,
    check_exactly_once,
    create,
    total,
    until,
)
from tests.integration.conftest import BrokerProcess, free_port


@pytest.fixture(scope="module")
def grow_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("grow") / "broker", free_port(), configs=dict(CONFIGS))
    proc.start()
    yield proc
    proc.stop()


async def test_a_running_producer_sees_new_partitions_and_keys_remap(grow_broker, topic_name):
    await create(grow_broker.bootstrap, topic_name, 2)
    keys = [b"key-%d" % i for i in range(40)]
    async with Producer(grow_broker.bootstrap, linger_ms=0, metadata_max_age_ms=300) as producer:
        before = [(await producer.send(topic_name, b"v", key=k)).partition for k in keys]
        async with Admin(grow_broker.bootstrap) as admin:
            await admin.create_partitions(topic_name, 4)
            [topic] = await admin.describe_topics([topic_name])
        assert [p.partition for p in topic.partitions] == [0, 1, 2, 3]
        await until(lambda: producer.cluster.metadata.partition_count(topic_name) == 4, 10,
                    "the producer's metadata shows 4 partitions")
        after = [(await producer.send(topic_name, b"v", key=k)).partition for k in keys]
    hasher = KeyPartitioner()
    assert before == [hasher.partition_for_key(k, 2) for k in keys]
    assert after == [hasher.partition_for_key(k, 4) for k in keys]  # Kafka's remap, exactly
    assert {2, 3} <= set(after) and before != after


async def test_a_group_rebalances_onto_new_partitions(grow_broker, topic_name):
    group_name = f"g-{topic_name}"
    await create(grow_broker.bootstrap, topic_name, 2)
    members = [await Member(grow_broker.bootstrap, group_name, [topic_name], metadata_max_age_ms=500).start()
               for _ in range(2)]
    try:
        await until(lambda: all(len(m.assignment) == 1 for m in members), what="one partition each")
        async with Admin(grow_broker.bootstrap) as admin:
            await admin.create_partitions(topic_name, 4)
        await until(lambda: all(len(m.assignment) == 2 for m in members), what="two partitions each after growth")
        assigned = set().union(*(m.assignment for m in members))
        assert assigned == {TopicPartition(topic_name, p) for p in range(4)}
        async with Producer(grow_broker.bootstrap, linger_ms=2) as producer:
            for p in range(4):
                await producer.send_many(topic_name, [(None, b"%d-%d" % (p, i)) for i in range(25)], partition=p)
        await until(lambda: total(members) >= 100, what="all 100 records")
        check_exactly_once(members, 100)
    finally:
        for m in members:
            await m.stop()


def test_errors_and_the_blocking_facade(grow_broker, topic_name):
    with blocking.Admin(grow_broker.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=3)
        with pytest.raises(MqError) as shrink:
            admin.create_partitions(topic_name, 3)
        assert shrink.value.code == ErrorCode.INVALID_PARTITIONS
        assert f"topic {topic_name} has 3 partitions; the count can only grow" in shrink.value.message
        with pytest.raises(MqError) as unknown:
            admin.create_partitions(topic_name + "-nope", 3)
        assert unknown.value.code == ErrorCode.UNKNOWN_TOPIC
        with pytest.raises(MqError) as rf:
            admin.create_partitions(topic_name, 4, assignments=[[1, 2]])  # one broker only, RF 1
        assert rf.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        admin.create_partitions(topic_name, 5, validate_only=True)
        assert len(admin.describe_topics([topic_name])[0].partitions) == 3
        admin.create_partitions(topic_name, 5, assignments=[[1], [1]])
        assert len(admin.describe_topics([topic_name])[0].partitions) == 5
