"""The active-active workloads of ``loadtests.bench_geo``: two regions that both take
writes and a flow each way (``mq.lab.active.start_active_active``, the layout of
regions/active-active.yaml on free ports), and the copy path's transform alone.

- ``aa_throughput``: ``records`` 100-byte records produced flat out into ``orders``-like
  topics in each loaded region at once (``directions``: both, or east only); per direction,
  the rate at which the remote topic (``east.<topic>`` in west, ``west.<topic>`` in east)
  filled, from its first record to its last.
- ``aa_latency``: ``rate`` records/s into each region at once; a reader per region takes
  now - the send stamp of every record it reads from the remote topic.
- ``transform``: in one process, no I/O: source batches of ``batch_records`` records in,
  target batches out, through the copy path's batch-level fast path
  (``mirror.active.ActiveCopier._decide`` and ``build_batch_columns``) and through the
  record-by-record path it replaced (``Stamper.copy``, ``DedupeIndex.admit_origin``,
  ``build_batch``), interleaved A B A B.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

from loadtests.geo_workloads import CpuMeter, _cpu_seconds, _paced_producer, _report, _spawn
from loadtests.region_workloads import STALL_S, latency_reader, p3
from loadtests.stats import latency_summary
from mirror.active import ActiveCopier, RemotePartition
from mirror.dedupe import DedupeIndex
from mirror.remote import Route
from mq.core.errors import MqError
from mq.core.types import TopicPartition
from mq.lab.geo import GeoLab
from mq.lab.process import wait_until
from mq.protocol.batch_builder import build_batch, build_batch_columns
from mq.protocol.record_batch import decode_record_columns, iter_batches

REGIONS = ("east", "west")


def _other(region: str) -> str:
    return "west" if region == "east" else "east"


def create_topics(lab: GeoLab, topic: str, partitions: int) -> dict[str, Any]:
    """``topic`` in both regions (RF = min(3, brokers), min.insync.replicas = min(2, brokers),
    full ISR); returns once each region's remote topic exists in the other."""
    brokers = len(lab.deployment.region("east").brokers)
    rf, min_isr = min(3, brokers), min(2, brokers)
    for region in REGIONS:
        admin = lab.admin(region)
        admin.create_topic(topic, partitions=partitions, replication_factor=rf,
                           configs={"min.insync.replicas": str(min_isr)})

        def full_isr(admin: Any = admin) -> bool:
            try:
                parts = admin.describe_topic(topic).partitions
            except MqError:
                return False
            return len(parts) == partitions and all(p.leader is not None and p.leader >= 0
                                                    and sorted(p.isr) == sorted(p.replicas) for p in parts)

        wait_until(full_isr, timeout_s=60, interval_s=0.05, what=f"{topic}: full ISR in {region}")
    for region in REGIONS:
        lab.wait_topic(_other(region), f"{region}.{topic}", timeout_s=60)
    return {"replication_factor": rf, "min_insync_replicas": min_isr, "partitions": partitions}


class RemoteProgress:
    """Polls the remote topics' ends in a thread: when each first held a record and when
    it held ``goal`` (key: the source region)."""

    def __init__(self, lab: GeoLab, topic: str, goal: int, sources: tuple[str, ...], *,
                 every_s: float = 0.02) -> None:
        self.lab, self.topic, self.goal, self.every_s = lab, topic, goal, every_s
        self.admins = {source: lab.admin(_other(source)) for source in sources}
        self.first: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aa-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and len(self.done) < len(self.admins):
            for source, admin in self.admins.items():
                if source in self.done:
                    continue
                try:
                    have = sum(self.lab.ends(_other(source), f"{source}.{self.topic}", admin=admin).values())
                except MqError as exc:
                    self.error = str(exc)
                    continue
                now = time.monotonic()
                if have > 0:
                    self.first.setdefault(source, now)
                if have >= self.goal:
                    self.done[source] = now
            self._stop.wait(self.every_s)

    def wait(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        self._stop.set()
        return len(self.done) == len(self.admins)


def aa_throughput(lab: GeoLab, topic: str, *, records: int, partitions: int, producers: int, size_bytes: int,
                  seed: int, chunk_records: int, batch_size: int, sources: tuple[str, ...],
                  backlog: bool = False) -> dict[str, Any]:
    """``records`` produced flat out into ``topic`` in every region of ``sources`` at once;
    per direction, the remote topic's fill rate (see the module docstring). ``backlog``:
    the flows are stopped while the records are produced, then started together (the
    copy alone, without the producers on the same cores)."""
    topic_settings = create_topics(lab, topic, partitions)
    flows = _flows(sources)
    if backlog:
        for flow in flows:
            lab.stop_mirror(flow)
    cpu = CpuMeter(lab).start()
    mirror_cpu = {flow: _proc_cpu(lab.mirror_pid(flow)) for flow in flows}
    progress = RemoteProgress(lab, topic, records, sources) if not backlog else None
    produced: dict[str, Any] = {}

    def produce(region: str) -> None:
        try:
            produced[region] = p3(lab.bootstrap(region), topic, partitions=partitions, producers=producers,
                                  records=records, size_bytes=size_bytes, seed=seed, chunk_records=chunk_records,
                                  in_flight=4, linger_ms=5, batch_size=batch_size)
        except Exception as exc:  # noqa: BLE001 - any failure is reported below
            produced[region] = exc

    threads = [threading.Thread(target=produce, args=(r,), daemon=True) for r in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [f"{r}: {x}" for r, x in produced.items() if isinstance(x, BaseException)]
    if failed:
        raise RuntimeError(f"AA producers failed: {failed}")
    if progress is None:
        for flow in flows:
            lab.start_mirror(flow=flow)
        cpu = CpuMeter(lab).start()
        mirror_cpu = {flow: _proc_cpu(lab.mirror_pid(flow)) for flow in flows}
        progress = RemoteProgress(lab, topic, records, sources)
    if not progress.wait(STALL_S + records / 10_000):
        raise RuntimeError(f"AA: {topic} not mirrored both ways ({progress.error or 'too slow'}): "
                           f"done {sorted(progress.done)}")
    directions = {}
    for source in sources:
        seconds = max(progress.done[source] - progress.first[source], progress.every_s)
        directions[f"{source}->{_other(source)}"] = {
            "rec_per_s": round(records / seconds), "seconds": round(seconds, 3),
            "mb_per_s": round(records * size_bytes / seconds / 2**20, 2),
            "source_produce_rec_per_s": round(produced[source].rec_per_s)}
    spent = cpu.stop()
    spent["mirrors"] = {flow: round((_proc_cpu(lab.mirror_pid(flow)) or 0) - (before or 0), 2)
                        for flow, before in mirror_cpu.items()}
    spent.pop("mirror", None)
    rates = [d["rec_per_s"] for d in directions.values()]
    return {"records_per_direction": records, "bytes": records * size_bytes * len(sources),
            "directions": directions, "min_direction_rec_per_s": min(rates),
            "loaded": "both" if len(sources) == 2 else f"{sources[0]} only", "cpu_s": spent,
            "mode": "backlog" if backlog else "live",
            "settings": {**topic_settings, "producers_per_region": producers, "batch_size": batch_size}}


def _flows(sources: tuple[str, ...]) -> list[str]:
    return [f"{s}-to-{_other(s)}" for s in sources]


def _proc_cpu(pid: int | None) -> float | None:
    return _cpu_seconds(pid)


def aa_latency(lab: GeoLab, topic: str, *, rate: int, seconds: float, warmup_s: float, partitions: int,
               size_bytes: int, linger_ms: int) -> dict[str, Any]:
    """``rate`` records/s into ``topic`` in both regions at once; per direction, now - the
    send stamp of every record read from the remote topic in the other region."""
    topic_settings = create_topics(lab, topic, partitions)
    count, warmup = int(rate * (seconds + warmup_s)), int(rate * warmup_s)
    readers, writers = {}, {}
    for source in REGIONS:  # keep every handle _spawn returns until the reports are in
        readers[source] = _spawn(latency_reader, lab.bootstrap(_other(source)), f"{source}.{topic}",
                                 list(range(partitions)), count, 100)
    for source, reader in readers.items():
        if not reader[1].wait(60):
            raise RuntimeError(f"AA latency: the reader of {source}.{topic} did not start")
    for source in REGIONS:
        writers[source] = _spawn(_paced_producer, lab.bootstrap(source), topic, partitions, rate, count,
                                 size_bytes, linger_ms)
    directions = {}
    for source in REGIONS:
        sent = _report(writers[source][3], writers[source][0], f"AA latency producer in {source}",
                       STALL_S + seconds + warmup_s)
        report = _report(readers[source][3], readers[source][0], f"AA latency reader of {source}.{topic}", STALL_S)
        measured = [lat for seq, lat in report if seq >= warmup]
        directions[f"{source}->{_other(source)}"] = {
            "achieved_rec_per_s": round(sent["sent"] / (sent["stopped"] - sent["start"])),
            "records_failed": sent["failed"],
            "latency": latency_summary(measured, of="send in the source region -> read from the remote topic "
                                                    "in the other region, every record")}
    return {"records_per_direction": count - warmup, "target_rec_per_s": rate, "directions": directions,
            "settings": {**topic_settings, "acks": "all", "linger_ms": linger_ms, "warmup_s": warmup_s,
                         "api": "send() per record, partitions round-robin"}}


# ---------------------------------------------------------------- the transform alone


class _Raw:
    def __init__(self, records: bytes) -> None:
        self.records = records


def _source_fetch(batches: int, batch_records: int, size_bytes: int) -> bytes:
    value = os.urandom(size_bytes)
    out = []
    for b in range(batches):
        base = b * batch_records
        out.append(build_batch([(None, value, (), 1_700_000_000_000 + (base + i) // 50) for i in range(batch_records)],
                               base_offset=base))
    return b"".join(out)


def _per_record(raw: bytes, route: Route) -> int:
    """The copy path before the fast path: decide, stamp and admit each record, then build."""
    rp = RemotePartition(TopicPartition("orders", 0), "east.orders", route, offset_lag_max=100,
                         offset_sync_interval_ms=1000)
    view, writes = memoryview(raw), []
    copy, admit = rp.stamper.copy, rp.index.admit_origin
    for pos, header in iter_batches(view):
        cols = decode_record_columns(view[pos:pos + header.size])
        for o, ts, key, value, headers in zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers,
                                              strict=True):
            decision, origin, origin_offset, stamped = copy(headers, o, ts)
            if decision and origin is not None and admit(origin, origin_offset):
                writes.append((key, value, stamped, ts))
    build_batch(writes)
    return len(writes)


def _batch_level(raw: bytes, route: Route) -> int:
    rp = RemotePartition(TopicPartition("orders", 0), "east.orders", route, offset_lag_max=100,
                         offset_sync_interval_ms=1000)
    rp.index = DedupeIndex()
    fetched = ActiveCopier._decide(None, rp, _Raw(raw), 0)  # type: ignore[arg-type]
    assert fetched is not None
    build_batch_columns(fetched.timestamps, fetched.keys, fetched.values, fetched.headers)
    return fetched.writes


def transform(*, batches: int, batch_records: int, size_bytes: int, reps: int) -> list[dict[str, Any]]:
    """Source fetch bytes -> target batch bytes, rec/s of each path (median of ``reps``)."""
    raw = _source_fetch(batches, batch_records, size_bytes)
    route = Route("east", "west")
    rates: dict[str, list[float]] = {"per-record": [], "batch": []}
    for _ in range(reps):
        for name, fn in (("per-record", _per_record), ("batch", _batch_level)):
            started = time.perf_counter()
            n = fn(raw, route)
            rates[name].append(n / (time.perf_counter() - started))
    lines = [{"path": name, "records": batches * batch_records, "runs": reps,
              "rec_per_s": round(statistics.median(r)), "per_run": [round(x) for x in r]}
             for name, r in rates.items()]
    ratio = statistics.median(b / a for a, b in zip(rates["per-record"], rates["batch"], strict=True))
    for line in lines:
        line["batch_over_per_record"] = round(ratio, 2)
    return lines
