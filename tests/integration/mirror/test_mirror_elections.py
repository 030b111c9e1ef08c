"""Leader elections on both sides while the mirror copies: two three-broker regions from
`mq up`, a writer in east all along, the leader of a partition killed in east and then in
west (and restarted); the mirror rides both elections: at the end west holds exactly
east's records, at the same offsets."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path

import pytest

from mq.client import blocking
from mq.core.errors import MqError
from mq.core.types import TopicPartition
from tests.integration.cli.helpers import base_env, free_listen, run_mq
from tests.integration.cli.test_cli_geo import free_block
from tests.integration.mirror.harness import high_watermarks, raw_batches, wait_for

READY_S = 90
TPS = [TopicPartition("orders", p) for p in range(3)]


def leader_of(region: str, env: dict, cwd: Path, partition: int) -> int:
    out = run_mq("topic", "describe", "orders", "--region", region, "--json", env=env, cwd=cwd).stdout
    return next(p["leader"] for p in json.loads(out)["partitions"] if p["partition"] == partition)


@pytest.mark.slow
def test_the_mirror_survives_leader_elections_in_both_regions(tmp_path: Path) -> None:
    listens = [free_listen() for _ in range(6)]
    base = free_block(9)
    brokers = lambda ls: ", ".join(f"{{id: {i + 1}, listen: '{a}'}}" for i, a in enumerate(ls))
    (tmp_path / "geo.yaml").write_text(textwrap.dedent(f"""\
        data_dir: .mq
        link_port_base: {base}
        configs: {{replica.lag.time.max.ms: 5000}}
        regions:
          - name: east
            brokers: [{brokers(listens[:3])}]
          - name: west
            brokers: [{brokers(listens[3:])}]
        links:
          - {{source: east, target: west, latency_ms: 10}}
        mirrors:
          - {{name: east-to-west, source: east, target: west, refresh.topics.interval.ms: 500}}
        """))
    east, west = ",".join(listens[:3]), ",".join(listens[3:])
    env = base_env()
    up = run_mq("up", "geo.yaml", "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        assert run_mq("topic", "create", "orders", "--region", "east", "--partitions", "3", "--replication-factor",
                      "3", "--config", "min.insync.replicas=2", env=env, cwd=tmp_path).returncode == 0
        stop, written = threading.Event(), []

        def writer() -> None:  # writes until both elections are over: they happen mid-flow
            with blocking.Producer(east, acks="all", delivery_timeout_ms=60_000) as producer:
                while not stop.is_set():
                    producer.send_many("orders", [(None, b"%06d" % (len(written) + j)) for j in range(500)])
                    written.append(500)
                    stop.wait(0.05)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        wait_for(lambda: sum(high_watermarks(west, TPS).values()) > 3000 if _exists(west) else False,
                 30, "the mirror copying")
        for region in ("east", "west"):
            node = leader_of(region, env, tmp_path, 0)
            assert run_mq("broker", "kill", str(node), "--region", region, env=env, cwd=tmp_path).returncode == 0
            wait_for(lambda region=region, node=node: leader_of(region, env, tmp_path, 0) not in (node, -1, None),
                     30, f"a new leader in {region}")
            restart = run_mq("broker", "restart", str(node), "--region", region, env=env, cwd=tmp_path, timeout=90)
            assert restart.returncode == 0, restart.stderr
        assert thread.is_alive(), "the writer stopped before the elections were over"
        stop.set()
        thread.join(90)
        wait_for(lambda: _caught_up(east, west), 60, "west to catch up")
        assert sum(high_watermarks(west, TPS).values()) == sum(written) > 3000
        for tp in TPS:
            assert raw_batches(west, tp) == raw_batches(east, tp)
        status = json.loads(run_mq("mirror", "status", "--json", "--flow", "east-to-west", env=env,
                                   cwd=tmp_path).stdout)
        assert status["state"] == "running" and status["totals"]["blocked"] == 0
    finally:
        down = run_mq("down", env=env, cwd=tmp_path, timeout=90)
        assert down.returncode == 0, down.stderr


def _caught_up(east: str, west: str) -> bool:
    """Equal ends; a broker just restarted may not know the topic yet (UNKNOWN_TOPIC): not yet."""
    try:
        return high_watermarks(east, TPS) == high_watermarks(west, TPS)
    except MqError:
        return False


def _exists(bootstrap: str) -> bool:
    try:
        high_watermarks(bootstrap, TPS)
        return True
    except Exception:  # noqa: BLE001 - the mirror has not created the topic yet
        return False
