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
# # 05 — Two regions: replication latency, fail-over, fail-back and the loss-vs-duplicates dial
#
# A **region** is a whole cluster: its own brokers, its own Raft metadata quorum. Two regions
# are joined by a WAN **link** (here an emulated one: a TCP proxy that adds latency, jitter,
# bandwidth limits and cuts) and a **mirror** copies topics from one into the other. The mirror
# is a client of both regions, like Kafka's MirrorMaker 2, but it writes the copies the way
# Confluent's Cluster Linking does: into **mirror topics** that keep the source's offsets and
# bytes. A record at offset 41 of `orders-2` in east is at offset 41 of `orders-2` in west, so a
# consumer group's position means the same thing in both regions.
#
# What does that buy, and what does it cost? Two numbers decide what a region's loss costs you:
#
# * **RPO**, the recovery point: records the source acknowledged that the target does not have
#   yet when you fail over. Asynchronous replication always lags; the lag, in records, is the
#   loss.
# * **re-reads**: after a fail-over a consumer group resumes in the target at the offsets the
#   mirror last **synced** there, and reads again what it had read since. With preserved
#   offsets, nothing else can go wrong: no translation, no guessing.
#
# Together they are a dial: the link's latency and the load set the loss; the offset-sync
# interval sets the duplicates. We measure both, then cut the link for real, fail over and
# fail back. docs/explanation/geo-replication.md has the theory.

# %%
import statistics
import time

import matplotlib.pyplot as plt

from mq.core.errors import MqError
from mq.core.types import TopicPartition
from mq.lab import table, wait_until
from mq.lab.figures import save_figure
from mq.lab.geo import GeoLab
from mq.lab.geo_measure import (
    EndsRecorder,
    GroupReader,
    LatencyProbe,
    SteadyLoad,
    committed,
    percentile,
    periods,
    sample_at_risk,
    sample_rereads,
)
from mq.lab.geo_plots import (
    plot_at_risk,
    plot_latency_steps,
    plot_regions,
    plot_rereads,
)

PARTITIONS = 3
RATE = 2000  # records/s produced in east while we watch

# %% [markdown]
# ## Two regions on this machine
#
# `GeoLab.start()` writes a region file like `regions/default.yaml` — regions `east` and
# `west`, a link pair, one flow `east-to-west` — with free ports (one broker per region, to
# keep the lab quick) and short intervals, and starts it with the same launcher as `mq up`:
# brokers, the link process, the mirror process. We shorten the mirror's intervals: topics are
# discovered every second, group offsets synced every second, a heartbeat every half second.

# %%
started = time.perf_counter()
lab = GeoLab.start(brokers=1, latency_ms=20, sync_interval_ms=1000, refresh_interval_ms=1000,
                   heartbeat_interval_ms=500)
east, west = lab.admin("east"), lab.admin("west")
print(f"two regions up in {time.perf_counter() - started:.1f} s; region file: {lab.region_file}")
print(table([{"link": s.name, "state": s.state, "latency_ms": s.settings.latency_ms, "control": s.control}
             for s in lab.link_status()]))
print("mirror:", {k: lab.mirror_status()[k] for k in ("flow", "state", "pid", "metrics")})

# %% [markdown]
# ## A mirror topic: the same offsets, the same bytes, read-only
#
# We create `orders` in east only. Within a refresh interval the mirror creates `orders` in
# west with the same partitions and copies the record batches through the link as they are:
# it never decodes them. West refuses producers on a mirror topic, naming the region that
# writes it.

# %%
east.create_topic("orders", partitions=PARTITIONS)
producer = lab.producer("east", acks="all")
for p in range(PARTITIONS):
    producer.send_many("orders", [(None, f"order {p}-{i}".encode()) for i in range(100)], partition=p)
mirrored = lab.wait_mirrored("orders")
print(table([{"partition": p, "east end": e, "west end": mirrored[p]} for p, e in lab.ends("east", "orders").items()]))

readers = {region: lab.consumer(region) for region in ("east", "west")}
same = []
for region, reader in readers.items():
    tp = TopicPartition("orders", 1)
    reader.assign([tp])
    reader.seek(tp, 41)
    record = reader.poll(timeout_ms=2000)[0]
    same.append({"region": region, "offset": record.offset, "timestamp": record.timestamp, "value": record.value})
print(table(same))
assert same[0]["value"] == same[1]["value"] and same[0]["timestamp"] == same[1]["timestamp"]
try:
    lab.producer("west").send("orders", b"written in west")
except MqError as error:
    print(f"produce in west: {error}")

# %% [markdown]
# ## Replication latency while the link slows down
#
# East now takes a steady 2,000 records/s. In west, a reader follows the mirror topic and, for
# every record, takes *now − the record's timestamp*: the producer's clock in east, the
# reader's in west, one machine. Every few seconds we make the link slower (`mq link set
# east west --latency-ms N`, both directions). A record crosses the link once; the mirror's
# fetch request crosses it the other way first, so the latency should grow by about one to
# two link latencies per step.

# %%
origin = time.monotonic()
load = SteadyLoad(lab.producer("east", acks="all"), "orders", partitions=PARTITIONS, rate_per_s=RATE,
                  origin=origin).start()
probe = LatencyProbe(lab.consumer("west"), "orders", partitions=PARTITIONS, origin=origin).start()
steps = []
for one_way_ms in (10, 50, 100, 200):
    lab.set_link(latency_ms=one_way_ms)
    steps.append({"t_s": time.monotonic() - origin, "latency_ms": one_way_ms})
    time.sleep(2.0)
end_s = time.monotonic() - origin
rows = []
for i, step in enumerate(steps):
    until = steps[i + 1]["t_s"] if i + 1 < len(steps) else end_s
    window = probe.summary(step["t_s"] + 0.5, until)  # after the change has settled
    rows.append({"link one way (ms)": step["latency_ms"], **window})
print(table(rows))
hb = lab.mirror_status()["heartbeats"]
print(f"the mirror's own heartbeats say: p50 {hb['latency_p50_ms']} ms, p99 {hb['latency_p99_ms']} ms (last window)")
for row in rows:
    ratio = row["p50_ms"] / row["link one way (ms)"] if row["p50_ms"] else float("nan")
    print(f"expect p50 between 1x and ~2.5x the one-way latency: {row['link one way (ms)']} ms link -> "
          f"p50 {row['p50_ms']} ms ({ratio:.1f}x)")

# %%
fig, ax = plt.subplots(figsize=(9, 3.6))
plot_latency_steps(probe.buckets(0.25), steps, ax=ax)
save_figure(fig, "latency-vs-link")
plt.show()

# %% [markdown]
# The p50 climbs with each step and stays there: the copy is a pipeline of round trips through
# the link (fetch request east-bound, records west-bound), so the latency is a few link
# latencies plus the time east takes to acknowledge (acks=all) and west to append. The p99
# spikes at each change: bytes already on the wire when the link slows are held longer.
#
# ## The loss dial: records at risk against link latency and load
#
# If east vanished right now, how many acknowledged records would be lost? Exactly those east
# acknowledged that west does not hold yet: *acknowledged end − west's end*, per partition. We
# sample that every 50 ms for two seconds at each link latency and load (no need to fail over
# each time: a fail-over at that instant loses exactly this, as the real one below shows). The
# model: loss ≈ rate × replication latency.

# %%
probe.stop()
load.stop()
east.create_topic("dial", partitions=PARTITIONS)
lab.wait_topic("west", "dial")
dial = []
for one_way_ms in (10, 60, 150):
    lab.set_link(latency_ms=one_way_ms)
    for rate in (500, 2000):
        t0 = time.monotonic() - origin
        run = SteadyLoad(lab.producer("east", acks="all"), "dial", partitions=PARTITIONS, rate_per_s=rate,
                         origin=origin).start()
        watch = LatencyProbe(lab.consumer("west"), "dial", partitions=PARTITIONS, origin=origin).start()
        time.sleep(0.6)  # settle
        samples = [n for _, n in sample_at_risk(run, west, seconds=1.5)]
        run.stop()
        watch.stop()
        lab.forget(run.producer)
        lab.forget(watch.consumer)
        latency = watch.summary(t0 + 0.6)
        dial.append({"latency_ms": one_way_ms, "rate": rate, "samples": len(samples),
                     "median": round(statistics.median(samples)), "p99": percentile(samples, 99), "max": max(samples),
                     "replication_p50_ms": latency["p50_ms"],
                     "expected": round(rate * (latency["p50_ms"] or 0) / 1000)})
print(table(dial))
for row in dial:
    print(f"link {row['latency_ms']:>3} ms, {row['rate']:>5} rec/s: median at risk {row['median']:>6} "
          f"vs expected {row['expected']:>5} (rate x p50 replication latency)")

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.6))
plot_at_risk(dial, ax=ax)
save_figure(fig, "dial-loss")
plt.show()

# %% [markdown]
# Loss grows with both: four times the load loses about four times the records, and a slower
# link loses more at the same load. A record's exposure window is its replication latency;
# everything acknowledged inside that window is at risk. Synchronous replication would close
# it, at the price of a WAN round trip on every produce.
#
# ## The duplicates dial: re-reads against the offset-sync interval
#
# A group `billing-…` consumes in east and commits after every poll. Every
# `sync.group.offsets.interval.ms` the mirror copies the group's committed offsets into west
# (never past what west holds). If we failed over now, the group would resume in west at the
# synced offsets and read again *east's committed − west's synced* records. We restart the mirror
# with three intervals (through its CLI: `python -m mirror run ... --sync-group-offsets-interval-ms N`)
# and sample that difference every 100 ms. The mirror waits the interval *after* each sync, and a
# sync is a few round trips through the link (list the groups, read their offsets, commit in
# west), so the real period is longer than the interval; its log says when it synced each group
# (`event=group_offsets_synced`). A synced offset is never past what west holds: it is capped at
# west's end as the sync found it when it started. So the bound is: consume rate × (the longest
# period + twice a sync's duration + the replication lag).

# %%
lab.set_link(latency_ms=20)
east.create_topic("reads", partitions=PARTITIONS)
lab.wait_topic("west", "reads")
reread = []
for interval_ms in (250, 1000, 2000):
    lab.stop_mirror()
    lab.start_mirror("--sync-group-offsets-interval-ms", str(interval_ms))
    run = SteadyLoad(lab.producer("east", acks="all"), "reads", partitions=PARTITIONS, rate_per_s=1000,
                     origin=origin).start()
    group = f"billing-{interval_ms}"
    reader = GroupReader(lab.consumer("east", group_id=group, auto_offset_reset="latest"), "reads").start()
    # until the mirror has synced the group twice (the first syncs after a restart are slower)
    wait_until(lambda g=group: len([e for e in lab.mirror_events("group_offsets_synced") if e["group"] == g]) >= 2,
               timeout_s=30, what=f"two syncs of {group}")
    samples = [n for _, n in sample_rereads(east, west, group, "reads",
                                            seconds=max(2.0, 2.5 * interval_ms / 1000))]
    reader.stop()
    run.stop()
    lab.forget(reader.consumer)
    lab.forget(run.producer)
    rate = run.achieved_rate()
    # when the mirror synced the group, from its log (event=group_offsets_synced); the first
    # period after the restart is left out, as the sampling left it out
    synced_at = [e["t"] for e in lab.mirror_events("group_offsets_synced") if e["group"] == group][1:]
    gaps_s = periods(synced_at) or [interval_ms / 1000]
    period_s, step_s = max(gaps_s), max(0.0, statistics.median(gaps_s) - interval_ms / 1000)
    reread.append({"interval_ms": interval_ms, "samples": samples, "median": round(statistics.median(samples)),
                   "max": max(samples), "consume_rate": round(rate), "syncs": len(synced_at),
                   "max_period_ms": round(period_s * 1000), "sync_step_ms": round(step_s * 1000),
                   "bound": round(rate * (period_s + 2 * step_s + 0.1))})
print(table([{k: v for k, v in r.items() if k != "samples"} for r in reread]))
for r in reread:
    print(f"interval {r['interval_ms']:>5} ms: synced every {r['max_period_ms']} ms at most (a sync takes "
          f"~{r['sync_step_ms']} ms); re-reads at most {r['max']}, expected at most ~{r['bound']} = "
          f"rate x (period + 2 x sync + 0.1 s lag)")

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.6))
plot_rereads(reread, ax=ax)
save_figure(fig, "dial-rereads")
plt.show()

# %% [markdown]
# The saw-tooth of each interval shows as a spread of samples from near zero (just after a
# sync) up to about rate × interval (just before the next). The interval is the knob: a
# shorter one costs one `OffsetCommit` per group per interval in west and buys fewer
# duplicates. Note what is *not* there: with preserved offsets the synced offset is exact — a
# group never skips a record it has not read, and never re-reads more than one interval.
#
# ## Now for real: cut the link, fail over, fail back
#
# The group `billing` consumes `orders` in east while east takes writes. Then the WAN goes
# down (`mq link cut east west`, both directions): the mirror stalls and says so, east keeps
# serving. We stop the writers and fail over to west (`mq mirror failover --to west --group
# billing`): it stops the flow, reads what west has, tries east (which does not answer through
# the cut link, so the records at risk are the last figures the mirror knew), and promotes
# west's topics. Billing resumes in west at its synced offsets, writers produce in west. When
# the link heals, `mq mirror failback --to east` saves east's diverged tail to
# `orders.diverged`, truncates east at the promotion point, mirrors west back into east and
# makes east the writer again.

# %%
lab.stop_mirror()
lab.start_mirror()  # the flow's own settings again (sync every second)
lab.wait_mirrored("orders")
origin2 = time.monotonic()
events = []


def mark(label: str, kind: str = "op") -> None:
    events.append({"t_s": time.monotonic() - origin2, "kind": kind, "label": label})


recorder = EndsRecorder([lab.admin("east"), lab.admin("west")], "orders", PARTITIONS, origin=origin2).start()
load = SteadyLoad(lab.producer("east", acks="all"), "orders", partitions=PARTITIONS, rate_per_s=1000,
                  origin=origin2).start()
billing = GroupReader(lab.consumer("east", group_id="billing"), "orders").start()
wait_until(lambda: len([e for e in lab.mirror_events("group_offsets_synced") if e["group"] == "billing"]) >= 2,
           timeout_s=30, what="two syncs of billing")  # billing reads in east, the mirror syncs its offsets
time.sleep(1.0)
lab.cut_link()
mark("link cut")
billing.stop()  # billing's readers in east stop at the cut (had they read on, see below)
billing_in_east = committed(east, "billing", "orders")
before = load.acked_records()
status = wait_until(lambda: (s := lab.mirror_status())["state"] == "stalled" and s, timeout_s=20,
                    what="the mirror to say it is stalled")
mark("mirror stalled")
print(f"mirror: {status['state']} — {status['reason'] or next(p['reason'] for p in status['partitions'])}")
print(f"east kept serving: {load.acked_records() - before} more records acknowledged since the cut, "
      f"{load.failed_records()} failed")
load.stop()
acked_in_east = load.acked_ends()
mark("fail-over")
failover = lab.failover(to="west", groups=["billing"])
mark("west promoted")
print(f"fail-over took {failover.seconds:.1f} s:")
print("\n".join(failover.steps))
report = failover.report
print(table([{k: p[k] for k in ("partition", "source_end", "mirrored_end", "records", "basis")}
             for p in report["partitions"]]))
promoted = report["promotion_ends"]["orders"]
truly_lost = sum(max(0, end - promoted[p]) for p, end in acked_in_east.items())
print(f"records at risk reported: {report['records_at_risk']} ({report['partitions'][0]['basis']}); "
      f"acknowledged in east and missing in west: {truly_lost}")
print("expect the reported figure to undercount when east does not answer: the mirror's last figures for east "
      "are from before the cut, and east acknowledged records after it")

# %% [markdown]
# The records at risk are the ones east acknowledged that never crossed: everything acknowledged
# after the cut, plus what was in flight. The command cannot count them — east does not answer —
# so it reports what the mirror last knew, which is from before the cut. Fail-back below puts
# every one of them in `orders.diverged`: they are set aside, not silently dropped.
#
# Billing resumes in west. Its committed offsets there are the ones the mirror synced before the
# cut, so it reads again what it had read in east since that sync, and nothing more. (Had billing
# kept reading in east during the cut, its commits could not have crossed either: it would read
# again everything it read during the cut that west has.) West is the writer now.

# %%
resumed = lab.consumer("west", group_id="billing")
resumed.subscribe(["orders"])
synced = committed(west, "billing", "orders")
again = 0
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    for record in resumed.poll(timeout_ms=300):
        if record.offset < billing_in_east.get(record.partition, 0):
            again += 1
    assigned = resumed.assignment()
    if len(assigned) == PARTITIONS and all(resumed.position(tp) >= promoted[tp.partition] for tp in assigned):
        break
resumed.commit()
lab.forget(resumed)
print(table([{"partition": p, "committed in east": billing_in_east.get(p), "synced to west": synced.get(p)}
             for p in range(PARTITIONS)]))
expected = sum(max(0, min(o, promoted[p]) - synced.get(p, 0)) for p, o in billing_in_east.items())
print(f"billing read {again} records again in west; expected: east committed (capped at what west has) - "
      f"west synced = {expected}, about 1,000 rec/s x (1 s sync interval + a sync's round trips)")
writer = lab.producer("west", acks="all")
meta = writer.send_many("orders", [(None, f"written in west {i}".encode()) for i in range(300)], partition=0)
mark("west writes")
print(f"west accepted 300 records at offsets {meta[0].offset}..{meta[-1].offset} of orders-0")

# %%
lab.heal_link()
mark("link healed")
east_before = lab.ends("east", "orders")
failback = lab.failback(to="east")
mark("failed back")
time.sleep(1)
recorder.stop()
print(f"fail-back took {failback.seconds:.1f} s:")
print("\n".join(failback.steps))
saved = lab.ends("east", "orders.diverged")  # the tail keeps its offsets: [promotion point, old end)
print(table([{"partition": p, "promotion point": promoted[p], "east's end before": east_before[p],
              "orders.diverged ends at": saved[p]} for p in range(PARTITIONS)]))
print(f"{sum(failback.report['diverged']['orders'])} records saved to orders.diverged; east ends "
      f"{lab.ends('east', 'orders')} = west ends {lab.ends('west', 'orders')}")
assert all(saved[p] == east_before[p] for p in range(PARTITIONS) if east_before[p] > promoted[p])

# %%
fig, ax = plt.subplots(figsize=(9, 3.6))
plot_regions(recorder.samples, events, ax=ax)
save_figure(fig, "cut-failover-failback")
plt.show()

# %% [markdown]
# Read the plot from the left: both lines rise together while the mirror keeps up. At the cut,
# west flattens and east goes on: those are the records at risk. The fail-over promotes west
# where it stopped; west's writes then lift it. At the fail-back, east drops to the promotion
# point (its diverged tail is in `orders.diverged`, not lost) and climbs to west's end as the
# reverse flow copies it; then east is the writer again and west its mirror.
#
# ## What we measured

# %%
print(table([
    {"figure": "replication latency p50 / p99, 10 ms link", "value": f"{rows[0]['p50_ms']} / {rows[0]['p99_ms']} ms"},
    {"figure": "replication latency p50 / p99, 200 ms link", "value": f"{rows[-1]['p50_ms']} / {rows[-1]['p99_ms']} ms"},
    {"figure": "records at risk, 150 ms link, 2,000 rec/s (median)", "value": dial[-1]["median"]},
    {"figure": "re-reads, 250 ms / 2 s sync interval (max of samples)",
     "value": f"{reread[0]['max']} / {reread[-1]['max']}"},
    {"figure": "fail-over with the link cut (command)", "value": f"{failover.seconds:.1f} s"},
    {"figure": "fail-back (command)", "value": f"{failback.seconds:.1f} s"},
    {"figure": "billing re-read after fail-over", "value": again},
]))
print(f"lab ran {time.perf_counter() - started:.0f} s")

# %%
lab.close()

# %% [markdown]
# **Try next.** Raise `sync_interval_ms` in `GeoLab.start()` and watch the re-reads grow;
# add jitter (`lab.set_link(latency_ms=50, jitter_ms=20)`) and look at the p99; limit the
# bandwidth (`bandwidth_mbit=5`) and push 10,000 rec/s: the lag, and the loss, grow without
# bound once the link carries less than the region produces. `mq bench --only
# P7,P7-latency,geo-failover` measures the same on three brokers per region.
