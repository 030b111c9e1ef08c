"""The I/O of the mq data source: asking the brokers where partitions start and end, and
reading one offset range into Arrow record batches.

Both use the blocking client (``mq.client.blocking``): Spark calls the source from plain
Python worker processes, and a client (sockets, a loop thread) is made where it is used,
never pickled. ``read_range`` assigns the one partition, seeks to the range's start and
polls until its position reaches the end; records past the end (a poll returns whole
batches) are cut off. A compacted partition has holes: the position jumps over them.
Records arrive as Arrow batches of up to ``ARROW_BATCH_ROWS`` rows, in the source's
schema (``SCHEMA``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa

from mq.analytics.options import SourceOptions
from mq.analytics.ranges import OffsetRange, PartitionBounds, SourceReadError
from mq.client.blocking import Admin, Consumer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition

SCHEMA = ("topic string, partition int, offset long, timestamp timestamp, key binary, value binary, "
          "headers array<struct<key: string, value: binary>>")
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                          ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.binary()),
                          ("value", pa.binary()), ("headers", HEADERS_TYPE)])
ARROW_BATCH_ROWS = 10_000
PLANNING_TIMEOUT_MS = 15_000
POLL_MS = 500


def _admin(bootstrap: str) -> Admin:
    try:
        return Admin(bootstrap, request_timeout_ms=PLANNING_TIMEOUT_MS, client_id="mq-spark")
    except MqError as exc:
        raise SourceReadError("MQ_SOURCE_NO_BROKER", f"no mq broker answered at {bootstrap} ({exc.message}); "
                              'check .option("bootstrap", "HOST:PORT")') from None


class Planner:
    """Asks the brokers what the planning of a read needs (one Admin, closed by ``close``)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = _admin(bootstrap)

    def close(self) -> None:
        self.admin.close()

    def partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        try:
            described = self.admin.describe_topics(list(topics))
        except MqError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC:
                raise SourceReadError("MQ_SOURCE_UNKNOWN_TOPIC", f"no such topic at {self.bootstrap}: {exc.message}; "
                                      "list them with `mq topic list`") from None
            raise
        return [TopicPartition(t.name, p.partition) for t in described for p in t.partitions]

    def bounds(self, tps: Sequence[TopicPartition], *, start_ms: int | None = None,
               end_ms: int | None = None) -> dict[TopicPartition, PartitionBounds]:
        """Log start and end of every partition, and the offsets for the timestamps given."""
        if not tps:
            return {}
        starts = self.admin.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps})
        ends = self.admin.list_offsets({tp: LATEST_TIMESTAMP for tp in tps})
        by_start = self.admin.list_offsets({tp: start_ms for tp in tps}) if start_ms is not None else {}
        by_end = self.admin.list_offsets({tp: end_ms for tp in tps}) if end_ms is not None else {}
        return {tp: PartitionBounds(starts[tp].offset, ends[tp].offset,
                                    by_start[tp].offset if tp in by_start else None,
                                    by_end[tp].offset if tp in by_end else None) for tp in tps}

    def bounds_for(self, options: SourceOptions) -> dict[TopicPartition, PartitionBounds]:
        return self.bounds(self.partitions(options.topics), start_ms=options.starting_timestamp_ms,
                           end_ms=options.ending_timestamp_ms)

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        self.admin.alter_group_offsets(group_id, dict(offsets))


def _batch(topic: str, partition: int, rows: list) -> pa.RecordBatch:
    n = len(rows)
    return pa.RecordBatch.from_arrays([
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([r.offset for r in rows], pa.int64()),
        pa.array([r.timestamp * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
        pa.array([r.key for r in rows], pa.binary()),
        pa.array([r.value for r in rows], pa.binary()),
        pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in rows], HEADERS_TYPE),
    ], schema=ARROW_SCHEMA)


def read_range(bootstrap: str, r: OffsetRange, *, poll_timeout_ms: int,
               batch_rows: int = ARROW_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The records of ``[r.start, r.end)`` of one partition, as Arrow batches."""
    if r.size == 0:
        return
    tp = r.tp
    try:
        consumer = Consumer(bootstrap, auto_offset_reset="none", max_poll_records=batch_rows,
                            max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_wait_ms=100, client_id="mq-spark")
    except MqError as exc:
        raise SourceReadError("MQ_SOURCE_NO_BROKER", f"no mq broker answered at {bootstrap} ({exc.message})") from None
    try:
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        position, rows = r.start, []
        waited_since = time.monotonic()
        while position < r.end:
            try:
                records = consumer.poll(timeout_ms=POLL_MS, max_records=batch_rows)
            except MqError as exc:
                if exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise SourceReadError("MQ_SOURCE_DATA_LOSS", f"{tp}: offset {position} is no longer in the log "
                                          "(deleted while the query ran)") from None
                raise
            if records:
                waited_since = time.monotonic()
                rows += [rec for rec in records if rec.offset < r.end]
                position = records[-1].offset + 1
            else:
                position = max(position, consumer.position(tp))  # holes of a compacted log
                if (time.monotonic() - waited_since) * 1000 > poll_timeout_ms:
                    raise SourceReadError("MQ_SOURCE_TIMEOUT", f"{tp}: no records at offset {position} for "
                                          f"{poll_timeout_ms} ms (range [{r.start}, {r.end}))")
            while len(rows) >= batch_rows:
                yield _batch(r.topic, r.partition, rows[:batch_rows])
                rows = rows[batch_rows:]
        if rows:
            yield _batch(r.topic, r.partition, rows)
    finally:
        consumer.close()
