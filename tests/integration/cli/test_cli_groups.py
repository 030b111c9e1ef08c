"""`mq group` and `mq records delete` as a user types them, against a broker from `mq up`.

The broker runs with group.initial.rebalance.delay.ms=0 (a lone console consumer joins
at once) and 3 offsets-topic partitions (quick to create on one broker).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from .helpers import LocalCluster, base_env, free_listen, mq_command, run_mq

GROUP = "analytics"
TOPIC = "clicks"
PER_PARTITION = 10
DEADLINE_S = 30


@pytest.fixture(scope="module")
def groups_cluster(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("mq-cli-groups")
    data_dir = root / ".mq"
    listen = free_listen()
    env = base_env(MQ_BOOTSTRAP=listen)
    up = run_mq("up", "--data-dir", str(data_dir), "--listen", listen,
                "--config", "group.initial.rebalance.delay.ms=0", "--config", "offsets.topic.num.partitions=3",
                env=env, timeout=60)
    assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
    try:
        yield LocalCluster(data_dir=data_dir, listen=listen, env=env)
    finally:
        down = run_mq("down", "--data-dir", str(data_dir), env=env, timeout=60)
        assert down.returncode == 0, (down.stdout + down.stderr).decode(errors="replace")


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.stdout + result.stderr).decode(errors="replace")
    return result.stdout.decode()


def fails(result: subprocess.CompletedProcess, *words: str) -> str:
    """A failure is one line on stderr, `error: what — what to do`, non-zero exit."""
    err = result.stderr.decode()
    assert result.returncode != 0, result.stdout.decode()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], err
    for word in words:
        assert word in lines[0], err
    return lines[0]


def describe(cluster: LocalCluster) -> dict:
    return json.loads(ok(cluster.mq("group", "describe", GROUP, "--json")))


def offsets(doc: dict) -> dict[int, int | None]:
    return {p["partition"]: p["current_offset"] for p in doc["partitions"] if p["topic"] == TOPIC}


def reset(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    return cluster.mq("group", "reset-offsets", GROUP, *args)


def plan_of(stdout: str) -> dict[int, int]:
    """PARTITION -> NEW-OFFSET from the dry-run table."""
    rows = [line.split() for line in stdout.splitlines() if line.strip().startswith(GROUP)]
    return {int(r[2]): int(r[4]) for r in rows}


def test_group_walkthrough(groups_cluster: LocalCluster):
    c = groups_cluster
    ok(c.mq("topic", "create", TOPIC, "--partitions", "3"))
    for p in range(3):
        lines = "".join(f"p{p}-{i}\n" for i in range(PER_PARTITION)).encode()
        ok(c.mq("produce", TOPIC, "--partition", str(p), input=lines))

    # Consume 10 records as the group; it commits on exit and leaves.
    consumed = c.mq("consume", TOPIC, "--group", GROUP, "--from-beginning", "--max-messages", "10",
                    "--timeout-ms", "20000", timeout=60)
    assert len(ok(consumed).splitlines()) == 10

    doc = describe(c)
    assert doc["state"] == "Empty" and doc["members"] == []
    assert sum(v or 0 for v in offsets(doc).values()) == 10
    lagging = [p for p in doc["partitions"] if p["lag"]]
    assert sum(p["lag"] for p in doc["partitions"] if p["lag"] is not None) == 20
    assert lagging and all(p["lag_seconds"] is not None and p["lag_seconds"] > 0 for p in lagging)
    assert all(p["log_end_offset"] == PER_PARTITION for p in doc["partitions"])
    table = ok(c.mq("group", "describe", GROUP))
    for column in ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG-SECONDS", "MEMBER", "CLIENT", "HOST", "state Empty"):
        assert column in table, table

    listed = json.loads(ok(c.mq("group", "list", "--json")))
    assert {"group_id": GROUP, "state": "Empty"}.items() <= next(g for g in listed if g["group_id"] == GROUP).items()

    # Dry run (the default) changes nothing.
    before = offsets(describe(c))
    dry = reset(c, "--topic", TOPIC, "--to-earliest")
    assert plan_of(ok(dry)) == {0: 0, 1: 0, 2: 0}
    assert "dry run" in dry.stderr.decode()
    assert offsets(describe(c)) == before

    # Other strategies, planned (the plan logic itself is unit-tested).
    assert plan_of(ok(reset(c, "--topic", f"{TOPIC}:1", "--to-offset", "99"))) == {1: PER_PARTITION}  # clamped
    assert plan_of(ok(reset(c, "--topic", TOPIC, "--by-duration", "1h"))) == {0: 0, 1: 0, 2: 0}
    assert plan_of(ok(reset(c, "--topic", TOPIC, "--to-datetime", "2100-01-01T00:00:00Z"))) == \
        {p: PER_PARTITION for p in range(3)}

    # Execute: offsets move; --export / --from-file round trip.
    ok(reset(c, "--topic", TOPIC, "--to-offset", "4", "--execute"))
    assert offsets(describe(c)) == {0: 4, 1: 4, 2: 4}
    exported = ok(reset(c, "--all-topics", "--shift-by", "2", "--export"))
    assert sorted(exported.splitlines()) == [f"{TOPIC},{p},6" for p in range(3)]
    csv = c.data_dir.parent / "offsets.csv"
    csv.write_text(exported)
    ok(reset(c, "--from-file", str(csv), "--execute"))
    doc = describe(c)
    assert offsets(doc) == {0: 6, 1: 6, 2: 6}
    assert sum(p["lag"] for p in doc["partitions"]) == 3 * (PER_PARTITION - 6)

    # The group resumes where the reset put it.
    resumed = c.mq("consume", TOPIC, "--group", GROUP, "--max-messages", "12", "--timeout-ms", "20000", timeout=60)
    assert sorted(ok(resumed).split()) == sorted(f"p{p}-{i}" for p in range(3) for i in range(6, PER_PARTITION))

    fails(c.mq("group", "describe", "no-such-group"), "no-such-group", "does not exist", "mq group list")
    fails(reset(c, "--topic", "nope", "--to-earliest"), "'nope' does not exist")


def test_reset_and_delete_are_refused_while_members_are_active(groups_cluster: LocalCluster):
    c = groups_cluster
    ok(c.mq("topic", "create", "views", "--partitions", "2"))
    ok(c.mq("produce", "views", input=b"a\nb\nc\n"))
    member = subprocess.Popen([*mq_command(), "consume", "views", "--group", "live"], env=c.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            described = c.mq("group", "describe", "live", "--json")
            doc = json.loads(described.stdout) if described.returncode == 0 else None
            if doc and doc["state"] == "Stable" and len(doc["members"]) == 1:
                break
            assert member.poll() is None, member.stderr.read().decode()
            assert time.monotonic() < deadline, f"the console consumer never joined: {doc}"
            time.sleep(0.2)
        assert [p["member_id"] for p in doc["partitions"]] == [doc["members"][0]["member_id"]] * 2
        members = ok(c.mq("group", "describe", "live", "--members"))
        assert "mq-console-consumer" in members and "views(0,1)" in members

        advice = "group live has 1 active member — stop them first (mq group describe live)"
        assert fails(c.mq("group", "reset-offsets", "live", "--topic", "views", "--to-earliest", "--execute"),
                     advice)
        dry = c.mq("group", "reset-offsets", "live", "--topic", "views", "--to-earliest")
        assert ok(dry) and "--execute is refused" in dry.stderr.decode()
        fails(c.mq("group", "delete", "live"), advice)
    finally:
        member.send_signal(signal.SIGTERM)
        member.wait(timeout=30)
    assert member.returncode == 0, member.stderr.read().decode()

    deadline = time.monotonic() + DEADLINE_S
    while json.loads(ok(c.mq("group", "describe", "live", "--json")))["state"] != "Empty":
        assert time.monotonic() < deadline, "the member never left"
        time.sleep(0.2)
    ok(c.mq("group", "reset-offsets", "live", "--topic", "views", "--to-earliest", "--execute"))
    assert "deleted group live" in ok(c.mq("group", "delete", "live"))
    assert "live" not in [g["group_id"] for g in json.loads(ok(c.mq("group", "list", "--json")))]
    fails(c.mq("group", "delete", "live"), "does not exist")


def test_records_delete(groups_cluster: LocalCluster):
    c = groups_cluster
    ok(c.mq("topic", "create", "old", "--partitions", "2"))
    ok(c.mq("produce", "old", "--partition", "0", input=b"".join(b"r%d\n" % i for i in range(5))))
    table = ok(c.mq("records", "delete", "old", "--partition", "0", "--before-offset", "3"))
    assert "LOG-START-OFFSET" in table and "3" in table
    parts = json.loads(ok(c.mq("topic", "describe", "old", "--json")))["partitions"]
    assert [(p["log_start_offset"], p["log_end_offset"]) for p in parts] == [(3, 5), (0, 0)]
    fails(c.mq("records", "delete", "old", "--partition", "0", "--before-offset", "99"), "past the end")
    fails(c.mq("records", "delete", "old", "--partition", "7", "--before-offset", "1"), "no partition 7")
    done = json.loads(ok(c.mq("records", "delete", "old", "--before-offset", "end", "--json")))
    assert done == [{"topic": "old", "partition": 0, "log_start_offset": 5},
                    {"topic": "old", "partition": 1, "log_start_offset": 0}]
