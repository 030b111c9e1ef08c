"""`mq dump-log` shows transaction markers (control batches: COMMIT/ABORT, coordinator
epoch) in the .log and the aborted transactions in the .txnindex, against a cluster
started with `mq up` and a transactional producer (real processes)."""

from __future__ import annotations

import json

import jsonschema

from mq.cli.schemas import DUMP_LOG
from mq.client import Producer


def _dump(cluster, path) -> list[dict]:
    result = cluster.mq("dump-log", str(path), "--json")
    assert result.returncode == 0, result.stderr
    entries = [json.loads(line) for line in result.stdout.decode().splitlines()]
    for entry in entries:
        jsonschema.validate(entry, DUMP_LOG)
    return entries


async def test_dump_log_shows_markers_and_the_txnindex(cluster):
    created = cluster.mq("topic", "create", "dl-txn")
    assert created.returncode == 0, created.stderr
    async with Producer(cluster.listen, acks="all", transactional_id="dl-txn-1") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send("dl-txn", b"kept")
        await producer.commit_transaction()
        producer.begin_transaction()
        await producer.send("dl-txn", b"dropped")
        await producer.abort_transaction()
        producer.begin_transaction()
        await producer.send("dl-txn", b"kept-too")
        await producer.commit_transaction()  # the abort's marker precedes this one: it is written
    directory = cluster.data_dir / "broker-1" / "dl-txn-0"
    batches = [b for b in _dump(cluster, directory / "00000000000000000000.log") if b["type"] == "batch"]
    assert [(b["is_transactional"], b["is_control"]) for b in batches][:4] == [
        (True, False), (True, True), (True, False), (True, True)]
    assert [b["control"]["marker"] for b in batches if b["is_control"]][:2] == ["COMMIT", "ABORT"]
    pid = batches[0]["producer_id"]
    assert [b["producer_epoch"] for b in batches[:4]] == [0, 1, 1, 2]  # KIP-890: markers carry the bumped epoch
    [aborted] = _dump(cluster, directory / "00000000000000000000.txnindex")
    assert aborted == {"type": "aborted_txn", "producer_id": pid, "first_offset": 2, "last_offset": 3,
                       "last_stable_offset": aborted["last_stable_offset"]}
    assert 2 <= aborted["last_stable_offset"] <= 4
    text = cluster.mq("dump-log", str(directory / "00000000000000000000.txnindex"))
    assert text.returncode == 0 and f"producer_id: {pid}" in text.stdout.decode()
