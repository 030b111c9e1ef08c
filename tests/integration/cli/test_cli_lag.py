"""`mq lag`: the lag exporter `mq up` starts, and `mq lag export` in the foreground, as a user runs them.

What the exporter writes is checked three ways against what the group really did: the
status `mq lag status` prints, the samples on its /metrics, and the records of
``__lag_snapshots`` read back with `mq consume`.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from mq.client.blocking import Consumer
from mq.client.internals.lag_snapshot import decode
from mq.core.types import TopicPartition
from mq.deploy.process import is_alive

from .helpers import base_env, free_listen, free_port, run_mq

RECORDS = 300
CONSUMED = 100
DEADLINE_S = 30


def ok(result) -> str:
    assert result.returncode == 0, (result.stdout + result.stderr).decode(errors="replace")
    return result.stdout.decode()


def error_line(result) -> str:
    err = result.stderr.decode().strip().splitlines()
    assert result.returncode != 0 and len(err) == 1 and err[0].startswith("error: ") and " — " in err[0], \
        (result.stdout + result.stderr).decode(errors="replace")
    return err[0]


def wait_for(condition, what: str, timeout_s: float = DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def produce_and_consume_part(env: dict, topic: str, group: str) -> None:
    ok(run_mq("topic", "create", topic, "--partitions", "3", env=env))
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(RECORDS))
    ok(run_mq("produce", topic, "--key-separator", ":", env=env, input=lines))
    consumed = ok(run_mq("consume", topic, "--group", group, "--from-beginning", "--max-messages", str(CONSUMED),
                         env=env))
    assert len(consumed.splitlines()) == CONSUMED


def described(env: dict, group: str) -> dict[int, tuple]:
    """``{partition: (committed, log end, lag)}`` as `mq group describe` reports them."""
    doc = json.loads(ok(run_mq("group", "describe", group, "--json", env=env)))
    return {p["partition"]: (p["current_offset"], p["log_end_offset"], p["lag"]) for p in doc["partitions"]}


def snapshots(env: dict, topic: str) -> list:
    """Every snapshot written so far (the exporter keeps writing: read up to the ends seen now)."""
    with Consumer(env["MQ_BOOTSTRAP"]) as consumer:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for(topic)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records = []
        deadline = time.monotonic() + DEADLINE_S
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            records += [r for r in consumer.poll(timeout_ms=200) if r.offset < ends[TopicPartition(r.topic, r.partition)]]
    assert len(records) == sum(ends.values()), "could not read every snapshot"
    return [decode(r.value) for r in records]


def test_mq_up_starts_the_lag_exporter_and_mq_down_stops_it(tmp_path: Path):
    data_dir = tmp_path / ".mq"
    listen = free_listen()
    env = base_env(MQ_BOOTSTRAP=listen)
    up = run_mq("up", "--data-dir", str(data_dir), "--listen", listen, "--lag-interval", "300ms",
                "--config", "group.initial.rebalance.delay.ms=0", "--config", "offsets.topic.num.partitions=1", env=env)
    pid = None
    try:
        assert "lag exporter: pid" in ok(up)
        pid = json.loads((data_dir / "cluster.json").read_text())["processes"]["lag-exporter"]["pid"]
        produce_and_consume_part(env, "orders", "billing")

        status_path = data_dir / "lag-exporter" / "status.json"

        def exported():  # a round after the group committed, seen in the status file
            doc = json.loads(status_path.read_text()) if status_path.exists() else {}
            return doc if doc.get("regions", {}).get("local", {}).get("groups") else None

        doc = wait_for(exported, "a round with the group")
        table = ok(run_mq("lag", "status", "--data-dir", str(data_dir), env=env))
        assert f"lag exporter pid {pid}" in table and doc["metrics"] in table and "local" in table
        status = json.loads(run_mq("status", "--data-dir", str(data_dir), "--json", env=env).stdout)
        exporter = status["lag_exporter"]
        assert (exporter["pid"], exporter["alive"], exporter["metrics"]) == (pid, True, doc["metrics"])
        assert exporter["status"]["regions"]["local"]["rounds"] >= 1
        assert f"lag exporter: pid {pid}" in ok(run_mq("status", "--data-dir", str(data_dir), env=env))

        with urllib.request.urlopen(f"http://{doc['metrics']}/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = answer.read().decode()
        values = {(s.name, s.labels.get("partition")): s.value for f in text_string_to_metric_families(text)
                  for s in f.samples if s.labels.get("group") == "billing"}
        truth = described(env, "billing")  # nothing moves any more: the exporter must say the same
        assert sum(c for c, _, _ in truth.values()) == CONSUMED and sum(e for _, e, _ in truth.values()) == RECORDS
        for p, (committed, log_end, lag) in truth.items():
            assert values[("mq_consumergroup_current_offset", str(p))] == committed
            assert values[("mq_consumergroup_log_end_offset", str(p))] == log_end
            assert values[("mq_consumergroup_lag", str(p))] == lag
        assert values[("mq_consumergroup_members", None)] == 0  # the console consumer left

        rows = [s for s in snapshots(env, "__lag_snapshots") if s.group == "billing"]
        rounds: dict[int, dict] = {}
        for s in rows:
            rounds.setdefault(s.ts_ms, {})[s.partition] = (s.committed, s.log_end, s.lag)
        assert len(rows) == sum(len(r) for r in rounds.values())  # one snapshot per partition per round
        assert rounds[max(rounds)] == truth
        assert {s.region for s in rows} == {"local"} and {s.state for s in rows if s.ts_ms == max(rounds)} == {"Empty"}
    finally:
        down = run_mq("down", "--data-dir", str(data_dir), env=env)
    assert f"stopped lag-exporter (pid {pid})" in ok(down)
    assert pid is not None and not is_alive(pid)


def test_lag_export_in_the_foreground_and_its_bad_input(cluster):
    env = cluster.env
    produce_and_consume_part(env, "lagged", "lag-export-group")
    status = cluster.data_dir.parent / "export-status.json"
    ok(cluster.mq("lag", "export", "--topic", "lag-export-test", "--rounds", "2", "--interval", "200ms",
                  "--groups", "lag-export-.*", "--no-metrics", "--status-file", str(status)))
    rows = snapshots(env, "lag-export-test")
    truth = described(env, "lag-export-group")
    assert {s.group for s in rows} == {"lag-export-group"} and len(rows) == 2 * len(truth)  # 2 rounds
    for ts in {s.ts_ms for s in rows}:
        assert {s.partition: (s.committed, s.log_end, s.lag) for s in rows if s.ts_ms == ts} == truth
    written = json.loads(status.read_text())
    assert written["regions"][""]["rounds"] == 2 and written["metrics"] == ""
    assert "lag-export-test" in ok(cluster.mq("lag", "status", "--status-file", str(status)))

    nowhere = f"127.0.0.1:{free_port()}"
    assert "no broker at" in error_line(run_mq("lag", "export", "--bootstrap", nowhere, env=base_env()))
    assert "is not a duration" in error_line(cluster.mq("lag", "export", "--interval", "soon"))
    assert "a duration above zero" in error_line(cluster.mq("lag", "export", "--interval", "0s"))
    assert "is not a regular expression" in error_line(cluster.mq("lag", "export", "--groups", "("))
    assert "no lag exporter status" in error_line(cluster.mq("lag", "status", "--status-file",
                                                             str(cluster.data_dir / "nope.json")))


def test_analytics_lag_bad_input_is_refused_before_spark_starts(cluster, tmp_path: Path):
    env = cluster.env
    assert "no no-snapshots-here topic" in error_line(cluster.mq("analytics", "lag", "--topic", "no-snapshots-here"))
    assert "is not a duration" in error_line(cluster.mq("analytics", "lag", "--since", "a while"))
    assert "--load" in error_line(cluster.mq("analytics", "lag", "--load", str(tmp_path / "nothing")))
    assert "no such region" in error_line(run_mq("analytics", "lag", "--region", "mars", "--data-dir",
                                                 str(cluster.data_dir), env=base_env()))
    nowhere = f"127.0.0.1:{free_port()}"
    assert "no broker at" in error_line(run_mq("analytics", "lag", "--bootstrap", nowhere, env=env))
