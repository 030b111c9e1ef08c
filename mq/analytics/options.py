"""The options of ``spark.read.format("mq")`` and ``spark.readStream.format("mq")``, checked.

Names follow Spark's Kafka source where the meaning is the same (``startingOffsets``,
``endingOffsets``, ``startingTimestamp``, ``endingTimestamp``, ``failOnDataLoss``);
Spark hands them over as strings, case-insensitively. Every wrong value raises
``SourceOptionError`` naming the option, what was given and what is accepted; so does an
option this source does not know (a typo must not be ignored silently).

======================  ===========================  ===============================================
option                  default                      meaning
======================  ===========================  ===============================================
``bootstrap``           ``localhost:9092``           brokers to contact first, ``HOST:PORT[,...]``
``topic``               (required)                   one topic, or several separated by commas
                                                     (``.load("orders")`` means the same)
``startingOffsets``     ``earliest`` (batch),        ``earliest``, ``latest``, or JSON
                        ``latest`` (stream)          ``{"orders": {"0": 42, "1": -2}}`` (-2 earliest,
                                                     -1 latest; partitions left out: the default)
``endingOffsets``       ``latest``                   batch only: the same forms, exclusive
``startingTimestamp``   none                         ms since the epoch, or ISO 8601
                                                     (``2026-11-25T10:00:00Z``): start at the first
                                                     record with a timestamp >= it; wins over
                                                     ``startingOffsets``
``endingTimestamp``     none                         batch only: end before the first record with a
                                                     timestamp >= it
``maxRecordsPerPartition``  none                     split a partition's range into Spark
                                                     partitions of at most this many offsets
``failOnDataLoss``      ``true``                     a range that starts below the log start
                                                     (deleted by retention): fail, or (``false``)
                                                     start at the log start
``pollTimeoutMs``       ``30000``                    how long a task waits for records it knows
                                                     exist before it fails
``groupId``             none                         stream only: commit each finished micro-batch's
                                                     end offsets to this consumer group (one with
                                                     no members), so ``mq group describe`` and the
                                                     lag exporter see the query's lag
======================  ===========================  ===============================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

EARLIEST = -2
LATEST = -1
DEFAULT_BOOTSTRAP = "localhost:9092"
DEFAULT_POLL_TIMEOUT_MS = 30_000

KNOWN = ("bootstrap", "topic", "startingoffsets", "endingoffsets", "startingtimestamp", "endingtimestamp",
         "maxrecordsperpartition", "failondataloss", "polltimeoutms", "groupid", "path")
SPELLING = {k.lower(): k for k in ("bootstrap", "topic", "startingOffsets", "endingOffsets", "startingTimestamp",
                                    "endingTimestamp", "maxRecordsPerPartition", "failOnDataLoss", "pollTimeoutMs",
                                    "groupId")}


class SourceOptionError(ValueError):
    """A wrong option of the mq data source (the message says which and what is accepted)."""

    code = "MQ_SOURCE_BAD_OPTION"

    def __init__(self, message: str) -> None:
        super().__init__(f"[{self.code}] {message}")


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    topics: tuple[str, ...]
    starting: int | dict[str, dict[int, int]]  # EARLIEST / LATEST, or per topic and partition
    ending: int | dict[str, dict[int, int]]
    starting_timestamp_ms: int | None = None
    ending_timestamp_ms: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    group_id: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check ``options`` (Spark's, keys in any case) into ``SourceOptions``."""
    given = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(k for k in given if k not in KNOWN)
    if unknown:
        raise SourceOptionError(f"unknown option(s) {', '.join(unknown)}; the mq source takes "
                                f"{', '.join(sorted(SPELLING.values()))}")
    topics = tuple(t.strip() for t in (given.get("topic") or given.get("path", "")).split(",") if t.strip())
    if not topics:
        raise SourceOptionError('option topic is required: .option("topic", "orders") (several: "a,b")')
    bootstrap = given.get("bootstrap", DEFAULT_BOOTSTRAP)
    _check_bootstrap(bootstrap)
    if streaming:
        for batch_only in ("endingoffsets", "endingtimestamp"):
            if batch_only in given:
                raise SourceOptionError(f"{SPELLING[batch_only]} is for batch reads only: a stream has no end "
                                        "(use spark.read for a bounded range)")
    elif "groupid" in given:
        raise SourceOptionError("groupId is for streaming reads only (a batch read commits nothing)")
    return SourceOptions(
        bootstrap=bootstrap, topics=topics,
        starting=_offsets("startingOffsets", given.get("startingoffsets", "latest" if streaming else "earliest"),
                          topics),
        ending=_ending(given.get("endingoffsets", "latest"), topics),
        starting_timestamp_ms=_timestamp("startingTimestamp", given.get("startingtimestamp")),
        ending_timestamp_ms=_timestamp("endingTimestamp", given.get("endingtimestamp")),
        max_records_per_partition=_positive("maxRecordsPerPartition", given.get("maxrecordsperpartition")),
        fail_on_data_loss=_boolean("failOnDataLoss", given.get("failondataloss", "true")),
        poll_timeout_ms=_positive("pollTimeoutMs", given.get("polltimeoutms")) or DEFAULT_POLL_TIMEOUT_MS,
        group_id=given.get("groupid") or None)


def _check_bootstrap(value: str) -> None:
    for address in value.split(","):
        host, sep, port = address.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SourceOptionError(f"bootstrap {value!r}: {address.strip()!r} is not HOST:PORT "
                                    "(for example localhost:9092, or several separated by commas)")


def _offsets(name: str, value: str, topics: tuple[str, ...]) -> int | dict[str, dict[int, int]]:
    text = value.strip()
    if text.lower() == "earliest":
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise SourceOptionError(f'{name} {value!r}: use "earliest", "latest" or JSON like '
                                '{"orders": {"0": 42, "1": -2}} (-2: earliest, -1: latest)')
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in doc.items():
        if topic not in topics:
            raise SourceOptionError(f"{name} names topic {topic!r}, which is not read (topic: {', '.join(topics)})")
        if not isinstance(partitions, dict):
            raise SourceOptionError(f'{name}: {topic!r} must map partitions to offsets, like {{"0": 42}}')
        out[topic] = {}
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int) \
                    or offset < EARLIEST:
                raise SourceOptionError(f"{name}: {topic} partition {partition!r} offset {offset!r}: partitions "
                                        "are numbers from 0, offsets integers >= 0, or -2 (earliest), -1 (latest)")
            out[topic][int(partition)] = offset
    return out


def _ending(value: str, topics: tuple[str, ...]) -> int | dict[str, dict[int, int]]:
    ending = _offsets("endingOffsets", value, topics)
    if ending == EARLIEST or (isinstance(ending, dict) and any(o == EARLIEST for p in ending.values()
                                                                for o in p.values())):
        raise SourceOptionError(f"endingOffsets {value!r}: earliest (-2) is not an end; use latest (-1) or offsets")
    return ending


def _timestamp(name: str, value: str | None) -> int | None:
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if text.lstrip("-").isdigit():
        ms = int(text)
    else:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise SourceOptionError(f"{name} {value!r}: use milliseconds since the epoch or ISO 8601 "
                                    "(2026-11-25T10:00:00Z; no zone: UTC)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise SourceOptionError(f"{name} {value!r}: a time at or after 1970-01-01 is needed")
    return ms


def _positive(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise SourceOptionError(f"{name} must be a positive integer, not {value!r}")
    return number


def _boolean(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise SourceOptionError(f"{name} must be true or false, not {value!r}")
    return lowered == "true"
