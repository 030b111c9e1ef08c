"""The data source's options and offset ranges, without Spark or a broker: every rule of
``mq.analytics.options`` and ``mq.analytics.ranges`` on known bounds."""

from __future__ import annotations

import pytest

from mq.analytics.options import EARLIEST, LATEST, SourceOptionError, parse_options
from mq.analytics.ranges import (
    OffsetRange,
    PartitionBounds,
    SourceReadError,
    batch_ranges,
    initial_offsets,
    offsets_json,
    offsets_of_json,
    split,
    stream_ranges,
)
from mq.core.types import TopicPartition

O0, O1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
BOUNDS = {O0: PartitionBounds(10, 100), O1: PartitionBounds(0, 50)}


def batch(**options: str):
    return parse_options({"topic": "orders", **options}, streaming=False)


def test_defaults_of_a_batch_and_of_a_stream():
    b = batch()
    assert (b.bootstrap, b.topics, b.starting, b.ending, b.fail_on_data_loss) == \
        ("localhost:9092", ("orders",), EARLIEST, LATEST, True)
    s = parse_options({"TOPIC": "a, b", "Bootstrap": "h1:1,h2:2"}, streaming=True)
    assert (s.topics, s.starting, s.bootstrap) == (("a", "b"), LATEST, "h1:1,h2:2")
    assert parse_options({"path": "orders"}, streaming=False).topics == ("orders",)  # .load("orders")


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({}, False, "option topic is required"),
    ({"topic": "t", "maxRecordsPerPartition": "ten"}, False, ("maxRecordsPerPartition must be a positive integer, "
                                                             "not 'ten'")),
    ({"topic": "t", "maxRecordsPerPartition": "0"}, False, "must be a positive integer"),
    ({"topic": "t", "pollTimeoutMs": "1.5"}, False, "pollTimeoutMs must be a positive integer"),
    ({"topic": "t", "failOnDataLoss": "yes"}, False, "failOnDataLoss must be true or false, not 'yes'"),
    ({"topic": "t", "startingOffsets": "first"}, False, 'use "earliest", "latest" or JSON'),
    ({"topic": "t", "startingOffsets": '{"other": {"0": 1}}'}, False, "names topic 'other', which is not read"),
    ({"topic": "t", "startingOffsets": '{"t": {"x": 1}}'}, False, "partitions are numbers from 0"),
    ({"topic": "t", "startingOffsets": '{"t": {"0": -3}}'}, False, "offsets integers >= 0"),
    ({"topic": "t", "startingOffsets": '{"t": [1]}'}, False, "must map partitions to offsets"),
    ({"topic": "t", "endingOffsets": "earliest"}, False, "earliest (-2) is not an end"),
    ({"topic": "t", "startingTimestamp": "yesterday"}, False, "use milliseconds since the epoch or ISO 8601"),
    ({"topic": "t", "startingTimestamp": "-5"}, False, "a time at or after 1970"),
    ({"topic": "t", "bootstrap": "localhost"}, False, "'localhost' is not HOST:PORT"),
    ({"topic": "t", "startingOffset": "earliest"}, False, "unknown option(s) startingoffset"),
    ({"topic": "t", "endingOffsets": "latest"}, True, "endingOffsets is for batch reads only"),
    ({"topic": "t", "groupId": "g"}, False, "groupId is for streaming reads only"),
])
def test_bad_options_are_named_with_what_is_accepted(options, streaming, message):
    with pytest.raises(SourceOptionError, match="MQ_SOURCE_BAD_OPTION") as caught:
        parse_options(options, streaming=streaming)
    assert message in str(caught.value)


def test_timestamps_in_ms_or_iso_8601():
    assert batch(startingTimestamp="1764064800000").starting_timestamp_ms == 1_764_064_800_000
    assert batch(startingTimestamp="2025-11-25T10:00:00Z").starting_timestamp_ms == 1_764_064_800_000
    assert batch(endingTimestamp="2025-11-25T10:00:00").ending_timestamp_ms == 1_764_064_800_000  # no zone: UTC
    assert batch(endingTimestamp="2025-11-25T11:00:00+01:00").ending_timestamp_ms == 1_764_064_800_000


def test_batch_ranges_from_offsets():
    assert batch_ranges(batch(), BOUNDS) == [OffsetRange("orders", 0, 10, 100), OffsetRange("orders", 1, 0, 50)]
    explicit = batch(startingOffsets='{"orders": {"0": 20}}', endingOffsets='{"orders": {"0": 30, "1": -1}}')
    assert batch_ranges(explicit, BOUNDS) == [OffsetRange("orders", 0, 20, 30), OffsetRange("orders", 1, 0, 50)]
    assert batch_ranges(batch(startingOffsets="latest"), BOUNDS) == [OffsetRange("orders", 0, 100, 100),
                                                                     OffsetRange("orders", 1, 50, 50)]


def test_batch_ranges_from_timestamps():
    bounds = {O0: PartitionBounds(10, 100, start_for_time=40, end_for_time=-1),
              O1: PartitionBounds(0, 50, start_for_time=-1, end_for_time=-1)}
    options = batch(startingTimestamp="1000", endingTimestamp="2000")
    assert batch_ranges(options, bounds) == [OffsetRange("orders", 0, 40, 100), OffsetRange("orders", 1, 50, 50)]
    bounds[O0] = PartitionBounds(10, 100, start_for_time=40, end_for_time=70)
    assert batch_ranges(options, bounds)[0] == OffsetRange("orders", 0, 40, 70)


def test_ranges_the_brokers_cannot_serve_are_refused():
    for options, code, message in [
        (batch(startingOffsets='{"orders": {"1": 60}}'), "MQ_SOURCE_OFFSET_BEYOND_END", "60 is beyond the log end 50"),
        (batch(endingOffsets='{"orders": {"1": 60}}'), "MQ_SOURCE_OFFSET_BEYOND_END", "do not exist yet"),
        (batch(startingOffsets='{"orders": {"1": 30}}', endingOffsets='{"orders": {"1": 20}}'), "MQ_SOURCE_BAD_RANGE",
         "endingOffsets 20 is before startingOffsets 30"),
        (batch(startingOffsets='{"orders": {"0": 5}}'), "MQ_SOURCE_DATA_LOSS", "offsets [5, 10) were deleted"),
    ]:
        with pytest.raises(SourceReadError, match=code) as caught:
            batch_ranges(options, BOUNDS)
        assert message in str(caught.value)
    lenient = batch(startingOffsets='{"orders": {"0": 5}}', failOnDataLoss="false")
    assert batch_ranges(lenient, BOUNDS)[0] == OffsetRange("orders", 0, 10, 100)


def test_split_into_spark_partitions():
    ranges = [OffsetRange("orders", 0, 10, 35), OffsetRange("orders", 1, 7, 7)]
    assert split(ranges, None) == ranges[:1]
    assert split(ranges, 10) == [OffsetRange("orders", 0, 10, 20), OffsetRange("orders", 0, 20, 30),
                                 OffsetRange("orders", 0, 30, 35)]


def test_streaming_offsets_round_trip_through_json():
    offsets = {O1: 7, O0: 42}
    doc = offsets_json(offsets)
    assert doc == {"orders": {"0": 42, "1": 7}}
    assert offsets_of_json(doc) == offsets
    with pytest.raises(SourceReadError, match="MQ_SOURCE_BAD_CHECKPOINT"):
        offsets_of_json({"orders": [1, 2]})


def test_stream_starts_and_micro_batches():
    stream = parse_options({"topic": "orders"}, streaming=True)
    assert initial_offsets(stream, BOUNDS) == {O0: 100, O1: 50}
    early = parse_options({"topic": "orders", "startingOffsets": '{"orders": {"0": -2}}'}, streaming=True)
    assert initial_offsets(early, BOUNDS) == {O0: 10, O1: 50}  # partitions left out: latest
    o2 = TopicPartition("orders", 2)
    ranges = stream_ranges(stream, {O0: 100, O1: 50}, {O0: 130, O1: 50, o2: 5}, {O0: 10, O1: 0, o2: 0})
    assert ranges == [OffsetRange("orders", 0, 100, 130), OffsetRange("orders", 2, 0, 5)]  # a new partition: all
    with pytest.raises(SourceReadError, match="MQ_SOURCE_DATA_LOSS"):
        stream_ranges(stream, {O0: 100}, {O0: 130}, {O0: 120})
    lenient = parse_options({"topic": "orders", "failOnDataLoss": "false"}, streaming=True)
    assert stream_ranges(lenient, {O0: 100}, {O0: 130}, {O0: 120}) == [OffsetRange("orders", 0, 120, 130)]
