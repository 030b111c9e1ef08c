"""`mq dump-log` shows an idempotent producer's id, epoch and sequences in the .log and its
state in the .snapshot files written at each segment roll (real processes, `mq up`)."""

from __future__ import annotations

import json

import jsonschema

from mq.cli.schemas import DUMP_LOG


def _dump(cluster, path) -> list[dict]:
    result = cluster.mq("dump-log", str(path), "--json")
    assert result.returncode == 0, result.stderr
    entries = [json.loads(line) for line in result.stdout.decode().splitlines()]
    for entry in entries:
        jsonschema.validate(entry, DUMP_LOG)
    return entries


def test_dump_log_shows_producer_fields_and_snapshots(cluster):
    created = cluster.mq("topic", "create", "dl-idem", "--config", "segment.bytes=2048")
    assert created.returncode == 0, created.stderr
    lines = b"".join(b"value-%04d\n" % i for i in range(400))
    produced = cluster.mq("produce", "dl-idem", "--acks", "all", "--batch-size", "600", input=lines)
    assert produced.returncode == 0, produced.stderr
    directory = cluster.data_dir / "broker-1" / "dl-idem-0"
    segments = sorted(directory.glob("*.log"))
    assert len(segments) > 2
    batches = [b for b in _dump(cluster, segments[0]) if b["type"] == "batch"]
    pid = batches[0]["producer_id"]
    assert pid >= 1 << 24 and {b["producer_id"] for b in batches} == {pid}
    assert [b["producer_epoch"] for b in batches] == [0] * len(batches)
    assert [b["base_sequence"] for b in batches] == [b["base_offset"] for b in batches]  # one producer
    snapshots = sorted(directory.glob("*.snapshot"))
    assert snapshots and snapshots[-1].name == segments[-1].name.replace(".log", ".snapshot")
    [producer] = _dump(cluster, snapshots[-1])
    base = int(snapshots[-1].stem)
    assert producer["type"] == "producer" and producer["producer_id"] == pid
    assert producer["last_offset"] == base - 1 and producer["last_sequence"] == base - 1
    assert 1 <= len(producer["batches"]) <= 5
    text = cluster.mq("dump-log", str(snapshots[-1]))
    assert text.returncode == 0 and f"producer_id: {pid}" in text.stdout.decode()
