"""cluster.json parsing, the status table, and the metrics exposition, without processes."""

from __future__ import annotations

import json

import pytest

from mirror.fetch_plan import FetchSettings
from mirror.flow_config import FlowConfigError, flow_from_cluster, parse_address_map
from mirror.metrics import FlowMetrics
from mirror.partition import PartitionMirror
from mirror.status import describe, format_table, read_status, write_status
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch


def cluster_json(tmp_path, configs: tuple[tuple[str, str], ...] = ()) -> str:
    """A cluster.json as mq up writes it (mq.deploy.topology.Deployment)."""
    from mq.deploy.topology import BrokerSpec, Deployment, FlowSpec, LinkPair, ProxyRoute, Topology

    east = Topology("east", str(tmp_path / "east"), (BrokerSpec(1, "127.0.0.1:9092", "d1"),
                                                      BrokerSpec(2, "127.0.0.1:9093", "d2")))
    west = Topology("west", str(tmp_path / "west"), (BrokerSpec(1, "127.0.0.1:9192", "d3"),))
    routes = (ProxyRoute("east", 1, "127.0.0.1:9092", "127.0.0.1:29092"),
              ProxyRoute("east", 2, "127.0.0.1:9093", "127.0.0.1:29093"),
              ProxyRoute("west", 1, "127.0.0.1:9192", "127.0.0.1:29192"))
    flow = FlowSpec("east->west", "east", "west", topics_include=("orders.*",), topics_exclude=(".*tmp",),
                    groups_include=("billing",), groups_exclude=("billing-test",),
                    sync_group_offsets_interval_ms=2000, data_dir=str(tmp_path / "mirror-east->west"),
                    configs=configs)
    doc = Deployment(str(tmp_path), (east, west), pairs=(LinkPair(("east", "west"), "127.0.0.1:1", routes,
                                                                   str(tmp_path / "links")),), flows=(flow,))
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc.to_json()))
    return str(path)


def test_a_flow_is_read_from_cluster_json(tmp_path) -> None:
    from mirror.flow_config import load_cluster, reverse_address_map

    path = cluster_json(tmp_path)
    flow = flow_from_cluster(path, "east->west")
    assert (flow.source_region, flow.target_region) == ("east", "west")
    assert flow.source_bootstrap == "127.0.0.1:29092,127.0.0.1:29093"  # through the link
    assert flow.target_bootstrap == "127.0.0.1:9192"
    assert flow.source_address_map == {"127.0.0.1:9092": "127.0.0.1:29092", "127.0.0.1:9093": "127.0.0.1:29093"}
    assert reverse_address_map(load_cluster(path), "west", "east") == {"127.0.0.1:9192": "127.0.0.1:29192"}
    assert flow.topics.matches("orders") and not flow.topics.matches("orders.tmp")
    assert flow.groups == ("billing",) and flow.groups_exclude == ("billing-test",)
    assert flow.sync_group_offsets_interval_ms == 2000
    assert flow.refresh_topics_interval_ms == 1000  # the default
    assert flow.state_dir == str(tmp_path / "mirror-east->west")
    assert flow.fetch == FetchSettings()  # the defaults: 4 MiB per partition, 64 MiB per flow, 2 per leader


def test_fetch_settings_come_from_the_flow_configs_and_are_checked(tmp_path) -> None:
    path = cluster_json(tmp_path, (("max.partition.fetch.bytes", "1048576"), ("buffer.max.bytes", "8388608"),
                                   ("fetches.per.leader", "1")))
    assert flow_from_cluster(path, "east->west").fetch == FetchSettings(1 << 20, 8 << 20, 1)
    for configs, message in (((("fetches.per.leader", "0"),), "fetches.per.leader must be at least 1"),
                             ((("buffer.max.bytes", "lots"),), "buffer.max.bytes must be an integer"),
                             ((("buffer.max.bytes", "1024"),), r"buffer.max.bytes \(1024\) is below max.partition")):
        with pytest.raises(FlowConfigError, match=message):
            flow_from_cluster(cluster_json(tmp_path, configs), "east->west")


def test_unknown_flows_and_bad_maps_are_refused_with_the_reason(tmp_path) -> None:
    path = cluster_json(tmp_path)
    with pytest.raises(FlowConfigError, match=r"no flow 'west->east' .*flows: east->west"):
        flow_from_cluster(path, "west->east")
    with pytest.raises(FlowConfigError, match="does not exist"):
        flow_from_cluster(str(tmp_path / "nope.json"), "east->west")
    assert parse_address_map("a:1=b:2, c:3=d:4") == {"a:1": "b:2", "c:3": "d:4"}
    with pytest.raises(FlowConfigError, match="ADVERTISED=DIAL"):
        parse_address_map("a:1")


def _partition() -> PartitionMirror:
    pm = PartitionMirror(TopicPartition("orders", 0))
    pm.reset(0)
    _, epoch = pm.fetch_sent(0)
    pm.on_fetched(epoch, build_batch([(None, b"x", (), 1_000)] * 4), 10, 0, 0, 2_000)
    pm.next_append(0)
    pm.on_appended(high_watermark=4, duplicates=0, now_ms=1, wall_ms=1_100)
    return pm


def test_the_status_file_round_trips_and_reads_as_a_table(tmp_path) -> None:
    status = _partition().status(1_100)
    doc = {"flow": "east->west", "source": "east", "target": "west", "pid": 7, "state": "running",
           "updated_ms": 1_000, "partitions": [status.to_json()],
           "problems": {"audit": "topic audit exists in west and is not a mirror topic"}}
    path = str(tmp_path / "mirror-east->west" / "status.json")
    write_status(path, doc)
    assert read_status(path) == doc
    text = describe(doc, now_ms=1_500)
    assert "flow east->west: east -> west  state running" in text
    row = next(line for line in text.splitlines() if line.startswith("orders"))
    assert row.split()[:6] == ["orders", "0", "running", "10", "4", "6"]
    assert "problem: audit" in text


def test_format_table_pads_columns() -> None:
    assert format_table(("a", "bb"), [[1, None], ["long", 2.5]]).splitlines() == [
        "a    bb", "──── ───", "1    -", "long 2.5"]


def test_metrics_expose_lag_state_and_latency() -> None:
    from prometheus_client import generate_latest

    metrics = FlowMetrics("east->west")
    pm = _partition()
    metrics.snapshot = [pm.status(1_100)]
    metrics.observe_latencies("orders", 0, [100, 2_000])
    metrics.error("fetch")
    metrics.buffer_used_bytes = 5_000
    text = generate_latest(metrics.registry).decode()
    assert 'mq_mirror_lag_records{flow="east->west",partition="0",topic="orders"} 6.0' in text
    assert 'mq_mirror_partition_state{flow="east->west",partition="0",state="running",topic="orders"} 1.0' in text
    assert 'mq_mirror_records_total{flow="east->west",partition="0",topic="orders"} 4.0' in text
    assert 'mq_mirror_replication_latency_seconds_count{flow="east->west",partition="0",topic="orders"} 2.0' in text
    assert 'mq_mirror_errors_total{flow="east->west",kind="fetch"} 1.0' in text
    assert 'mq_mirror_buffer_used_bytes{flow="east->west"} 5000.0' in text
