"""Prometheus metrics of one broker, served at ``/metrics``.

Request latencies are observed per request (one histogram per API). Per-topic record
and byte counters and per-partition log sizes are read from the node at scrape time
by a custom collector, so the produce and fetch paths only bump plain ints.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from mq.aio.server import BrokerServer
    from mq.broker.node import BrokerNode

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _NodeCollector(Collector):
    def __init__(self, node: BrokerNode, server: BrokerServer | None) -> None:
        self.node = node
        self.server = server

    def collect(self) -> Iterator:
        families = {
            "records_in": CounterMetricFamily("mq_topic_records_in", "Records appended, per topic", labels=["topic"]),
            "bytes_in": CounterMetricFamily("mq_topic_bytes_in", "Batch bytes appended, per topic", labels=["topic"]),
            "records_out": CounterMetricFamily("mq_topic_records_out", "Records fetched, per topic", labels=["topic"]),
            "bytes_out": CounterMetricFamily("mq_topic_bytes_out", "Batch bytes fetched, per topic", labels=["topic"]),
            "produce_errors": CounterMetricFamily("mq_topic_produce_errors", "Refused partition appends, per topic", labels=["topic"]),
        }
        for topic in sorted(self.node.stats.topics):
            stats = self.node.stats.topics[topic]
            for name, family in families.items():
                family.add_metric([topic], getattr(stats, name))
        yield from families.values()
        size = GaugeMetricFamily("mq_log_size_bytes", "Bytes on disk, per partition", labels=["topic", "partition"])
        end = GaugeMetricFamily("mq_log_end_offset", "Log end offset, per partition", labels=["topic", "partition"])
        start = GaugeMetricFamily("mq_log_start_offset", "Log start offset, per partition", labels=["topic", "partition"])
        hw = GaugeMetricFamily("mq_high_watermark", "High watermark, per partition", labels=["topic", "partition"])
        for tp in sorted(self.node.partitions):
            p = self.node.partitions[tp]
            labels = [tp.topic, str(tp.partition)]
            size.add_metric(labels, p.log.size_bytes)
            end.add_metric(labels, p.log.log_end_offset)
            start.add_metric(labels, p.log.log_start_offset)
            hw.add_metric(labels, p.high_watermark)
        yield from (size, end, start, hw)
        conns = GaugeMetricFamily("mq_connections", "Open client connections")
        conns.add_metric([], len(self.server.connections) if self.server else 0)
        yield conns
        waiting = GaugeMetricFamily("mq_delayed_fetches", "Long-poll fetches waiting for data")
        waiting.add_metric([], len(self.node.purgatory))
        yield waiting
        peers = self.server.peers if self.server is not None else None
        in_flight = GaugeMetricFamily("mq_peer_requests_in_flight", "Requests to other nodes awaiting an answer")
        in_flight.add_metric([], peers.in_flight() if peers is not None else 0)
        yield in_flight


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_latency = Histogram(
            "mq_request_latency_seconds", "Time from a request's arrival to its response, per API",
            ["api"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self._children: dict[str, object] = {}

    def attach(self, node: BrokerNode, server: BrokerServer | None) -> None:
        self.registry.register(_NodeCollector(node, server))

    def observe_request(self, api: str, seconds: float) -> None:
        child = self._children.get(api)
        if child is None:
            child = self._children[api] = self.request_latency.labels(api)
        child.observe(seconds)  # type: ignore[attr-defined]

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def start_metrics_server(metrics: BrokerMetrics, host: str, port: int) -> tuple[web.AppRunner, tuple[str, int]]:
    """Serve ``GET /metrics`` with aiohttp; returns the runner and the bound address."""

    async def handle_metrics(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", handle_metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    server = site._server  # aiohttp exposes no public accessor for the bound port
    sock = server.sockets[0].getsockname()  # type: ignore[union-attr]
    return runner, (sock[0], sock[1])
