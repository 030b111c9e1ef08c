"""Consumer's group surface without a broker: configuration and API misuse."""

from __future__ import annotations

import pytest

from mq.client import Consumer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

TP = TopicPartition("t", 0)


def codes(fn) -> ErrorCode:
    with pytest.raises(MqError) as err:
        fn()
    return err.value.code


def test_assign_and_subscribe_are_mutually_exclusive() -> None:
    c = Consumer("localhost:1", group_id="g")
    c.assign([TP])
    assert codes(lambda: c.subscribe(["t"])) == ErrorCode.INVALID_CONFIG
    c.unsubscribe()
    assert c.assignment() == []
    c.subscribe(["t"])
    assert c.subscription() == ["t"]
    assert codes(lambda: c.assign([TP])) == ErrorCode.INVALID_CONFIG


def test_group_methods_need_a_group_id() -> None:
    c = Consumer("localhost:1")
    assert codes(lambda: c.subscribe(["t"])) == ErrorCode.INVALID_CONFIG
    assert codes(c.group_metadata) == ErrorCode.INVALID_CONFIG
    assert c.subscription() is None


def test_bad_group_configs() -> None:
    assert codes(lambda: Consumer("localhost:1", group_id="g", assignor="nope")) == ErrorCode.INVALID_CONFIG
    assert codes(lambda: Consumer("localhost:1", group_id="g", heartbeat_interval_ms=50_000)) == \
        ErrorCode.INVALID_CONFIG
    c = Consumer("localhost:1", group_id="g")
    assert codes(lambda: c.subscribe(pattern="(")) == ErrorCode.INVALID_CONFIG


def test_group_metadata_before_joining_and_pattern_subscription() -> None:
    c = Consumer("localhost:1", group_id="g", group_instance_id="i", assignor=["cooperative-sticky", "range"])
    md = c.group_metadata()
    assert (md.group_id, md.generation_id, md.member_id, md.group_instance_id) == ("g", -1, "", "i")
    c.subscribe(pattern=r"clicks\..*")
    assert c.subscription() == r"clicks\..*"
    assert c.metrics()["records_lag"] == {} and c.metrics()["member_state"] == "unjoined"
