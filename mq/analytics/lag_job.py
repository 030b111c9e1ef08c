"""The consumer-lag analysis of ``mq analytics lag``, as Spark transformations (no I/O here).

Input: lag snapshots (the records of ``__lag_snapshots``, ``mq.client.internals.lag_snapshot``)
parsed into columns by ``parse_snapshots``. A *consumer* is a consumer group or a mirror
flow of a region (``kind``, ``region``, ``name``). Per export round (one ``ts_ms`` per
region) a consumer's lag is the sum of its partitions' lag in records, and its lag in
seconds the largest of theirs (the age of its oldest unread record).

- ``consumers``: that series, per consumer and round.
- ``percentiles``: per consumer, lag in seconds p50/p90/p99/max over its rounds (exact:
  Spark's ``percentile``, linear between the closest ranks, as numpy's default), and the
  largest lag in records.
- ``breaches``: SLA breach windows. A window opens at the first round whose lag in seconds
  is above ``threshold_s`` and closes at the next round at or below it (``end_ms``); one
  still open at the last round ends there (``open``). Only windows lasting at least
  ``min_duration_s`` are kept.
- ``skew``: per breach window, the partitions that were above the threshold in it, with
  their largest lag in seconds and their share of the consumer's lag in records over the
  window's rounds, largest share first.
- ``partition_share``: per consumer and partition over the whole period: share of the
  lag in records, largest lag in seconds (the skew with no breach at all).
- ``e2e``: end-to-end latency of records from their produce timestamps (``end_to_end``):
  a record at offset ``o`` was consumed by the first round whose committed offset is
  above ``o``; latency = that round's time - the record's timestamp. An upper bound, to
  the export interval; only records still unread at the first round count.
- ``mirror``: per flow, lag in records and seconds and the replication latency the
  mirror measured (its p99 over the rounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

SNAPSHOT_SCHEMA = ("v int, ts_ms long, kind string, region string, topic string, partition int, group string, "
                   "flow string, committed long, log_end long, lag long, lag_seconds double, members int, "
                   "member_id string, state string, latency_p50_ms double, latency_p99_ms double")
CONSUMER = ["kind", "region", "name"]
PERCENTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class LagAnalysis:
    snapshots: DataFrame
    consumers: DataFrame
    percentiles: DataFrame
    breaches: DataFrame
    skew: DataFrame
    partition_share: DataFrame
    mirror: DataFrame
    e2e: DataFrame | None = None

    def tables(self) -> dict[str, DataFrame]:
        out = {"snapshots": self.snapshots, "consumers": self.consumers, "percentiles": self.percentiles,
               "breaches": self.breaches, "skew": self.skew, "partition_share": self.partition_share,
               "mirror": self.mirror}
        if self.e2e is not None:
            out["e2e"] = self.e2e
        return out


def parse_snapshots(records: DataFrame) -> DataFrame:
    """The JSON values of ``__lag_snapshots`` records (the data source's DataFrame) as columns,
    with ``name`` (group or flow) and ``time`` added; other versions are left out."""
    parsed = records.select(F.from_json(F.col("value").cast("string"), SNAPSHOT_SCHEMA).alias("s")).select("s.*")
    return with_names(parsed.where(F.col("v") == 1).drop("v"))


def with_names(snapshots: DataFrame) -> DataFrame:
    return (snapshots.withColumn("name", F.when(F.col("kind") == "group", F.col("group")).otherwise(F.col("flow")))
            .withColumn("time", F.timestamp_millis(F.col("ts_ms"))))


def consumer_series(snapshots: DataFrame) -> DataFrame:
    return (snapshots.groupBy(*CONSUMER, "ts_ms")
            .agg(F.sum("lag").alias("lag"), F.max("lag_seconds").alias("lag_seconds"),
                 F.max("members").alias("members"), F.count("*").alias("partitions"),
                 F.max("latency_p99_ms").alias("latency_p99_ms"))
            .withColumn("time", F.timestamp_millis(F.col("ts_ms"))))


def percentiles(consumers: DataFrame) -> DataFrame:
    exprs = [F.percentile(F.col("lag_seconds"), p).alias(f"lag_seconds_p{round(p * 100)}") for p in PERCENTILES]
    return (consumers.groupBy(*CONSUMER)
            .agg(*exprs, F.max("lag_seconds").alias("lag_seconds_max"), F.max("lag").alias("lag_max"),
                 F.count("*").alias("rounds"), F.min("ts_ms").alias("first_ms"), F.max("ts_ms").alias("last_ms"))
            .orderBy(*CONSUMER))


def breach_windows(consumers: DataFrame, threshold_s: float, min_duration_s: float) -> DataFrame:
    """Islands of rounds above the threshold (see the module docstring for the exact rule)."""
    order = Window.partitionBy(*CONSUMER).orderBy("ts_ms")
    flagged = (consumers.withColumn("above", F.coalesce(F.col("lag_seconds") > threshold_s, F.lit(False)))
               .withColumn("next_ms", F.lead("ts_ms").over(order))
               .withColumn("change", (F.col("above") != F.coalesce(F.lag("above").over(order), F.lit(False)))
                           .cast("int"))
               .withColumn("island", F.sum("change").over(order.rowsBetween(Window.unboundedPreceding, 0))))
    windows = (flagged.where("above").groupBy(*CONSUMER, "island")
               .agg(F.min("ts_ms").alias("start_ms"), F.max("ts_ms").alias("last_above_ms"),
                    F.max_by("next_ms", "ts_ms").alias("next_ms"), F.max("lag_seconds").alias("peak_lag_seconds"),
                    F.max("lag").alias("peak_lag"), F.count("*").alias("rounds"))
               .withColumn("open", F.col("next_ms").isNull())
               .withColumn("end_ms", F.coalesce(F.col("next_ms"), F.col("last_above_ms")))
               .withColumn("duration_s", (F.col("end_ms") - F.col("start_ms")) / 1000.0))
    return (windows.where(F.col("duration_s") >= min_duration_s)
            .select(*CONSUMER, "start_ms", "end_ms", "duration_s", "open", "peak_lag_seconds", "peak_lag", "rounds",
                    F.timestamp_millis("start_ms").alias("start"), F.timestamp_millis("end_ms").alias("end"))
            .orderBy(*CONSUMER, "start_ms"))


def skew_in_breaches(snapshots: DataFrame, breaches: DataFrame, threshold_s: float) -> DataFrame:
    """Per breach window, the partitions above the threshold in it and their share of the lag."""
    w = breaches.select(*CONSUMER, "start_ms", "end_ms", "open")
    before_end = (F.col("ts_ms") < F.col("end_ms")) | (F.col("open") & (F.col("ts_ms") == F.col("end_ms")))
    inside = snapshots.join(w, on=CONSUMER).where((F.col("ts_ms") >= F.col("start_ms")) & before_end)
    per_partition = (inside.groupBy(*CONSUMER, "start_ms", "topic", "partition")
                     .agg(F.max("lag_seconds").alias("max_lag_seconds"), F.sum("lag").alias("lag_sum"),
                          F.max("lag").alias("max_lag")))
    totals = Window.partitionBy(*CONSUMER, "start_ms")
    return (per_partition.withColumn("share", F.col("lag_sum") / F.sum("lag_sum").over(totals))
            .where(F.col("max_lag_seconds") > threshold_s)
            .select(*CONSUMER, "start_ms", "topic", "partition", "max_lag_seconds", "max_lag", "share")
            .orderBy(*CONSUMER, "start_ms", F.desc("share"), "topic", "partition"))


def partition_share(snapshots: DataFrame) -> DataFrame:
    totals = Window.partitionBy(*CONSUMER)
    per = (snapshots.groupBy(*CONSUMER, "topic", "partition")
           .agg(F.sum("lag").alias("lag_sum"), F.max("lag").alias("max_lag"),
                F.max("lag_seconds").alias("max_lag_seconds"), F.avg("lag").alias("mean_lag")))
    return (per.withColumn("share", F.coalesce(F.col("lag_sum") / F.sum("lag_sum").over(totals), F.lit(0.0)))
            .orderBy(*CONSUMER, F.desc("share"), "topic", "partition"))


def mirror_summary(consumers: DataFrame) -> DataFrame:
    flows = consumers.where(F.col("kind") == "mirror")
    return (flows.groupBy("region", "name")
            .agg(F.max("lag").alias("lag_max"), F.percentile(F.col("lag_seconds"), 0.99).alias("lag_seconds_p99"),
                 F.max("lag_seconds").alias("lag_seconds_max"),
                 F.percentile(F.col("latency_p99_ms"), 0.5).alias("replication_latency_p99_ms_median"),
                 F.max("latency_p99_ms").alias("replication_latency_p99_ms_max"), F.count("*").alias("rounds"))
            .withColumnRenamed("name", "flow").orderBy("region", "flow"))


def end_to_end(snapshots: DataFrame, records: DataFrame) -> DataFrame:
    """Per group: end-to-end latency percentiles (ms) of ``records`` (the data source's
    columns topic, partition, offset, timestamp, plus ``region``); see the module docstring."""
    keys = ["region", "name", "topic", "partition"]
    commits = (snapshots.where((F.col("kind") == "group") & F.col("committed").isNotNull())
               .select(*keys, (F.col("committed") - 0.5).alias("key"), F.col("ts_ms").alias("event_ms"),
                       F.lit(None).cast("long").alias("record_ms")))
    first = commits.groupBy(*keys).agg(F.min("key").alias("first_key"))
    read = (records.select("region", "topic", "partition", F.col("offset").cast("double").alias("key"),
                           F.lit(None).cast("long").alias("event_ms"),
                           (F.unix_micros("timestamp") / 1000).cast("long").alias("record_ms"))
            .join(first, on=["region", "topic", "partition"]).where(F.col("key") > F.col("first_key"))
            .select(*keys, "key", "event_ms", "record_ms"))
    after = Window.partitionBy(*keys).orderBy("key").rowsBetween(0, Window.unboundedFollowing)
    joined = (commits.unionByName(read).withColumn("consumed_ms", F.first("event_ms", ignorenulls=True).over(after))
              .where(F.col("record_ms").isNotNull() & F.col("consumed_ms").isNotNull())
              .withColumn("latency_ms", F.col("consumed_ms") - F.col("record_ms")))
    exprs = [F.percentile(F.col("latency_ms"), p).alias(f"latency_ms_p{round(p * 100)}") for p in PERCENTILES]
    return (joined.groupBy("region", "name")
            .agg(*exprs, F.max("latency_ms").alias("latency_ms_max"), F.count("*").alias("records"))
            .orderBy("region", "name"))


def analyse(snapshots: DataFrame, *, threshold_s: float, min_duration_s: float,
            records: DataFrame | None = None) -> LagAnalysis:
    """Every table of the module docstring from parsed snapshots (and, for ``e2e``, records)."""
    # Every table is written and summarised, several actions each: cache them all (they are
    # small), so the snapshots and the topics' records are read from the brokers once.
    snapshots = snapshots.cache()
    consumers = consumer_series(snapshots).cache()
    breaches = breach_windows(consumers, threshold_s, min_duration_s).cache()
    return LagAnalysis(
        snapshots=snapshots, consumers=consumers, percentiles=percentiles(consumers).cache(), breaches=breaches,
        skew=skew_in_breaches(snapshots, breaches, threshold_s).cache(),
        partition_share=partition_share(snapshots).cache(), mirror=mirror_summary(consumers).cache(),
        e2e=end_to_end(snapshots, records).cache() if records is not None else None)


def rows(df: DataFrame) -> list[dict[str, Any]]:
    """A small DataFrame as dicts (for summaries and tests)."""
    return [r.asDict() for r in df.collect()]
