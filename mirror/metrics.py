"""Prometheus metrics of one mirror flow, served by prometheus_client's own HTTP server.

Replication latency is observed per appended batch (a histogram; the ``heartbeats``
partition's series is the end-to-end latency of the heartbeats). Everything else is read
at scrape time from the snapshot the flow takes every second for its status file, so the
copy path bumps only plain ints and the scrape thread never walks live state. Labels:
``flow``, and ``topic`` and ``partition`` where it applies.

==========================================  =======  ==============================================
name                                        type     meaning
==========================================  =======  ==============================================
``mq_mirror_lag_records``                   gauge    source high watermark - mirrored end
``mq_mirror_lag_seconds``                   gauge    age of the oldest record not yet mirrored
``mq_mirror_source_end_offset``             gauge    the source high watermark last seen
``mq_mirror_mirrored_end_offset``           gauge    the target's high watermark (mirrored end)
``mq_mirror_source_unreachable``            gauge    1 while the source does not answer (lag is a lower bound)
``mq_mirror_source_silent_seconds``         gauge    seconds since the source last answered a fetch
``mq_mirror_source_produce_rate``           gauge    last known source produce rate, records/s
``mq_mirror_lag_records_estimate``          gauge    source unreachable: lag + rate x silence (estimate)
``mq_mirror_partition_state``               gauge    1 for the partition's state (label ``state``)
``mq_mirror_buffer_used_bytes``             gauge    fetched, not appended, and asked by fetches in flight
``mq_mirror_records_total``                 counter  records appended to the target
``mq_mirror_bytes_total``                   counter  bytes of record batches appended
``mq_mirror_gap_records_total``             counter  records deleted in the source before mirrored
``mq_mirror_gaps_total``                    counter  gaps detected (each has exact offsets in the log)
``mq_mirror_errors_total``                  counter  errors by ``kind`` (fetch, append, topics, ...)
``mq_mirror_group_offsets_synced_total``    counter  committed offsets written in the target, by group
``mq_mirror_replication_latency_seconds``   histo    arrival in the target - the batch's max timestamp
==========================================  =======  ==============================================
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mirror.partition import PartitionState, PartitionStatus

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0)


class FlowMetrics(Collector):
    def __init__(self, flow: str) -> None:
        self.flow = flow
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "mq_mirror_replication_latency_seconds",
            "Arrival of a record batch in the target minus its max timestamp",
            ["flow", "topic", "partition"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self.snapshot: Sequence[PartitionStatus] = ()
        self.buffer_used_bytes = 0  # of the flow's buffer.max.bytes, taken with the snapshot
        self.gaps_total: dict[tuple[str, int], int] = {}
        self.errors: dict[str, int] = {}
        self.group_offsets: dict[str, int] = {}
        self.registry.register(self)
        self._latency_children: dict[tuple[str, int], object] = {}

    def serve(self, host: str, port: int) -> int:
        """Start /metrics on ``host:port`` (0: any free port); returns the port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return server.server_address[1]

    def observe_latencies(self, topic: str, partition: int, latencies_ms: Sequence[int]) -> None:
        child = self._latency_children.get((topic, partition))
        if child is None:
            child = self.latency.labels(self.flow, topic, str(partition))
            self._latency_children[(topic, partition)] = child
        for ms in latencies_ms:
            child.observe(ms / 1000)  # type: ignore[attr-defined]

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def gap(self, topic: str, partition: int) -> None:
        self.gaps_total[(topic, partition)] = self.gaps_total.get((topic, partition), 0) + 1

    def synced(self, group: str, offsets: int) -> None:
        self.group_offsets[group] = self.group_offsets.get(group, 0) + offsets

    def collect(self) -> Iterator:
        labels = ["flow", "topic", "partition"]
        gauges = {
            "lag_records": GaugeMetricFamily("mq_mirror_lag_records", "Source high watermark minus mirrored end", labels=labels),
            "lag_seconds": GaugeMetricFamily("mq_mirror_lag_seconds", "Age of the oldest record not yet mirrored", labels=labels),
            "source_end": GaugeMetricFamily("mq_mirror_source_end_offset", "Source high watermark last seen", labels=labels),
            "mirrored_end": GaugeMetricFamily("mq_mirror_mirrored_end_offset", "Target high watermark (mirrored end)", labels=labels),
            "source_unreachable": GaugeMetricFamily("mq_mirror_source_unreachable", "1 while the source does not answer the partition's fetches", labels=labels),
            "source_silent_s": GaugeMetricFamily("mq_mirror_source_silent_seconds", "Seconds since the source last answered a fetch", labels=labels),
            "source_rate_per_s": GaugeMetricFamily("mq_mirror_source_produce_rate", "Last known growth of the source high watermark, records per second", labels=labels),
            "lag_records_estimate": GaugeMetricFamily("mq_mirror_lag_records_estimate", "While the source is unreachable: lag lower bound + produce rate x silence (an estimate)", labels=labels),
        }
        state = GaugeMetricFamily("mq_mirror_partition_state", "1 for the partition's current state",
                                  labels=[*labels, "state"])
        records = CounterMetricFamily("mq_mirror_records", "Records appended to the target", labels=labels)
        nbytes = CounterMetricFamily("mq_mirror_bytes", "Bytes of record batches appended to the target", labels=labels)
        gap_records = CounterMetricFamily("mq_mirror_gap_records", "Records deleted in the source before they were mirrored", labels=labels)
        gaps = CounterMetricFamily("mq_mirror_gaps", "Gaps detected", labels=labels)
        for p in self.snapshot:
            key = [self.flow, p.topic, str(p.partition)]
            for name, family in gauges.items():
                value = getattr(p, name)
                if value is not None:
                    family.add_metric(key, float(value))
            for s in PartitionState:
                state.add_metric([*key, s.value], 1.0 if p.state == s else 0.0)
            records.add_metric(key, p.records_mirrored)
            nbytes.add_metric(key, p.bytes_mirrored)
            gap_records.add_metric(key, p.gap_records)
            gaps.add_metric(key, self.gaps_total.get((p.topic, p.partition), 0))
        yield from gauges.values()
        yield from (state, records, nbytes, gap_records, gaps)
        used = GaugeMetricFamily("mq_mirror_buffer_used_bytes", "Fetched and not yet appended, plus what the "
                                 "fetches in flight may bring (bounded by buffer.max.bytes)", labels=["flow"])
        used.add_metric([self.flow], self.buffer_used_bytes)
        yield used
        errors = CounterMetricFamily("mq_mirror_errors", "Errors by kind", labels=["flow", "kind"])
        for kind, n in sorted(self.errors.items()):
            errors.add_metric([self.flow, kind], n)
        yield errors
        synced = CounterMetricFamily("mq_mirror_group_offsets_synced",
                                     "Committed offsets written in the target", labels=["flow", "group"])
        for group, n in sorted(self.group_offsets.items()):
            synced.add_metric([self.flow, group], n)
        yield synced
