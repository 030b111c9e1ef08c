"""`mq consume` output without a broker: Kafka's formatter properties, format strings, JSON."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from mq.cli.formatter import FormatError, FormatString, KafkaFormat, renderer, unescape
from mq.client.internals.fetcher import ConsumerRecord
from mq.core.types import TimestampType

TS = 1_700_000_000_000


def rec(key=b"k1", value=b"v1", headers=(("h1", b"a"), ("h2", b"b")), *, partition=0, offset=5,
        topic="clicks", ts=TS, ts_type=TimestampType.CREATE_TIME) -> ConsumerRecord:
    return ConsumerRecord(topic, partition, offset, ts, ts_type, key, value, tuple(headers))


def kafka(*pairs: str, print_key: bool = False) -> KafkaFormat:
    return KafkaFormat.from_properties([tuple(p.split("=", 1)) for p in pairs], print_key=print_key)


def test_kafka_default_prints_the_value_only():
    assert kafka().render(rec()) == b"v1\n"
    assert kafka().render(rec(value=None)) == b"null\n"


def test_kafka_all_fields_in_kafkas_order_and_labels():
    fmt = kafka("print.timestamp=true", "print.partition=true", "print.offset=true", "print.headers=true",
                "print.key=true")
    assert fmt.render(rec()) == b"CreateTime:1700000000000\tPartition:0\tOffset:5\th1:a,h2:b\tk1\tv1\n"
    assert fmt.render(rec(headers=(), key=None, ts_type=TimestampType.LOG_APPEND_TIME)) == \
        b"LogAppendTime:1700000000000\tPartition:0\tOffset:5\tNO_HEADERS\tnull\tv1\n"


def test_kafka_separators_null_literal_and_no_value():
    fmt = kafka("print.key=TRUE", "key.separator= | ", "line.separator=\\r\\n", "null.literal=<nil>",
                "print.headers=true", "headers.separator=;")
    assert fmt.render(rec(key=None)) == b"h1:a;h2:b | <nil> | v1\r\n"
    # print.value=false: the last printed field ends the line (Kafka's writeSeparator).
    assert kafka("print.offset=true", "print.value=false").render(rec()) == b"Offset:5\n"
    assert kafka("print.value=false").render(rec()) == b""
    assert kafka("print.key=true", print_key=False).print_key
    assert kafka(print_key=True).render(rec()) == b"k1\tv1\n"


@pytest.mark.parametrize(("pair", "words"), [
    ("print.key=yes", "use true or false"),
    ("print.topic=true", "unknown formatter property 'print.topic'"),
    ("key.deserializer=x", "print.timestamp, print.key"),
])
def test_kafka_bad_properties(pair, words):
    with pytest.raises(FormatError, match=words):
        kafka(pair)


def test_unescape():
    assert unescape("a\\tb\\nc\\r\\\\d\\x41\\q") == b"a\tb\nc\r\\dA\\q"
    with pytest.raises(FormatError, match="two hex digits"):
        unescape("\\x4")


def render(fmt: str, record=None, index: int = 1) -> bytes:
    return FormatString.compile(fmt).render(record or rec(), index)


def test_format_string_verbs():
    assert render("%t %p %o %k %v %h") == b"clicks 0 5 k1 v1 h1:a,h2:b\n"
    assert render("%T %K %V %H %i %d", index=7) == b"6 2 2 2 7 1700000000000\n"
    assert render("%%%{%}") == b"%{}\n"
    assert render("%k|%v|%K|%V", rec(key=None, value=None)) == b"||-1|-1\n"


def test_format_string_escapes_and_line_end():
    assert render("%v\\t%k\\n") == b"v1\tk1\n"  # ends with a newline: none added
    assert render("%v\n") == b"v1\n"
    assert render("%v;") == b"v1;\n"
    assert render("%v\\x00") == b"v1\x00\n"


def test_format_string_modifiers():
    assert render("%k{hex} %v{base64}") == b"6b31 djE=\n"
    assert render("%h{%k=%v;}") == b"h1=a;h2=b;\n"
    assert render("%h{[%K:%k{hex}:%V:%v{hex}]}") == b"[2:6831:1:61][2:6832:1:62]\n"
    assert render("%h{%k}", rec(headers=())) == b"\n"
    local = datetime.fromtimestamp(TS / 1000).astimezone()
    assert render("%d{strftime[%Y-%m-%d %H:%M:%S.%f]}") == \
        local.strftime("%Y-%m-%d %H:%M:%S.%f").encode() + b"\n"


@pytest.mark.parametrize(("fmt", "words"), [
    ("%v%", "lone %"),
    ("%q", "unknown verb %q"),
    ("%e", "leader epoch"),
    ("%v{upper}", "modifiers are hex, base64"),
    ("%p{hex}", "takes no {modifier}"),
    ("%h{%t}", "a header has only"),
    ("%h{%k", "never closed"),
    ("%v{hex", "never closed"),
    ("%d{iso}", "strftime"),
])
def test_format_string_errors(fmt, words):
    with pytest.raises(FormatError, match=words):
        FormatString.compile(fmt)


def test_renderer_choice():
    assert renderer("text", [])(rec(), 1) == b"v1\n"
    assert json.loads(renderer("json", [])(rec(value=b"\xff"), 1)) == {
        "topic": "clicks", "partition": 0, "offset": 5, "key": "k1", "value": {"base64": "/w=="},
        "timestamp": TS, "headers": [["h1", "a"], ["h2", "b"]]}
    assert renderer("%o", [])(rec(), 1) == b"5\n"
    with pytest.raises(FormatError, match="neither text, json nor a format string"):
        renderer("csv", [])
    with pytest.raises(FormatError, match="--property print.key shapes --format text only"):
        renderer("json", [("print.key", "true")])
    with pytest.raises(FormatError, match="--print-key shapes --format text only"):
        renderer("%v", [], print_key=True)
