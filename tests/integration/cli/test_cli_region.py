"""The issue's walk-through on a three-broker region: `mq up FILE`, `mq status`,
`mq broker kill` of a partition leader, fail-over seen in `mq status`, `mq down`.

Needs the multi-broker runtime (Raft metadata quorum, replication): every broker is a
controller voter, so `mq up` only returns once a controller is elected and all three
brokers are registered and unfenced.
"""

from __future__ import annotations

import json
import time

from mq.deploy.process import is_alive

from .helpers import base_env, free_listen, run_mq

READY_S = 60


def _region_file(tmp_path) -> tuple[str, list[str]]:
    listens: list[str] = []
    while len(listens) < 3:  # three distinct free ports (and their metrics ports)
        candidate = free_listen()
        if candidate not in listens:
            listens.append(candidate)
    brokers = "\n".join(f"  - {{id: {i}, listen: {listen}}}" for i, listen in enumerate(listens, start=1))
    path = tmp_path / "region.yaml"
    path.write_text(f"region: test\ndata_dir: {tmp_path / 'data'}\n"
                    "configs: {replica.lag.time.max.ms: 5000}\n"
                    f"brokers:\n{brokers}\n")
    return str(path), listens


def _status(env: dict, data_dir: str) -> dict:
    result = run_mq("status", "--data-dir", data_dir, "--json", env=env)
    return json.loads(result.stdout)


def _poll(what: str, check, timeout_s: float = 30.0):
    """Call ``check()`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")


def test_region_up_status_kill_failover_down(tmp_path):
    path, listens = _region_file(tmp_path)
    data_dir = str(tmp_path / "data")
    bootstrap = ",".join(listens)
    env = base_env(MQ_BOOTSTRAP=bootstrap)

    up = run_mq("up", path, "--timeout", str(READY_S), env=env, timeout=READY_S + 30)
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        out = up.stdout.decode()
        assert "mq is up: region test, 3 brokers" in out and f"bootstrap: {bootstrap}" in out
        assert all(listen in out for listen in listens) and "controller: broker " in out

        doc = _status(env, data_dir)
        assert doc["running"] and doc["region"] == "test" and doc["voters"] == [1, 2, 3]
        assert doc["controller"] is not None and doc["controller"]["id"] in (1, 2, 3)
        assert [(b["node_id"], b["state"], b["registered"], b["fenced"]) for b in doc["brokers"]] == [
            (1, "alive", True, False), (2, "alive", True, False), (3, "alive", True, False)]
        cmdline = json.loads((tmp_path / "data" / "cluster.json").read_text())["processes"]["test/broker-2"]["command"]
        assert f"controller.quorum.voters=1@{listens[0]},2@{listens[1]},3@{listens[2]}" in cmdline

        created = run_mq("topic", "create", "payments", "--partitions", "3", "--replication-factor", "3",
                         "--config", "min.insync.replicas=2", env=env)
        assert created.returncode == 0, created.stderr
        lines = b"".join(b"payment-%d\n" % i for i in range(300))
        produced = run_mq("produce", "payments", "--partition", "0", "--acks", "all", env=env, input=lines)
        assert produced.returncode == 0, produced.stderr

        def full_isr():
            parts = _status(env, data_dir)["partitions"]
            ok = len(parts) == 3 and all(len(p["isr"]) == 3 and not p["under_replicated"] for p in parts)
            return parts if ok and parts[0]["high_watermark"] == 300 else None

        parts = _poll("3 partitions fully replicated, HW 300 on payments-0", full_isr)
        assert {p["leader"] for p in parts} == {1, 2, 3}  # leaders spread over the brokers
        table = run_mq("status", "--data-dir", data_dir, env=env)
        assert table.returncode == 0, table.stderr
        text = table.stdout.decode()
        assert "active controller: broker " in text and "payments" in text and "HIGH-WATERMARK" in text

        leader = parts[0]["leader"]
        old_epoch = parts[0]["leader_epoch"]
        killed = run_mq("broker", "kill", str(leader), "--data-dir", data_dir, env=env)
        assert killed.returncode == 0 and f"killed broker-{leader}" in killed.stdout.decode()

        def failed_over():
            doc = _status(env, data_dir)
            p0 = doc["partitions"][0] if doc["partitions"] else None
            dead = next(b for b in doc["brokers"] if b["node_id"] == leader)
            if p0 and p0["leader"] not in (leader, -1) and p0["leader_epoch"] > old_epoch \
                    and leader not in p0["isr"] and dead["state"] == "down" and dead["fenced"] in (True, None):
                return doc
            return None

        doc = _poll(f"a new leader for payments-0 after killing broker {leader}", failed_over)
        assert doc["running"] and doc["controller"] is not None
        assert doc["partitions"][0]["under_replicated"] and doc["partitions"][0]["high_watermark"] == 300
        table = run_mq("status", "--data-dir", data_dir, env=env)
        assert table.returncode == 0 and b"no" in table.stdout

        more = run_mq("produce", "payments", "--partition", "0", "--acks", "all", env=env,
                      input=b"after-kill\n")
        assert more.returncode == 0, more.stderr  # ISR of 2 >= min.insync.replicas
        consumed = run_mq("consume", "payments", "--partition", "0", "--from-beginning", "--max-messages", "301",
                          "--timeout-ms", "10000", env=env)
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.decode().splitlines() == [f"payment-{i}" for i in range(300)] + ["after-kill"]

        restarted = run_mq("broker", "restart", str(leader), "--data-dir", data_dir, env=env, timeout=90)
        assert restarted.returncode == 0, restarted.stderr
        _poll("the restarted broker back in every ISR",
              lambda: all(len(p["isr"]) == 3 for p in _status(env, data_dir)["partitions"]))
        pids = [b["pid"] for b in _status(env, data_dir)["brokers"]]
    finally:
        down = run_mq("down", "--data-dir", data_dir, env=env, timeout=60)
    assert down.returncode == 0, down.stderr
    text = down.stdout.decode()
    assert all(f"stopped broker-{i}" in text for i in (1, 2, 3)), text  # controlled shutdown, no SIGKILL
    assert not any(is_alive(pid) for pid in pids)
    assert not (tmp_path / "data" / "cluster.json").exists()
