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
# # 01 — The log
#
# A topic partition in mq, as in Kafka, is an **append-only log**: records get
# consecutive offsets, and readers ask for "everything from offset N". On disk the
# log is cut into **segments** — files named by the first offset they hold — so that
# old data can be dropped a whole file at a time.
#
# In this lab we start a real broker, write to it, read back, open its files, watch
# a segment roll and retention delete old segments, replay from a point in time, and
# plot what it all cost. Everything runs on this machine in well under a minute.

# %%
import time

from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition
from mq.lab import (
    Cluster,
    compare,
    consume,
    dump,
    fits_retention_bytes,
    make_values,
    plot_segments,
    plot_spread,
    plot_throughput,
    poll_records,
    produce,
    spread,
    table,
)
from mq.lab.figures import save_figure

SEED = 7
TOPIC = "orders"
SEGMENT_BYTES = 128 * 1024  # tiny segments so we can watch them roll
RECORDS = 20_000

# %% [markdown]
# ## Start a broker
#
# `Cluster.start()` runs `python -m mq.aio.runner` as a child process on a free port,
# with its data in a temporary directory. We ask the broker to check retention every
# 200 ms (the default is five minutes) so we can watch it work.

# %%
cluster = Cluster.start(config={"log.retention.check.interval.ms": 200})
print(cluster)
print("bootstrap:", cluster.bootstrap)

# %% [markdown]
# ## Create a topic with small segments
#
# `segment.bytes` is the size at which the broker closes the active segment and rolls
# a new one. Topic settings keep Kafka's names.

# %%
admin = cluster.admin()
admin.create_topic(TOPIC, partitions=1, configs={"segment.bytes": str(SEGMENT_BYTES)})
print(admin.list_topics())

# %% [markdown]
# ## Produce
#
# We write 20,000 seeded 100-byte records with the bulk API (`send_many`), 200 at a
# time, and time every chunk. The producer groups records into **record batches**:
# one header (offsets, timestamps, CRC) for many records. The batch is the unit that
# travels over the network and lands on disk unchanged.

# %%
values = make_values(SEED, RECORDS, size_bytes=100)
producer = cluster.producer(linger_ms=5)
run = produce(producer, TOPIC, values, chunk_records=200)
print(f"{run.records:,} records in {run.seconds:.2f} s = {run.rec_per_s:,.0f} rec/s; "
      f"offsets {run.first.offset}..{run.last.offset}")
assert run.first.offset == 0 and run.last.offset == RECORDS - 1

# %% [markdown]
# ## Consume from offset 0
#
# A consumer does not "take" records: it reads from an offset of its choosing, and
# anyone else can read the same offsets again.

# %%
consumer = cluster.consumer(auto_offset_reset="earliest")
records = consume(consumer, TOPIC, count=RECORDS)
print(table([{"offset": r.offset, "timestamp": r.timestamp, "value": r.value} for r in records],
            limit=5))
assert [r.offset for r in records] == list(range(RECORDS))
assert [r.value for r in records] == values

# %% [markdown]
# ## The files on disk
#
# The partition `orders-0` is a directory of segments. Each segment has a `.log`
# (record batches back to back), a sparse `.index` (an entry at most every
# `index.interval.bytes`, naming a batch by its last offset and where it starts in the
# `.log`) and a `.timeindex` (the largest timestamp so far → its offset). To read from
# offset N the broker finds the segment by file name, the nearest index entry below
# N, and scans forward from there — a few KiB at most. The last segment is the
# **active** one; the others are closed and never change again.

# %%
partition_dir = cluster.partition_dir(TOPIC)
segments = cluster.segments(TOPIC)
print(partition_dir)
print(table([s.row() for s in segments]))
assert len(segments) > 5, "20,000 records should fill several 128 KiB segments"
assert segments[0].base_offset == 0

# %% [markdown]
# `mq.lab.dump` is what `mq dump-log` prints: the batches of a `.log` with their
# offsets, timestamps and CRC check, and the entries of an index.

# %%
batches = [row for row in dump(segments[0].log_path) if row["type"] == "batch"]
print(table(batches, limit=5, columns=["base_offset", "last_offset", "count", "position", "size",
                                       "max_timestamp", "codec", "crc_ok"]))
assert all(b["crc_ok"] for b in batches)
print()
print(table(dump(segments[0].index_path), limit=5))
print()
print(table(dump(segments[0].timeindex_path), limit=5))

# %% [markdown]
# The next segment starts exactly where this one ends: segment file names are offsets.

# %%
assert segments[1].base_offset == batches[-1]["last_offset"] + 1
print(f"segment 0 holds offsets 0..{segments[1].base_offset - 1}; "
      f"segment 1 starts at {segments[1].base_offset}")

# %% [markdown]
# ## Watch a segment roll
#
# We keep writing small chunks and look at the active segment after each one. It
# grows until the next batch would take it past `segment.bytes`; then the broker
# closes it and starts a new file named by the next offset.

# %%
more = make_values(SEED + 1, 5_000, size_bytes=100)
active = cluster.segments(TOPIC)[-1]
print(f"active segment {active.log_path.name}: {active.log_bytes:,} bytes")
written = 0
for begin in range(0, len(more), 100):
    produce(producer, TOPIC, more[begin:begin + 100], chunk_records=100, progress=False)
    written += 100
    now_active = cluster.segments(TOPIC)[-1]
    print(f"  after {written:>5} more records: {now_active.log_path.name} "
          f"{now_active.log_bytes:>7,} bytes")
    if now_active.base_offset != active.base_offset:
        break
assert now_active.base_offset > active.base_offset, "the active segment should have rolled"
print(f"rolled: new active segment starts at offset {now_active.base_offset}")

# %% [markdown]
# ## Replay from a point in time
#
# Every batch records its largest timestamp and the `.timeindex` maps timestamps to
# offsets, so "everything since 10:42" is a lookup, not a scan. We pick the timestamp
# of the record in the middle and ask the consumer to seek there.

# %%
tp = TopicPartition(TOPIC, 0)
middle = records[RECORDS // 2]
expected = next(r.offset for r in records if r.timestamp >= middle.timestamp)
consumer.seek_to_timestamp(middle.timestamp, tp)
replayed = poll_records(consumer, count=10, progress=False)
print(f"seek_to_timestamp({middle.timestamp}) -> first offset {replayed[0].offset} "
      f"(first record with timestamp >= it: {expected})")
print(table([{"offset": r.offset, "timestamp": r.timestamp, "value": r.value} for r in replayed],
            limit=3))
assert replayed[0].offset <= expected <= replayed[-1].offset
assert all(r.timestamp >= middle.timestamp for r in replayed if r.offset >= expected)

# %% [markdown]
# ## Retention by size
#
# Retention never edits a file: it deletes whole closed segments, oldest first, and
# moves the **log start offset** forward. We cap the partition at four segments'
# worth of bytes with `retention.bytes` (AlterConfigs, no restart) and wait for the
# broker's retention check.

# %%
before = cluster.segments(TOPIC)
retention_bytes = 4 * SEGMENT_BYTES
admin.alter_configs(TOPIC, set={"retention.bytes": str(retention_bytes)})

after = cluster.wait_for_segments(
    TOPIC, lambda s: s[0].base_offset > 0 and fits_retention_bytes(s, retention_bytes),
    what="retention.bytes to delete old segments",
)
deleted = [s for s in before if s.base_offset < after[0].base_offset]
print(f"{len(before)} segments, {sum(s.log_bytes for s in before):,} bytes -> "
      f"{len(after)} segments, {sum(s.log_bytes for s in after):,} bytes; "
      f"log start offset now {after[0].base_offset}")
assert sum(s.log_bytes for s in after) < sum(s.log_bytes for s in before)
assert fits_retention_bytes(after, retention_bytes)

# %% [markdown]
# A consumer that asks for an offset below the log start offset gets
# `OFFSET_OUT_OF_RANGE`; with `auto_offset_reset="earliest"` it starts again at the
# new beginning.

# %%
fresh = cluster.consumer(auto_offset_reset="earliest")
survivors = consume(fresh, TOPIC, count=10, progress=False)
print("first readable offset:", survivors[0].offset)
assert survivors[0].offset == after[0].base_offset

# %% [markdown]
# ## Retention by time
#
# `retention.ms` deletes segments whose newest record is older than the limit. Every
# record here is already a few seconds old, so a one-second limit expires all of
# them — the active segment too: the broker rolls a new, empty active segment first
# (as Kafka does), so the log keeps its offsets. Log start and log end are now equal:
# the partition is empty, and the next record still gets the next offset.

# %%
admin.alter_configs(TOPIC, set={"retention.ms": "1000"})
remaining = cluster.wait_for_segments(
    TOPIC, lambda segments: segments[0].base_offset == RECORDS + written,
    what="retention.ms to delete every segment",
)
offsets = admin.list_offsets({tp: EARLIEST_TIMESTAMP}), admin.list_offsets({tp: LATEST_TIMESTAMP})
log_start, log_end = (o[tp].offset for o in offsets)
print(f"{len(remaining)} segment(s) left, starting at offset {remaining[0].base_offset}; "
      f"log start {log_start}, log end {log_end}")
assert log_start == log_end == RECORDS + written

# %% [markdown]
# ## What batching buys
#
# Each request costs a network round trip and a pass through the broker, however
# many records it carries. We write the same records with 1, 10, 100 and 1,000
# records per `send_many` call, waiting for each call's acknowledgement before the
# next — the same data, very different rates. A rate measured once on a laptop can be
# off by a factor of two (another program, a garbage collection, the CPU's clock), so
# we measure each way three times, interleaved, and look at the spread.

# %%
admin.create_topic("batching", partitions=1)
RUNS = 3
rates = {f"{per_call}/call": [] for per_call in (1, 10, 100, 1000)}
for _ in range(RUNS):
    for per_call in (1, 10, 100, 1000):
        sample = values[: 500 if per_call == 1 else 3_000]
        timed = produce(producer, "batching", sample, chunk_records=per_call, progress=False)
        rates[f"{per_call}/call"].append(timed.rec_per_s)
batching = {name: spread(runs) for name, runs in rates.items()}
print(table([s.row(name, unit="rec/s") for name, s in batching.items()]))
print(compare("1000/call", batching["1000/call"], "1/call", batching["1/call"]))
slowest_vs_fastest = batching["1000/call"].low / batching["1/call"].high
print(f"expected: 1000 records per call at least 5× faster than 1 per call; here even its slowest "
      f"run was {slowest_vs_fastest:.0f}× the fastest 1-per-call run")

# %% [markdown]
# ## What it looked like
#
# Left: records per second for each chunk of the first produce run (the first chunk
# includes connecting and fetching metadata). Middle: the batching experiment on a log
# scale, each bar the median of three runs, each dot one run. Right: the segments before
# size-based retention; grey hatched bars are the ones it deleted, orange is the active
# segment.

# %%
import matplotlib.pyplot as plt

fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 3.5))
plot_throughput({"send_many, 200 per call": run.points}, ax=left)
plot_spread(batching, ax=middle, title="records per send_many call", log_scale=True)
plot_segments(after, deleted=deleted, ax=right, title="segments after retention.bytes")
fig.tight_layout()
save_figure(fig, "produce-batching-retention")
plt.show()

# %% [markdown]
# ## Stop the broker
#
# `close()` closes our clients, stops the broker with SIGTERM (it flushes and writes
# its checkpoints) and removes the temporary data directory.

# %%
started = time.perf_counter()
cluster.close()
print(f"stopped in {time.perf_counter() - started:.2f} s")
