"""Reset plans (kafka-consumer-groups --reset-offsets semantics) and their parsers."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.client.internals.offset_reset import (
    OffsetRange,
    PlannedReset,
    ResetSpec,
    ResetStrategy,
    clamp,
    parse_datetime_ms,
    parse_duration_ms,
    parse_offsets_csv,
    parse_topic_spec,
    plan_reset,
    plan_to_csv,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
BOUNDS = {A0: OffsetRange(10, 100), A1: OffsetRange(0, 50), B0: OffsetRange(5, 5)}
CURRENT = {A0: 40, A1: 50}


def plan(spec: ResetSpec, tps=(A0, A1, B0), **kw) -> dict[TopicPartition, int]:
    return {p.tp: p.new for p in plan_reset(tps, spec, current=CURRENT, bounds=BOUNDS, **kw)}


def test_earliest_and_latest_are_the_log_bounds():
    assert plan(ResetSpec(ResetStrategy.TO_EARLIEST)) == {A0: 10, A1: 0, B0: 5}
    assert plan(ResetSpec(ResetStrategy.TO_LATEST)) == {A0: 100, A1: 50, B0: 5}


def test_to_offset_is_clamped_into_the_log_like_kafka():
    result = plan_reset([A0, A1], ResetSpec(ResetStrategy.TO_OFFSET, 60), current=CURRENT, bounds=BOUNDS)
    assert result == [PlannedReset(A0, 40, 60, False), PlannedReset(A1, 50, 50, True)]
    assert plan(ResetSpec(ResetStrategy.TO_OFFSET, 0), tps=[A0]) == {A0: 10}


def test_shift_by_moves_from_the_committed_offset_and_clamps():
    assert plan(ResetSpec(ResetStrategy.SHIFT_BY, -35), tps=[A0, A1]) == {A0: 10, A1: 15}
    assert plan(ResetSpec(ResetStrategy.SHIFT_BY, 5), tps=[A0, A1]) == {A0: 45, A1: 50}


def test_shift_by_without_a_committed_offset_is_an_error():
    with pytest.raises(MqError, match="no committed offset"):
        plan(ResetSpec(ResetStrategy.SHIFT_BY, 1), tps=[B0])


def test_time_strategies_use_the_looked_up_offset_or_the_log_end():
    found = {A0: 70, A1: -1, B0: None}
    assert plan(ResetSpec(ResetStrategy.TO_DATETIME, 123), offsets_for_time=found) == {A0: 70, A1: 50, B0: 5}
    assert ResetSpec(ResetStrategy.TO_DATETIME, 123).target_time_ms(now_ms=10_000) == 123
    assert ResetSpec(ResetStrategy.BY_DURATION, 4_000).target_time_ms(now_ms=10_000) == 6_000
    assert ResetSpec(ResetStrategy.TO_LATEST).target_time_ms(now_ms=10_000) is None


def test_from_file_needs_every_partition_in_the_file():
    spec = ResetSpec(ResetStrategy.FROM_FILE, offsets={A0: 20, A1: 99})
    assert plan(spec, tps=[A1, A0]) == {A0: 20, A1: 50}
    with pytest.raises(MqError, match="not in the offsets file"):
        plan(spec, tps=[B0])


def test_unknown_partition_is_named():
    with pytest.raises(MqError) as err:
        plan(ResetSpec(ResetStrategy.TO_LATEST), tps=[TopicPartition("zzz", 3)])
    assert err.value.code == ErrorCode.UNKNOWN_TOPIC


def test_plan_is_sorted_and_keeps_the_current_offset():
    result = plan_reset([B0, A1, A0, A0], ResetSpec(ResetStrategy.TO_EARLIEST), current=CURRENT, bounds=BOUNDS)
    assert [(p.tp, p.current) for p in result] == [(A0, 40), (A1, 50), (B0, None)]


@given(st.integers(-1000, 1000), st.integers(0, 500), st.integers(0, 500))
def test_clamp_always_lands_in_the_range(offset, start, length):
    bounds = OffsetRange(start, start + length)
    value, clamped = clamp(offset, bounds)
    assert bounds.log_start <= value <= bounds.log_end
    assert clamped == (value != offset)


# ---------------------------------------------------------------- parsers


@pytest.mark.parametrize(("text", "ms"), [
    ("PT1H30M", 5_400_000), ("P2D", 172_800_000), ("P1DT12H", 129_600_000), ("PT0.5S", 500),
    ("pt45s", 45_000), ("1h30m", 5_400_000), ("2d", 172_800_000), ("90s", 90_000), ("500ms", 500),
    ("1d2h3m4s", 93_784_000), ("1.5h", 5_400_000), ("0s", 0),
])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "P1DT", "1x", "h1", "10", "1h 30m", "-1h", "PT1H30"])
def test_bad_durations_say_what_is_accepted(text):
    with pytest.raises(MqError, match="PnDTnHnMnS"):
        parse_duration_ms(text)


def test_datetimes_without_a_zone_use_the_given_or_local_zone():
    plus2 = timezone(timedelta(hours=2))
    assert parse_datetime_ms("2026-11-25T10:00:00Z") == 1_795_600_800_000
    assert parse_datetime_ms("2026-11-25T10:00:00+02:00") == 1_795_600_800_000 - 7_200_000
    assert parse_datetime_ms("2026-11-25T10:00:00", tz=plus2) == 1_795_600_800_000 - 7_200_000
    assert parse_datetime_ms("2026-11-25", tz=UTC) == 1_795_564_800_000
    assert isinstance(parse_datetime_ms("2026-11-25T10:00:00"), int)  # the machine's zone
    with pytest.raises(MqError, match="ISO-8601"):
        parse_datetime_ms("yesterday")


def test_topic_specs():
    assert parse_topic_spec("clicks") == ("clicks", None)
    assert parse_topic_spec("clicks:2,0,2") == ("clicks", (0, 2))
    for bad in (":1", "clicks:", "clicks:x", "clicks:-1"):
        with pytest.raises(MqError):
            parse_topic_spec(bad)


def test_offsets_csv_round_trips_the_export_and_reads_kafka_formats():
    result = plan_reset([A0, A1], ResetSpec(ResetStrategy.TO_OFFSET, 30), current=CURRENT, bounds=BOUNDS)
    assert parse_offsets_csv(plan_to_csv(result)) == {A0: 30, A1: 30}
    text = "topic,partition,offset\n# comment\n\na, 0, 7\ng1,b,0,3\ng2,b,0,9\n"
    assert parse_offsets_csv(text, group_id="g1") == {A0: 7, B0: 3}


@pytest.mark.parametrize(("text", "match"), [
    ("", "no topic,partition,offset"), ("a,0\n", "line 1"), ("a,x,1\n", "must be numbers"),
    ("a,0,-5\n", "offset >= 0"), ("a,0,1,2,3\n", "expected"),
])
def test_bad_offsets_files_name_the_line(text, match):
    with pytest.raises(MqError, match=match):
        parse_offsets_csv(text)
