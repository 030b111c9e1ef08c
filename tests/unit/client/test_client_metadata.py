"""Metadata cache: routing, refresh decisions and bootstrap rotation."""

import pytest

from mq.client.internals.metadata import Metadata, needs_metadata_refresh, parse_bootstrap
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol.messages import BrokerInfo, MetadataResponse, PartitionMetadata, TopicMetadata

BOOT = [("h1", 1), ("h2", 2), ("h3", 3)]


def answer(leaders: dict[int, int], *, epoch: int = 0, topic: str = "t", error: int = 0):
    parts = [PartitionMetadata(p, 0 if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE, leader,
                               epoch, [1, 2], [1, 2]) for p, leader in leaders.items()]
    return MetadataResponse(brokers=[BrokerInfo(1, "a", 10), BrokerInfo(2, "b", 20)],
                            controller_id=1,
                            topics=[TopicMetadata(topic, error, [] if error else parts)])


def test_update_routes_partitions_to_leaders() -> None:
    md = Metadata(BOOT, Rng(1))
    md.add_topics("t")
    md.update(answer({0: 1, 1: 2, 2: -1}), now_ms=0)
    assert md.leader_for(TopicPartition("t", 0)) == 1
    assert md.leader_for(TopicPartition("t", 1)) == 2
    assert md.leader_for(TopicPartition("t", 2)) is None
    assert md.partition_count("t") == 3 and md.available_partitions("t") == [0, 1]
    assert md.node(2).port == 20 and md.controller_id == 1


def test_an_older_leader_epoch_never_wins() -> None:
    md = Metadata(BOOT, Rng(1))
    md.update(answer({0: 2}, epoch=5), now_ms=0)
    md.update(answer({0: 1}, epoch=4), now_ms=1)
    assert md.leader_for(TopicPartition("t", 0)) == 2
    md.update(answer({0: 1}, epoch=6), now_ms=2)
    assert md.leader_for(TopicPartition("t", 0)) == 1


def test_topic_error_is_remembered_and_routes_dropped() -> None:
    md = Metadata(BOOT, Rng(1))
    md.update(answer({0: 1}), now_ms=0)
    md.update(answer({}, error=ErrorCode.UNKNOWN_TOPIC), now_ms=1)
    assert md.topic_error("t") == ErrorCode.UNKNOWN_TOPIC
    assert md.partition_count("t") is None and md.leader_for(TopicPartition("t", 0)) is None


def test_refresh_timing_backoff_and_max_age() -> None:
    md = Metadata(BOOT, Rng(1), retry_backoff_ms=100, metadata_max_age_ms=10_000)
    assert md.time_to_next_update_ms(0) == 0  # nothing known yet
    md.attempt_started(0)
    md.update_failed(0)
    assert md.time_to_next_update_ms(40) == 60  # backoff after a failure
    md.update(answer({0: 1}), now_ms=200)
    assert md.time_to_next_update_ms(300) == 9_900  # max age
    md.request_update()
    assert md.time_to_next_update_ms(300) == 0  # backoff since the last attempt passed
    md.attempt_started(350)
    assert md.time_to_next_update_ms(360) == 90
    assert md.add_topics("new") and md.need_update and not md.add_topics("new")


def test_a_new_topic_skips_the_refresh_backoff_once() -> None:
    """A consumer assigned a topic right after connecting must not wait out a backoff
    meant for retries (Kafka's requestUpdateForNewTopics)."""
    md = Metadata(BOOT, Rng(1), retry_backoff_ms=100, metadata_max_age_ms=10_000)
    md.attempt_started(0)
    md.update(answer({0: 1}, topic="old"), now_ms=0)
    md.request_update()
    assert md.time_to_next_update_ms(10) == 90  # a retry: backoff applies
    md.add_topics("new")
    assert md.time_to_next_update_ms(10) == 0  # a new topic: at once
    md.attempt_started(10)
    md.update_failed(10)
    assert md.time_to_next_update_ms(20) == 90  # after a failed attempt: backoff again


def test_a_topic_added_while_a_refresh_is_on_the_wire_keeps_the_update_needed() -> None:
    md = Metadata(BOOT, Rng(1), retry_backoff_ms=100)
    md.add_topics("t")
    md.attempt_started(0)
    md.add_topics("late")  # not in the request being answered
    md.update(answer({0: 1}), now_ms=1)
    assert md.need_update and md.time_to_next_update_ms(2) == 0
    md.attempt_started(2)
    md.update(answer({0: 1}, topic="late"), now_ms=3)
    assert not md.need_update


@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER, ErrorCode.UNKNOWN_TOPIC,
                                  ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH])
def test_stale_routing_errors_refresh(code: ErrorCode) -> None:
    assert needs_metadata_refresh(code)


def test_other_errors_do_not_refresh() -> None:
    assert not needs_metadata_refresh(ErrorCode.RECORD_TOO_LARGE)
    assert not needs_metadata_refresh(ErrorCode.NONE)


def test_bootstrap_candidates_cover_every_address_and_rotate() -> None:
    md = Metadata(BOOT, Rng(5))
    first = md.metadata_candidates()
    assert sorted(first) == sorted(BOOT)
    second = md.metadata_candidates()
    assert sorted(second) == sorted(BOOT)
    starts = {Metadata(BOOT, Rng(seed)).metadata_candidates()[0] for seed in range(20)}
    assert len(starts) > 1  # not always the first bootstrap server
    md.update(answer({0: 1}), now_ms=0)
    known = md.metadata_candidates()
    assert set(known[:2]) == {("a", 10), ("b", 20)} and set(known[2:]) == set(BOOT)


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]
    for bad in ("", "nohost", "a:b"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)
