"""`mq produce` input parsing without a broker: Kafka's LineMessageReader properties."""

from __future__ import annotations

import pytest

from mq.cli.common import CliError
from mq.cli.formatter import FormatError
from mq.cli.line_reader import LineError, LineFormat, ParsedLine
from mq.cli.main import build_parser, run
from mq.cli.produce import line_format, producer_kwargs


def fmt(*pairs: str, **base) -> LineFormat:
    return LineFormat.from_properties([tuple(p.split("=", 1)) for p in pairs], **base)


def test_default_is_the_whole_line_as_value():
    assert fmt().parse(b"a\tb:c") == ParsedLine(None, b"a\tb:c")


def test_headers_key_and_value_in_kafkas_layout():
    reader = fmt("parse.headers=true", "parse.key=true")
    assert reader.parse(b"h1:a,h2:b:c\tk\tv\tw") == ParsedLine(b"k", b"v\tw", (("h1", b"a"), ("h2", b"b:c")))
    assert reader.parse(b"\tk\tv") == ParsedLine(b"k", b"v")  # an empty header section: no headers
    assert reader.parse(b"h:\t\t") == ParsedLine(b"", b"", (("h", b""),))


def test_custom_separators_with_escapes():
    reader = fmt("parse.headers=true", "parse.key=true", "headers.delimiter=|", "headers.separator=;",
                 "headers.key.separator==", "key.separator=\\x01")
    assert reader.parse(b"a=1;b=2|key\x01value") == ParsedLine(b"key", b"value", (("a", b"1"), ("b", b"2")))


@pytest.mark.parametrize(("props", "line", "words"), [
    (["parse.key=true"], b"no tab here", "no key separator '\\t' found"),
    (["parse.headers=true"], b"h:1", "no headers delimiter"),
    (["parse.headers=true"], b"h1:1,h2\tv", "no header key separator ':' in header 'h2'"),
    (["parse.headers=true"], b"\xff:1\tv", "not UTF-8"),
    (["parse.headers=true", "null.marker=N"], b"h:N\tv", "neither may be the null marker"),
])
def test_bad_lines(props, line, words):
    with pytest.raises(LineError) as info:
        fmt(*props).parse(line)
    assert words in str(info.value)


def test_ignore_error_and_null_marker():
    reader = fmt("parse.key=true", "ignore.error=true", "null.marker=<null>")
    assert reader.parse(b"whole line") == ParsedLine(None, b"whole line", no_key_separator=True)
    assert reader.parse(b"<null>\tv") == ParsedLine(None, b"v")
    assert reader.parse(b"k\t<null>") == ParsedLine(b"k", None)  # a tombstone
    assert fmt("parse.headers=true", "ignore.error=true").parse(b"flag\tv") == ParsedLine(None, b"v",
                                                                                         (("flag", b""),))


@pytest.mark.parametrize(("props", "words"), [
    (["parse.headers=true", "headers.separator=\\t"], "headers.delimiter and headers.separator may not be equal"),
    (["parse.headers=true", "headers.key.separator=,"], "headers.separator and headers.key.separator"),
    (["null.marker=\\t"], "null.marker and key.separator may not be equal"),
    (["key.separator="], "must not be empty"),
    (["parse.key=1"], "use true or false"),
    (["print.key=true"], "unknown reader property 'print.key'"),
])
def test_bad_properties(props, words):
    with pytest.raises(FormatError) as info:
        fmt(*props)
    assert words in str(info.value)


def args_of(*argv: str):
    return build_parser().parse_args(["produce", "t", *argv])


def test_key_separator_shorthand():
    assert line_format(args_of("--key-separator", ":")) == LineFormat(parse_key=True, key_separator=b":",
                                                                      ignore_error=True)
    assert not line_format(args_of("--key-separator", ":", "--require-key")).ignore_error
    with pytest.raises(CliError, match="both say how keys are read"):
        line_format(args_of("--key-separator", ":", "--property", "parse.key=true"))


def test_producer_kwargs():
    assert producer_kwargs(args_of()) == {"acks": 1, "linger_ms": 5, "batch_size": 65536,
                                          "delivery_timeout_ms": 30000, "client_id": "mq-console-producer",
                                          "request_timeout_ms": 30000}
    got = producer_kwargs(args_of("--acks", "all", "-z", "zstd", "--linger-ms", "0", "--producer-property",
                                  "max.in.flight.requests.per.connection=1", "--producer-property",
                                  "delivery.timeout.ms=5000", "--producer-property", "linger.ms=0"))
    assert got["acks"] == "all" and got["compression"] == "zstd" and got["linger_ms"] == 0
    assert got["max_in_flight"] == 1 and got["delivery_timeout_ms"] == 5000 and got["request_timeout_ms"] == 5000
    assert producer_kwargs(args_of("--compression-codec", "none"))["compression"] is None
    with pytest.raises(CliError, match="--batch-size and --producer-property batch.size disagree"):
        producer_kwargs(args_of("--batch-size", "100", "--producer-property", "batch.size=200"))


@pytest.mark.parametrize(("argv", "words"), [
    (["produce"], "no topic to produce to"),
    (["produce", "a", "-t", "b"], "two topics"),
    (["produce", "a", "--property", "parse.key=maybe"], "use true or false"),
    (["produce", "a", "--producer-property", "partitioner.class=RoundRobin"], "the accepted names are acks"),
    (["produce", "a", "-z", "snappy"], "invalid choice"),
])
def test_produce_usage_errors_need_no_broker(capsys, argv, words):
    code = run([*argv, "--bootstrap", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert words in err and err.startswith("error: ") and err.count("\n") == 1
