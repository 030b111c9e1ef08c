"""CreatePartitions on the controller: new PartitionRecords for the added partitions
only, at the topic's replication factor over live brokers, and Kafka's errors."""

from __future__ import annotations

from mq.core.errors import ErrorCode
from mq.metadata.records import PartitionRecord
from mq.protocol.messages import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
)
from tests.unit.metadata.metadata_harness import Harness


def _grow(h: Harness, *topics: CreatePartitionsTopic, validate_only: bool = False) -> CreatePartitionsResponse:
    request = CreatePartitionsRequest(list(topics), validate_only=validate_only)
    response: CreatePartitionsResponse = h.commit(h.controller.create_partitions(request, now_ms=h.now_ms))
    return response


def _cluster(brokers: int = 3) -> Harness:
    h = Harness.create()
    h.start_brokers(*range(1, brokers + 1))
    return h


def test_growing_adds_only_the_new_partitions_at_the_topics_replication_factor() -> None:
    h = _cluster(3)
    assert h.create_topic("orders", 2, 2).topics[0].error_code == ErrorCode.NONE
    before = {p: h.partition("orders", p) for p in (0, 1)}
    log_len = len(h.log)
    response = _grow(h, CreatePartitionsTopic("orders", 6))
    assert [(r.name, r.error_code) for r in response.results] == [("orders", ErrorCode.NONE)]
    records = h.log[log_len]
    assert all(isinstance(r, PartitionRecord) for r in records)
    assert [r.partition for r in records] == [2, 3, 4, 5]
    topic = h.image.topics["orders"]
    assert list(topic.partitions) == [0, 1, 2, 3, 4, 5]
    assert {p: h.partition("orders", p) for p in (0, 1)} == before  # old ones untouched
    for p in range(2, 6):
        part = h.partition("orders", p)
        assert len(part.replicas) == 2 and len(set(part.replicas)) == 2
        assert part.leader == part.replicas[0] and part.isr == part.replicas and part.leader_epoch == 0
    leaders = sorted(h.partition("orders", p).leader for p in range(2, 6))
    assert max(leaders.count(b) for b in (1, 2, 3)) <= 2  # spread, not piled on one broker


def test_a_count_that_does_not_grow_is_invalid_partitions_and_writes_nothing() -> None:
    h = _cluster(3)
    h.create_topic("orders", 6, 1)
    log_len = len(h.log)
    for count in (6, 3, 0, -1):
        result = _grow(h, CreatePartitionsTopic("orders", count)).results[0]
        assert result.error_code == ErrorCode.INVALID_PARTITIONS
        assert result.error_message.startswith("topic orders has 6 partitions; the count can only grow")
    assert len(h.log) == log_len and len(h.image.topics["orders"].partitions) == 6


def test_unknown_topic_and_a_topic_named_twice() -> None:
    h = _cluster(1)
    h.create_topic("a", 1, 1)
    response = _grow(h, CreatePartitionsTopic("nope", 2), CreatePartitionsTopic("a", 2),
                     CreatePartitionsTopic("a", 3))
    assert [r.error_code for r in response.results] == [
        ErrorCode.UNKNOWN_TOPIC, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert "nope" in response.results[0].error_message
    assert len(h.image.topics["a"].partitions) == 1


def test_not_enough_live_brokers_for_the_topics_replication_factor() -> None:
    h = _cluster(3)
    h.create_topic("orders", 3, 3)
    h.advance(20_000, heartbeating=(1, 2))  # broker 3 goes silent and is fenced
    assert h.image.live_broker_ids() == [1, 2]
    result = _grow(h, CreatePartitionsTopic("orders", 4)).results[0]
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "replication factor 3" in result.error_message and "[1, 2]" in result.error_message
    assert len(h.image.topics["orders"].partitions) == 3


def test_validate_only_answers_and_writes_nothing() -> None:
    h = _cluster(3)
    h.create_topic("orders", 2, 3)
    log_len = len(h.log)
    response = _grow(h, CreatePartitionsTopic("orders", 4), validate_only=True)
    assert response.results[0].error_code == ErrorCode.NONE
    assert len(h.log) == log_len and len(h.image.topics["orders"].partitions) == 2
    bad = _grow(h, CreatePartitionsTopic("orders", 1), validate_only=True)
    assert bad.results[0].error_code == ErrorCode.INVALID_PARTITIONS


def test_manual_assignments_are_checked_and_used() -> None:
    h = _cluster(3)
    h.create_topic("orders", 1, 2)
    cases = [
        ([[1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # one assignment for two new partitions
        ([[1, 1], [2, 3]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # a broker twice
        ([[1], [2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # wrong replication factor
        ([[1, 9], [2, 3]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # not a live broker
    ]
    for lists, code in cases:
        assignments = [CreatePartitionsAssignment(b) for b in lists]
        result = _grow(h, CreatePartitionsTopic("orders", 3, assignments)).results[0]
        assert result.error_code == code, (lists, result)
    assert len(h.image.topics["orders"].partitions) == 1
    ok = _grow(h, CreatePartitionsTopic("orders", 3, [CreatePartitionsAssignment([3, 1]),
                                                       CreatePartitionsAssignment([2, 3])]))
    assert ok.results[0].error_code == ErrorCode.NONE
    assert h.partition("orders", 1).replicas == (3, 1) and h.partition("orders", 2).replicas == (2, 3)


def test_growing_then_growing_again_keeps_partition_numbers_dense() -> None:
    h = _cluster(2)
    h.create_topic("t", 1, 1)
    _grow(h, CreatePartitionsTopic("t", 2))
    _grow(h, CreatePartitionsTopic("t", 5))
    assert list(h.image.topics["t"].partitions) == [0, 1, 2, 3, 4]
    assert _grow(h, CreatePartitionsTopic("t", 10_001)).results[0].error_code == ErrorCode.INVALID_PARTITIONS
