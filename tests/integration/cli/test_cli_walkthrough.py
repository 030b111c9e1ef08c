"""The issue's walk-through, typed as a user would, against a broker from `mq up`."""

from __future__ import annotations

import json
import time

from .helpers import run_mq


def test_walkthrough(cluster):
    created = cluster.mq("topic", "create", "orders", "--partitions", "3")
    assert created.returncode == 0, created.stderr
    assert b"orders" in created.stdout

    started = time.monotonic()
    produced = cluster.shell("seq 1 100000 | sed 's/^/order-/' | mq produce orders --key-separator :")
    elapsed = time.monotonic() - started
    assert produced.returncode == 0, produced.stderr
    assert b"100000 line(s) had no key separator" in produced.stderr
    assert elapsed < 30, f"100,000 lines took {elapsed:.1f} s"

    consumed = cluster.mq("consume", "orders", "--from-beginning", "--max-messages", "5", "--format", "json",
                          timeout=30)
    assert consumed.returncode == 0, consumed.stderr
    lines = consumed.stdout.decode().splitlines()
    assert len(lines) == 5
    for line in lines:
        doc = json.loads(line)
        assert set(doc) == {"topic", "partition", "offset", "key", "value", "timestamp", "headers"}
        assert doc["topic"] == "orders" and doc["key"] is None
        assert doc["value"].startswith("order-") and doc["headers"] == []

    segment = cluster.data_dir / "broker-1" / "orders-0" / "00000000000000000000.log"
    dumped = cluster.shell(f"mq dump-log .mq/broker-1/orders-0/{segment.name}")
    assert dumped.returncode == 0, dumped.stderr
    text = dumped.stdout.decode()
    assert "base_offset" in text or "baseOffset" in text or "offset" in text
    assert "crc" in text.lower()

    described = cluster.mq("topic", "describe", "orders", "--json")
    assert described.returncode == 0, described.stderr
    doc = json.loads(described.stdout)
    assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2]
    assert sum(p["log_end_offset"] - p["log_start_offset"] for p in doc["partitions"]) == 100_000
    for p in doc["partitions"]:
        assert p["leader"] == 1 and p["replicas"] == [1] and p["isr"] == [1]

    table = cluster.mq("topic", "describe", "orders")
    assert table.returncode == 0 and b"leader" in table.stdout.lower()


def test_console_script_is_installed(cluster):
    """`mq` on PATH is the console script declared in pyproject.toml."""
    result = cluster.shell("command -v mq && mq --help")
    assert result.returncode == 0, result.stderr
    assert b"produce" in result.stdout and b"consume" in result.stdout


def test_reference_page_matches_parser():
    """docs/reference/cli.md is generated; regenerate with `python -m mq.cli.reference --write`."""
    from mq.cli.reference import PAGE, render

    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/reference/cli.md is stale: run `python -m mq.cli.reference --write`")


def test_bench_passes_arguments_through():
    result = run_mq("bench", "--help", timeout=60)
    # Either loadtests.bench printed its own help, or we say how to get it.
    assert result.returncode == 0 or result.stderr.startswith(b"error: the benchmarks are not importable")
