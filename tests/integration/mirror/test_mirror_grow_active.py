"""Active-active: `mq topic alter orders --region east --partitions 4` while the flow runs
grows west's remote topic `east.orders` to 4 partitions and the new partitions are copied
(through the real `mq` command: `mq up` of two one-broker regions)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.integration.cli.helpers import base_env, free_listens, run_mq
from tests.integration.cli.test_cli_geo import free_block
from tests.integration.mirror.harness import wait_for
from tests.integration.mirror.test_mirror_active_active import READY_S, consume, shell


def test_growing_a_source_topic_grows_its_remote_topic_and_copies_the_new_partitions(tmp_path: Path) -> None:
    east, west = free_listens(2)
    (tmp_path / "aa.yaml").write_text(textwrap.dedent(f"""\
        data_dir: .mq
        link_port_base: {free_block(5)}
        regions:
          - {{name: east, brokers: [{{id: 1, listen: '{east}'}}]}}
          - {{name: west, brokers: [{{id: 1, listen: '{west}'}}]}}
        links:
          - {{source: east, target: west, latency_ms: 5}}
        mirrors:
          - {{name: east-to-west, source: east, target: west, mode: active-active, refresh.topics.interval.ms: 300}}
        """))
    env = base_env()
    up = run_mq("up", "aa.yaml", "--timeout", str(READY_S), env=env, cwd=tmp_path, timeout=READY_S + 30)
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        created = run_mq("topic", "create", "orders", "--region", "east", "--partitions", "2", env=env, cwd=tmp_path)
        assert created.returncode == 0, created.stderr
        assert shell("seq 1 100 | mq produce orders --region east --acks all", env, tmp_path).returncode == 0
        wait_for(lambda: len(consume("east.orders --region west", env, tmp_path)) == 100, 30, "the first 100 copied")

        grown = run_mq("topic", "alter", "orders", "--region", "east", "--partitions", "4", env=env, cwd=tmp_path)
        assert grown.returncode == 0, grown.stderr
        for p in (2, 3):
            script = f"seq {p}01 {p}50 | mq produce orders --region east --partition {p} --acks all"
            assert shell(script, env, tmp_path).returncode == 0

        def remote_partitions() -> int:
            out = run_mq("topic", "describe", "east.orders", "--region", "west", "--json", env=env, cwd=tmp_path)
            return len(json.loads(out.stdout)["partitions"]) if out.returncode == 0 else 0

        wait_for(lambda: remote_partitions() == 4, 15, "east.orders in west grown to 4 partitions")
        records = wait_for(lambda: (got := consume("east.orders --region west", env, tmp_path)) and len(got) >= 200
                           and got, 30, "all 200 records in east.orders")
        by_partition = {p: sorted(int(r["value"]) for r in records if r["partition"] == p) for p in (2, 3)}
        assert by_partition == {2: list(range(201, 251)), 3: list(range(301, 351))}
        assert len(records) == 200
    finally:
        down = run_mq("down", env=env, cwd=tmp_path, timeout=60)
        assert down.returncode == 0, down.stderr
