"""`mq group` without a broker: argument checks, the describe document and table rows."""

from __future__ import annotations

import argparse

import pytest

from mq.cli.group import describe_doc, member_rows, partition_rows, summary_line
from mq.cli.group_reset import plan_rows, spec_of
from mq.cli.main import build_parser, run
from mq.client.group_admin import GroupDescription, MemberDescription, PartitionLag
from mq.client.internals.offset_reset import PlannedReset, ResetStrategy
from mq.core.types import TopicPartition

T0, T1, T2 = (TopicPartition("clicks", p) for p in range(3))


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def error_of(capsys, *argv: str) -> tuple[int, str]:
    code = run(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_reset_needs_exactly_one_strategy(capsys):
    code, err = error_of(capsys, "group", "reset-offsets", "g", "--topic", "clicks")
    assert code == 2 and err.startswith("error: ") and "--to-earliest" in err and err.count("\n") == 1
    code, err = error_of(capsys, "group", "reset-offsets", "g", "--topic", "t", "--to-latest", "--to-earliest")
    assert code == 2 and "not allowed with" in err


@pytest.mark.parametrize(("argv", "words"), [
    (["--topic", "clicks:x", "--to-latest"], "partitions must be numbers"),
    (["--topic", "t", "--by-duration", "soon"], "PnDTnHnMnS"),
    (["--topic", "t", "--to-datetime", "tomorrow"], "ISO-8601"),
    (["--topic", "t", "--all-topics", "--to-latest"], "not allowed with"),
    (["--topic", "t", "--to-latest", "--dry-run", "--execute"], "not allowed with"),
])
def test_bad_reset_arguments_are_one_line_usage_errors(capsys, argv, words):
    code, err = error_of(capsys, "group", "reset-offsets", "g", *argv)
    assert code == 2 and words in err and err.count("\n") == 1


def test_spec_of_each_strategy(tmp_path):
    assert spec_of(parse("group", "reset-offsets", "g", "--all-topics", "--to-earliest")).strategy \
        == ResetStrategy.TO_EARLIEST
    spec = spec_of(parse("group", "reset-offsets", "g", "--topic", "t:1,0", "--shift-by", "-3"))
    assert (spec.strategy, spec.value) == (ResetStrategy.SHIFT_BY, -3)
    spec = spec_of(parse("group", "reset-offsets", "g", "--topic", "t", "--by-duration", "1h30m"))
    assert (spec.strategy, spec.value) == (ResetStrategy.BY_DURATION, 5_400_000)
    spec = spec_of(parse("group", "reset-offsets", "g", "--topic", "t", "--to-datetime", "2026-11-25T10:00:00Z"))
    assert (spec.strategy, spec.value) == (ResetStrategy.TO_DATETIME, 1_795_600_800_000)
    args = parse("group", "reset-offsets", "g", "--topic", "t:1,0", "--to-offset", "7")
    assert args.topic == [("t", (0, 1))] and spec_of(args).value == 7
    path = tmp_path / "offsets.csv"
    path.write_text("clicks,0,5\nclicks,2,9\n")
    spec = spec_of(parse("group", "reset-offsets", "g", "--from-file", str(path)))
    assert spec.offsets == {T0: 5, T2: 9}


def test_unreadable_or_bad_offsets_files_say_so(tmp_path, capsys):
    code, err = error_of(capsys, "group", "reset-offsets", "g", "--from-file", str(tmp_path / "nope.csv"))
    assert code == 1 and "cannot read --from-file" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("clicks;0;5\n")
    code, err = error_of(capsys, "group", "reset-offsets", "g", "--from-file", str(bad))
    assert code == 2 and "line 1" in err


def test_negative_to_offset_is_refused(capsys):
    code, err = error_of(capsys, "group", "reset-offsets", "g", "--topic", "t", "--to-offset", "-1",
                         "--bootstrap", "127.0.0.1:1")
    assert code == 2 and "--to-offset must be 0 or more" in err


def test_consume_group_rejects_partition_and_offset(capsys):
    for extra in (["--partition", "0"], ["--offset", "5"], ["--from-time", "2026-01-01"]):
        code, err = error_of(capsys, "consume", "clicks", "--group", "g", *extra, "--bootstrap", "127.0.0.1:1")
        assert code == 2 and "cannot be used with --group" in err


def _description() -> GroupDescription:
    return GroupDescription("g", "Stable", "range", 4, 1, [
        MemberDescription("m-1", None, "c1", "/10.0.0.1", [T0, T1]),
        MemberDescription("m-2", "inst-2", "c2", "/10.0.0.2", []),
    ])


def test_describe_rows_like_kafka_consumer_groups():
    lags = [PartitionLag(T0, "m-1", 40, 100, 60, 12.345), PartitionLag(T1, "m-1", None, 7, None, None),
            PartitionLag(T2, None, 5, 5, 0, 0.0)]
    doc = describe_doc("g", _description(), lags)
    assert summary_line(doc) == "group g: state Stable, assignor range, generation 4, coordinator 1, 2 members"
    assert partition_rows(doc) == [
        ["g", "clicks", "0", "40", "100", "60", "12.3", "m-1", "c1", "/10.0.0.1"],
        ["g", "clicks", "1", "-", "7", "-", "-", "m-1", "c1", "/10.0.0.1"],
        ["g", "clicks", "2", "5", "5", "0", "0.0", "-", "-", "-"],
        ["g", "-", "-", "-", "-", "-", "-", "m-2", "c2", "/10.0.0.2"],
    ]
    assert member_rows(doc) == [["g", "m-1", "-", "c1", "/10.0.0.1", "2", "clicks(0,1)"],
                                ["g", "m-2", "inst-2", "c2", "/10.0.0.2", "0", "-"]]
    assert doc["partitions"][0]["lag_seconds"] == 12.345 and doc["members"][0]["assignment"] == [
        ["clicks", 0], ["clicks", 1]]


def test_describe_of_a_group_with_only_offsets():
    doc = describe_doc("g", None, [PartitionLag(T0, None, 3, 9, 6, 1.5)])
    assert doc["state"] == "Empty" and doc["members"] == []
    assert partition_rows(doc) == [["g", "clicks", "0", "3", "9", "6", "1.5", "-", "-", "-"]]


def test_plan_rows():
    assert plan_rows("g", [PlannedReset(T0, None, 0), PlannedReset(T1, 9, 4)]) == [
        ["g", "clicks", "0", "-", "0"], ["g", "clicks", "1", "9", "4"]]
