"""TESTING.md R17 as the issue's walk-through, in real processes from a scratch dir:

    seq 1 N | mq produce payments --acks all --report acked.jsonl &
    mq broker kill <leader> ; mq broker restart <leader> ; ... (3 times)

on a three-broker region started with `mq up`. The producer is idempotent by default
(acks=all). What it acknowledged (the report) and what `mq consume` reads back go
through the chaos suite's history checker: 0 lost, 0 duplicates, 0 reorders, 0 skips.
N is 20,000 in CI and 200,000 nightly (`-m nightly`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.chaos.harness import check
from tests.chaos.harness.history import Op

from .helpers import base_env, mq_command, run_mq
from .test_cli_region import READY_S, _poll, _region_file, _status

KILLS = 3
REQUEST_TIMEOUT_MS = 500
PAUSE_S = 1.5  # > REQUEST_TIMEOUT_MS, < replica.lag.time.max.ms (5 s): the ISR keeps the follower


def _leader(env: dict, data_dir: str) -> int | None:
    parts = _status(env, data_dir)["partitions"]
    leader = parts[0]["leader"] if parts else -1
    return leader if leader and leader > 0 else None


def _burst(stdin, first: int, last: int) -> None:
    stdin.write("".join(f"{i}\n" for i in range(first, last + 1)).encode())
    stdin.flush()


def _walkthrough(tmp_path, total: int) -> None:
    path, listens = _region_file(tmp_path)
    data_dir = str(tmp_path / "data")
    env = base_env(MQ_BOOTSTRAP=",".join(listens))
    up = run_mq("up", path, "--timeout", str(READY_S), env=env, timeout=READY_S + 30)
    ops: list[Op] = []
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        created = run_mq("topic", "create", "payments", "--partitions", "1", "--replication-factor", "3",
                         "--config", "min.insync.replicas=2", env=env)
        assert created.returncode == 0, created.stderr
        _poll("payments-0 led and fully replicated", lambda: (p := _status(env, data_dir)["partitions"])
              and len(p[0]["isr"]) == 3 and _leader(env, data_dir))
        report = tmp_path / "acked.jsonl"
        stderr_path = tmp_path / "produce.stderr"
        producer = subprocess.Popen(
            [*mq_command(), "produce", "payments", "--acks", "all", "--report", str(report),
             "--delivery-timeout-ms", "120000", "--producer-property", f"request.timeout.ms={REQUEST_TIMEOUT_MS}"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr_path.open("wb"), env=env, cwd=tmp_path)
        # Input comes in KILLS + 1 bursts (a fast `seq` pipe); each of the first KILLS
        # bursts meets lost answers (a paused follower holds the high watermark) and then a
        # SIGKILL of the partition leader; `mq broker restart` brings it back.
        started = time.monotonic()
        per = total // (KILLS + 1)
        for k in range(KILLS + 1):
            first, last = k * per + 1, total if k == KILLS else (k + 1) * per
            if k == KILLS:
                _burst(producer.stdin, first, last)
                break
            leader = _poll("a leader for payments-0", lambda: _leader(env, data_dir))
            at = int((time.monotonic() - started) * 1000)
            ops.append(Op("invoke", "nemesis", f"kill n{leader}", time_ms=at, process="nemesis"))
            pids = {b["node_id"]: b["pid"] for b in _status(env, data_dir)["brokers"]}
            follower = next(n for n in sorted(pids) if n != leader)
            # A follower pauses: the high watermark stops, acks=all answers wait past the
            # producer's request timeout and it resends batches the leader already holds
            # (a plain producer duplicates them here) ...
            os.kill(pids[follower], signal.SIGSTOP)
            try:
                _burst(producer.stdin, first, last)
                time.sleep(PAUSE_S)
            finally:
                os.kill(pids[follower], signal.SIGCONT)
            # ... then the leader dies with those resends in flight.
            killed = run_mq("broker", "kill", str(leader), "--data-dir", data_dir, env=env)
            assert killed.returncode == 0, killed.stderr
            restarted = run_mq("broker", "restart", str(leader), "--data-dir", data_dir, env=env, timeout=90)
            assert restarted.returncode == 0, restarted.stderr
            _poll("payments-0 back to a full ISR", lambda: len(_status(env, data_dir)["partitions"][0]["isr"]) == 3)
            ops.append(Op("ok", "nemesis", f"kill n{leader}",
                          time_ms=int((time.monotonic() - started) * 1000), process="nemesis"))
        producer.stdin.close()
        producer.wait(timeout=180)
        assert producer.returncode == 0, stderr_path.read_text(errors="replace")
        acked = [json.loads(line) for line in report.read_text().splitlines()]
        consumed = run_mq("consume", "payments", "--from-beginning", "--max-messages", str(total + 1),
                          "--timeout-ms", "5000", "--format", "json", env=env, timeout=180)
        assert consumed.returncode == 0, consumed.stderr
        reads = [json.loads(line) for line in consumed.stdout.decode().splitlines()]
    finally:
        down = run_mq("down", "--data-dir", data_dir, env=env, timeout=60)
        assert down.returncode == 0, down.stderr
    for i in range(1, total + 1):
        ops.append(Op("invoke", "send", str(i), partition=0, process=i))
    for a in acked:
        ops.append(Op("ok", "send", a["value"], partition=a["partition"], offset=a["offset"], process=int(a["value"])))
    for r in reads:
        ops.append(Op("ok", "read", r["value"], partition=r["partition"], offset=r["offset"], process="reader"))
    result = check(ops)
    print(f"R17 walk-through: {result.summary()}")
    assert result.acked == total, result.summary()  # every line acknowledged, none failed
    assert len(reads) == total, f"read {len(reads)} records for {total} lines"
    result.assert_ok()  # 0 lost, 0 duplicates, 0 reorders, 0 skips, 0 unexpected


def test_r17_broker_kills_under_acks_all_lose_and_duplicate_nothing(tmp_path):
    _walkthrough(tmp_path, 20_000)


@pytest.mark.nightly
@pytest.mark.timeout(1200)
def test_r17_walkthrough_200k(tmp_path):
    _walkthrough(tmp_path, 200_000)
