from __future__ import annotations

import pytest

from mq.core.config import BROKER_KEYS, TOPIC_KEYS, BrokerConfig, TopicConfig
from mq.core.errors import ErrorCode, MqError, raise_for
from mq.core.rng import Rng
from mq.core.types import CleanupPolicy, FlushPolicy, TimestampType, TopicPartition


def test_topic_config_parses_kafka_names_and_strings() -> None:
    config = TopicConfig.from_kafka(
        {"segment.bytes": "2048", "message.timestamp.type": "LogAppendTime",
         "cleanup.policy": "compact", "unclean.leader.election.enable": "true"}
    )
    assert config.segment_bytes == 2048
    assert config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    assert config.cleanup_policy is CleanupPolicy.COMPACT
    assert config.unclean_leader_election_enable is True
    assert config.overrides() == {
        "segment.bytes": "2048", "cleanup.policy": "compact",
        "message.timestamp.type": "LogAppendTime", "unclean.leader.election.enable": "true",
    }


def test_to_kafka_round_trips_every_key() -> None:
    config = TopicConfig(retention_ms=5, cleanup_policy=CleanupPolicy.COMPACT_DELETE)
    assert TopicConfig.from_kafka(config.to_kafka()) == config
    assert set(config.to_kafka()) == {k.name for k in TOPIC_KEYS}


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("segment.bytes", "x", "not a valid int"),
        ("segment.bytes", "10", ">= 1024"),
        ("cleanup.policy", "shred", "cleanup.policy"),
        ("unclean.leader.election.enable", "yes", "unclean.leader.election.enable"),
        ("no.such.key", "1", "unknown topic config"),
        ("min.cleanable.dirty.ratio", "2", "between 0 and 1"),
    ],
)
def test_bad_values_are_named_errors(name: str, value: str, fragment: str) -> None:
    with pytest.raises(MqError) as info:
        TopicConfig.from_kafka({name: value})
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert fragment in str(info.value)


def test_broker_config_and_topic_defaults() -> None:
    broker = BrokerConfig.from_kafka({"log.flush.policy": "always", "log.segment.bytes": "4096"})
    assert broker.log_flush_policy is FlushPolicy.ALWAYS
    assert broker.topic_defaults().segment_bytes == 4096
    assert {k.field for k in BROKER_KEYS} >= {"node_id", "listeners"}


def test_errors_carry_retriable_flags() -> None:
    assert ErrorCode.NOT_LEADER.retriable and not ErrorCode.RECORD_TOO_LARGE.retriable
    with pytest.raises(MqError) as info:
        raise_for(6, "moved")
    assert info.value.code is ErrorCode.NOT_LEADER and info.value.retriable
    raise_for(0)


def test_rng_is_reproducible_and_forks_independently() -> None:
    a, b = Rng(7), Rng(7)
    assert [a.randint(0, 100) for _ in range(5)] == [b.randint(0, 100) for _ in range(5)]
    assert Rng(7).fork("x").random() == Rng(7).fork("x").random()
    assert Rng(7).fork("x").random() != Rng(7).fork("y").random()


def test_topic_partitions_order_and_print() -> None:
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 2)])[0] == TopicPartition("a", 2)
    assert str(TopicPartition("orders", 1)) == "orders-1"
