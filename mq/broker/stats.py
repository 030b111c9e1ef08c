"""Counters the shell exports as Prometheus metrics (the core stays free of
prometheus_client). Plain ints updated on the request path; read at scrape time."""

from __future__ import annotations

from dataclasses import dataclass

from mq.protocol.record_batch import iter_batches


@dataclass(slots=True)
class TopicStats:
    records_in: int = 0
    bytes_in: int = 0
    records_out: int = 0
    bytes_out: int = 0
    produce_errors: int = 0
    duplicate_batches: int = 0  # idempotent retries answered with their original offsets
    truncated_committed_offsets: int = 0  # offsets below the high watermark lost to unclean elections


class BrokerStats:
    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}

    def _topic(self, topic: str) -> TopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    def produced(self, topic: str, records: int, size_bytes: int) -> None:
        stats = self._topic(topic)
        stats.records_in += records
        stats.bytes_in += size_bytes

    def duplicate_produced(self, topic: str) -> None:
        self._topic(topic).duplicate_batches += 1

    def produce_failed(self, topic: str) -> None:
        self._topic(topic).produce_errors += 1

    def fetched(self, topic: str, data: bytes | memoryview) -> None:
        """Counts records from batch headers only (one struct read per batch)."""
        if not data:
            return
        stats = self._topic(topic)
        stats.bytes_out += len(data)
        stats.records_out += sum(h.record_count for _, h in iter_batches(data))

    def truncated_committed(self, topic: str, offsets: int) -> None:
        self._topic(topic).truncated_committed_offsets += max(0, offsets)

    def forget(self, topic: str) -> None:
        self.topics.pop(topic, None)
