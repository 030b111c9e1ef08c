"""``spark.read.format("mq")`` and ``spark.readStream.format("mq")``: mq topics as Spark DataFrames.

PySpark's Python Data Source API (PySpark 4): no JVM connector, the reads run in Spark's
Python workers through mq's blocking client. Register once per session::

    from mq.analytics import register
    register(spark)
    df = spark.read.format("mq").option("bootstrap", "localhost:9092").option("topic", "orders").load()

Schema (as Spark's Kafka source): ``topic string, partition int, offset long, timestamp
timestamp, key binary, value binary, headers array<struct<key string, value binary>>``.
Options: ``mq.analytics.options``.

Batch: the driver asks the brokers for each partition's range (offsets or timestamps)
when Spark plans the read; one Spark partition per topic partition, or several with
``maxRecordsPerPartition``. Streaming: the offsets are ``{"orders": {"0": 42}}`` per
micro-batch, kept by Spark in the checkpoint, so a restarted query resumes after the
last batch it completed (each record once, with an idempotent or transactional sink);
a partition added to the topic is read from its log start; with ``groupId`` the end of
each completed batch is also committed to that mq consumer group.
"""

from __future__ import annotations

import logging

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from mq.analytics.options import SourceOptions, parse_options
from mq.analytics.ranges import (
    OffsetRange,
    batch_ranges,
    initial_offsets,
    offsets_json,
    offsets_of_json,
    split,
    stream_ranges,
)
from mq.analytics.reading import SCHEMA, Planner, read_range
from mq.core.errors import MqError

log = logging.getLogger("mq.analytics")

FORMAT = "mq"


class RangePartition(InputPartition):
    """One Spark partition: an offset range of one topic partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


class MqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MqBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MqStreamReader(parse_options(self.options, streaming=True))


class MqBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        planner = Planner(self.options.bootstrap)
        try:
            ranges = batch_ranges(self.options, planner.bounds_for(self.options))
        finally:
            planner.close()
        return [RangePartition(r) for r in split(ranges, self.options.max_records_per_partition)]

    def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
        yield from read_range(self.options.bootstrap, partition.range, poll_timeout_ms=self.options.poll_timeout_ms)


class MqStreamReader(DataSourceStreamReader):
    """Offsets per partition; a planner (Admin) lives for the query in Spark's source process."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: Planner | None = None

    def __getstate__(self) -> dict:
        return {"options": self.options, "_planner": None}  # a client is never pickled

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options.bootstrap)
        return self._planner

    def initialOffset(self) -> dict:
        bounds = self.planner.bounds_for(self.options)
        return offsets_json(initial_offsets(self.options, bounds))

    def latestOffset(self) -> dict:
        bounds = self.planner.bounds(self.planner.partitions(self.options.topics))
        return offsets_json({tp: b.log_end for tp, b in bounds.items()})

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, finish = offsets_of_json(start), offsets_of_json(end)
        log_starts = {tp: b.log_start for tp, b in self.planner.bounds(sorted(finish)).items()}
        ranges = stream_ranges(self.options, begin, finish, log_starts)
        return [RangePartition(r) for r in split(ranges, self.options.max_records_per_partition)]

    def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
        yield from read_range(self.options.bootstrap, partition.range, poll_timeout_ms=self.options.poll_timeout_ms)

    def commit(self, end: dict) -> None:
        """Spark finished the batches up to ``end``; with ``groupId`` tell mq (for lag, not
        for recovery: the checkpoint is what a restart reads, so a refused commit — the
        group has members of its own — is logged, never fatal to the query)."""
        if not self.options.group_id:
            return
        try:
            self.planner.commit(self.options.group_id, offsets_of_json(end))
        except MqError as exc:
            log.warning("event=spark_group_commit_failed group=%s code=%s message=\"%s\"", self.options.group_id,
                        exc.code.name, exc.message)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


def register(spark) -> None:  # type: ignore[no-untyped-def]
    """Make ``format("mq")`` known to ``spark`` (a SparkSession)."""
    spark.dataSource.register(MqDataSource)
