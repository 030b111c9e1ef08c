"""Admin against a real broker: plain dataclasses back, the broker's errors raised."""

from __future__ import annotations

import pytest

from mq.client import Admin, Producer
from mq.client.admin import NewTopic
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition


async def test_topic_lifecycle_and_errors(shared_broker, topic_name) -> None:
    async with Admin(shared_broker.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic_name, partitions=3, configs={"retention.ms": "60000"}),
                                   NewTopic(topic_name + "-b")])
        assert {topic_name, topic_name + "-b"} <= set(await admin.list_topics())
        [desc] = await admin.describe_topics([topic_name])
        assert desc.name == topic_name and [p.partition for p in desc.partitions] == [0, 1, 2]
        assert all(p.leader == 1 and p.replicas == (1,) and p.isr == (1,) for p in desc.partitions)
        with pytest.raises(MqError) as err:
            await admin.create_topic(topic_name)
        assert err.value.code == ErrorCode.TOPIC_ALREADY_EXISTS and topic_name in err.value.message
        await admin.create_topic(topic_name, exist_ok=True)
        with pytest.raises(MqError) as err:
            await admin.create_topic(topic_name + "-bad", configs={"retention.ms": "soon"})
        assert err.value.code == ErrorCode.INVALID_CONFIG
        with pytest.raises(MqError) as err:
            await admin.describe_topics(["missing-" + topic_name])
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC
        await admin.delete_topics([topic_name + "-b"])
        assert topic_name + "-b" not in await admin.list_topics()
        with pytest.raises(MqError) as err:
            await admin.delete_topics([topic_name + "-b"])
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC


async def test_configs_describe_and_alter(shared_broker, topic_name) -> None:
    async with Admin(shared_broker.bootstrap) as admin:
        await admin.create_topic(topic_name, configs={"retention.ms": "60000"})
        configs = {c.name: c for c in await admin.describe_configs(topic_name)}
        assert configs["retention.ms"].value == "60000" and not configs["retention.ms"].is_default
        assert configs["segment.bytes"].is_default
        await admin.alter_configs(topic_name, set={"segment.bytes": "1048576"},
                                  delete=["retention.ms"])
        configs = {c.name: c for c in await admin.describe_configs(topic_name)}
        assert configs["segment.bytes"].value == "1048576"
        assert configs["retention.ms"].is_default
        with pytest.raises(MqError) as err:
            await admin.alter_configs(topic_name, set={"no.such.key": "1"})
        assert err.value.code == ErrorCode.INVALID_CONFIG
        with pytest.raises(MqError) as err:
            await admin.describe_configs("missing-" + topic_name)
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC


async def test_offsets_delete_records_and_cluster(shared_broker, topic_name) -> None:
    bootstrap = shared_broker.bootstrap
    tp = TopicPartition(topic_name, 0)
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic_name)
        async with Producer(bootstrap) as producer:
            for i in range(5):
                await producer.send(topic_name, b"x", timestamp_ms=1_000_000 + i * 10)
        offsets = await admin.list_offsets({tp: EARLIEST_TIMESTAMP})
        assert offsets[tp].offset == 0
        assert (await admin.list_offsets({tp: LATEST_TIMESTAMP}))[tp].offset == 5
        by_time = (await admin.list_offsets({tp: 1_000_025}))[tp]
        assert (by_time.offset, by_time.timestamp) == (3, 1_000_030)
        assert await admin.delete_records({tp: 2}) == {tp: 2}
        assert (await admin.list_offsets({tp: EARLIEST_TIMESTAMP}))[tp].offset == 2
        with pytest.raises(MqError) as err:
            await admin.list_offsets({TopicPartition(topic_name, 7): LATEST_TIMESTAMP})
        assert err.value.code == ErrorCode.UNKNOWN_TOPIC
        cluster = await admin.cluster()
        assert cluster.controller_id == 1
        assert [(b.node_id, b.port) for b in cluster.brokers] == [(1, shared_broker.port)]
