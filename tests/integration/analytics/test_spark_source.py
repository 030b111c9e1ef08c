"""``format("mq")`` in Spark against a real broker: a batch read equals what was produced
(offsets, keys, values, headers, timestamps), by offsets and by timestamps, split or not;
a streaming query resumes from its checkpoint after a restart with no record twice; bad
options and unknown topics are clear errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mq.client.blocking import Admin, Consumer, Producer
from mq.core.types import TopicPartition

RECORDS = 10_000
PARTITIONS = 3
T0 = 1_764_000_000_000  # the records' timestamps: T0 + i


def produce(bootstrap: str, topic: str, first: int, count: int) -> list[tuple]:
    """Records ``first..first+count-1`` into partition i % 3 with key, value, two headers and
    timestamp T0 + i; returns (partition, offset, key, value, headers, timestamp) as acknowledged."""
    with Producer(bootstrap, linger_ms=5) as producer:
        futures = []
        for i in range(first, first + count):
            key, value = f"k{i % 97}".encode(), f"value-{i}".encode()
            headers = [("i", str(i).encode()), ("src", b"\x00\xff")]
            futures.append((i, key, value, headers, producer.send_nowait(
                topic, value, key, headers, partition=i % PARTITIONS, timestamp_ms=T0 + i)))
        out = []
        for i, key, value, headers, future in futures:
            meta = future.result(30)
            out.append((meta.partition, meta.offset, key, value, tuple(headers), T0 + i))
    return out


def rows_of(df) -> list[tuple]:
    return sorted((r.partition, r.offset, bytes(r.key), bytes(r.value),
                   tuple((h.key, bytes(h.value)) for h in r.headers), int(r.timestamp.timestamp() * 1000))
                  for r in df.collect())


@pytest.fixture(scope="module")
def loaded(module_broker):
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic("orders", PARTITIONS)
    return module_broker.bootstrap, produce(module_broker.bootstrap, "orders", 0, RECORDS)


def test_batch_read_equals_what_was_produced(spark, loaded):
    bootstrap, produced = loaded
    df = spark.read.format("mq").option("bootstrap", bootstrap).option("topic", "orders").load()
    assert df.columns == ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
    assert df.rdd.getNumPartitions() == PARTITIONS  # one Spark partition per topic partition
    started = time.monotonic()
    assert rows_of(df) == sorted(produced)
    print(f"batch read of {RECORDS} records: {time.monotonic() - started:.2f} s")
    split = (spark.read.format("mq").option("bootstrap", bootstrap).option("maxRecordsPerPartition", "1000")
             .load("orders"))
    assert split.rdd.getNumPartitions() == 12  # 3334, 3333, 3333 records: 4 ranges each
    assert split.count() == RECORDS and split.select("offset", "partition").distinct().count() == RECORDS


def test_batch_read_by_timestamps_and_by_offsets(spark, loaded):
    bootstrap, produced = loaded
    window = (spark.read.format("mq").option("bootstrap", bootstrap).option("topic", "orders")
              .option("startingTimestamp", str(T0 + 2000)).option("endingTimestamp", "2025-11-24T16:00:05Z").load())
    assert T0 + 5000 == 1_764_000_005_000  # what the ISO time above says
    assert rows_of(window) == sorted(r for r in produced if T0 + 2000 <= r[5] < T0 + 5000)
    offsets = (spark.read.format("mq").option("bootstrap", bootstrap).option("topic", "orders")
               .option("startingOffsets", json.dumps({"orders": {"0": 100, "2": -1}}))
               .option("endingOffsets", json.dumps({"orders": {"0": 200}})).load())
    expected = [r for r in produced if (r[0] == 0 and 100 <= r[1] < 200) or r[0] == 1]
    assert rows_of(offsets) == sorted(expected)


def test_stream_resumes_from_its_checkpoint_with_no_record_twice(spark, module_broker, tmp_path: Path):
    bootstrap = module_broker.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic("events", PARTITIONS)
    first = produce(bootstrap, "events", 0, 900)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    def run_query() -> None:
        stream = (spark.readStream.format("mq").option("bootstrap", bootstrap).option("topic", "events")
                  .option("startingOffsets", "earliest").option("groupId", "spark-events").load())
        query = (stream.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").writeStream
                 .foreachBatch(lambda batch, batch_id: batch.write.mode("overwrite").parquet(f"{out}/batch={batch_id}"))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()

    run_query()
    assert spark.read.parquet(str(out)).count() == 900
    second = produce(bootstrap, "events", 900, 600)
    run_query()  # a new query on the same checkpoint: a restart
    read = spark.read.parquet(str(out))
    assert read.count() == 1500 and read.select("partition", "offset").distinct().count() == 1500
    assert sorted((r.partition, r.offset) for r in read.collect()) == sorted((r[0], r[1]) for r in first + second)
    assert read.select("batch").distinct().count() >= 2  # the second run made batches of its own
    with Admin(bootstrap) as admin:  # the end of the first run's batches, committed when the second began
        committed = {tp: om.offset for tp, om in admin.list_group_offsets("spark-events").items()}
    with Consumer(bootstrap) as consumer:
        first_end = {TopicPartition("events", p): sum(1 for r in first if r[0] == p) for p in range(PARTITIONS)}
        assert all(first_end[tp] <= committed[tp] <= end for tp, end in
                   consumer.end_offsets(list(first_end)).items()), committed


def test_bad_options_and_unknown_topics_are_clear_errors(spark, module_broker):
    def reader():  # a DataFrameReader keeps its options: a fresh one each time
        return spark.read.format("mq").option("bootstrap", module_broker.bootstrap)

    with pytest.raises(Exception, match="maxRecordsPerPartition must be a positive integer, not 'ten'"):
        reader().option("topic", "orders").option("maxRecordsPerPartition", "ten").load().collect()
    with pytest.raises(Exception, match="MQ_SOURCE_UNKNOWN_TOPIC"):
        reader().option("topic", "no-such-topic").load().collect()
    with pytest.raises(Exception, match="MQ_SOURCE_NO_BROKER"):
        spark.read.format("mq").option("bootstrap", "127.0.0.1:1").option("topic", "t").load().collect()
