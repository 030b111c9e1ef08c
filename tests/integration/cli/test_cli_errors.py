"""Every failure is one line: `error: <what was wrong> — <what to do>`, exit code ≠ 0."""

from __future__ import annotations

import socket
import subprocess
import time
from contextlib import contextmanager

from mq.cli.common import explain
from mq.core.errors import ErrorCode, MqError

from .helpers import base_env, free_listen, mq_command, run_mq


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
    line = _one_error_line(run_mq("consume", "orders", "--timeout-ms", "100", env=base_env(MQ_BOOTSTRAP=nowhere)))
    assert f"no broker at {nowhere}" in line and "did not answer" not in line


@contextmanager
def _silent_broker():
    """A port where the kernel completes the TCP handshake but nothing ever answers.

    That is what a SIGSTOPped (``mq broker pause``) broker looks like from outside:
    the listen backlog accepts connections, the process never reads them.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        host, port = sock.getsockname()
        yield f"{host}:{port}"


def test_silent_broker_is_not_answering_rather_than_absent():
    with _silent_broker() as silent:
        env = base_env(MQ_BOOTSTRAP=silent)
        commands = {
            "topic": (["topic", "list"], None),
            "produce": (["produce", "orders", "--delivery-timeout-ms", "1000"], b"x\n"),
            "consume": (["consume", "orders", "--timeout-ms", "100"], None),
        }
        started = time.monotonic()
        procs = {name: subprocess.Popen([*mq_command(), *args], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for name, (args, _) in commands.items()}  # in parallel: each waits out its probe
        for name, proc in procs.items():
            out, err = proc.communicate(input=commands[name][1], timeout=60)
            assert b"Traceback" not in err, err.decode(errors="replace")
            result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
            line = _one_error_line(result)
            assert f"broker at {silent} accepted the connection but did not answer within" in line, (name, line)
            assert "paused" in line and "mq status" in line and "mq broker resume ID" in line, line
            assert "no broker" not in line, line
        assert time.monotonic() - started < 30


def test_closed_connection_is_not_an_mq_broker():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        host, port = sock.getsockname()
        proc = subprocess.Popen([*mq_command(), "topic", "list", "--bootstrap", f"{host}:{port}"],
                                env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        sock.settimeout(0.2)
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                conn, _ = sock.accept()
                conn.close()  # hang up on every connection without a word
            except TimeoutError:
                continue
        out, err = proc.communicate(timeout=30)
    line = _one_error_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert "did not answer as an mq broker" in line and "no broker" not in line, line


def test_explain_tells_refused_from_timed_out():
    assert explain(ConnectionRefusedError(111, "Connection refused"), "h:1").what == "no broker at h:1"
    timed_out = explain(TimeoutError(), "h:1")
    assert "did not answer" in timed_out.what and "mq broker resume ID" in timed_out.todo
    for code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.DELIVERY_TIMEOUT):
        err = explain(MqError(code, "no response from h:1 within request_timeout_ms=100"), "h:1")
        assert code.name in err.what and "paused" in err.todo and "mq status" in err.todo
    lost = explain(MqError(ErrorCode.NETWORK_EXCEPTION, "connection reset"), "h:1")
    assert "mq status" in lost.todo and "mq broker restart ID" in lost.todo
    assert "did not answer" not in explain(ConnectionResetError(), "h:1").what


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
