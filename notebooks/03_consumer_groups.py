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
# # 03 — Consumer groups
#
# One consumer reads a partition at a time. To read a topic faster you run several
# consumers in a **group**: the group's **coordinator** (a broker) hands each member a
# share of the partitions, moves them when members come and go (a **rebalance**), and
# stores how far the group got in each partition (**committed offsets**) in the internal,
# compacted topic `__consumer_offsets`.
#
# In this lab we scale a group from one consumer to three and back to two and watch the
# partitions move; measure how long consumption stops during a rebalance with the
# **eager** protocol (everyone gives up everything first) and the **cooperative** one
# (only the partitions that move stop); kill a consumer without it saying goodbye and
# compare with a **static member** restarting; rewind a group's offsets and replay; and
# watch **compaction** shrink a keyed topic to its latest value per key.
# docs/explanation/consumer-groups.md has the theory.

# %%
import os
import subprocess
import sys
import time

import matplotlib.pyplot as plt
from tqdm import tqdm

from mq.core.types import TopicPartition
from mq.lab import Cluster, dump, plot_segments, read_all, table
from mq.lab.figures import save_figure
from mq.lab.groups import GroupLab, PartitionLoad
from mq.lab.plots import plot_assignment, plot_consuming, plot_pauses

PARTITIONS = 6
RATE = 600  # records/s over all partitions of "clicks": 100 per partition
STEADY_S = 1.0  # seconds of normal consumption before each change

# %% [markdown]
# ## One broker, tuned for watching
#
# Kafka's defaults are made for production: a new group waits 3 s
# (`group.initial.rebalance.delay.ms`) for more members before its first rebalance, and
# the shortest session a member may ask for is 6 s. We shorten both, give the offsets
# topic a few small partitions, and make the log cleaner look for work every 200 ms.

# %%
started = time.perf_counter()
cluster = Cluster.start(config={
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.segment.bytes": 16 * 1024,
    "log.cleaner.backoff.ms": 200,
})
admin = cluster.admin()
admin.create_topic("clicks", partitions=PARTITIONS)
load = PartitionLoad(cluster.bootstrap, "clicks", partitions=PARTITIONS, rate_per_s=RATE).start()
print(f"broker up in {time.perf_counter() - started:.1f} s: {cluster.broker()}")
print(f"producing {RATE} records/s to the {PARTITIONS} partitions of clicks")

# %% [markdown]
# ## Scale a group: 1 → 3 → 2 consumers
#
# `GroupLab` runs each member as a `Consumer(group_id=..., assignor=...)` in its own
# thread and records every `on_assign` / `on_revoke` callback and every poll that returned
# records. Each change of membership is a rebalance: the coordinator bumps the group's
# **generation** and computes a new assignment. We use `cooperative-sticky`, the assignor
# that moves as few partitions as possible.

# %%
scale = GroupLab(cluster.bootstrap, ["clicks"], group_id="scale", partitions={"clicks": PARTITIONS},
                 assignor="cooperative-sticky")
steps = [("c1 starts", lambda: scale.add("c1"), 1), ("c2 starts", lambda: scale.add("c2"), 2),
         ("c3 starts", lambda: scale.add("c3"), 3), ("c2 leaves", lambda: scale.stop("c2"), 2)]
for label, action, members in tqdm(steps, desc="scaling"):
    scale.mark(label, kind="join" if "starts" in label else "leave")
    action()
    scale.wait_consumed(scale.wait_stable(members))
    time.sleep(STEADY_S)
scale_end = scale.now_s()
print(table([{"member": m, "partitions": [tp.partition for tp in tps]}
             for m, tps in scale.assignment().items()]))
print(table(scale.generations()))

# %%
ax = plot_assignment(scale.ownership(until_s=scale_end), marks=scale.marks, until_s=scale_end,
                     title="group scale: who owns which partition of clicks")
save_figure(ax.figure, "scale")
plt.show()
scale.close()

# %% [markdown]
# Each coloured bar is a partition owned by one member. When c2 starts, c1 keeps three of
# its six partitions; when c3 starts, c1 and c2 each give one up; when c2 leaves, its two
# partitions are split between the others, and nobody else's move. Notice the white gaps:
# a moving partition is first **revoked** by its owner, and only in the **next**
# generation assigned to its new owner — the cooperative protocol's two-phase hand-off,
# so that no partition is ever read by two members at once.
#
# ## Eager against cooperative: how long does consumption stop?
#
# Now a fourth member joins a group of three, once with the eager protocol (`sticky`
# assignor: the same target assignment, so only the protocol differs) and once with
# the cooperative one. To make the difference visible we let every `on_revoke` take
# 300 ms — the time an application needs to flush state or finish a batch before it lets
# go of a partition. We measure, per partition, the **longest gap** between two polls
# that returned its records, from the join until the group is balanced again and every
# partition has been read since; a partition "kept consuming" if that gap stayed under
# the revoke time. `steady_gap_s` is the same figure over a quiet second before the join:
# on a busy laptop even a healthy partition goes a few hundred milliseconds without
# records now and then, so look at the shape more than at the third decimal.
# `kept_assigned_fraction` does not depend on timing: the share of partitions that some
# member owned at every instant.

# %%
REVOKE_S = 0.3


def join_one(assignor: str) -> tuple[GroupLab, object, float, float, float]:
    lab = GroupLab(cluster.bootstrap, ["clicks"], group_id=f"pause-{assignor}",
                   partitions={"clicks": PARTITIONS}, assignor=assignor, auto_offset_reset="latest",
                   revoke_s=REVOKE_S)
    for name in ("c1", "c2", "c3"):
        lab.add(name)
    steady_from = lab.wait_consumed(lab.wait_stable(3))
    time.sleep(STEADY_S)
    steady = lab.steady_gap(steady_from, lab.now_s())
    joined = lab.mark("c4 joins", kind="join")
    lab.add("c4")
    end = lab.wait_consumed(lab.wait_stable(4)) + 0.3
    time.sleep(max(0.0, end - lab.now_s()))
    stats = lab.pause(joined, end, threshold_s=REVOKE_S)
    return lab, stats, joined, end, steady


pauses = {}
for name, assignor in tqdm([("eager", "sticky"), ("cooperative", "cooperative-sticky")], desc="protocols"):
    pauses[name] = join_one(assignor)
print(table([{"protocol": name, **stats.row(), "steady_gap_s": round(steady, 3)}
             for name, (_, stats, _, _, steady) in pauses.items()]))

# %%
fig, axes = plt.subplots(2, 2, figsize=(13, 7))
for ax, (name, (lab, stats, joined, end, _)) in zip(axes[0], pauses.items()):
    plot_assignment(lab.ownership(until_s=end), marks=lab.marks, until_s=end, ax=ax,
                    title=f"{name}: assignment")
    ax.set_xlim(joined - 1.0, end)
plot_consuming({name: lab.consuming_series(joined - 0.5, end, window_s=0.15)
                for name, (lab, _, joined, end, _) in pauses.items()},
               ax=axes[1][0], partitions=PARTITIONS)
axes[1][0].set_xlim(left=-0.5)
plot_pauses({name: stats for name, (_, stats, *_) in pauses.items()}, ax=axes[1][1])
fig.tight_layout()
save_figure(fig, "eager-vs-cooperative")
plt.show()
for lab, *_ in pauses.values():
    lab.close()

# %% [markdown]
# With **eager** rebalancing every member revokes *all* its partitions before rejoining,
# so every partition stops — for at least the revoke time, plus the join round — even
# the ones that end up with the same member (`kept_assigned_fraction` 0). With
# **cooperative** rebalancing only the partitions that move stop: their owner revokes
# just those, and the coordinator hands them over in the following generation. Most
# partitions never notice (`kept_consuming_fraction`), while the moved ones wait a bit
# longer than in the eager case (two rebalances instead of one). `mq bench --only
# rebalance` measures the same with 100 partitions and 10 members.
#
# ## A consumer dies without leaving; a static member restarts
#
# A consumer that closes sends `LeaveGroup`: the group rebalances at once. One that
# *crashes* sends nothing; the coordinator notices only when it has had no heartbeat for
# `session_timeout_ms`, and until then nobody reads its partitions. Here c3 crashes with
# a 3 s session timeout (Kafka's default is 45 s).
#
# A **static member** (`group_instance_id`) is different on purpose: it does not send
# `LeaveGroup` when it closes, and when it comes back with the same instance id within
# its session timeout it gets **the same partitions, with no rebalance** — a rolling
# restart that moves nothing.

# %%
SESSION_MS = 3000
crash = GroupLab(cluster.bootstrap, ["clicks"], group_id="crash", partitions={"clicks": PARTITIONS},
                 assignor="cooperative-sticky", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300)
for name in ("c1", "c2", "c3"):
    crash.add(name)
crash.wait_consumed(crash.wait_stable(3))
time.sleep(STEADY_S)
orphans = crash.members["c3"].assignment()
killed = crash.mark("c3 crashes", kind="kill")
crash.crash("c3")
back = crash.wait_consumed(killed, tps=orphans)
crash_end = crash.wait_consumed(crash.wait_stable(2)) + 0.5
time.sleep(max(0.0, crash_end - crash.now_s()))
crash_gap = back - killed

static = GroupLab(cluster.bootstrap, ["clicks"], group_id="static", partitions={"clicks": PARTITIONS},
                  assignor="cooperative-sticky", session_timeout_ms=6000, heartbeat_interval_ms=300)
for name in ("s1", "s2", "s3"):
    static.add(name, group_instance_id=name)
static.wait_consumed(static.wait_stable(3))
time.sleep(STEADY_S)
before = static.assignment()
generations_before = {m.name: m.generation for m in static.live()}
stopped = static.mark("s3 restarts", kind="restart")
static.stop("s3")  # closes: a static member sends no LeaveGroup
static.add("s3", group_instance_id="s3")
static.wait_stable(3)
back_static = static.wait_consumed(stopped, tps=before["s3"])
static_end = back_static + 1.0
time.sleep(max(0.0, static_end - static.now_s()))
after = static.assignment()
print(f"crash: c3's partitions {[tp.partition for tp in orphans]} were read again {crash_gap:.2f} s "
      f"after the crash (session timeout {SESSION_MS / 1000:g} s)")
print(f"static restart: s3's partitions {[tp.partition for tp in before['s3']]} were read again "
      f"{back_static - stopped:.2f} s after it stopped; same assignment: {after == before}; "
      f"s1, s2 generation before/after: "
      f"{[(generations_before[m], static.members[m].generation) for m in ('s1', 's2')]}")
assert after == before, "a static member that returns within its session keeps its partitions"

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(13, 3.8))
plot_assignment(crash.ownership(until_s=crash_end), marks=crash.marks, until_s=crash_end, ax=left,
                title=f"dynamic member crashes: its partitions idle {crash_gap:.1f} s")
left.set_xlim(killed - 1.0, crash_end)
plot_assignment(static.ownership(until_s=static_end), marks=static.marks, until_s=static_end, ax=right,
                title=f"static member restarts: back in {back_static - stopped:.1f} s, nothing moves")
right.set_xlim(stopped - 1.0, static_end)
fig.tight_layout()
save_figure(fig, "crash-vs-static")
plt.show()
crash.close()
static.close()

# %% [markdown]
# On the left c3's bars end at the crash, but its partitions stay white until the session
# timeout expires; then the coordinator removes c3 and hands them to c1 and c2. On the
# right s3 is back within its session: the coordinator recognises the instance id, gives
# the new process the same partitions and fences the old member id; s1 and s2 see no
# rebalance at all (same generation). The cost of static membership is the other side of
# the same coin: a static member that really died keeps its partitions idle for its whole
# session timeout.
#
# ## Rewind a group and replay
#
# The committed offset is the **next record to read**. A group that has read all 900
# records of `orders` has committed 300 on each of its three partitions. An operator can
# move those offsets — but only while the group has no members, or a live member would
# overwrite them at its next commit.

# %%
admin.create_topic("orders", partitions=3)
writer = cluster.producer(linger_ms=2)
for p in range(3):
    writer.send_many("orders", [(None, f"order-{p}-{n:03d}".encode()) for n in range(300)], partition=p)
orders = {"orders": 3}
ORDERS = [TopicPartition("orders", p) for p in range(3)]


def read_orders(expected: int) -> GroupLab:
    lab = GroupLab(cluster.bootstrap, ["orders"], group_id="billing", partitions=orders,
                   auto_commit_interval_ms=200)
    lab.add("b1")
    wait_start = time.monotonic()
    while sum(lab.counts().values()) < expected:
        lab.check()
        assert time.monotonic() - wait_start < 30, f"read {lab.counts()} of {expected}"
        time.sleep(0.05)
    return lab


first = read_orders(900)
print("read the first time:", first.counts())
try:
    admin.alter_group_offsets("billing", {tp: 0 for tp in ORDERS})
except Exception as error:  # noqa: BLE001 - the point of the cell
    print(f"while b1 runs, resetting is refused: {error}")
first.close()  # commits its positions, then leaves: the group is Empty
print(table([{"partition": tp.partition, "committed": om.offset}
             for tp, om in sorted(admin.list_group_offsets("billing").items())]))

# %% [markdown]
# `mq group reset-offsets` plans first (dry run, the default) and commits only with
# `--execute`. Here: back 100 records on every partition.

# %%
cli = [sys.executable, "-m", "mq.cli.main", "group", "reset-offsets", "billing", "--topic", "orders",
       "--shift-by", "-100", "--bootstrap", cluster.bootstrap]
plain = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"} | {"NO_COLOR": "1", "TERM": "dumb"}
for mode in ([], ["--execute"]):
    print("$ mq group reset-offsets billing --topic orders --shift-by -100", *mode)
    done = subprocess.run([*cli, *mode], capture_output=True, text=True, timeout=60, check=False, env=plain)
    print(done.stdout or done.stderr)
print(table([{"partition": tp.partition, "committed": om.offset}
             for tp, om in sorted(admin.list_group_offsets("billing").items())]))

# %%
replay = read_orders(300)
time.sleep(0.5)  # nothing more arrives: the last 100 of each partition, once
offsets = replay.consumed_offsets()
print("replayed:", {tp.partition: (min(o), max(o), len(o)) for tp, o in sorted(offsets.items())})
assert {tp: (min(o), max(o), len(o)) for tp, o in offsets.items()} == {tp: (200, 299, 100) for tp in ORDERS}
assert replay.duplicates() == 0
replay.close()
admin.alter_group_offsets("billing", {tp: 0 for tp in ORDERS})  # or Admin: straight to the start
print("after Admin.alter_group_offsets:", {tp.partition: om.offset
                                           for tp, om in sorted(admin.list_group_offsets("billing").items())})

# %% [markdown]
# The replay read exactly offsets 200–299 of each partition: no record twice, none
# skipped — Kafka's convention that the committed offset is the next one to read.
#
# ## Compaction: the latest value per key
#
# A topic with `cleanup.policy=compact` keeps, eventually, only the latest record of
# each key: a changelog, or a table. `__consumer_offsets` is one (the key is group,
# topic, partition). Here 20 products get 2,000 price updates; small segments
# (`segment.bytes` 4 KiB) and `min.cleanable.dirty.ratio=0.01` let the cleaner start
# almost at once.

# %%
admin.create_topic("prices", partitions=1, configs={
    "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0"})
KEYS = 20
updates = [(f"product-{n % KEYS:02d}".encode(), f"price {n:05d} for product {n % KEYS:02d}".encode())
           for n in range(2000)]
latest = dict(updates)
for begin in tqdm(range(0, len(updates), 100), desc="price updates"):
    writer.send_many("prices", updates[begin:begin + 100], partition=0)


def records_in(segment) -> int | None:
    """Records in a segment file (None: the cleaner replaced it while we read)."""
    try:
        return sum(b.get("count", 0) for b in dump(segment.log_path) if b.get("type") == "batch")
    except Exception:  # noqa: BLE001 - gone or half-swapped: ask again
        return None


def cleaned(segments) -> bool:
    counts = [records_in(s) for s in segments[:-1]]
    return None not in counts and sum(counts) <= KEYS


def summary(when: str, segments) -> dict:
    counts = [records_in(s) or 0 for s in segments]
    return {"when": when, "segments": len(segments), "segments holding records": sum(1 for n in counts if n),
            "log bytes": sum(s.log_bytes for s in segments), "records": sum(counts),
            "records in closed segments": sum(counts[:-1])}


before = cluster.segments("prices")
before_row = summary("before", before)
print(table([before_row]))

# %% [markdown]
# The cleaner is done when the closed segments hold one record per key: the latest each
# had when the cleaner looked (the active segment is never cleaned).

# %%
after = cluster.wait_for_segments("prices", cleaned, timeout_s=30, what="the cleaner to compact prices")
print(table([before_row, summary("after", after)]))
reader = cluster.consumer(auto_offset_reset="earliest")
records = read_all(reader, "prices")
assert {r.key: r.value for r in records} == latest, "compaction keeps the latest value of every key"
print(f"read back {len(records)} records of 2,000: the latest price of each of the {KEYS} products is "
      f"there; the offsets stay, with gaps: {[r.offset for r in records[:4]]} ... "
      f"{[r.offset for r in records[-2:]]}")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(13, 3.5), sharey=True)
plot_segments(before, ax=left, title=f"prices before: {len(before)} segments")
plot_segments(after, ax=right, title=f"after compaction: {len(after)} segments")
fig.tight_layout()
save_figure(fig, "compaction")
plt.show()

# %% [markdown]
# The cleaner rewrote the closed segments keeping only the last record of each key: a
# fraction of the bytes (a segment whose records were all superseded keeps an empty batch
# header: it is tiny). The active segment (orange) is never cleaned, so the newest
# updates sit there until it rolls. Offsets did not change: a consumer reading
# from the start simply jumps over the gaps. That is also why `__consumer_offsets` stays
# small however often groups commit: only the latest commit per group and partition
# survives.
#
# ## Stop
#
# `close()` stops the load, the clients and the broker, and removes the temporary
# directory.

# %%
load.stop()
print(f"load: {load.acked:,} records acknowledged, {load.failed} failed")
cluster.close()
print(f"whole lab: {time.perf_counter() - started:.0f} s")
