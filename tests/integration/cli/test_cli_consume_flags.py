"""`mq consume` as Kafka and rpk users call it, in real processes against a real broker:
several topics, --include, formatter properties, format strings, --partition/--offset,
the group flags and --consumer-property."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from .helpers import mq_command


def _lines(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr
    return result.stdout.decode().splitlines()


@pytest.fixture(scope="module")
def topics(cluster) -> str:
    """cf-a (2 partitions, keyed k0:v0..k5:v5), cf-b (b0, b1), cfx (x0): read-only for the tests."""
    for topic, partitions in (("cf-a", "2"), ("cf-b", "1"), ("cfx", "1")):
        assert cluster.mq("topic", "create", topic, "--partitions", partitions).returncode == 0
    keyed = "".join(f"k{i}:v{i}\n" for i in range(6)).encode()
    assert cluster.mq("produce", "cf-a", "--key-separator", ":", input=keyed).returncode == 0
    assert cluster.mq("produce", "cf-b", input=b"b0\nb1\n").returncode == 0
    assert cluster.mq("produce", "cfx", input=b"x0\n").returncode == 0
    return "cf"


def _by_partition(lines: list[str]) -> dict[tuple[str, str], list[int]]:
    """topic, partition -> offsets in the order printed (first three fields of '%t %p %o ...')."""
    seen: dict[tuple[str, str], list[int]] = {}
    for line in lines:
        topic, partition, offset = line.split(" ")[:3]
        seen.setdefault((topic, partition), []).append(int(offset))
    return seen


def test_several_topics_and_include_without_a_group(cluster, topics):
    fmt = ["-f", "%t %p %o %k %v"]
    named = _lines(cluster.mq("consume", "cf-a", "cf-b", "--from-beginning", "--max-messages", "8", *fmt))
    assert len(named) == 8 == len(set(named))
    offsets = _by_partition(named)
    # Every partition of both topics, each from its log start, in offset order.
    assert sorted(offsets) == [("cf-a", "0"), ("cf-a", "1"), ("cf-b", "0")]
    assert all(o == list(range(len(o))) for o in offsets.values())
    assert {line.split(" ", 3)[3] for line in named if line.startswith("cf-b")} == {" b0", " b1"}

    # -t (kcat and Kafka spell the topic as an option) and --include: the same records.
    as_options = _lines(cluster.mq("consume", "-t", "cf-a", "-t", "cf-b", "--from-beginning",
                                   "--max-messages", "8", *fmt))
    assert sorted(as_options) == sorted(named)
    included = _lines(cluster.mq("consume", "--include", r"cf-\w", "--from-beginning", "--max-messages", "8",
                                 *fmt))
    assert sorted(included) == sorted(named)  # cfx does not match the whole pattern
    both = _lines(cluster.mq("consume", "cfx", "--include", "cf-b", "--offset", "earliest",
                             "--max-messages", "3", *fmt))
    assert sorted(both) == ["cf-b 0 0  b0", "cf-b 0 1  b1", "cfx 0 0  x0"]

    nothing = cluster.mq("consume", "--include", "nomatch.*", "--timeout-ms", "100")
    assert nothing.returncode == 1 and b"no topic matches --include 'nomatch.*'" in nothing.stderr
    missing = cluster.mq("consume", "cf-a", "nosuchtopic", "--timeout-ms", "100")
    assert missing.returncode == 1 and b"topic 'nosuchtopic' does not exist" in missing.stderr


def test_kafka_formatter_properties(cluster, topics):
    result = cluster.mq("consume", "cf-a", "--from-beginning", "--max-messages", "6",
                        "--property", "print.timestamp=true", "--property", "print.partition=true",
                        "--property", "print.offset=true", "--property", "print.headers=true",
                        "--property", "print.key=true")
    for line in _lines(result):
        assert re.fullmatch(r"CreateTime:\d{13}\tPartition:[01]\tOffset:\d\tNO_HEADERS\tk(\d)\tv\1", line), line
    custom = cluster.mq("consume", "cf-b", "--from-beginning", "--max-messages", "2",
                        "--property", "print.key=true", "--property", "key.separator=|",
                        "--property", "line.separator=;", "--property", "null.literal=-")
    assert custom.returncode == 0 and custom.stdout == b"-|b0;-|b1;"
    no_value = cluster.mq("consume", "cf-b", "--from-beginning", "--max-messages", "2",
                          "--property", "print.offset=true", "--property", "print.value=false")
    assert no_value.stdout == b"Offset:0\nOffset:1\n"


def test_format_string_and_offsets(cluster, topics):
    described = json.loads(cluster.mq("topic", "describe", "cf-a", "--json").stdout)
    count = described["partitions"][1]["log_end_offset"]
    assert count > 0, "partition 1 of cf-a holds records"
    lines = _lines(cluster.mq("consume", "cf-a", "-p", "1", "-o", "earliest", "--max-messages", str(count),
                              "-f", "%p/%o %k{hex} %V %d\\t%i\\n"))
    assert len(lines) == count
    for n, line in enumerate(lines, start=1):
        head, tail = line.split("\t")
        partition_offset, key_hex, length, stamp = head.split(" ")
        assert partition_offset == f"1/{n - 1}" and bytes.fromhex(key_hex).startswith(b"k")
        assert length == "2" and stamp.isdigit() and tail == str(n)

    # -o N is clamped into [log start, log end], with a note; -o latest prints nothing old.
    assert cluster.mq("topic", "create", "cf-clamp").returncode == 0
    assert cluster.mq("produce", "cf-clamp", input=b"c0\nc1\n").returncode == 0
    past = cluster.mq("consume", "cf-clamp", "-p", "0", "-o", "7", "--timeout-ms", "300")
    assert past.returncode == 0 and past.stdout == b""
    assert b"note: cf-clamp-0 holds offsets 0..1; starting at the log end 2, not 7" in past.stderr
    assert cluster.mq("records", "delete", "cf-clamp", "--before-offset", "1").returncode == 0
    below = cluster.mq("consume", "cf-clamp", "-o", "0", "--max-messages", "1", "-f", "%o %v")
    assert below.stdout == b"1 c1\n", below.stderr
    assert b"starting at the log start 1, not 0" in below.stderr
    latest = cluster.mq("consume", "cf-clamp", "-o", "latest", "--timeout-ms", "300")
    assert latest.returncode == 0 and latest.stdout == b""


def _describe(cluster, group: str) -> dict:
    result = cluster.mq("group", "describe", group, "--json")
    return json.loads(result.stdout) if result.returncode == 0 else {}


def test_group_flags_and_consumer_properties(cluster, topics):
    # Two new groups at once: each waits group.initial.rebalance.delay.ms before its first assignment.
    static = subprocess.Popen(
        [*mq_command(), "consume", "cf-b", "--include", r"cf-a", "-g", "flags", "--from-beginning",
         "--assignor", "cooperative-sticky", "--group-instance-id", "console-1", "--session-timeout-ms", "6000",
         "--consumer-property", "max.poll.records=1", "--consumer-property", "client.id=flag-test",
         "--max-messages", "8", "-f", "%t %p %o %v"], env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # enable.auto.commit=false: nothing is committed, so the group would start over next time.
    manual = subprocess.Popen(
        [*mq_command(), "consume", "cf-b", "-g", "nocommit", "--from-beginning", "--max-messages", "2",
         "--consumer-property", "enable.auto.commit=false"], env=cluster.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        static_out, static_err = static.communicate(timeout=60)
        manual_out, manual_err = manual.communicate(timeout=60)
    finally:
        static.kill()
        manual.kill()
    assert static.returncode == 0 and manual.returncode == 0, static_err + manual_err
    lines = static_out.decode().splitlines()
    assert sorted(_by_partition(lines)) == [("cf-a", "0"), ("cf-a", "1"), ("cf-b", "0")]
    doc = _describe(cluster, "flags")
    assert doc["assignor"] == "cooperative-sticky"
    # A static member does not leave the group when it stops (KIP-345): it is still listed.
    assert [(m["group_instance_id"], m["client_id"]) for m in doc["members"]] == [("console-1", "flag-test")]
    assert {p["lag"] for p in doc["partitions"]} == {0}
    assert manual_out == b"b0\nb1\n"
    assert {p["current_offset"] for p in _describe(cluster, "nocommit").get("partitions", [])} <= {None}


def test_include_with_a_group_follows_new_topics(cluster):
    proc = subprocess.Popen([*mq_command(), "consume", "--include", "later-.*", "-g", "follow", "--from-beginning",
                             "--max-messages", "1", "--timeout-ms", "20000", "-f", "%t %v"],
                            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while _describe(cluster, "follow").get("state") != "Stable":
            assert time.monotonic() < deadline, "the console consumer never joined its group"
            time.sleep(0.1)
        assert cluster.mq("topic", "create", "later-1").returncode == 0
        assert cluster.mq("produce", "later-1", input=b"hello\n").returncode == 0
        out, err = proc.communicate(timeout=25)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == b"later-1 hello\n"


def test_a_new_group_starts_at_the_log_start_and_latest_by_property(cluster, topics):
    """`mq consume T --group G` with nothing committed reads T from its start (rpk's default);
    auto.offset.reset=latest gives Kafka's console behaviour, and waits for new records."""
    assert _lines(cluster.mq("consume", "cf-b", "-g", "fresh", "--max-messages", "2", timeout=60)) == ["b0", "b1"]
    latest = _lines(cluster.mq("consume", "cf-b", "-g", "tail", "--consumer-property", "auto.offset.reset=latest",
                               "--timeout-ms", "2000", timeout=60))
    assert latest == []


def test_a_missing_topic_is_waited_for_within_the_timeout(cluster):
    """With --timeout-ms a topic created a moment later (as a mirror creates one) is read;
    without it a missing topic is an error at once."""
    missing = cluster.mq("consume", "not-yet-there", "--from-beginning")
    assert missing.returncode == 1 and b"topic 'not-yet-there' does not exist" in missing.stderr
    proc = subprocess.Popen([*mq_command(), "consume", "soon", "--from-beginning", "--timeout-ms", "8000"],
                            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1)
        assert cluster.mq("topic", "create", "soon").returncode == 0
        assert cluster.mq("produce", "soon", input=b"here\n").returncode == 0
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == b"here\n"
    assert b"waiting up to --timeout-ms 8000" in err


def test_delivery_presets_and_isolation_level_from_the_console(cluster, topics):
    """`mq consume --group G --delivery at-most-once` commits what it printed; a group's
    committed offsets (`mq group describe --json`) are the independent reader; without a
    group the preset is refused by name; --isolation-level read_committed reads plain records."""
    got = _lines(cluster.mq("consume", "cf-b", "--group", "cf-amo", "--delivery", "at-most-once",
                            "--max-messages", "2"))
    assert got == ["b0", "b1"]
    described = cluster.mq("group", "describe", "cf-amo", "--json")
    assert described.returncode == 0, described.stderr
    doc = json.loads(described.stdout)
    offsets = {p["partition"]: p["current_offset"] for p in doc["partitions"] if p["topic"] == "cf-b"}
    assert offsets == {0: 2}
    produced = cluster.mq("produce", "cf-b", "--delivery", "at-most-once", input=b"b2\n")
    assert produced.returncode == 0, produced.stderr
    wrong = cluster.mq("consume", "cf-b", "--delivery", "at-most-once", "--max-messages", "1")
    assert wrong.returncode != 0 and b"group_id" in wrong.stderr
    committed_only = _lines(cluster.mq("consume", "cf-b", "--from-beginning", "--isolation-level", "read_committed",
                                       "--max-messages", "3"))
    assert committed_only == ["b0", "b1", "b2"]
