"""`mq topic alter NAME --partitions N` (Kafka's `kafka-topics.sh --alter --partitions`) on
a three-broker region started by `mq up FILE`: the new partitions get leaders and a full
ISR on every broker, take records and serve them; shrinking is refused in words."""

from __future__ import annotations

import json

from .helpers import base_env, run_mq
from .test_cli_region import READY_S, _poll, _region_file


def test_alter_grows_a_topic_on_a_region_and_refuses_to_shrink(tmp_path):
    path, listens = _region_file(tmp_path)
    data_dir = str(tmp_path / "data")
    env = base_env(MQ_BOOTSTRAP=",".join(listens))
    up = run_mq("up", path, "--timeout", str(READY_S), env=env, timeout=READY_S + 30)
    try:
        assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
        created = run_mq("topic", "create", "orders", "--partitions", "2", "--replication-factor", "3", env=env)
        assert created.returncode == 0, created.stderr
        before = run_mq("produce", "orders", "--partition", "0", "--acks", "all", env=env, input=b"p0-old\n")
        assert before.returncode == 0, before.stderr

        check = run_mq("topic", "alter", "orders", "--partitions", "4", "--validate-only", env=env)
        assert check.returncode == 0 and b"would grow topic orders to 4 partitions" in check.stdout, check
        grown = run_mq("topic", "alter", "orders", "--partitions", "4", env=env)
        assert grown.returncode == 0 and b"grew topic orders to 4 partitions" in grown.stdout, grown

        def described():
            doc = json.loads(run_mq("topic", "describe", "orders", "--json", env=env).stdout)
            parts = doc["partitions"]
            return parts if len(parts) == 4 and all(len(p["isr"]) == 3 and p["leader"] > 0 for p in parts) else None

        parts = _poll("orders with 4 fully replicated partitions", described)
        assert [p["partition"] for p in parts] == [0, 1, 2, 3]
        assert all(sorted(p["replicas"]) == [1, 2, 3] for p in parts)

        for p in (2, 3):
            sent = run_mq("produce", "orders", "--partition", str(p), "--acks", "all", env=env,
                          input=f"p{p}-a\np{p}-b\n".encode())
            assert sent.returncode == 0, sent.stderr
        for p, expected in ((0, ["p0-old"]), (2, ["p2-a", "p2-b"]), (3, ["p3-a", "p3-b"])):
            got = run_mq("consume", "orders", "--partition", str(p), "--from-beginning", "--max-messages",
                         str(len(expected)), "--timeout-ms", "10000", env=env)
            assert got.returncode == 0 and got.stdout.decode().splitlines() == expected, got

        # Keyed records after the change spread over all four partitions (murmur2 % 4).
        keyed = b"".join(b"k%d\tv%d\n" % (i, i) for i in range(40))
        sent = run_mq("produce", "orders", "--key-separator", "\t", "--acks", "all", env=env, input=keyed)
        assert sent.returncode == 0, sent.stderr
        ends = {p["partition"]: p["log_end_offset"]
                for p in json.loads(run_mq("topic", "describe", "orders", "--json", env=env).stdout)["partitions"]}
        assert sum(ends.values()) == 1 + 4 + 40 and min(ends.values()) > 0, ends

        shrink = run_mq("topic", "alter", "orders", "--partitions", "3", env=env)
        err = shrink.stderr.decode()
        assert shrink.returncode == 2, (shrink.returncode, err)
        assert "topic orders has 4 partitions; the count can only grow (asked for 3)" in err, err
        assert "partitions can only be added" in err and "Traceback" not in err
        unknown = run_mq("topic", "alter", "nope", "--partitions", "3", env=env)
        assert unknown.returncode == 1 and b"nope" in unknown.stderr and b"Traceback" not in unknown.stderr
    finally:
        down = run_mq("down", "--data-dir", data_dir, env=env, timeout=60)
    assert down.returncode == 0, down.stderr
