"""The lag benchmark runs end to end at tiny size (the exporter's cost; Spark against the
Python consumer on the same records), so it cannot rot between real runs."""

from __future__ import annotations

from loadtests.bench_lag import exporter_overhead, parse_args, spark_vs_consumer


def test_exporter_overhead_is_measured_over_real_rounds():
    line = exporter_overhead(groups=2, partitions=2, interval="300ms", seconds=2.0)
    assert line["workload"] == "lag-exporter" and line["snapshots_per_round"] == 4
    assert line["rounds"] >= 3 and line["last_round_seconds"] is not None
    assert line["exporter_cpu_per_round_ms"] > 0 and 0 <= line["broker_cpu_share_with_exporter"] < 2


def test_spark_read_and_the_python_consumer_read_the_same_records(spark, capsys):
    lines = spark_vs_consumer(spark, records=3000, runs=1, partitions=3)
    runs = [line for line in lines if not line.get("summary")]
    assert {(line["system"], line["records"]) for line in runs} == {("spark", 3000), ("python-consumer", 3000)}
    [summary] = [line for line in lines if line.get("summary")]
    assert summary["ratio_spark_to_consumer"] > 0
    assert capsys.readouterr().out.count('"workload": "spark-read"') == 3  # one JSON line per run + the summary


def test_arguments():
    args = parse_args(["--only", "exporter", "--groups", "5"])
    assert (args.only, args.groups, args.partitions, args.master) == ("exporter", 5, 12, "local[2]")
