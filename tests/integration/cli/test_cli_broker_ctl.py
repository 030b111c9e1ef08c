"""`mq broker kill|pause|resume|restart ID` on a broker started by `mq up` (real processes)."""

from __future__ import annotations

import json

import pytest

from mq.deploy import Launcher
from mq.deploy.process import is_alive, is_paused

from .helpers import LocalCluster, base_env, free_listen, run_mq


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A broker of its own: these tests crash and freeze it, the session cluster must not."""
    data_dir = tmp_path_factory.mktemp("mq-ctl") / ".mq"
    listen = free_listen()
    env = base_env(MQ_BOOTSTRAP=listen)
    up = run_mq("up", "--data-dir", str(data_dir), "--listen", listen, env=env)
    assert up.returncode == 0, up.stderr
    try:
        yield LocalCluster(data_dir=data_dir, listen=listen, env=env)
    finally:
        down = run_mq("down", "--data-dir", str(data_dir), env=env)
        assert down.returncode == 0, down.stderr


def _ctl(c: LocalCluster, *args: str):
    return c.mq("broker", *args, "--data-dir", str(c.data_dir))


def _status(c: LocalCluster) -> dict:
    result = c.mq("status", "--data-dir", str(c.data_dir), "--json")
    return json.loads(result.stdout)["brokers"][0]


def _table_alive(c: LocalCluster) -> str:
    out = c.mq("status", "--data-dir", str(c.data_dir)).stdout.decode()
    [row] = [line for line in out.splitlines() if "broker-1" in line]
    return row.replace("│", " ").split()[2]


def _consume(c: LocalCluster, topic: str, n: int) -> list[str]:
    result = c.mq("consume", topic, "--from-beginning", "--max-messages", str(n), "--timeout-ms", "10000")
    assert result.returncode == 0, result.stderr
    return result.stdout.decode().splitlines()


def _one_line_error(result) -> str:
    assert result.returncode != 0
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("error: ") and " — " in line
    return line


def test_kill_then_restart_keeps_data(own_cluster):
    c = own_cluster
    assert c.mq("topic", "create", "survivors").returncode == 0
    assert c.mq("produce", "survivors", input=b"a\nb\nc\n").returncode == 0
    pid = _status(c)["pid"]

    killed = _ctl(c, "kill", "1")
    assert killed.returncode == 0 and f"killed broker-1 (pid {pid})" in killed.stdout.decode()
    assert not is_alive(pid)
    assert (c.data_dir / "broker-1" / "broker.pid").read_text().strip() == str(pid)  # stale, kept
    assert _status(c)["alive"] is False and _table_alive(c) == "no"
    line = _one_line_error(_ctl(c, "kill", "1"))
    assert "broker-1 is not running" in line and "mq broker restart 1" in line
    assert "is not running" in _one_line_error(_ctl(c, "pause", "1"))

    restarted = _ctl(c, "restart", "1")
    assert restarted.returncode == 0, restarted.stderr
    status = _status(c)
    assert status["answering"] and status["pid"] != pid
    assert f"new pid {status['pid']}" in restarted.stdout.decode()
    assert c.mq("produce", "survivors", input=b"d\n").returncode == 0
    assert _consume(c, "survivors", 4) == ["a", "b", "c", "d"]

    # Restart of a running broker: graceful stop, same arguments, data kept.
    again = _ctl(c, "restart", "1")
    assert again.returncode == 0 and f"stopped pid {status['pid']}" in again.stdout.decode()
    assert not is_alive(status["pid"])
    assert _consume(c, "survivors", 4) == ["a", "b", "c", "d"]


def test_pause_blocks_clients_until_resume(own_cluster):
    c = own_cluster
    assert c.mq("topic", "create", "frozen").returncode == 0
    paused = _ctl(c, "pause", "1")
    assert paused.returncode == 0, paused.stderr
    pid = _status(c)["pid"]
    assert is_paused(pid) and _status(c)["paused"] is True and _table_alive(c) == "paused"
    try:
        line = _one_line_error(_ctl(c, "pause", "1"))
        assert "broker-1 is already paused" in line and "mq broker resume 1" in line
        blocked = c.mq("produce", "frozen", "--delivery-timeout-ms", "1000", input=b"x\n", timeout=20)
        assert blocked.returncode != 0
    finally:
        resumed = _ctl(c, "resume", "1")
    assert resumed.returncode == 0 and f"resumed broker-1 (pid {pid})" in resumed.stdout.decode()
    assert not is_paused(pid) and _table_alive(c) == "yes"
    assert "broker-1 is not paused" in _one_line_error(_ctl(c, "resume", "1"))
    assert c.mq("produce", "frozen", input=b"y\n").returncode == 0
    assert _consume(c, "frozen", 1) == ["y"]


def test_restart_of_a_paused_broker(own_cluster):
    c = own_cluster
    launcher = Launcher(str(c.data_dir))  # the API mq.lab uses
    paused = launcher.pause(1)
    result = launcher.restart(1, stop_timeout_s=10)
    assert result.old_pid == paused.pid and result.pid != paused.pid and not is_alive(paused.pid)
    [status] = launcher.status()
    assert status.answering and not status.paused and status.pid == result.pid


def test_errors_are_one_line(own_cluster, tmp_path):
    c = own_cluster
    line = _one_line_error(_ctl(c, "kill", "7"))
    assert "no broker 7 in" in line and "cluster.json" in line and "see `mq status`" in line
    empty = c.mq("broker", "resume", "1", "--data-dir", str(tmp_path / "nothing"))
    assert "cluster.json not found" in _one_line_error(empty) and "mq up" in empty.stderr.decode()
    usage = c.mq("broker", "kill", "one")
    assert usage.returncode == 2 and "invalid int value" in _one_line_error(usage)
    assert c.mq("broker").returncode == 2


def test_foreground_form_still_parses():
    """`mq broker --node-id ...` (no verb) is `mq broker run ...`: same checks, same errors."""
    old = run_mq("broker", "--node-id", "x", env=base_env())
    new = run_mq("broker", "run", "--node-id", "x", env=base_env())
    assert old.returncode == new.returncode == 2 and old.stderr == new.stderr
