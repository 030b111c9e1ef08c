"""Share groups as a user runs them: `mq up` (a three-broker region), four
`mq consume --share-group` processes on ONE partition, one stuck while it holds
record locks (its stdout is a pipe nobody reads: it blocks in the middle of a batch,
as a slow worker would) and then SIGKILLed; every record ends accepted (at least once) or in the
dead-letter topic, checked by an independent reader (a plain `mq consume` of the
dead-letter topic, and `mq share-group describe`)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path

import jsonschema

from mq.cli import schemas
from mq.cli import share_group as share_group_cli
from mq.client.share_admin import ShareGroupAdmin
from mq.core.errors import MqError

from .helpers import base_env, free_listen, mq_command, run_mq

GROUP = "workers"
TOPIC = "jobs"
RECORDS = 3000
BAD_EVERY = 100  # every 100th job is "bad-…": rejected, to the dead-letter topic
LOCK_MS = 15000  # long enough for a loaded machine to start four processes before it runs out


def _region(tmp_path: Path) -> tuple[str, str]:
    listens: list[str] = []
    while len(listens) < 3:
        candidate = free_listen()
        if candidate not in listens:
            listens.append(candidate)
    brokers = "\n".join(f"  - {{id: {i}, listen: {listen}}}" for i, listen in enumerate(listens, start=1))
    configs = {"share.record.lock.duration.ms": LOCK_MS, "share.session.timeout.ms": 40000,
               "share.heartbeat.interval.ms": 500, "share.delivery.attempt.limit": 3,
               "share.coordinator.state.topic.num.partitions": 3, "offsets.topic.num.partitions": 3,
               "replica.lag.time.max.ms": 5000}
    path = tmp_path / "region.yaml"
    path.write_text(f"region: test\ndata_dir: {tmp_path / 'data'}\nconfigs: {json.dumps(configs)}\n"
                    f"brokers:\n{brokers}\n")
    return str(path), ",".join(listens)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.stdout + result.stderr).decode(errors="replace")
    return result.stdout.decode()


def _until(what: str, check, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")


def _values(path: Path) -> list[str]:
    return [json.loads(line)["value"] for line in path.read_text().splitlines() if line.strip()]


def _describe_doc(bootstrap: str) -> dict:
    async def fetch() -> dict:
        async with ShareGroupAdmin(bootstrap) as admin:
            try:
                g = await admin.describe_group(GROUP)
            except MqError:
                return {}
            return share_group_cli.describe_doc(g, admin.coordinator_id)
    return asyncio.run(fetch())


def _coordinator_failover(env: dict, tmp_path: Path, describe, consumer) -> float:
    """Two consumers work while the share coordinator's broker is SIGKILLed: the new
    coordinator rebuilds the group from ``__share_group_state`` and every record still
    ends accepted; none accepted before the kill is handed out again, so a record is
    printed twice only if it was held (at most a batch per consumer) when the broker died."""
    first = [f"p2-{i}" for i in range(1000)]
    second = [f"p3-{i}" for i in range(1000)]
    ok(run_mq("produce", TOPIC, "--acks", "all", input="".join(f"{v}\n" for v in first).encode(), env=env))
    outs = [tmp_path / f"phase2-{i}.jsonl" for i in range(2)]
    workers = [consumer(f"phase2-{i}", out.open("wb")) for i, out in enumerate(outs)]
    _until("the consumers started on the new records",
           lambda: (describe().get("partitions") or [{}])[0].get("start_offset", 0) > RECORDS)
    coordinator = describe()["coordinator"]
    ok(run_mq("broker", "kill", str(coordinator), "--data-dir", str(tmp_path / "data"), env=env))
    killed = time.monotonic()
    ok(run_mq("produce", TOPIC, "--acks", "all", input="".join(f"{v}\n" for v in second).encode(), env=env,
              timeout=90))

    def all_done() -> dict | None:
        doc = describe()
        p = (doc.get("partitions") or [{}])[0]
        return doc if p.get("start_offset") == RECORDS + 2000 and p.get("acquired") == 0 else None

    doc = _until("every record accepted after the coordinator fail-over", all_done, 90)
    took = time.monotonic() - killed
    assert doc["coordinator"] != coordinator
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        assert proc.wait(timeout=60) == 0
    printed = [v for out in outs for v in _values(out)]
    assert set(printed) >= set(first) | set(second)
    assert len(printed) - len(set(printed)) <= 2 * 500, "more redelivered than the consumers could hold"
    return took


def test_four_share_consumers_on_one_partition_one_killed_holding_locks(tmp_path):
    region, bootstrap = _region(tmp_path)
    env = base_env(MQ_BOOTSTRAP=bootstrap)
    up = run_mq("up", region, "--timeout", "60", env=env, timeout=90)
    procs: list[subprocess.Popen] = []
    try:
        ok(up)
        ok(run_mq("topic", "create", TOPIC, "--partitions", "1", "--replication-factor", "3", env=env))
        jobs = [f"bad-{i}" if i % BAD_EVERY == 0 else f"job-{i}" for i in range(RECORDS)]
        ok(run_mq("produce", TOPIC, "--acks", "all", input="".join(f"{j}\n" for j in jobs).encode(), env=env))

        def consumer(name: str, stdout) -> subprocess.Popen:
            proc = subprocess.Popen(
                [*mq_command(), "consume", TOPIC, "--share-group", GROUP, "--from-beginning", "--format", "json",
                 "--share-reject-matching", "^bad-"],
                env=env, stdout=stdout, stderr=(tmp_path / f"{name}.err").open("wb"))
            procs.append(proc)
            return proc

        def describe() -> dict:
            """What `mq share-group describe --json` prints, read in-process (the polls
            would otherwise start a Python process every 0.2 s; the CLI's own output is
            checked below)."""
            return _describe_doc(bootstrap)

        def partition() -> dict:
            return (describe().get("partitions") or [{}])[0]

        victim = consumer("victim", subprocess.PIPE)  # never read: it blocks holding its batch

        def holders() -> dict[str, int]:
            return {m["member_id"]: m["acquired"] for m in describe().get("members", [])}

        [victim_id] = _until("the first consumer holds locks", lambda: [m for m, n in holders().items() if n > 0])
        outs = [tmp_path / f"survivor-{i}.jsonl" for i in range(3)]
        survivors = [(consumer(f"survivor-{i}", out.open("wb")), out) for i, out in enumerate(outs)]
        _until("four members", lambda: len(describe().get("members", [])) == 4)
        victim.send_signal(signal.SIGKILL)
        # A dead process acquires nothing: if its member still holds locks now, it died holding them.
        locked = holders().get(victim_id, 0)
        assert locked > 0, "the stuck consumer's locks expired before it was killed: raise LOCK_MS"
        victim_out = tmp_path / "victim.jsonl"
        victim_out.write_bytes(victim.communicate(timeout=10)[0])

        def all_done() -> dict | None:
            doc = describe()
            p = (doc.get("partitions") or [{}])[0]
            return doc if p.get("start_offset") == RECORDS and p.get("acquired") == 0 else None

        doc = _until("the locked records were redelivered and accepted", all_done, LOCK_MS / 1000 + 30)
        cli_doc = json.loads(ok(run_mq("share-group", "describe", GROUP, "--json", env=env)))
        jsonschema.Draft202012Validator(schemas.schema_of("mq share-group describe").schema).validate(cli_doc)
        assert cli_doc["partitions"] == doc["partitions"]
        listed = json.loads(ok(run_mq("share-group", "list", "--json", env=env)))
        jsonschema.Draft202012Validator(schemas.schema_of("mq share-group list").schema).validate(listed)
        assert [g["group_id"] for g in listed] == [GROUP]
        table = ok(run_mq("share-group", "describe", GROUP, env=env))
        assert "START-OFFSET" in table and "DEAD-LETTERS" in table and str(RECORDS) in table
        busy = run_mq("share-group", "delete", GROUP, env=env)  # the survivors are still members
        assert busy.returncode == 1 and "still has members" in busy.stderr.decode()
        missing = run_mq("share-group", "describe", "nope", env=env)
        assert missing.returncode == 1 and "share group nope does not exist — see `mq share-group list`" in \
            missing.stderr.decode()
        for proc, _ in survivors:
            proc.send_signal(signal.SIGTERM)  # Ctrl-C: acknowledge what was printed, leave the group
        for proc, _ in survivors:
            assert proc.wait(timeout=60) == 0
        printed = _values(victim_out) + [v for _, out in survivors for v in _values(out)]
        survivor_values = [v for _, out in survivors for v in _values(out)]
        good = {j for j in jobs if j.startswith("job-")}
        assert set(printed) == good, "every good record printed, no bad one, nothing unexpected"
        assert len(set(survivor_values)) == len(survivor_values), "the survivors never got a record twice"
        # What the survivors did not print, the killed consumer accepted (so it printed it).
        assert good - set(survivor_values) <= set(_values(victim_out))
        redelivered = set(_values(victim_out)) & set(survivor_values)
        assert sum(1 for _, out in survivors if _values(out)) >= 2, "several consumers shared the partition"

        # The independent reader: a plain consumer of the dead-letter topic.
        dlq = ok(run_mq("consume", f"{GROUP}.dlq", "--from-beginning", "--format", "json", "--timeout-ms", "3000",
                        env=env, timeout=60))
        dead = [json.loads(line) for line in dlq.splitlines()]
        headers = [{k: v for k, v in d["headers"]} for d in dead]
        bad = {f"bad-{i}": i for i in range(0, RECORDS, BAD_EVERY)}
        assert {d["value"] for d in dead} == set(bad), "exactly the rejected records, each at least once"
        for d, h in zip(dead, headers, strict=True):
            assert h["mq.dlq.topic"] == TOPIC and h["mq.dlq.partition"] == "0" and h["mq.dlq.group"] == GROUP
            assert int(h["mq.dlq.offset"]) == bad[d["value"]] and h["mq.dlq.reason"] == "rejected"
            assert int(h["mq.dlq.delivery.count"]) >= 1
        failover_seconds = _coordinator_failover(env, tmp_path, describe, consumer)
        print(f"coordinator fail-over: every record accepted {failover_seconds:.1f} s after the kill")
        print(f"the killed consumer held {locked} locked records; {len(redelivered)} it had printed were printed "
              f"again by survivors; {len(printed)} printed for {len(good)} good; "
              f"{len(dead)} dead letters")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=10)
        down = run_mq("down", "--data-dir", str(tmp_path / "data"), env=env, timeout=60)
        assert down.returncode == 0, (down.stdout + down.stderr).decode(errors="replace")
