# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 — Load and lag: a locust spike, a slow consumer group, and Spark finding the culprit
#
# A consumer group keeps up as long as it can do its work faster than records arrive. When
# the load spikes above its **capacity**, records wait: the group's **lag** grows, in records
# (log end minus committed offset) and in **seconds** (the age of the oldest record it has
# not read yet — the number an SLA is written in). When the load falls back, the backlog
# drains at *capacity minus load*; adding a member raises the capacity and drains it faster.
#
# In this lab a locust **spike** (`mq load run spike`) writes `orders`, half of its records
# with one **hot key**, so one partition gets far more than the others. A group, `billing`,
# spends 5 ms on each record: one member handles 200 records/s, less than the spike. The
# **lag exporter** (`mq lag export`, what `mq up` runs) writes every group's lag per
# partition to `__lag_snapshots` every half second. After the spike we add a member and
# watch the lag drain; then the **PySpark job** `mq analytics lag` reads the snapshots back
# with the `format("mq")` data source and finds the SLA breach windows, the lag-in-seconds
# percentiles and the partition behind them. docs/explanation/load-and-lag.md has the theory.

# %%
import json
import shutil
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from mq.lab import Cluster, table, wait_until
from mq.lab.figures import save_figure
from mq.lab.load import LagExporterProcess, LoadRun, WorkGroup, run_lag_job

WORK = Path(tempfile.mkdtemp(prefix="mq-lab07-"))
PARTITIONS = 6
USERS = 10  # locust users at the peak: 2 of them the spike scenario's own fast consumer group
RATE = 40  # records/s of each producer user: 80/s before and after the spike, 320/s at its peak
HOT_KEY_SHARE = 0.5  # half of the records carry the key "hot"
DURATION_S = 30  # the spike runs from 30 % to 65 % of it
PER_RECORD_MS = 5  # billing's work per record: 200 records/s per member
THRESHOLD, LONGER_THAN = "2s", "2s"  # the SLA: lag above 2 s for 2 s or more is a breach

# %% [markdown]
# ## A broker, the topic, the exporter and the slow group
#
# One broker on free ports, with its data in a temporary directory (the same exporter runs
# against a region of three, or against every region `mq up` started). New groups start at
# once (`group.initial.rebalance.delay.ms=0`).

# %%
started = time.perf_counter()
cluster = Cluster.start(config={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1})
admin = cluster.admin()
admin.create_topic("orders", partitions=PARTITIONS)
exporter = LagExporterProcess(cluster.bootstrap, region="lab", interval="500ms", directory=WORK / "exporter").start()
billing = WorkGroup(cluster.bootstrap, "orders", "billing", per_record_ms=PER_RECORD_MS).add_member()
print(f"broker {cluster.bootstrap}; lag exporter /metrics at {exporter.metrics_url}")
print(f"billing: {billing.members} member, capacity {billing.capacity_per_s:.0f} records/s")

# %% [markdown]
# ## The spike
#
# `mq load run spike` runs locust headless in its own process: a quarter of the producers,
# then all of them for the middle third, then a quarter again, and two members of the
# scenario's own group (`load-spike`) that read as fast as they can. We watch `billing`'s
# lag on the exporter's `/metrics` — what Prometheus would scrape — and add a second member
# as soon as the peak is over.

# %%
load = LoadRun(cluster.bootstrap, "spike", users=USERS, duration_s=DURATION_S, out_dir=WORK / "spike",
               topic="orders", rate=RATE, hot_key_share=HOT_KEY_SHARE).start()
peak_ends_s = 0.65 * DURATION_S + 0.5
watch = []
while time.monotonic() - load.started_s < peak_ends_s:
    time.sleep(2)
    lines = [line for line in exporter.metrics("mq_consumergroup_lag{") if 'group="billing"' in line]
    watch.append((time.monotonic() - load.started_s, sum(float(line.rsplit(" ", 1)[1]) for line in lines)))
    print(f"{watch[-1][0]:5.1f} s  billing lag {watch[-1][1]:7.0f} records")
billing.add_member()
added_ms = time.time_ns() // 1_000_000
print(f"added a member: billing now has capacity {billing.capacity_per_s:.0f} records/s")
print(load.wait())

# %% [markdown]
# ## The lag drains
#
# The load is back to a quarter (80 records/s); two members do 400 records/s. The backlog
# goes at about 320 records/s: the exporter shows it reach zero.

# %%
def billing_lag() -> float:
    lines = [line for line in exporter.metrics("mq_consumergroup_lag{") if 'group="billing"' in line]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


drained_s = wait_until(lambda: billing_lag() == 0 and time.monotonic() - load.started_s,
                       timeout_s=90, interval_s=0.5, what="billing's lag to drain")
time.sleep(1.5)  # a few more rounds of snapshots at zero
status = exporter.status()
print(f"billing caught up {drained_s:.1f} s after the spike started")
print(f"exporter: {status['regions']['lab']['rounds']} rounds, {status['regions']['lab']['snapshots']} snapshots "
      f"written to {status['topic']}")
assert not billing.errors, billing.errors

# %% [markdown]
# ## The Spark job
#
# `mq analytics lag` reads the last minutes of `__lag_snapshots` with
# `spark.read.format("mq")` (by timestamp: the data source asks the broker which offset
# each partition had at that time), joins locust's history (`--load`), reads `orders` too
# for the end-to-end latency, and writes parquet, PNG plots and `summary.json`. Spark runs
# `local[2]` here; `--master spark://HOST:7077` sends the same job to a cluster.

# %%
out = WORK / "analytics"
printed, job_s = run_lag_job(cluster.bootstrap, out, since="3m", threshold=THRESHOLD, longer_than=LONGER_THAN,
                             load_dirs=(WORK / "spike",))
print(printed)
print(f"the job took {job_s:.0f} s (a Spark session starts in 5-15 s of it)")
summary = json.loads((out / "summary.json").read_text())
snapshots = pd.read_parquet(out / "snapshots.parquet")
breaches = pd.read_parquet(out / "breaches.parquet")
share = pd.read_parquet(out / "partition_share.parquet")
load_history = pd.read_parquet(out / "load.parquet")
assert len(snapshots) and {"billing", "load-spike"} <= set(snapshots["name"])

# %% [markdown]
# ## Lag against load
#
# Top: what locust sent (its own running rate: produce and the fast group's polls). Bottom:
# `billing`'s lag in seconds per partition, with the SLA threshold, the breach windows the
# job found (shaded) and the moment the second member joined.
#
# Two things to see. While one member reads everything, it takes from every partition in
# turn, so all partitions fall behind *in seconds* together, whatever their traffic. Once
# the second member joins, the group splits the partitions three and three (the range
# assignor): the member without the hot partition clears its three at once, the member
# with it is still busy for seconds — with all three of its partitions. Adding consumers
# does not help a partition beyond what one member can do: the hot key sets the floor.

# %%
mine = snapshots[snapshots["name"] == "billing"]
t0 = min(mine["ts_ms"].min(), load_history["ts_ms"].min())
fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6), sharex=True, height_ratios=(1, 2))
top.plot((load_history["ts_ms"] - t0) / 1000, load_history["requests_per_s"], color="grey")
top.set_ylabel("locust requests/s")
top.set_title("spike: load (locust) and billing's lag (lag exporter -> Spark)")
for (topic, partition), part in mine.groupby(["topic", "partition"]):
    part = part.sort_values("ts_ms")
    bottom.plot((part["ts_ms"] - t0) / 1000, part["lag_seconds"], label=f"{topic}-{partition}")
bottom.axhline(float(THRESHOLD.rstrip("s")), color="red", ls="--", lw=1, label=f"SLA {THRESHOLD}")
for _, b in breaches[breaches["name"] == "billing"].iterrows():
    bottom.axvspan((b["start_ms"] - t0) / 1000, (b["end_ms"] - t0) / 1000, color="red", alpha=0.12)
bottom.axvline((added_ms - t0) / 1000, color="black", lw=1, ls=":", label="second member")
bottom.set_ylabel("lag (s)")
bottom.set_xlabel("seconds")
bottom.legend(fontsize=8, ncol=4, loc="upper left")
fig.tight_layout()
save_figure(fig, "lag-vs-load")
plt.show()

# %% [markdown]
# ## Which partitions?
#
# In records the picture is the other way round: the job's `partition_share` (each
# partition's share of the group's lag in records over the whole run) puts most of it on the
# hot key's partition, because most records wait there. `skew` lists the partitions above
# the threshold inside each breach window.

# %%
billing_share = share[share["name"] == "billing"].sort_values("partition")
fig, ax = plt.subplots(figsize=(8, 3))
ax.bar([f"orders-{p}" for p in billing_share["partition"]], billing_share["share"])
ax.set_ylabel("share of billing's lag")
ax.set_title("skew: the hot key's partition holds most of the lag")
fig.tight_layout()
save_figure(fig, "skewed-partitions")
plt.show()
hot = billing_share.sort_values("share", ascending=False).iloc[0]
after = mine[mine["ts_ms"] > added_ms]
cleared = {p: (g[g["lag"] == 0]["ts_ms"].min() - added_ms) / 1000 for p, g in after.groupby("partition")}
print("seconds from the second member joining to each partition's first round with no lag:",
      {f"orders-{p}": round(float(s), 1) for p, s in sorted(cleared.items())})
print(table(summary["consumers"], columns=["name", "breaches", "breach_seconds", "lag_seconds_p50",
                                           "lag_seconds_p99", "lag_seconds_max", "top_partition",
                                           "top_partition_share", "e2e_p50_ms", "e2e_p99_ms"]))
print(f"expected: billing breached the SLA, orders-{hot['partition']} (the hot key's partition) holds the largest "
      f"share of its lag ({hot['share']:.0%} here), the partitions sharing a member with it clear last; "
      "load-spike, reading as fast as it can, never breached")

# %% [markdown]
# ## What to read next, and stop
#
# - The breach windows are the rounds whose lag in seconds was above the threshold, from
#   the first to the next round back at or below it (docs/reference/lag-snapshots.md).
# - Try `PER_RECORD_MS = 2` (the group keeps up: no breach), `HOT_KEY_SHARE = 0` (the lag
#   spreads evenly), or add the second member before the spike.
# - The same job runs against `mq up`'s regions: `mq analytics lag --since 10m`.

# %% [markdown]
# `close()` stops the group, the exporter and the broker; the temporary directory with
# locust's results and the job's parquet and plots goes too (copy it first to keep them).

# %%
billing.stop()
exporter.stop()
cluster.close()
shutil.rmtree(WORK, ignore_errors=True)
print(f"whole lab: {time.perf_counter() - started:.0f} s")
