"""`mq produce --report` and `mq consume` agree record for record."""

from __future__ import annotations

import json
import signal
import subprocess

from mq.cli.records import json_to_bytes

from .helpers import mq_command


def _read_all(cluster, topic: str, *extra: str, expect: int = 0) -> dict[tuple[int, int], dict]:
    """Consume ``expect`` records (then stop at once); with ``expect=0`` check that nothing
    arrives within half a second. The timeout only bounds a failing run."""
    limit = ["--max-messages", str(expect), "--timeout-ms", "10000"] if expect else ["--timeout-ms", "500"]
    result = cluster.mq("consume", topic, "--format", "json", *limit, *extra, timeout=30)
    assert result.returncode == 0, result.stderr
    records = {(d["partition"], d["offset"]): d for d in map(json.loads, result.stdout.decode().splitlines())}
    assert len(records) == expect
    return records


def test_report_offsets_read_back(cluster, tmp_path):
    assert cluster.mq("topic", "create", "reported", "--partitions", "2").returncode == 0
    lines = [f"k{i % 7}:value-{i}" for i in range(3000)] + ["no-separator-line", "k:\xe9t\xe9"]
    report = tmp_path / "report.jsonl"
    produced = cluster.mq("produce", "reported", "--key-separator", ":", "--compression", "lz4",
                          "--report", str(report), input=("\n".join(lines) + "\n").encode())
    assert produced.returncode == 0, produced.stderr
    acked = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(acked) == len(lines)
    assert [a["value"] for a in acked[:3]] == ["value-0", "value-1", "value-2"]  # input order

    stored = _read_all(cluster, "reported", "--from-beginning", expect=len(lines))
    for a in acked:
        record = stored[(a["partition"], a["offset"])]
        assert record["value"] == a["value"] and record["key"] == a["key"]
    assert acked[-2]["key"] is None and acked[-2]["value"] == "no-separator-line"
    assert json_to_bytes(acked[-1]["value"]) == "\xe9t\xe9".encode()
    # Same key, same partition (murmur2 as Kafka).
    partitions_of_k1 = {a["partition"] for a in acked if a["key"] == "k1"}
    assert len(partitions_of_k1) == 1


def test_consume_positions_and_binary(cluster):
    assert cluster.mq("topic", "create", "positions").returncode == 0
    payload = b"\xff\xfe binary"
    lines = b"a\nb\nc\n" + payload + b"\n"
    assert cluster.mq("produce", "positions", "--partition", "0", input=lines).returncode == 0

    records = _read_all(cluster, "positions", "--offset", "2", "--partition", "0", expect=2)
    assert sorted(records) == [(0, 2), (0, 3)]
    assert json_to_bytes(records[(0, 3)]["value"]) == payload
    assert isinstance(records[(0, 3)]["value"], dict)  # {"base64": ...}

    _read_all(cluster, "positions", "--from-time", "2000-01-01T00:00:00Z", expect=4)
    assert _read_all(cluster, "positions", "--from-time", "2999-01-01") == {}
    # Default start is the end: nothing old is printed.
    assert _read_all(cluster, "positions") == {}

    text = cluster.mq("consume", "positions", "--from-beginning", "--max-messages", "3", "--print-key")
    assert text.returncode == 0
    assert text.stdout == b"null\ta\nnull\tb\nnull\tc\n"


def test_broken_pipe_and_ctrl_c_exit_quietly(cluster):
    assert cluster.mq("topic", "create", "quiet").returncode == 0
    assert cluster.mq("produce", "quiet", input=b"".join(b"line-%d\n" % i for i in range(20000))).returncode == 0

    piped = cluster.shell("mq consume quiet --from-beginning | head -n 3")
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == b"line-0\nline-1\nline-2\n"

    proc = subprocess.Popen([*mq_command(), "consume", "quiet", "--from-beginning"], env=cluster.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"line-0\n"  # it is consuming: interrupt it now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert b"Traceback" not in err and b"Processed a total of" in err


def test_ctrl_c_while_produce_waits_for_input(cluster):
    """Interactive use: stdin stays open; Ctrl-C ends it at once, without a fatal error."""
    assert cluster.mq("topic", "create", "typed").returncode == 0
    proc = subprocess.Popen([*mq_command(), "produce", "typed", "--report", "/dev/stdout"], env=cluster.env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(b"first\n")
        proc.stdin.flush()
        assert b'"value": "first"' in proc.stdout.readline()  # acknowledged while stdin is open
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and b"Fatal" not in err
