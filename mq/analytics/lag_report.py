"""``mq analytics lag``: read the lag snapshots, analyse them (``mq.analytics.lag_job``), write
parquet, PNG plots and ``summary.json``, and return the summary the command prints.

Sources are regions: each region's ``__lag_snapshots`` is read from ``since_ms`` on (by
timestamp, with the ``format("mq")`` source) and the regions are put together. With
``e2e`` the groups' topics are read too, from the same time, for the end-to-end latency.
A locust run directory (``mq load run``: ``*_stats_history.csv``) adds the load to the
lag plot and a ``load`` table. Files written under ``out_dir``::

    snapshots.parquet consumers.parquet percentiles.parquet breaches.parquet skew.parquet
    partition_share.parquet mirror.parquet [e2e.parquet] [load.parquet]
    lag_over_time.png lag_percentiles.png skew.png [mirror_lag.png] summary.json
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import functions as F

from mq.analytics.lag_job import LagAnalysis, analyse, parse_snapshots, rows
from mq.analytics.ranges import SourceReadError

SNAPSHOT_TOPIC = "__lag_snapshots"


@dataclass(frozen=True)
class Source:
    region: str
    bootstrap: str


@dataclass(frozen=True)
class LagReport:
    out_dir: str
    summary: list[dict[str, Any]]
    breaches: list[dict[str, Any]]
    files: list[str] = field(default_factory=list)
    analysis: LagAnalysis | None = None


class NoSnapshots(RuntimeError):
    """Nothing to analyse: the message says where it looked and what to do."""


def existing_topics(bootstrap: str, topics: Sequence[str]) -> list[str]:
    """The topics of ``topics`` that exist in the cluster at ``bootstrap``."""
    from mq.analytics.reading import Planner

    planner = Planner(bootstrap)
    try:
        listed = set(planner.admin.list_topics(include_internal=True))
    finally:
        planner.close()
    return [t for t in topics if t in listed]


def _union(frames: list) -> Any:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def read_snapshots(spark: Any, sources: Sequence[Source], *, since_ms: int, topic: str = SNAPSHOT_TOPIC) -> Any:
    frames = []
    for source in sources:
        if not existing_topics(source.bootstrap, [topic]):
            continue
        raw = (spark.read.format("mq").option("bootstrap", source.bootstrap).option("topic", topic)
               .option("startingTimestamp", str(since_ms)).option("failOnDataLoss", "false").load())
        frames.append(parse_snapshots(raw).withColumn("source", F.lit(source.bootstrap)))
    if not frames:
        where = ", ".join(f"{s.region or s.bootstrap}" for s in sources)
        raise NoSnapshots(f"no {topic} topic in {where}: the lag exporter has written nothing there yet "
                          "(`mq up` starts one; or run `mq lag export`)")
    return _union(frames)


def read_records(spark: Any, sources: Sequence[Source], snapshots: Any, *, since_ms: int) -> Any | None:
    """The records of the groups' topics since ``since_ms`` (offset, timestamp), per region."""
    frames = []
    for source in sources:
        pairs = (snapshots.where((F.col("kind") == "group") & (F.col("source") == source.bootstrap))
                 .select("region", "topic").distinct())
        wanted = sorted({r["topic"] for r in pairs.collect()})
        topics = existing_topics(source.bootstrap, wanted) if wanted else []
        if not topics:
            continue
        raw = (spark.read.format("mq").option("bootstrap", source.bootstrap).option("topic", ",".join(topics))
               .option("startingTimestamp", str(since_ms)).option("failOnDataLoss", "false").load())
        frames.append(raw.join(pairs, on="topic").select("region", "topic", "partition", "offset", "timestamp"))
    return _union(frames) if frames else None


def read_load(paths: Sequence[str]) -> Any:
    """locust's ``*_stats_history.csv`` of the run directories (aggregated rows) as pandas."""
    import pandas as pd

    frames = []
    for path in paths:
        files = [path] if os.path.isfile(path) else sorted(glob.glob(os.path.join(path, "*_stats_history.csv")))
        if not files:
            raise FileNotFoundError(f"no locust *_stats_history.csv in {path}")
        for name in files:
            history = pd.read_csv(name)
            history = history[history["Name"] == "Aggregated"]
            frames.append(pd.DataFrame({
                "ts_ms": history["Timestamp"].astype("int64") * 1000, "users": history["User Count"],
                "requests_per_s": history["Requests/s"], "failures_per_s": history["Failures/s"],
                "latency_p50_ms": pd.to_numeric(history["50%"], errors="coerce"),
                "latency_p99_ms": pd.to_numeric(history["99%"], errors="coerce"), "run": os.path.basename(name)}))
    return pd.concat(frames, ignore_index=True).sort_values("ts_ms") if frames else pd.DataFrame()


def summary_rows(analysis: LagAnalysis) -> list[dict[str, Any]]:
    """One row per consumer: lag percentiles, breaches, the partition with most of the lag, e2e."""
    breaches = rows(analysis.breaches)
    worst = {}
    for s in rows(analysis.partition_share):
        key = (s["kind"], s["region"], s["name"])
        worst.setdefault(key, s)
    e2e = {(r["region"], r["name"]): r for r in rows(analysis.e2e)} if analysis.e2e is not None else {}
    out = []
    for p in rows(analysis.percentiles):
        key = (p["kind"], p["region"], p["name"])
        mine = [b for b in breaches if (b["kind"], b["region"], b["name"]) == key]
        top = worst.get(key)
        latency = e2e.get((p["region"], p["name"]), {})
        out.append({
            "kind": p["kind"], "region": p["region"], "name": p["name"], "rounds": p["rounds"],
            "lag_max": p["lag_max"], "lag_seconds_p50": p["lag_seconds_p50"], "lag_seconds_p90": p["lag_seconds_p90"],
            "lag_seconds_p99": p["lag_seconds_p99"], "lag_seconds_max": p["lag_seconds_max"],
            "breaches": len(mine), "breach_seconds": round(sum(b["duration_s"] for b in mine), 3),
            "top_partition": f"{top['topic']}-{top['partition']}" if top and top["share"] else None,
            "top_partition_share": round(top["share"], 4) if top and top["share"] else None,
            "e2e_p50_ms": latency.get("latency_ms_p50"), "e2e_p99_ms": latency.get("latency_ms_p99")})
    return out


def write(analysis: LagAnalysis, out_dir: str, *, threshold_s: float, load: Any = None) -> list[str]:
    from mq.analytics import lag_plots

    os.makedirs(out_dir, exist_ok=True)
    files = []
    for name, df in analysis.tables().items():
        path = os.path.join(out_dir, f"{name}.parquet")
        df.coalesce(1).write.mode("overwrite").parquet(path)
        files.append(path)
    snapshots = analysis.snapshots.drop("time").toPandas()
    consumers = analysis.consumers.drop("time").toPandas()
    breaches = analysis.breaches.drop("start", "end").toPandas()
    figures = {"lag_over_time": lag_plots.lag_over_time(snapshots, breaches, threshold_s, load),
               "lag_percentiles": lag_plots.percentile_bars(analysis.percentiles.toPandas()),
               "skew": lag_plots.skew_bars(analysis.partition_share.toPandas())}
    if (consumers["kind"] == "mirror").any():
        figures["mirror_lag"] = lag_plots.mirror_lag(consumers)
    if load is not None and len(load):
        path = os.path.join(out_dir, "load.parquet")
        load.to_parquet(path, index=False)
        files.append(path)
    for name, fig in figures.items():
        path = os.path.join(out_dir, f"{name}.png")
        fig.savefig(path, dpi=90)
        lag_plots.plt.close(fig)
        files.append(path)
    return files


def run(spark: Any, sources: Sequence[Source], *, since_ms: int, out_dir: str, threshold_s: float,
        min_duration_s: float, e2e: bool = True, load_paths: Sequence[str] = (), topic: str = SNAPSHOT_TOPIC,
        groups: str | None = None) -> LagReport:
    snapshots = read_snapshots(spark, sources, since_ms=since_ms, topic=topic)
    if groups:
        snapshots = snapshots.where((F.col("kind") != "group") | F.col("name").rlike(f"^(?:{groups})$"))
    snapshots = snapshots.cache()
    if snapshots.limit(1).count() == 0:
        raise NoSnapshots(f"no lag snapshots since the start of the window in {topic}: is the lag exporter "
                          "running (`mq lag status`), and is --since long enough?")
    records = read_records(spark, sources, snapshots, since_ms=since_ms) if e2e else None
    load = read_load(load_paths) if load_paths else None
    analysis = analyse(snapshots, threshold_s=threshold_s, min_duration_s=min_duration_s, records=records)
    files = write(analysis, out_dir, threshold_s=threshold_s, load=load)
    summary = summary_rows(analysis)
    breaches = [{k: v for k, v in b.items() if k not in ("start", "end")} for b in rows(analysis.breaches)]
    doc = {"since_ms": since_ms, "threshold_s": threshold_s, "min_duration_s": min_duration_s,
           "regions": [s.region for s in sources], "consumers": summary, "breaches": breaches,
           "skew": rows(analysis.skew)}
    path = os.path.join(out_dir, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)
    files.append(path)
    return LagReport(out_dir, summary, breaches, files, analysis)


__all__ = ["LagReport", "NoSnapshots", "Source", "SourceReadError", "read_load", "read_records", "read_snapshots",
           "run", "summary_rows", "write"]
