"""Lag snapshots: built from group lag and mirror status documents, encoded as the records of
``__lag_snapshots``, and rendered as the exporter's ``/metrics``."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mq.client.group_admin import PartitionLag
from mq.client.internals.lag_snapshot import (
    FIELD_NAMES,
    STALE_STATUS_MS,
    ExporterStats,
    LagSnapshot,
    decode,
    group_snapshots,
    metrics_text,
    mirror_snapshots,
)
from mq.core.durations import format_duration_ms, parse_duration_ms
from mq.core.types import TopicPartition

NOW = 1_764_000_000_000


def lags() -> list[PartitionLag]:
    return [PartitionLag(TopicPartition("orders", 1), None, None, 7, None, None),
            PartitionLag(TopicPartition("orders", 0), "m-1", 40, 100, 60, 12.34567)]


def mirror_doc(updated_ms: int = NOW - 500, state: str = "running") -> dict:
    return {"flow": "east-to-west", "source": "east", "target": "west", "state": state, "updated_ms": updated_ms,
            "partitions": [
                {"topic": "orders", "partition": 1, "state": "stalled", "source_end": 90, "mirrored_end": 80,
                 "lag_records": 10, "lag_seconds": 2.5, "latency_p50_ms": 41, "latency_p99_ms": 75},
                {"topic": "orders", "partition": 0, "state": "running", "source_end": 50, "mirrored_end": 50,
                 "lag_records": 0, "lag_seconds": 0.0, "latency_p50_ms": None, "latency_p99_ms": None}]}


def test_group_snapshots_one_per_partition_in_order():
    rows = group_snapshots("east", "billing", "Stable", 2, lags(), NOW)
    assert [(s.topic, s.partition) for s in rows] == [("orders", 0), ("orders", 1)]
    first, second = rows
    assert first == LagSnapshot(NOW, "group", "east", "orders", 0, group="billing", committed=40, log_end=100,
                                lag=60, lag_seconds=12.346, members=2, member_id="m-1", state="Stable")
    assert (second.committed, second.lag, second.lag_seconds, second.log_end) == (None, None, None, 7)
    assert first.key == b"group:billing:orders:0" and first.name == "billing"


def test_encoding_round_trips_and_is_versioned():
    for snapshot in group_snapshots("east", "billing", "Stable", 2, lags(), NOW) + mirror_snapshots(mirror_doc(), NOW):
        doc = json.loads(snapshot.encode())
        assert doc["v"] == 1 and set(doc) == {"v", *FIELD_NAMES}
        assert decode(snapshot.encode()) == snapshot
    with pytest.raises(ValueError, match="not a version 1 lag snapshot"):
        decode(b'{"v": 2}')
    with pytest.raises(ValueError, match="not a lag snapshot"):
        decode(b"\xff")
    with pytest.raises(ValueError, match="not a lag snapshot"):
        decode(b'{"v": 1, "kind": "group"}')  # required fields missing


def test_mirror_snapshots_map_the_status_document():
    rows = mirror_snapshots(mirror_doc(), NOW)
    assert [(s.topic, s.partition) for s in rows] == [("orders", 0), ("orders", 1)]
    lagging = rows[1]
    assert lagging == LagSnapshot(NOW, "mirror", "west", "orders", 1, flow="east-to-west", committed=80, log_end=90,
                                  lag=10, lag_seconds=2.5, state="stalled", latency_p50_ms=41.0, latency_p99_ms=75.0)
    assert lagging.key == b"mirror:east-to-west:orders:1"


def test_an_old_mirror_status_is_stale_unless_the_mirror_stopped():
    old = NOW - STALE_STATUS_MS - 1
    assert {s.state for s in mirror_snapshots(mirror_doc(updated_ms=old), NOW)} == {"stale"}
    assert {s.state for s in mirror_snapshots(mirror_doc(updated_ms=old, state="stopped"), NOW)} == \
        {"running", "stalled"}
    assert mirror_snapshots({"flow": "f", "partitions": [{"topic": "x"}, "junk"]}, NOW) == []


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_text_is_prometheus_exposition_with_the_latest_values():
    snapshots = group_snapshots("east", 'bill"ing\\', "Stable", 2, lags(), NOW) + mirror_snapshots(mirror_doc(), NOW)
    stats = [ExporterStats("east", rounds=3, snapshots=12, errors={"produce": 1}, last_round_ms=NOW,
                           last_round_seconds=0.02)]
    found = samples(metrics_text(snapshots, stats))
    group = (("group", 'bill"ing\\'), ("partition", "0"), ("region", "east"), ("topic", "orders"))
    assert found[("mq_consumergroup_lag", group)] == 60
    assert found[("mq_consumergroup_lag_seconds", group)] == 12.346
    assert found[("mq_consumergroup_current_offset", group)] == 40
    assert found[("mq_consumergroup_log_end_offset", group)] == 100
    assert ("mq_consumergroup_lag", (("group", 'bill"ing\\'), ("partition", "1"), ("region", "east"),
                                     ("topic", "orders"))) not in found  # no commit: no lag to report
    assert found[("mq_consumergroup_members", (("group", 'bill"ing\\'), ("region", "east")))] == 2
    assert found[("mq_consumergroup_state", (("group", 'bill"ing\\'), ("region", "east"), ("state", "Stable")))] == 1
    flow = (("flow", "east-to-west"), ("partition", "1"), ("region", "west"), ("topic", "orders"))
    assert found[("mq_mirror_flow_lag", flow)] == 10
    assert found[("mq_mirror_flow_replication_latency_p99_seconds", flow)] == 0.075
    assert found[("mq_lag_exporter_rounds_total", (("region", "east"),))] == 3
    assert found[("mq_lag_exporter_errors_total", (("kind", "produce"), ("region", "east")))] == 1
    assert found[("mq_lag_exporter_last_round_duration_seconds", (("region", "east"),))] == 0.02


@pytest.mark.parametrize(("text", "ms"), [("500ms", 500), ("5", 5000), ("1.5s", 1500), ("10m", 600_000),
                                          ("2h", 7_200_000), ("1d", 86_400_000), (" 3 s ", 3000)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


def test_bad_durations_say_what_is_accepted():
    for text in ("", "5x", "-1s", "s", "1e3"):
        with pytest.raises(ValueError, match="is not a duration .*500ms, 5s, 10m"):
            parse_duration_ms(text)
    assert [format_duration_ms(ms) for ms in (600_000, 1500, 5000, 86_400_000)] == ["10m", "1500ms", "5s", "1d"]


def test_the_command_line_and_the_exporter_process_share_defaults():
    from mq.cli import lag as cli_lag
    from mq.client import lag_exporter
    from mq.deploy import lag_exporter as process

    assert parse_duration_ms(cli_lag.DEFAULT_INTERVAL) == process.DEFAULT_INTERVAL_MS
    assert parse_duration_ms(cli_lag.DEFAULT_RETENTION) == lag_exporter.DEFAULT_RETENTION_MS
    assert cli_lag.DEFAULT_PARTITIONS == lag_exporter.DEFAULT_PARTITIONS
    assert cli_lag.DEFAULT_TOPIC == process.SNAPSHOT_TOPIC
