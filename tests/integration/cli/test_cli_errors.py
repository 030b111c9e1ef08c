"""Every failure is one line: `error: <what was wrong> — <what to do>`, exit code ≠ 0."""

from __future__ import annotations

from .helpers import base_env, free_listen, run_mq


def _one_error_line(result) -> str:
    assert result.returncode != 0
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and " — " in lines[0], lines[0]
    return lines[0]


def test_no_broker():
    nowhere = free_listen()
    line = _one_error_line(run_mq("topic", "list", "--bootstrap", nowhere, env=base_env()))
    assert line == f"error: no broker at {nowhere} — start one with `mq up` or pass --bootstrap"
    line = _one_error_line(run_mq("produce", "orders", env=base_env(MQ_BOOTSTRAP=nowhere), input=b"x\n"))
    assert f"no broker at {nowhere}" in line


def test_unknown_topic(cluster):
    for args in (["consume", "no-such-topic", "--timeout-ms", "100"], ["topic", "describe", "no-such-topic"]):
        line = _one_error_line(cluster.mq(*args))
        assert "no-such-topic" in line and "mq topic list" in line and "mq topic create" in line
    result = cluster.mq("produce", "no-such-topic", input=b"x\n")
    line = _one_error_line(result)
    assert "does not exist" in line


def test_bad_config_and_usage(cluster):
    line = _one_error_line(cluster.mq("topic", "create", "bad-config", "--config", "retention.ms=soon"))
    assert "retention.ms" in line
    line = _one_error_line(cluster.mq("topic", "create", "bad-config", "--config", "no.such.key=1"))
    assert "no.such.key" in line
    result = cluster.mq("topic", "create", "bad-config", "--config", "missing-equals")
    assert result.returncode == 2
    assert "KEY=VALUE" in _one_error_line(result)
    assert b"bad-config" not in cluster.mq("topic", "list").stdout  # nothing was created

    assert cluster.mq("topic", "create", "twice").returncode == 0
    line = _one_error_line(cluster.mq("topic", "create", "twice"))
    assert "TOPIC_ALREADY_EXISTS" in line


def test_bad_iso_time_and_partition(cluster):
    result = cluster.mq("consume", "orders", "--from-time", "yesterday-ish")
    assert result.returncode == 2
    assert "ISO-8601" in _one_error_line(result)
    assert cluster.mq("topic", "create", "one-partition").returncode == 0
    line = _one_error_line(cluster.mq("consume", "one-partition", "--partition", "5", "--timeout-ms", "100"))
    assert "no partition 5" in line
    line = _one_error_line(cluster.mq("consume", "one-partition", "--from-beginning", "--offset", "3"))
    assert "not allowed with" in line


def test_missing_file():
    result = run_mq("dump-log", "/no/such/file.log", env=base_env())
    line = _one_error_line(result)
    assert "/no/such/file.log" in line
