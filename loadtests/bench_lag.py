"""``python -m loadtests.bench_lag``: what the lag exporter costs, and how fast Spark reads mq.

``exporter``: one broker, ``--groups`` consumer groups with committed offsets on a topic of
``--partitions`` partitions (so every round describes every group and looks up the next
unread record's timestamp of every partition); CPU seconds of the broker over
``--seconds`` without the exporter, then with ``python -m mq.deploy.lag_exporter`` at
``--interval``; the exporter's own CPU and its round times (from its status file).

``spark-read``: ``--records`` records of 100 B in 6 partitions, read with
``spark.read.format("mq")`` (``local[N]``: one executor core per partition reader, the sum
of the value lengths forces every row) and with the blocking Python consumer, alternately,
``--runs`` times; one JSON line per run, then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.stats import emit, load_average, median, versions
from mq.client.blocking import Admin, Consumer, Producer
from mq.core.types import TopicPartition
from mq.lab import Cluster

VALUE = b"x" * 100


def _cpu_s(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _fill(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions, exist_ok=True)
    with Producer(bootstrap, linger_ms=20, batch_size=256 * 1024) as producer:
        chunk = 10_000
        for p in range(partitions):
            share = records // partitions + (1 if p < records % partitions else 0)
            for start in range(0, share, chunk):
                producer.send_many(topic, [(None, VALUE)] * min(chunk, share - start), partition=p)


def exporter_overhead(*, groups: int, partitions: int, interval: str, seconds: float) -> dict[str, Any]:
    with Cluster.start() as cluster:
        bootstrap = cluster.bootstrap
        _fill(bootstrap, "lagged", partitions, partitions * 1000)
        with Admin(bootstrap) as admin:
            for g in range(groups):  # half-way through every partition: every partition lags
                admin.alter_group_offsets(f"group-{g}", {TopicPartition("lagged", p): 500 for p in range(partitions)})
        broker_pid = cluster.broker().pid
        before = _cpu_s(broker_pid)
        time.sleep(seconds)
        idle_cpu = _cpu_s(broker_pid) - before
        with tempfile.TemporaryDirectory() as tmp:
            status = Path(tmp) / "status.json"
            exporter = subprocess.Popen(
                [sys.executable, "-m", "mq.deploy.lag_exporter", "--bootstrap", bootstrap, "--region", "bench",
                 "--interval", interval, "--no-metrics", "--status-file", str(status)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 30
                while not status.exists():
                    if time.monotonic() > deadline or exporter.poll() is not None:
                        raise RuntimeError("the lag exporter did not write its status")
                    time.sleep(0.05)
                broker_before, exporter_before = _cpu_s(broker_pid), _cpu_s(exporter.pid)
                rounds_before = _rounds(status)
                time.sleep(seconds)
                broker_cpu = _cpu_s(broker_pid) - broker_before
                exporter_cpu = _cpu_s(exporter.pid) - exporter_before
                doc = _status(status)
            finally:
                exporter.terminate()
                exporter.wait(10)
    rounds = doc["rounds"] - rounds_before
    return {"workload": "lag-exporter", "groups": groups, "partitions": partitions, "interval": interval,
            "seconds": seconds, "rounds": rounds, "snapshots_per_round": groups * partitions,
            "last_round_seconds": doc["last_round_seconds"],
            "exporter_cpu_per_round_ms": round(exporter_cpu / max(1, rounds) * 1000, 2),
            "exporter_cpu_share": round(exporter_cpu / seconds, 4),
            "broker_cpu_share_idle": round(idle_cpu / seconds, 4),
            "broker_cpu_share_with_exporter": round(broker_cpu / seconds, 4),
            "load_average": load_average(), "versions": versions()}


def _status(path: Path) -> dict[str, Any]:
    import json

    return json.loads(path.read_text())["regions"]["bench"]


def _rounds(path: Path) -> int:
    return int(_status(path)["rounds"])


def consumer_read(bootstrap: str, topic: str, partitions: int) -> tuple[int, float]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    started = time.perf_counter()
    with Consumer(bootstrap, max_poll_records=10_000, max_partition_fetch_bytes=8 * 1024 * 1024) as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        total, done = 0, 0
        while done < len(tps):
            records = consumer.poll(timeout_ms=500)
            total += sum(len(r.value) for r in records)
            done = sum(consumer.position(tp) >= ends[tp] for tp in tps)
    return total // len(VALUE), time.perf_counter() - started


def spark_read(spark: Any, bootstrap: str, topic: str) -> tuple[int, float]:
    started = time.perf_counter()
    df = spark.read.format("mq").option("bootstrap", bootstrap).option("topic", topic).load()
    [row] = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()
    return int(row["n"]), time.perf_counter() - started


def spark_vs_consumer(spark: Any, *, records: int, runs: int, partitions: int = 6) -> list[dict[str, Any]]:
    lines = []
    with Cluster.start() as cluster:
        _fill(cluster.bootstrap, "bench", partitions, records)
        spark_read(spark, cluster.bootstrap, "bench")  # warm: the Python workers start once
        rates: dict[str, list[float]] = {"spark": [], "python-consumer": []}
        for run in range(runs):
            for system, read in (("spark", lambda: spark_read(spark, cluster.bootstrap, "bench")),
                                 ("python-consumer", lambda: consumer_read(cluster.bootstrap, "bench", partitions))):
                count, seconds = read()
                if count != records:
                    raise RuntimeError(f"{system} read {count} records, not {records}")
                rates[system].append(count / seconds)
                line = {"workload": "spark-read", "system": system, "run": run, "records": count,
                        "seconds": round(seconds, 3), "rec_per_s": round(count / seconds),
                        "spark_master": spark.sparkContext.master, "load_average": load_average()}
                lines.append(line)
                emit(line)
    summary = {"workload": "spark-read", "summary": True,
               "median_rec_per_s": {k: round(median(v)) for k, v in rates.items()},
               "ratio_spark_to_consumer": round(median(rates["spark"]) / median(rates["python-consumer"]), 3),
               "versions": versions()}
    emit(summary)
    return [*lines, summary]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_lag", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="exporter,spark-read", help="exporter, spark-read (default: both)")
    p.add_argument("--groups", type=int, default=20)
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--interval", default="1s")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    return p.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    only = {w.strip() for w in args.only.split(",")}
    if "exporter" in only:
        emit(exporter_overhead(groups=args.groups, partitions=args.partitions, interval=args.interval,
                               seconds=args.seconds))
    if "spark-read" in only:
        from mq.analytics.session import spark_session

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = spark_session(args.master, app_name="bench-lag", config={"spark.log.level": "ERROR"})
        try:
            spark_vs_consumer(spark, records=args.records, runs=args.runs)
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
