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


def test_replication_and_quorum_settings_have_kafkas_defaults() -> None:
    broker = BrokerConfig()
    assert (broker.replica_lag_time_max_ms, broker.replica_fetch_backoff_ms) == (30_000, 1000)
    assert (broker.replica_fetch_max_bytes, broker.replica_fetch_wait_max_ms) == (1 << 20, 500)
    assert broker.replica_fetch_min_bytes == 1
    assert (broker.broker_heartbeat_interval_ms, broker.broker_session_timeout_ms) == (500, 2000)
    assert (broker.controller_quorum_election_timeout_ms,
            broker.controller_quorum_fetch_timeout_ms) == (1000, 2000)
    assert broker.controller_quorum_voters == "" and broker.quorum_voters == ()
    changed = BrokerConfig.from_kafka({"replica.lag.time.max.ms": "100",
                                       "replica.fetch.wait.max.ms": "10"})
    assert (changed.replica_lag_time_max_ms, changed.replica_fetch_wait_max_ms) == (100, 10)


def test_quorum_voters_parse_in_the_given_order() -> None:
    broker = BrokerConfig.from_kafka(
        {"controller.quorum.voters": " 3@127.0.0.1:9095,1@localhost:9093 , 2@::1:9094"})
    assert broker.quorum_voters == ((3, "127.0.0.1", 9095), (1, "localhost", 9093), (2, "::1", 9094))


@pytest.mark.parametrize("voters", [
    "1@host", "x@host:1", "1@:9093", "1host:9093", "1@host:0", "1@host:70000", "1@h:1,1@h:2",
    "1@host:port",
])
def test_malformed_quorum_voters_are_refused(voters: str) -> None:
    with pytest.raises(MqError) as info:
        BrokerConfig.from_kafka({"controller.quorum.voters": voters})
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert "id@host:port" in str(info.value)


@pytest.mark.parametrize(("values", "fragment"), [
    ({"replica.fetch.wait.max.ms": "30000"}, "replica.fetch.wait.max.ms must be below"),
    ({"replica.lag.time.max.ms": "500"}, "replica.fetch.wait.max.ms must be below"),
    ({"broker.heartbeat.interval.ms": "9000"}, "broker.heartbeat.interval.ms must be below"),
    ({"broker.session.timeout.ms": "400"}, "broker.heartbeat.interval.ms must be below"),
    ({"replica.fetch.max.bytes": "0"}, ">= 1"),
])
def test_inconsistent_replication_timeouts_are_refused(values: dict, fragment: str) -> None:
    with pytest.raises(MqError) as info:
        BrokerConfig.from_kafka(values)
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert fragment in str(info.value)


def test_replication_error_codes_keep_kafkas_numbers_and_flags() -> None:
    assert (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
            ErrorCode.INELIGIBLE_REPLICA) == (77, 95, 107)
    for code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                 ErrorCode.INELIGIBLE_REPLICA):
        assert not code.retriable and code.description  # Kafka: plain ApiExceptions
    assert len({int(c) for c in ErrorCode}) == len(list(ErrorCode))  # no aliases
