"""``--consumer-property`` / ``--producer-property``: Kafka's client config names mapped to
the keyword arguments of ``mq.client.Consumer`` and ``Producer``.

Each accepted name has a converter that checks the value (a number, true/false, one of a
set) and says what is wrong in words. A name mq's client does not have is refused with the
list of accepted names. A dedicated flag and a property that set the same thing must
agree (Kafka's console tools refuse a ``--group`` that differs from ``group.id`` too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mq.cli.common import EXIT_USAGE, CliError

# mq.client.internals.group_membership.ASSIGNORS (not imported: mq.client loads lazily; a
# unit test checks they are equal).
ASSIGNORS = ("range", "round-robin", "sticky", "cooperative-sticky")
KAFKA_ASSIGNOR_CLASSES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "round-robin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "roundrobin": "round-robin",
}
COMPRESSION = ("none", "gzip", "lz4", "zstd")


def _int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("not a whole number") from None
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("use true or false")
    return value == "true"


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _one_of(*choices: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(f"use one of {', '.join(choices)}")
        return text
    return convert


def assignor_list(text: str) -> list[str]:
    """``range``, ``cooperative-sticky,range`` or Kafka's class names -> mq assignor names."""
    names = []
    for part in (p.strip() for p in text.split(",")):
        name = KAFKA_ASSIGNOR_CLASSES.get(part, part)
        if name not in ASSIGNORS:
            raise ValueError(f"unknown assignor {part!r}; use {', '.join(ASSIGNORS)} "
                             "(or Kafka's class names), several separated by commas")
        names.append(name)
    return names


def _acks(text: str) -> int | str:
    if text not in ("0", "1", "all", "-1"):
        raise ValueError("use 0, 1, all or -1")
    return "all" if text in ("all", "-1") else int(text)


def _compression(text: str) -> str:
    if text == "snappy":
        raise ValueError("snappy is not supported by mq; use gzip, lz4 or zstd")
    return _one_of(*COMPRESSION)(text)


@dataclass(frozen=True)
class Property:
    name: str  # Kafka's name
    kwarg: str  # the mq.client keyword argument
    convert: Callable[[str], Any]


CONSUMER_PROPERTIES = {p.name: p for p in (
    Property("group.id", "group_id", _text),
    Property("group.instance.id", "group_instance_id", _text),
    Property("client.id", "client_id", _text),
    Property("auto.offset.reset", "auto_offset_reset", _one_of("earliest", "latest", "none")),
    Property("enable.auto.commit", "enable_auto_commit", _bool),
    Property("auto.commit.interval.ms", "auto_commit_interval_ms", _int),
    Property("partition.assignment.strategy", "assignor", assignor_list),
    Property("session.timeout.ms", "session_timeout_ms", _int),
    Property("heartbeat.interval.ms", "heartbeat_interval_ms", _int),
    Property("max.poll.interval.ms", "max_poll_interval_ms", _int),
    Property("max.poll.records", "max_poll_records", _int),
    Property("fetch.min.bytes", "fetch_min_bytes", _int),
    Property("fetch.max.bytes", "fetch_max_bytes", _int),
    Property("fetch.max.wait.ms", "fetch_max_wait_ms", _int),
    Property("max.partition.fetch.bytes", "max_partition_fetch_bytes", _int),
    Property("check.crcs", "check_crcs", _bool),
    Property("request.timeout.ms", "request_timeout_ms", _int),
    Property("retry.backoff.ms", "retry_backoff_ms", _int),
    Property("metadata.max.age.ms", "metadata_max_age_ms", _int),
    Property("isolation.level", "isolation_level", _one_of("read_uncommitted", "read_committed")),
)}

PRODUCER_PROPERTIES = {p.name: p for p in (
    Property("acks", "acks", _acks),
    Property("client.id", "client_id", _text),
    Property("compression.type", "compression", _compression),
    Property("linger.ms", "linger_ms", _int),
    Property("batch.size", "batch_size", _int),
    Property("buffer.memory", "buffer_memory", _int),
    Property("max.block.ms", "max_block_ms", _int),
    Property("max.in.flight.requests.per.connection", "max_in_flight", _int),
    Property("retries", "retries", _int),
    Property("retry.backoff.ms", "retry_backoff_ms", _int),
    Property("delivery.timeout.ms", "delivery_timeout_ms", _int),
    Property("request.timeout.ms", "request_timeout_ms", _int),
    Property("max.request.size", "max_request_size", _int),
    Property("metadata.max.age.ms", "metadata_max_age_ms", _int),
    Property("enable.idempotence", "enable_idempotence", _bool),
)}

_ELSEWHERE = {"bootstrap.servers": "use --bootstrap-server HOST:PORT"}


def names_help(table: dict[str, Property]) -> str:
    return ", ".join(table)


def client_kwargs(pairs: Iterable[tuple[str, str]], table: dict[str, Property], flag: str) -> dict[str, Any]:
    """``[(kafka_name, text)]`` -> ``{kwarg: value}``; a usage error for anything wrong."""
    out: dict[str, Any] = {}
    for name, text in pairs:
        prop = table.get(name)
        if prop is None:
            todo = _ELSEWHERE.get(name, f"the accepted names are {names_help(table)}")
            raise CliError(f"bad {flag}: {name!r} is not a property mq's client takes", todo,
                           exit_code=EXIT_USAGE)
        try:
            out[prop.kwarg] = prop.convert(text)
        except ValueError as exc:
            raise CliError(f"bad {flag} {name}={text}: {exc}", f"fix the value of {name}",
                           exit_code=EXIT_USAGE) from None
    return out


def merge(flags: dict[str, tuple[str, Any]], props: dict[str, Any], flag: str,
          table: dict[str, Property]) -> dict[str, Any]:
    """Dedicated flags (``{kwarg: (flag_name, value or None)}``) over ``props``.

    A flag that was given and a property for the same keyword argument must agree."""
    out = dict(props)
    names = {p.kwarg: p.name for p in table.values()}
    for kwarg, (name, value) in flags.items():
        if value is None:
            continue
        if kwarg in props and props[kwarg] != value:
            raise CliError(f"{name} and {flag} {names.get(kwarg, kwarg)} disagree "
                           f"({_show(value)} vs {_show(props[kwarg])})",
                           "give the setting once", exit_code=EXIT_USAGE)
        out[kwarg] = value
    return out


def _show(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)
