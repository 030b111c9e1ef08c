"""Kafka client config names -> mq client keyword arguments, and `mq consume`'s argument checks."""

from __future__ import annotations

import inspect

import pytest

from mq.cli import client_props
from mq.cli.client_props import CONSUMER_PROPERTIES, PRODUCER_PROPERTIES, client_kwargs
from mq.cli.common import CliError
from mq.cli.consume import consumer_kwargs, subscription_pattern
from mq.cli.main import build_parser, run
from mq.client import Consumer, Producer
from mq.client.internals.group_membership import ASSIGNORS


def test_every_property_names_a_real_keyword_argument():
    consumer = inspect.signature(Consumer.__init__).parameters
    producer = inspect.signature(Producer.__init__).parameters
    assert all(p.kwarg in consumer for p in CONSUMER_PROPERTIES.values())
    assert all(p.kwarg in producer for p in PRODUCER_PROPERTIES.values())
    assert client_props.ASSIGNORS == ASSIGNORS


def test_values_are_converted():
    kwargs = client_kwargs([("max.poll.records", "10"), ("check.crcs", "False"), ("auto.offset.reset", "earliest"),
                            ("partition.assignment.strategy",
                             "org.apache.kafka.clients.consumer.CooperativeStickyAssignor, range")],
                           CONSUMER_PROPERTIES, "--consumer-property")
    assert kwargs == {"max_poll_records": 10, "check_crcs": False, "auto_offset_reset": "earliest",
                      "assignor": ["cooperative-sticky", "range"]}
    assert client_kwargs([("acks", "-1"), ("compression.type", "zstd"), ("linger.ms", "0")], PRODUCER_PROPERTIES,
                         "--producer-property") == {"acks": "all", "compression": "zstd", "linger_ms": 0}


@pytest.mark.parametrize(("pair", "words"), [
    (("isolation.levels", "read_committed"), "the accepted names are group.id, group.instance.id"),
    (("isolation.level", "committed"), "read_uncommitted"),
    (("bootstrap.servers", "x:1"), "use --bootstrap-server"),
    (("max.poll.records", "ten"), "max.poll.records=ten: not a whole number"),
    (("session.timeout.ms", "-1"), "must not be negative"),
    (("enable.auto.commit", "yes"), "use true or false"),
    (("partition.assignment.strategy", "fair"), "unknown assignor 'fair'"),
])
def test_bad_consumer_properties(pair, words):
    with pytest.raises(CliError) as info:
        client_kwargs([pair], CONSUMER_PROPERTIES, "--consumer-property")
    assert words in f"{info.value.what} — {info.value.todo}" and info.value.exit_code == 2


def test_snappy_is_refused_in_words():
    with pytest.raises(CliError, match="snappy is not supported"):
        client_kwargs([("compression.type", "snappy")], PRODUCER_PROPERTIES, "--producer-property")


def kwargs_of(*argv: str) -> dict:
    return consumer_kwargs(build_parser().parse_args(["consume", "t", *argv]))


def test_consumer_kwargs_flags_and_properties():
    assert kwargs_of() == {"auto_offset_reset": "latest", "client_id": "mq-console-consumer"}
    got = kwargs_of("-g", "g", "--assignor", "cooperative-sticky", "--group-instance-id", "i1",
                    "--session-timeout-ms", "6000", "--from-beginning", "--consumer-property", "client.id=me",
                    "--consumer-property", "session.timeout.ms=6000")
    assert got == {"group_id": "g", "assignor": ["cooperative-sticky"], "group_instance_id": "i1",
                   "session_timeout_ms": 6000, "auto_offset_reset": "earliest", "client_id": "me",
                   "enable_auto_commit": True}
    # A new group starts at the log start (rpk, Kafka Streams); Kafka's console default by property.
    assert kwargs_of("-g", "g")["auto_offset_reset"] == "earliest"
    assert kwargs_of("-g", "g", "--consumer-property", "auto.offset.reset=latest")["auto_offset_reset"] == "latest"
    # group.id by property is a group, like --group.
    assert kwargs_of("--consumer-property", "group.id=g2")["group_id"] == "g2"
    assert kwargs_of("-g", "g", "--consumer-property", "enable.auto.commit=false")["enable_auto_commit"] is False


def test_flags_and_properties_must_agree():
    with pytest.raises(CliError, match="--from-beginning and --consumer-property auto.offset.reset disagree"):
        kwargs_of("--from-beginning", "--consumer-property", "auto.offset.reset=latest")


def test_subscription_pattern_joins_names_and_include():
    import re

    pattern = re.compile(subscription_pattern(["a.b", "c"], r"x\d+"))
    assert [t for t in ["a.b", "axb", "c", "x12", "x", "cc"] if pattern.fullmatch(t)] == ["a.b", "c", "x12"]


@pytest.mark.parametrize(("argv", "words"), [
    (["consume"], "no topic to consume"),
    (["consume", "--include", "a("], "is not a regular expression"),
    (["consume", "a", "b", "-p", "0"], "--partition needs exactly one topic"),
    (["consume", "a", "--include", "b", "-p", "0"], "--partition needs exactly one topic"),
    (["consume", "a", "--session-timeout-ms", "100"], "--session-timeout-ms needs --group"),
    (["consume", "a", "--group-instance-id", "i"], "--group-instance-id needs --group"),
    (["consume", "a", "-g", "g", "-o", "3"], "--offset cannot be used with --group"),
    (["consume", "a", "--consumer-property", "group.id=g", "-p", "1"], "--partition cannot be used with --group"),
    (["consume", "a", "--assignor", "fair"], "unknown assignor 'fair'"),
    (["consume", "a", "-f", "%z"], "unknown verb %z"),
    (["consume", "a", "-f", "json", "--print-key"], "shapes --format text only"),
    (["consume", "a", "--property", "print.topic=true"], "unknown formatter property"),
    (["consume", "a", "--property", "print.key"], "is not KEY=VALUE"),
])
def test_consume_usage_errors_need_no_broker(capsys, argv, words):
    code = run([*argv, "--bootstrap", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert words in err and err.startswith("error: ") and err.count("\n") == 1
