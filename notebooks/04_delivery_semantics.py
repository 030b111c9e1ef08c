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
# # 04 — Delivery semantics
#
# "At least once", "at most once", "exactly once": what a pipeline promises depends on
# what happens when an answer is lost or a process dies halfway. In this lab we break
# things on purpose and count:
#
# 1. **Idempotence.** A producer whose answer is lost sends the batch again. Without
#    idempotence the broker writes it twice; with it (the default under `acks=all`) the
#    broker recognises the producer id and sequence number and answers "already have it".
# 2. **Transactions.** A consume-transform-produce copier (`payments` → `payments-out`)
#    writes its output and commits its input offsets in one transaction. We SIGKILL it at
#    random points and start it again: a `read_committed` reader of the output finds every
#    input exactly once, while a `read_uncommitted` reader also sees the aborted attempts.
# 3. **Share groups.** A work queue: several consumers on *one* partition, each record
#    locked to one of them at a time. A class of poison records is released again and
#    again until the delivery limit, then lands in the dead-letter topic with headers
#    saying where it came from.
#
# docs/explanation/transactions.md and docs/explanation/share-groups.md have the theory.

# %%
import asyncio
import os
import random
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib.pyplot as plt
from tqdm import tqdm

from mq.client import Consumer, Producer
from mq.client.share_consumer import ShareConsumer
from mq.core.types import TopicPartition
from mq.lab import Cluster, table, wait_until
from mq.lab.copier import Copier, transform
from mq.lab.figures import save_figure

SEED = 4
RECORDS = 2000  # produced in part 1, per producer
LOST_ANSWERS = 8  # produce answers the broker drops (after writing the records)
CHUNK = 100  # records per flush in part 1


def run(coro):
    """Run a coroutine to completion on a fresh event loop in a worker thread (the
    notebook's own loop is busy running the notebook)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def read_partition(bootstrap: str, topic: str, *, isolation_level: str = "read_uncommitted",
                         idle_polls: int = 4) -> list:
    """Every record of partition 0 from the beginning, until a few polls come back empty."""
    out: list = []
    async with Consumer(bootstrap, isolation_level=isolation_level, fetch_max_wait_ms=100) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        empty = 0
        while empty < idle_polls:
            records = await consumer.poll(timeout_ms=200)
            out.extend(records)
            empty = 0 if records else empty + 1
    return out


# %% [markdown]
# ## One broker, with lost answers
#
# A **failpoint** is a named place in the broker's code where a test can inject a fault
# (`mq/core/failpoints.py`). `broker.before_produce_response` fires after the records are
# written and just before the answer goes back: with
# `8*error(REQUEST_TIMED_OUT)` the broker's first eight produce answers say "timed out"
# although the records are in the log — exactly what a client sees when a connection
# drops after the write. Failpoints are read from `MQ_FAILPOINTS` when a broker starts.

# %%
started = time.perf_counter()
FAILPOINT = f"broker.before_produce_response={LOST_ANSWERS}*error(REQUEST_TIMED_OUT)"
BROKER_CONFIG = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    "group.initial.rebalance.delay.ms": 0,
    "share.coordinator.state.topic.num.partitions": 1,
    "share.record.lock.duration.ms": 2000,
    "share.delivery.attempt.limit": 3,
    "share.heartbeat.interval.ms": 500,
    "share.session.timeout.ms": 6000,
}
os.environ["MQ_FAILPOINTS"] = FAILPOINT
try:
    cluster = Cluster.start(config=BROKER_CONFIG)
finally:
    del os.environ["MQ_FAILPOINTS"]  # only this broker process gets it
broker = cluster.broker()
admin = cluster.admin()
print(f"broker up in {time.perf_counter() - started:.1f} s with MQ_FAILPOINTS={FAILPOINT}")

# %% [markdown]
# ## Duplicates without idempotence, none with
#
# Two producers each send the values `0 … 1999` with `acks=all` and retries, to a topic of
# their own, 100 at a time (one request each). The first has `enable_idempotence=False`; the second keeps the default. Each
# one meets eight lost answers (we restart the broker between them, with the same
# failpoint, so the count starts again) and retries the batches — which were written.
# Then we read both topics back and count.


# %%
async def produce_all(topic: str, *, idempotent: bool) -> int:
    async with Producer(cluster.bootstrap, acks="all", enable_idempotence=idempotent, linger_ms=2,
                        batch_size=4096, retry_backoff_ms=20) as producer:
        futures = []
        for first in range(0, RECORDS, CHUNK):  # one request per chunk: a lost answer costs one chunk
            futures += [producer.send(topic, b"%d" % i) for i in range(first, first + CHUNK)]
            await producer.flush()
        return sum(1 for f in futures if f.done() and f.exception() is None)


idempotence_rows = []
for idempotent in tqdm((False, True), desc="producers"):
    topic = "payments-idempotent" if idempotent else "payments-plain"
    if idempotent:  # a fresh failpoint count for the second producer
        os.environ["MQ_FAILPOINTS"] = FAILPOINT
        try:
            broker.restart()
        finally:
            del os.environ["MQ_FAILPOINTS"]
    admin.create_topic(topic, partitions=1)
    acknowledged = run(produce_all(topic, idempotent=idempotent))
    values = Counter(r.value for r in run(read_partition(cluster.bootstrap, topic)))
    idempotence_rows.append({
        "producer": "idempotent (default)" if idempotent else "enable_idempotence=False",
        "acknowledged": acknowledged, "read back": sum(values.values()), "distinct": len(values),
        "duplicates": sum(values.values()) - len(values),
        "missing": RECORDS - len(values)})
print(table(idempotence_rows))

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
labels = [r["producer"] for r in idempotence_rows]
ax.bar(labels, [r["acknowledged"] for r in idempotence_rows], color="#9ecae1", label="acknowledged")
ax.bar(labels, [r["duplicates"] for r in idempotence_rows], bottom=[r["acknowledged"] for r in idempotence_rows],
       color="#de2d26", label="duplicates in the log")
for i, r in enumerate(idempotence_rows):
    ax.text(i, r["read back"] + 20, f'{r["read back"]} read back\n({r["duplicates"]} duplicates)',
            ha="center", fontsize=8)
ax.set_ylim(0, max(r["read back"] for r in idempotence_rows) * 1.2)
ax.set_ylabel("records")
ax.set_title(f"{RECORDS} records, {LOST_ANSWERS} produce answers lost after the write", fontsize=9)
ax.legend(fontsize=8, loc="lower right")
save_figure(fig, "idempotence-duplicates")
plt.show()

# %% [markdown]
# The plain producer cannot tell "not written" from "written, answer lost", so every lost
# answer costs a whole batch written twice. The idempotent producer numbers its batches
# per partition; the leader keeps the last five sequence numbers per producer id and
# answers a resend with the original offsets instead of appending again.
#
# Idempotence covers one producer session and its retries. A process that dies and
# restarts gets a new producer id — for that we need transactions.

# %% [markdown]
# ## A pipeline killed mid-transaction
#
# Now the broker runs without failpoints. `payments` holds 1,000 payments; a copier
# process (`python -m mq.lab.copier`, see `mq/lab/copier.py`) reads them under
# `read_committed`, writes `processed <value>` to `payments-out`, and in the **same
# transaction** commits how far it read (`send_offsets_to_transaction`), 10 records per
# transaction. Either both the output and the offsets commit, or neither does.
#
# We SIGKILL it at random points — a random 50–400 ms after it resumed, so kills land
# mid-send, mid-commit or between transactions — and start it again with the same
# `transactional_id`. `init_transactions` fences the dead instance (its open transaction
# is aborted: abort **markers** are written) and the new one resumes from the committed
# offset.

# %%
PAYMENTS = 3000
KILLS = 5
broker.restart()  # without MQ_FAILPOINTS now
admin.create_topic("payments", partitions=1)
admin.create_topic("payments-out", partitions=1)
inputs = [b"payment-%04d" % i for i in range(PAYMENTS)]
with cluster.producer(acks="all") as producer:
    producer.send_many("payments", [(None, v) for v in inputs])
    producer.flush()

rng = random.Random(SEED)
log = Path(tempfile.mkdtemp(prefix="mq-lab04-")) / "copier.log"
copier = Copier(cluster.bootstrap, "payments", "payments-out", group="payments-copier",
                transactional_id="payments-copier-1", per_txn=10, log=log)
kills = []
try:
    for n in tqdm(range(KILLS), desc="kill the copier"):
        copier.start()
        wait_until(lambda n=n: len(copier.starts()) > n or copier.failed(), timeout_s=30,
                   what="the copier to fence the last one and resume")
        time.sleep(rng.uniform(0.05, 0.4))
        copier.kill()
        kills.append({"kill": n + 1, "resumed from": copier.starts()[-1],
                      "last commit before the kill": copier.commits()[-1] if copier.commits() else 0})
    copier.start()
    wait_until(lambda: (copier.commits() and copier.commits()[-1] >= PAYMENTS) or copier.failed(), timeout_s=60,
               what="the last copier to finish the input")
    assert not copier.failed(), copier.failed()
finally:
    copier.kill()
print(table(kills))
print("restarts resumed from:", copier.starts())

# %% [markdown]
# Now read `payments-out` twice: as a `read_committed` consumer (what a downstream
# transactional pipeline sees: only committed transactions, up to the **last stable
# offset**) and as a `read_uncommitted` one (everything in the log, aborted attempts too).

# %%
committed_out = [r.value for r in run(read_partition(cluster.bootstrap, "payments-out",
                                                     isolation_level="read_committed"))]
uncommitted_out = [r.value for r in run(read_partition(cluster.bootstrap, "payments-out"))]
expected = Counter(transform(v) for v in inputs)
seen_committed = Counter(committed_out)
seen_uncommitted = Counter(uncommitted_out)
pipeline_rows = [
    {"reader": reader, "records": sum(c.values()), "distinct": len(c),
     "exactly once": sum(1 for v in expected if c[v] == 1), "twice or more": sum(1 for v in expected if c[v] > 1),
     "missing": sum(1 for v in expected if c[v] == 0)}
    for reader, c in (("read_committed", seen_committed), ("read_uncommitted", seen_uncommitted))]
aborted = sum(seen_uncommitted.values()) - sum(seen_committed.values())
print(table(pipeline_rows))
print(f"{aborted} records in payments-out belong to aborted transactions "
      f"(the killed copiers' open ones); read_committed skips them")
assert pipeline_rows[0]["exactly once"] == PAYMENTS and pipeline_rows[0]["records"] == PAYMENTS

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
x = range(len(pipeline_rows))
once = [r["exactly once"] for r in pipeline_rows]
extra = [r["records"] - r["exactly once"] for r in pipeline_rows]
ax.bar(x, once, color="#31a354", label="outputs seen exactly once")
ax.bar(x, extra, bottom=once, color="#de2d26", label="aborted attempts (seen again)")
ax.set_xticks(list(x), [r["reader"] for r in pipeline_rows])
for i, r in enumerate(pipeline_rows):
    ax.text(i, r["records"] + 10, str(r["records"]), ha="center", fontsize=8)
ax.set_ylim(0, max(r["records"] for r in pipeline_rows) * 1.2)
ax.set_ylabel("records in payments-out")
ax.set_title(f"{PAYMENTS} payments, the copier SIGKILLed {KILLS} times at random points", fontsize=9)
ax.legend(fontsize=8, loc="lower right")
save_figure(fig, "transactions-killed-copier")
plt.show()

# %% [markdown]
# What made this exactly once: the output records and the input offsets are in one
# transaction, so a restart resumes exactly where the last *committed* output ends; the
# new instance's `init_transactions` bumps the producer epoch, so the old one — were it
# still alive — would be fenced; and the readers downstream use `read_committed`. Drop
# any of the three and the count goes wrong (try `isolation_level="read_uncommitted"` in
# `mq/lab/copier.py`'s consumer, or commit the offsets after the transaction instead).

# %% [markdown]
# ## A work queue with a dead-letter topic
#
# A consumer group gives each partition to one member; a **share group** lets several
# members take records from the same partition, each record locked to one member for
# `share.record.lock.duration.ms` (2 s here). The member acknowledges each record:
# `accept` (done), `release` (give it back for someone else) or `reject` (never again).
# After `share.delivery.attempt.limit` deliveries (3 here) a record that was never
# accepted is archived and written to the **dead-letter topic** (`<group>.dlq`) with
# headers saying where it came from.
#
# Our queue `jobs` has one partition and 300 jobs; every tenth is poison — the worker
# fails on it and releases it. Four workers share the partition.

# %%
JOBS = 300
WORKERS = 4
admin.create_topic("jobs", partitions=1)
jobs = [(b"job-%03d" % i, b"poison" if i % 10 == 7 else b"ok") for i in range(JOBS)]
with cluster.producer(acks="all") as producer:
    producer.send_many("jobs", jobs)
    producer.flush()
poison = sum(1 for _, v in jobs if v == b"poison")


async def work_queue(timeout_s: float = 45.0) -> tuple[list[dict], int]:
    deliveries: list[dict] = []  # one row per delivery of a record to a worker
    consumers = [ShareConsumer(cluster.bootstrap, group_id="workers", topics=["jobs"], auto_offset_reset="earliest",
                               max_poll_records=10, client_id=f"worker-{i}") for i in range(WORKERS)]
    for consumer in consumers:
        await consumer.start()
    accepted: set[int] = set()
    deadline = time.monotonic() + timeout_s

    def done() -> bool:
        return len(accepted) == JOBS - poison and sum(c.dead_letters_written for c in consumers) == poison

    async def worker(i: int, consumer: ShareConsumer) -> None:
        while not done() and time.monotonic() < deadline:
            for record in await consumer.poll(timeout_ms=300):
                fails = record.value == b"poison"
                deliveries.append({"worker": i, "offset": record.offset, "delivery": record.delivery_count,
                                   "poison": fails})
                if fails:
                    consumer.acknowledge(record, "release")  # someone else may try again
                else:
                    await asyncio.sleep(0.001)  # the work
                    consumer.acknowledge(record, "accept")
                    accepted.add(record.offset)
            await consumer.commit()

    try:
        await asyncio.gather(*(worker(i, c) for i, c in enumerate(consumers)))
    finally:
        for consumer in consumers:
            await consumer.close()
    return deliveries, sum(c.dead_letters_written for c in consumers)


queue_started = time.perf_counter()
deliveries, dead_written = run(work_queue())
queue_s = time.perf_counter() - queue_started
dead_letters = run(read_partition(cluster.bootstrap, "workers.dlq"))
per_record = Counter(d["offset"] for d in deliveries)
per_worker = Counter(d["worker"] for d in deliveries)
queue_rows = [
    {"records": "ok", "count": JOBS - poison,
     "deliveries each": "/".join(map(str, sorted({per_record[o] for o in range(JOBS) if jobs[o][1] == b"ok"}))),
     "accepted": len({d["offset"] for d in deliveries if not d["poison"]}), "dead-lettered": 0},
    {"records": "poison", "count": poison,
     "deliveries each": "/".join(map(str, sorted({per_record[o] for o in range(JOBS) if jobs[o][1] == b"poison"}))),
     "accepted": 0, "dead-lettered": len({int(dict(r.headers)["mq.dlq.offset"]) for r in dead_letters})},
]
print(f"{WORKERS} workers drained the queue in {queue_s:.1f} s; deliveries per worker: {dict(sorted(per_worker.items()))}")
print(table(queue_rows))
print("the first dead letter's headers:")
print(table([{"header": k, "value": v.decode()} for k, v in dead_letters[0].headers]))
assert queue_rows[1]["dead-lettered"] == poison and queue_rows[0]["accepted"] == JOBS - poison

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
offsets = list(range(JOBS))
left.bar(offsets, [per_record[o] for o in offsets], width=1.0,
         color=["#de2d26" if jobs[o][1] == b"poison" else "#9ecae1" for o in offsets])
left.set_xlabel("offset in jobs-0")
left.set_ylabel("deliveries")
left.set_title("deliveries per record (red: poison)", fontsize=9)
right.bar(["accepted", "dead-lettered"], [queue_rows[0]["accepted"], queue_rows[1]["dead-lettered"]],
          color=["#31a354", "#de2d26"])
right.set_title(f"{JOBS} jobs, {WORKERS} workers on one partition, attempt limit 3", fontsize=9)
save_figure(fig, "share-group-dead-letters")
plt.show()

# %% [markdown]
# The ordinary jobs were delivered once each and spread over the workers, although the
# topic has a single partition. Each poison job was delivered three times (the attempt
# limit), then handed to a worker once more with a reason; the `ShareConsumer` wrote it to
# `workers.dlq` with `acks=all` before accepting it, so a dead letter is written at least
# once and never lost. An operator reads the dead-letter topic, fixes the cause and
# produces the jobs to `jobs` again.
#
# ## What we measured

# %%
print(table([
    {"figure": f"duplicates after {LOST_ANSWERS} lost produce answers, enable_idempotence=False",
     "value": idempotence_rows[0]["duplicates"]},
    {"figure": "the same with the idempotent producer", "value": idempotence_rows[1]["duplicates"]},
    {"figure": f"copier SIGKILLed {KILLS} times: outputs seen exactly once under read_committed (of {PAYMENTS})",
     "value": pipeline_rows[0]["exactly once"]},
    {"figure": "outputs seen twice or missing under read_committed",
     "value": pipeline_rows[0]["twice or more"] + pipeline_rows[0]["missing"]},
    {"figure": "aborted records read_uncommitted also sees", "value": aborted},
    {"figure": f"share group: ok jobs accepted (of {JOBS - poison})", "value": queue_rows[0]["accepted"]},
    {"figure": f"poison jobs dead-lettered after 3 deliveries (of {poison})", "value": queue_rows[1]["dead-lettered"]},
    {"figure": "dead letters the workers wrote (at least once)", "value": dead_written},
]))

# %%
cluster.close()
print(f"lab ran {time.perf_counter() - started:.0f} s")

# %% [markdown]
# **Try next.** Raise `LOST_ANSWERS` and watch the duplicates grow by a batch each; set
# `max_in_flight=1` on the plain producer and see that ordering is kept but duplicates are
# not prevented. In the copier, set `per_txn=1` and time it: a transaction per record costs
# two extra round trips and markers. In the work queue, `reject` the poison instead of
# releasing it and see it dead-lettered after a single delivery.
