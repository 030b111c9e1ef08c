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
# In this lab we write a group consumer's loop out by hand and watch the group's **lag**
# while one member stalls; then, with helpers, scale a group from one consumer to three
# and back to two and watch the partitions move; measure how long consumption stops during a rebalance with the
# **eager** protocol (everyone gives up everything first) and the **cooperative** one
# (only the partitions that move stop); kill a consumer without it saying goodbye and
# compare with a **static member** restarting; rewind a group's offsets and replay; and
# watch **compaction** shrink a keyed topic to its latest value per key.
# docs/explanation/consumer-groups.md has the theory.

# %%
import asyncio
import os
import subprocess
import sys
import threading
import time

import matplotlib.pyplot as plt
from tqdm import tqdm

from mq.client import Consumer
from mq.core.types import TopicPartition
from mq.lab import Cluster, dump, plot_segments, read_all, table, wait_until
from mq.lab.figures import save_figure
from mq.lab.groups import GroupLab, PartitionLoad
from mq.lab.lag import LagSampler
from mq.lab.plots import plot_assignment, plot_consuming, plot_lag, plot_pauses

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
# ## A group consumer, written out
#
# Before the lab's helpers take over, here is a member of a consumer group as you would
# write one — the shape of every Kafka consumer:
#
# 1. **subscribe** to topics: the group's coordinator decides which of their partitions
#    this member gets, and changes that when members come and go;
# 2. **poll**: records of the partitions it owns now (the rebalance itself, and its
#    callbacks, happen inside `poll`);
# 3. **process** them;
# 4. **commit** the offset of the next record to read, per partition — here after each
#    poll, and only what was processed, so a crash replays at most one poll's worth;
# 5. **on_revoke**: called inside `poll` before a rebalance takes partitions away — the
#    last moment to commit what was processed of them, so that their next owner starts
#    exactly there.
#
# Three members run this loop, each in a thread with its own event loop (a notebook's
# own loop is busy running the notebook). Member `m2` can be made to stall in `process`:
# it waits for something slow (a database, a remote call) and stops polling, but its
# client keeps heartbeating in the background.

# %%
GROUP = "plain"
processed: dict[str, list[tuple[int, int]]] = {}  # member -> (partition, offset) it processed
member_names: dict[str, str] = {}  # the coordinator's member id -> our name
errors: dict[str, BaseException] = {}
stalled = threading.Event()  # while set, m2 is stuck in process()


async def process(name: str, record) -> None:
    while name == "m2" and stalled.is_set():
        await asyncio.sleep(0.05)  # waiting, not polling
    processed[name].append((record.partition, record.offset))


async def run_member(name: str, stop: threading.Event) -> None:
    positions: dict[TopicPartition, int] = {}  # next offset to commit, per partition processed

    async def on_revoke(partitions: list[TopicPartition]) -> None:
        done = {tp: positions.pop(tp) for tp in partitions if tp in positions}
        if done:
            await consumer.commit(done)  # the partitions' next owner starts here

    consumer = Consumer(cluster.bootstrap, group_id=GROUP, on_revoke=on_revoke,
                        enable_auto_commit=False,  # we commit, after processing
                        auto_offset_reset="latest",  # a new group starts at the log end
                        session_timeout_ms=3000, heartbeat_interval_ms=250)
    processed[name] = []
    async with consumer:  # on exit: on_revoke for what it owns, then LeaveGroup
        consumer.subscribe(["clicks"])
        while not stop.is_set():
            records = await consumer.poll(timeout_ms=100)
            for record in records:
                await process(name, record)
                positions[TopicPartition(record.topic, record.partition)] = record.offset + 1
            if positions:
                await consumer.commit(positions)
            member_names[consumer.group_metadata().member_id] = name


def member_thread(name: str, stop: threading.Event) -> threading.Thread:
    def main() -> None:
        try:
            asyncio.run(run_member(name, stop))
        except BaseException as error:  # noqa: BLE001 - shown below, never lost in a thread
            errors[name] = error
    return threading.Thread(target=main, name=name, daemon=True)


# %% [markdown]
# ## Lag while one member stalls
#
# **Lag** is what the group has left to read: per partition, log end − committed offset
# (records), and the age of the oldest unread record (seconds). `Admin.group_lag` and
# `mq group describe` both compute it from the coordinator's committed offsets and the
# partitions' log ends; `LagSampler` asks `Admin.group_lag` five times a second. We start
# the three members, let them settle, then stall `m2` for two seconds and look at the
# group from outside, the way an operator would.

# %%
STALL_S = 2.0
stop_members = threading.Event()
members = [member_thread(name, stop_members) for name in ("m1", "m2", "m3")]
lag = LagSampler(admin, GROUP, interval_s=0.2).start()
for thread in members:
    thread.start()


def settled() -> dict[str, list[int]] | None:
    """Every partition assigned, and each of the three members processing."""
    if errors:
        raise RuntimeError(f"a member failed: {errors}")
    group = admin.describe_group(GROUP)
    owned = {member_names.get(m.member_id): sorted(tp.partition for tp in m.assignment) for m in group.members}
    ready = (group.state == "Stable" and len(owned) == 3 and None not in owned
             and sum(map(len, owned.values())) == PARTITIONS and all(processed.get(n) for n in owned))
    return owned if ready else None


owned = wait_until(settled, timeout_s=30, what="the plain group to settle with three members")
lag.mark("3 members", kind="join")
print("assignment:", owned)
time.sleep(1.0)
stall_start = lag.mark("m2 stalls", kind="pause")
stalled.set()
time.sleep(0.5)
cli = [sys.executable, "-m", "mq.cli.main", "group", "describe", GROUP, "--bootstrap", cluster.bootstrap]
plain = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"} | {"NO_COLOR": "1", "TERM": "dumb"}
describe = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=plain)
time.sleep(max(0.0, stall_start + STALL_S - lag.now_s()))
described = describe.communicate(timeout=60)[0]  # the stall lasts until it has answered
during = admin.group_lag(GROUP)  # what Admin says at the end of the stall
stalled.clear()
stall_end = lag.mark("m2 resumes", kind="resume")
print(f"$ mq group describe {GROUP}   # started 0.5 s into the stall")
print(described)
print(f"Admin.group_lag({GROUP!r}) at the end of the stall:")
print(table([{"partition": r.tp.partition, "member": member_names.get(r.member_id, r.member_id),
              "committed": r.committed, "log end": r.log_end, "lag": r.lag, "lag seconds": r.lag_seconds}
             for r in during]))
wait_until(lambda: all(r["lag"] is not None and r["lag"] < 50 for r in lag.sample()),
           timeout_s=20, what="m2 to catch up")
time.sleep(0.5)
lag.stop()
stop_members.set()
for thread in members:
    thread.join(30)

stalled_rows = [r for r in lag.rows if stall_start <= r["t_s"] <= stall_end + 0.2]
peak = {p: max(r["lag"] or 0 for r in stalled_rows if r["partition"] == p) for p in range(PARTITIONS)}
everything = [record for records in processed.values() for record in records]
print(f"peak lag during the stall, per partition: {peak}")
print(f"expected: only m2's partitions {owned['m2']} lag, each by about {RATE // PARTITIONS} records per "
      f"second of stall (it lasted {stall_end - stall_start:.1f} s: ~{RATE // PARTITIONS * (stall_end - stall_start):,.0f}); "
      "the others stay near 0")
print(f"records processed: {len(everything):,}; processed twice: {len(everything) - len(set(everything))} "
      "(expected 0: each member commits what it processed before it lets a partition go)")

# %%
fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
plot_lag(lag.rows, ax=top, names=member_names, marks=lag.marks, span=(stall_start, stall_end),
         title=f"lag of group {GROUP} while m2 stalls (Admin.group_lag every 0.2 s)")
plot_lag(lag.rows, ax=bottom, names=member_names, span=(stall_start, stall_end), seconds=True,
         title="the same lag in seconds: the age of the oldest unread record")
bottom.get_legend().remove()
fig.tight_layout()
save_figure(fig, "lag-stall")
plt.show()

# %% [markdown]
# While `m2` stalls, the lag of its partitions climbs at the rate they are written (100
# records per second each) and the others stay near zero: lag points at the member that
# is behind. In seconds it grows with the clock — the age of the oldest record nobody
# has read — which is the figure to alert on, since it does not depend on how busy the
# topic is. The group stays `Stable` throughout: `m2` still heartbeats, and a member is
# only removed when it stops polling for longer than `max_poll_interval_ms` (five minutes
# by default, as in Kafka), so a slow member shows up as lag, not as a rebalance. When it
# resumes it reads everything it missed in a few polls, and the lag drops back.
#
# From here on the lab's `GroupLab` helper runs members for us: the same loop (commit
# handled by auto-commit), plus a record of every callback and poll for the plots.

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
# member owned at every instant. That is why one run of each protocol is enough here:
# the protocol decides `kept_assigned_fraction` (0 for eager, most partitions for
# cooperative) on any machine, while the gap times are one run's, and a difference
# between them smaller than `steady_gap_s` is noise.

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
