"""`mq up` / `mq status` / `mq down` with their own data dir and port."""

from __future__ import annotations

import json
import os
import signal
import socket

from mq.deploy.process import is_alive, wait_for_exit

from .helpers import base_env, free_listen, run_mq


def test_up_status_kill_up_down(tmp_path):
    """The whole life of a local broker, including one killed behind mq's back."""
    data_dir = tmp_path / "data"
    listen = free_listen()
    env = base_env(MQ_BOOTSTRAP=listen)
    args = ("--data-dir", str(data_dir))

    nothing = run_mq("status", *args, env=env)
    assert nothing.returncode == 1 and nothing.stderr.startswith(b"error: no broker runs under")

    up = run_mq("up", *args, "--listen", listen, env=env)
    pid = None
    try:
        assert up.returncode == 0, up.stderr
        out = up.stdout.decode()
        assert "mq is up" in out and listen in out and "/metrics" in out and "mq topic create" in out
        state = json.loads((data_dir / "cluster.json").read_text())
        pid = state["processes"]["local/broker-1"]["pid"]
        assert (data_dir / "broker-1" / "broker.pid").read_text().strip() == str(pid)
        assert (data_dir / "broker-1" / "broker.log").exists()
        assert is_alive(pid)

        again = run_mq("up", *args, "--listen", listen, env=env)
        assert again.returncode == 0 and b"already up" in again.stdout
        assert json.loads((data_dir / "cluster.json").read_text())["processes"]["local/broker-1"]["pid"] == pid

        assert run_mq("topic", "create", "t1", "--partitions", "2", env=env).returncode == 0
        status = run_mq("status", *args, "--json", env=env)
        assert status.returncode == 0, status.stderr
        doc = json.loads(status.stdout)
        assert doc["running"] is True
        [broker] = doc["brokers"]
        assert broker["pid"] == pid and broker["alive"] and broker["answering"]
        assert broker["endpoint"] == listen and broker["topics"] == 1 and broker["partitions"] == 2
        assert isinstance(broker["log_bytes"], int)
        table = run_mq("status", *args, env=env)
        assert table.returncode == 0 and listen.encode() in table.stdout

        # Killed behind mq's back: status says so (exit 1); up starts it again on the same data.
        os.kill(pid, signal.SIGKILL)
        assert wait_for_exit(pid, 10)
        dead = run_mq("status", *args, env=env)
        assert dead.returncode == 1 and b"no broker is running" in dead.stderr
        assert json.loads(run_mq("status", *args, "--json", env=env).stdout)["running"] is False
        restarted = run_mq("up", *args, "--listen", listen, env=env)
        assert restarted.returncode == 0 and b"mq is up" in restarted.stdout, restarted.stderr
        pid = json.loads((data_dir / "cluster.json").read_text())["processes"]["local/broker-1"]["pid"]
        assert b"t1" in run_mq("topic", "list", env=env).stdout
        lines = b"".join(b"record-%d-%s\n" % (i, b"x" * 40) for i in range(3000))
        assert run_mq("produce", "t1", "--partition", "0", env=env, input=lines).returncode == 0
    finally:
        down = run_mq("down", *args, env=env)
    assert down.returncode == 0, down.stderr
    assert b"stopped broker-1" in down.stdout
    assert pid is not None and not is_alive(pid)
    assert not (data_dir / "cluster.json").exists()
    assert (data_dir / "broker-1" / "t1-0").is_dir()  # data is kept

    # After a graceful stop the indexes are on disk: dump-log shows their entries.
    segment = data_dir / "broker-1" / "t1-0" / "00000000000000000000"
    for suffix, word in ((".log", "batch: "), (".index", "offset: "), (".timeindex", "timestamp: ")):
        dumped = run_mq("dump-log", f"{segment}{suffix}", env=env)
        assert dumped.returncode == 0, dumped.stderr
        assert dumped.stdout.decode().count(word) >= 1, (suffix, dumped.stdout[:500])
    assert b"crc_ok: true" in run_mq("dump-log", f"{segment}.log", env=env).stdout

    assert run_mq("status", *args, env=env).returncode == 1
    assert run_mq("down", *args, env=env).returncode == 0  # idempotent


def test_up_reports_a_port_in_use(tmp_path):
    """A port already taken: a clear error at once, not a hang or a half-started broker."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = f"127.0.0.1:{blocker.getsockname()[1]}"
        result = run_mq("up", "--data-dir", str(tmp_path / "d"), "--listen", taken, env=base_env())
    assert result.returncode == 1
    first = result.stderr.decode().splitlines()[0]
    assert first.startswith(f"error: {taken}") and "already in use" in first
    assert not os.path.exists(tmp_path / "d" / "cluster.json")


def test_up_shows_the_log_when_the_broker_cannot_start(tmp_path):
    """The broker exits at once (its data dir is a file): error line plus the log's tail."""
    data_dir = tmp_path / "d"
    (data_dir).mkdir()
    (data_dir / "broker-1").mkdir()
    (data_dir / "broker-1" / "__cluster_metadata-0").write_text("not a directory")
    result = run_mq("up", "--data-dir", str(data_dir), "--listen", free_listen(), env=base_env(),
                    timeout=60)
    assert result.returncode == 1
    err = result.stderr.decode()
    assert err.startswith("error: broker-1 exited with code") and "broker log (last lines):" in err
    assert not (data_dir / "cluster.json").exists()


def test_up_refuses_a_bad_region_file(tmp_path):
    """A mistake in the region file: one line naming the file and the key, nothing started."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("region: local\nbrokers:\n  - {id: 1, listen: 127.0.0.1:9092}\n  - {id: 2, listen: 127.0.0.1}\n")
    result = run_mq("up", str(bad), "--data-dir", str(tmp_path / "d"), env=base_env(), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        "error: bad.yaml: brokers[1].listen: '127.0.0.1' is not HOST:PORT — write it as 127.0.0.1:9093"]
    assert not (tmp_path / "d").exists()

    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("region: local\nlinks: []\nbrokers: [{id: 1, listen: '127.0.0.1:9092'}]\n")
    result = run_mq("up", str(mixed), env=base_env(), cwd=tmp_path)
    assert result.returncode == 2 and b"'links': only in a file with several regions" in result.stderr

    both = run_mq("up", str(bad), "--single", env=base_env(), cwd=tmp_path)
    assert both.returncode == 2 and b"exclude each other" in both.stderr
    missing = run_mq("up", "nope.yaml", env=base_env(), cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith(b"error: nope.yaml: no such file")


def test_up_a_one_broker_region_file(tmp_path):
    """`mq up FILE`: the region path end to end (one voter, so it runs on any runtime)."""
    listen = free_listen()
    path = tmp_path / "one.yaml"
    path.write_text(f"region: solo\ndata_dir: here\nconfigs: {{log.segment.bytes: 1048576}}\n"
                    f"brokers:\n  - id: 1\n    listen: {listen}\n")
    env = base_env(MQ_BOOTSTRAP=listen)
    up = run_mq("up", str(path), env=env, cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        out = up.stdout.decode()
        assert "mq is up: broker-1 pid" in out and f"bootstrap: {listen}" in out
        assert "mq status --data-dir here" in out  # not the default .mq: say where it is
        state = json.loads((tmp_path / "here" / "cluster.json").read_text())
        assert [(r["name"], r["voters"]) for r in state["regions"]] == [("solo", [1])]
        command = state["processes"]["solo/broker-1"]["command"]
        assert f"controller.quorum.voters=1@{listen}" in command and "log.segment.bytes=1048576" in command
        assert run_mq("topic", "create", "t", "--partitions", "2", env=env).returncode == 0
        assert run_mq("produce", "t", "--partition", "1", env=env, input=b"a\nb\n").returncode == 0
        status = run_mq("status", "--json", env=env, cwd=tmp_path / "here" / "..", timeout=30)
        assert status.returncode == 1  # the default data dir (.mq) holds nothing
        doc = json.loads(run_mq("status", "--data-dir", "here", "--json", env=env, cwd=tmp_path).stdout)
        assert doc["region"] == "solo" and doc["controller"]["id"] == 1
        [broker] = doc["brokers"]
        assert broker["state"] == "alive" and broker["registered"] is True and broker["fenced"] is False
        assert [(p["topic"], p["partition"], p["leader"], p["isr"], p["high_watermark"], p["under_replicated"])
                for p in doc["partitions"]] == [("t", 0, 1, [1], 0, False), ("t", 1, 1, [1], 2, False)]
        table = run_mq("status", "--data-dir", "here", env=env, cwd=tmp_path).stdout.decode()
        assert "active controller: broker 1" in table and "HIGH-WATERMARK" in table
    finally:
        down = run_mq("down", "--data-dir", "here", env=env, cwd=tmp_path)
    assert down.returncode == 0 and b"stopped broker-1" in down.stdout, down.stderr
