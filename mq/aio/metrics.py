"""Prometheus metrics of one broker, served at ``/metrics``.

Request latencies are observed per request (one histogram per API). Per-topic record
and byte counters and the per-partition gauges are read from the node at scrape time
by a custom collector, so the produce and fetch paths only bump plain ints.

Per-partition gauges, labelled ``topic`` and ``partition``, for every partition this
broker hosts (Kafka's JMX names in brackets):

- ``mq_log_end_offset``, ``mq_log_start_offset``, ``mq_log_size_bytes`` (``Log``
  ``LogEndOffset``, ``LogStartOffset``, ``Size``) and ``mq_high_watermark`` — on every
  replica: a follower's high watermark is the one the leader last told it.
- ``mq_partition_is_leader`` (1 on the leader), ``mq_partition_leader_epoch``,
  ``mq_partition_replicas`` (``ReplicasCount``) and ``mq_partition_isr_size``
  (``InSyncReplicasCount``): the leader's committed state, the metadata image's elsewhere.
- ``mq_partition_under_replicated`` and ``mq_partition_under_min_isr``
  (``UnderReplicated``, ``UnderMinIsr``): reported by the leader only (0 elsewhere), so
  a sum over the region counts each partition once, as in Kafka.
- ``mq_replica_lag_offsets`` and ``mq_replica_last_caught_up_age_ms``, with a third
  label ``replica``: each follower as the leader sees it (leader log end minus the
  follower's last fetch offset; time since it was last caught up). On the leader
  only, so the label set stays at (replication factor - 1) per partition.

Consumer groups, for each group this broker coordinates (labelled ``group``; Kafka
exports these through the group coordinator's JMX and ``kafka-consumer-groups``):

- ``mq_group_members`` and ``mq_group_state`` (one series per state, labelled
  ``state``: 1 for the group's current state, 0 for the others).
- ``mq_group_committed_offset`` and ``mq_group_lag_records``, labelled ``topic`` and
  ``partition``: the committed offset (the next record the group will read) and the
  high watermark minus it — only for partitions this broker hosts a replica of (the
  leader's high watermark, else the one the follower last heard).

Share groups: ``mq_share_*`` (``mq.aio.share_metrics``).

The log cleaner: ``mq_log_cleaner_cleaned_bytes_total`` (bytes its passes read),
``mq_log_cleaner_runs_total`` (passes finished) and ``mq_log_cleaner_aborts_total``
(passes abandoned: failed, or the log changed under them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mq.aio.share_metrics import share_families

if TYPE_CHECKING:
    from mq.aio.server import BrokerServer
    from mq.broker.node import BrokerNode
    from mq.broker.partition import Partition

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _NodeCollector(Collector):
    def __init__(self, node: BrokerNode, server: BrokerServer | None) -> None:
        self.node = node
        self.server = server

    def _now_ms(self) -> int:
        if self.server is not None:
            return int(self.server.clock.wall_ms())
        return time.time_ns() // 1_000_000

    def collect(self) -> Iterator:
        families = {
            "records_in": CounterMetricFamily("mq_topic_records_in", "Records appended, per topic", labels=["topic"]),
            "bytes_in": CounterMetricFamily("mq_topic_bytes_in", "Batch bytes appended, per topic", labels=["topic"]),
            "records_out": CounterMetricFamily("mq_topic_records_out", "Records fetched, per topic", labels=["topic"]),
            "bytes_out": CounterMetricFamily("mq_topic_bytes_out", "Batch bytes fetched, per topic", labels=["topic"]),
            "produce_errors": CounterMetricFamily("mq_topic_produce_errors", "Refused partition appends, per topic", labels=["topic"]),
            "duplicate_batches": CounterMetricFamily(
                "mq_topic_duplicate_batches",
                "Idempotent producer retries of batches already appended (answered, not appended again), per topic",
                labels=["topic"]),
            "truncated_committed_offsets": CounterMetricFamily(
                "mq_topic_truncated_committed_offsets",
                "Offsets below the high watermark a follower cut after an unclean leader election "
                "(acknowledged records lost), per topic", labels=["topic"]),
        }
        for topic in sorted(self.node.stats.topics):
            stats = self.node.stats.topics[topic]
            for name, family in families.items():
                family.add_metric([topic], getattr(stats, name))
        yield from families.values()
        yield from _partition_families(self.node, self._now_ms())
        yield from _group_families(self.node)
        yield from share_families(self.node)
        yield from _cleaner_families(self.node)
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


_PARTITION = ["topic", "partition"]
_GAUGES = (  # (attribute in _partition_values, metric name, help)
    ("size", "mq_log_size_bytes", "Bytes on disk, per partition"),
    ("end", "mq_log_end_offset", "Log end offset, per partition"),
    ("start", "mq_log_start_offset", "Log start offset, per partition"),
    ("hw", "mq_high_watermark", "High watermark, per partition (a follower's: the last the leader sent)"),
    ("is_leader", "mq_partition_is_leader", "1 if this broker leads the partition"),
    ("leader_epoch", "mq_partition_leader_epoch", "Leader epoch this broker knows for the partition"),
    ("replicas", "mq_partition_replicas", "Replicas assigned to the partition"),
    ("isr", "mq_partition_isr_size", "In-sync replicas (the leader's committed ISR; elsewhere the metadata's)"),
    ("under_replicated", "mq_partition_under_replicated", "1 on the leader when the ISR is smaller than the replica set"),
    ("under_min_isr", "mq_partition_under_min_isr", "1 on the leader when the ISR is below min.insync.replicas"),
)


def _partition_values(node: BrokerNode, partition: Partition) -> dict[str, int]:
    log = partition.log
    values = {"size": log.size_bytes, "end": log.log_end_offset, "start": log.log_start_offset,
              "hw": partition.high_watermark, "is_leader": 0, "leader_epoch": partition.leader_epoch,
              "replicas": 0, "isr": 0, "under_replicated": 0, "under_min_isr": 0}
    leader = partition.leader
    if leader is not None:
        values.update(is_leader=1, leader_epoch=leader.leader_epoch, replicas=len(leader.replicas),
                      isr=len(leader.isr), under_replicated=int(leader.is_under_replicated),
                      under_min_isr=int(leader.is_under_min_isr))
    else:
        image = node.image.partition(partition.tp)
        if image is not None:
            values.update(replicas=len(image.replicas), isr=len(image.isr))
    return values


def _partition_families(node: BrokerNode, now_ms: int) -> Iterator:
    families = {key: GaugeMetricFamily(name, text, labels=_PARTITION) for key, name, text in _GAUGES}
    lag = GaugeMetricFamily("mq_replica_lag_offsets",
                            "Leader log end minus a follower's last fetch offset (on the leader; -1: not fetched "
                            "in this leader epoch yet)", labels=[*_PARTITION, "replica"])
    caught_up = GaugeMetricFamily("mq_replica_last_caught_up_age_ms",
                                  "Milliseconds since a follower was last caught up with the leader (on the leader; -1: never)",
                                  labels=[*_PARTITION, "replica"])
    for tp in sorted(node.partitions):
        partition = node.partitions[tp]
        labels = [tp.topic, str(tp.partition)]
        for key, value in _partition_values(node, partition).items():
            families[key].add_metric(labels, value)
        leader = partition.leader
        if leader is None:
            continue
        end = partition.log.log_end_offset
        for replica_id in leader.replicas:
            if replica_id == leader.local_id:
                continue
            follower = leader.follower(replica_id)
            replica_labels = [*labels, str(replica_id)]
            lag.add_metric(replica_labels, end - follower.log_end_offset if follower.log_end_offset >= 0 else -1)
            never = follower.last_caught_up_ms <= 0
            caught_up.add_metric(replica_labels, -1 if never else max(0, now_ms - follower.last_caught_up_ms))
    yield from families.values()
    yield lag
    yield caught_up


GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


def _group_families(node: BrokerNode) -> Iterator:
    members = GaugeMetricFamily("mq_group_members", "Members of a group this broker coordinates", labels=["group"])
    state = GaugeMetricFamily("mq_group_state", "1 for the group's current state, 0 for the others",
                              labels=["group", "state"])
    committed = GaugeMetricFamily("mq_group_committed_offset",
                                  "Offset a group committed (the next record it reads), per partition",
                                  labels=["group", *_PARTITION])
    lag = GaugeMetricFamily("mq_group_lag_records",
                            "High watermark minus the group's committed offset (partitions hosted here)",
                            labels=["group", *_PARTITION])
    for group in node.groups.snapshot():
        members.add_metric([group.group_id], group.members)
        states = GROUP_STATES if group.state in GROUP_STATES else (*GROUP_STATES, group.state)
        for name in states:
            state.add_metric([group.group_id, name], 1 if name == group.state else 0)
        for tp, offset in group.offsets.items():
            labels = [group.group_id, tp.topic, str(tp.partition)]
            committed.add_metric(labels, offset)
            partition = node.partitions.get(tp)
            if partition is not None:
                lag.add_metric(labels, max(0, partition.high_watermark - offset))
    yield members
    yield state
    yield committed
    yield lag


def _cleaner_families(node: BrokerNode) -> Iterator:
    cleaner = node.log_cleaner
    cleaned = CounterMetricFamily("mq_log_cleaner_cleaned_bytes", "Bytes read by log cleaning passes")
    cleaned.add_metric([], cleaner.cleaned_bytes_total)
    runs = CounterMetricFamily("mq_log_cleaner_runs", "Log cleaning passes finished")
    runs.add_metric([], cleaner.cleaner_runs_total)
    aborts = CounterMetricFamily("mq_log_cleaner_aborts", "Log cleaning passes abandoned (failed, or the log changed)")
    aborts.add_metric([], cleaner.cleaner_aborts_total)
    yield cleaned
    yield runs
    yield aborts


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_latency = Histogram(
            "mq_request_latency_seconds", "Time from a request's arrival to its response, per API",
            ["api"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self._children: dict[str, object] = {}
        self.node: BrokerNode | None = None

    def attach(self, node: BrokerNode, server: BrokerServer | None) -> None:
        self.node = node
        self.registry.register(_NodeCollector(node, server))

    def readiness(self) -> tuple[bool, str]:
        """``GET /ready``: whether this broker serves (registered, not fenced, caught up with
        the metadata log) and, when not, why. A container's healthcheck asks this."""
        node = self.node
        if node is None:
            return False, "starting"
        if node.is_ready:
            return True, f"ready node_id={node.node_id} controller={node.controller_id}"
        life = node.control.lifecycle
        return False, (f"not ready node_id={node.node_id} registered={life.broker_epoch >= 0} "
                       f"fenced={life.is_fenced} caught_up={life.is_caught_up} controller={node.controller_id}")

    def observe_request(self, api: str, seconds: float) -> None:
        child = self._children.get(api)
        if child is None:
            child = self._children[api] = self.request_latency.labels(api)
        child.observe(seconds)  # type: ignore[attr-defined]

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def start_metrics_server(metrics: BrokerMetrics, host: str, port: int) -> tuple[web.AppRunner, tuple[str, int]]:
    """Serve ``GET /metrics`` (and ``GET /ready``: 200 or 503 with the reason) with aiohttp;
    returns the runner and the bound address."""

    async def handle_metrics(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def handle_ready(request: web.Request) -> web.Response:
        ready, text = metrics.readiness()
        return web.Response(status=200 if ready else 503, text=text + "\n")

    app = web.Application()
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/ready", handle_ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    server = site._server  # aiohttp exposes no public accessor for the bound port
    sock = server.sockets[0].getsockname()  # type: ignore[union-attr]
    return runner, (sock[0], sock[1])
