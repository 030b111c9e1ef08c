"""Every listing's --json (and the JSON Lines outputs) from real `mq` processes validates
against the documented schema (mq/cli/schemas.py, docs/reference/json-output.md), and the
tables share one header style."""

from __future__ import annotations

import json
import re

import jsonschema

from mq.cli import schemas


def _valid(prefix: str, result) -> object:
    assert result.returncode == 0, result.stderr
    output = schemas.schema_of(prefix)
    validator = jsonschema.Draft202012Validator(output.schema)
    text = result.stdout.decode() if isinstance(result.stdout, bytes) else result.stdout
    docs = [json.loads(line) for line in text.splitlines()] if output.lines else [json.loads(text)]
    assert docs, f"{prefix} printed nothing"
    for doc in docs:
        validator.validate(doc)
    return docs if output.lines else docs[0]


class _Text:
    def __init__(self, text: str) -> None:
        self.returncode, self.stdout, self.stderr = 0, text, ""


def test_every_json_output_matches_its_schema(cluster, tmp_path):
    mq = cluster.mq
    assert mq("topic", "create", "js", "--partitions", "2", "--config", "retention.ms=86400000").returncode == 0
    report = tmp_path / "report.jsonl"
    lines = b"h:1\tk1\tv1\n\tk2\t\xff\xfe\nh:2,h:3\tk3\tv3\n"
    produced = mq("produce", "js", "--property", "parse.headers=true", "--property", "parse.key=true",
                  "--report", str(report), input=lines)
    assert produced.returncode == 0, produced.stderr
    assert len(_valid("mq produce", _Text(report.read_text()))) == 3

    records = _valid("mq consume", mq("consume", "js", "--from-beginning", "--format", "json",
                                      "--max-messages", "3"))
    assert {json.dumps(r["value"]) for r in records} >= {'"v1"', '{"base64": "//4="}'}
    assert any(r["headers"] == [["h", "2"], ["h", "3"]] for r in records)

    segment = min((cluster.data_dir / "broker-1" / f"js-{records[0]['partition']}").glob("*.log"))
    dumped = _valid("mq dump-log", mq("dump-log", str(segment), "--json", "--print-records"))
    assert dumped[0]["type"] == "batch" and dumped[0]["records"]

    listed = _valid("mq topic list", mq("topic", "list", "--json"))
    assert {"name": "js", "partitions": 2, "replication_factor": 1} in listed
    described = _valid("mq topic describe", mq("topic", "describe", "js", "--json"))
    assert described["config_overrides"] == {"retention.ms": "86400000"}

    assert mq("consume", "js", "-g", "jsg", "--from-beginning", "--max-messages", "3").returncode == 0
    groups = _valid("mq group list", mq("group", "list", "--json"))
    assert "jsg" in {g["group_id"] for g in groups}
    group = _valid("mq group describe", mq("group", "describe", "jsg", "--json"))
    assert sum(p["current_offset"] for p in group["partitions"]) == 3
    plan = _valid("mq group reset-offsets", mq("group", "reset-offsets", "jsg", "-t", "js", "--to-earliest",
                                               "--json"))
    assert plan["executed"] is False and {p["new_offset"] for p in plan["partitions"]} == {0}
    done = _valid("mq group reset-offsets", mq("group", "reset-offsets", "jsg", "-t", "js:0", "--to-offset", "99",
                                               "--execute", "--json"))
    assert done["executed"] is True and [p["clamped"] for p in done["partitions"]] == [True]

    deleted = _valid("mq records delete", mq("records", "delete", "js", "-p", "0", "--before-offset", "end",
                                             "--json"))
    assert [(d["topic"], d["partition"]) for d in deleted] == [("js", 0)]

    status = _valid("mq status", mq("status", "--json", "--data-dir", str(cluster.data_dir)))
    assert status["running"] and any(p["topic"] == "js" for p in status["partitions"])



def _header_line(text: str) -> str:
    """The first line of a table that has upper-case column names."""
    return next(line for line in text.splitlines() if re.fullmatch(r"\s*[A-Z][A-Z-]*(\s+[A-Z#][A-Z-]*)+\s*", line))


def test_tables_share_one_style(cluster):
    assert cluster.mq("topic", "create", "styled").returncode == 0
    described = cluster.mq("topic", "describe", "styled").stdout.decode()
    assert _header_line(described).split() == ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET",
                                               "LOG-END-OFFSET", "RECORDS"]
    listed = cluster.mq("topic", "list").stdout.decode()
    assert _header_line(listed).split() == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"]
    status = cluster.mq("status", "--data-dir", str(cluster.data_dir)).stdout.decode()
    assert _header_line(status).split()[:3] == ["BROKER", "PID", "ALIVE"]
    assert "HIGH-WATERMARK" in status and "UNDER-REPLICATED" in status
