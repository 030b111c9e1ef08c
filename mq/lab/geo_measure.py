"""What a geo lab measures while it runs: a steady producer in the source region, the
replication latency seen by a reader in the target region, and the two sides of the
loss-versus-duplicates dial.

* ``SteadyLoad`` produces at a fixed rate (a thread, one blocking ``send_many`` per chunk,
  partitions round-robin) and keeps, per chunk, when it was acknowledged and at which
  offsets, so ``acked_ends(t)`` says exactly what the source had acknowledged by ``t``.
* ``LatencyProbe`` reads a mirror topic in the target region from its end and takes, for
  every record, *now - the record's timestamp*: the producer's clock in the source
  region, the reader's in the target, one machine. Offsets and bytes are preserved, so
  the timestamp is the one the producer wrote.
* ``at_risk`` (RPO): records the source acknowledged that the target does not hold yet
  (``acked end - target end``, per partition) — what a fail-over at that instant loses.
* ``rereads``: a group's committed offsets in the source minus the offsets the mirror
  synced into the target — what the group reads again if it fails over at that instant.

Every probe keeps its own time axis, ``time.monotonic() - origin``, so one origin puts
them all on one plot.
"""

from __future__ import annotations

import itertools
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mq.core.errors import MqError
from mq.core.types import LATEST_TIMESTAMP, TopicPartition


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (``p`` in 0..100); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(round(p * len(ordered) / 100, 9)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class Chunk:
    """One ``send_many`` call: sent at ``sent_s``, answered at ``done_s``; on success the
    partition and the offset after its last record (``end``)."""

    sent_s: float
    done_s: float
    partition: int
    records: int
    end: int | None  # None: failed
    error: str = ""


class SteadyLoad:
    """Produce ``rate_per_s`` records per second to ``topic`` until ``stop()``.

        load = SteadyLoad(lab.producer("east", acks="all"), "orders", partitions=3, rate_per_s=2000).start()
        ...
        load.stop(); load.acked_ends(t)    # {partition: offset after the last record acked by t}
    """

    def __init__(self, producer: Any, topic: str, *, partitions: int, rate_per_s: float,
                 chunk_records: int | None = None, size_bytes: int = 100, origin: float | None = None) -> None:
        self.producer = producer
        self.topic = topic
        self.partitions = partitions
        self.rate_per_s = rate_per_s
        # about 50 chunks a second, so the load is smooth and each chunk is one request
        self.chunk_records = chunk_records or max(1, int(rate_per_s / 50))
        self.size_bytes = size_bytes
        self.origin = time.monotonic() if origin is None else origin
        self.chunks: list[Chunk] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sequence = 0

    def now_s(self) -> float:
        return time.monotonic() - self.origin

    def start(self) -> SteadyLoad:
        self._thread = threading.Thread(target=self._run, name=f"steady-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _values(self, count: int) -> list[tuple[None, bytes]]:
        out = []
        for _ in range(count):
            head = f"{self.topic}-{self._sequence:09d} ".encode()
            out.append((None, head.ljust(self.size_bytes, b".")[: max(self.size_bytes, len(head))]))
            self._sequence += 1
        return out

    def _run(self) -> None:
        started, sent, k = self.now_s(), 0, 0
        while not self._stop.is_set():
            wait = started + sent / self.rate_per_s - self.now_s()
            if wait > 0 and self._stop.wait(wait):
                break
            partition = k % self.partitions
            k += 1
            pairs = self._values(self.chunk_records)
            sent_s = self.now_s()
            try:
                metadata = self.producer.send_many(self.topic, pairs, partition=partition)
                self.chunks.append(Chunk(sent_s, self.now_s(), partition, len(pairs), metadata[-1].offset + 1))
            except MqError as exc:
                self.chunks.append(Chunk(sent_s, self.now_s(), partition, len(pairs), None, f"{exc.code.name}: {exc}"))
            sent += len(pairs)

    def stop(self, timeout_s: float = 30.0) -> SteadyLoad:
        """No further chunks; returns once the one in flight is answered."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self

    def acked_ends(self, by_s: float | None = None) -> dict[int, int]:
        """Per partition, the offset after the last record acknowledged by ``by_s``
        (default: all acknowledged so far)."""
        ends: dict[int, int] = {}
        for c in list(self.chunks):
            if c.end is not None and (by_s is None or c.done_s <= by_s):
                ends[c.partition] = max(ends.get(c.partition, 0), c.end)
        return ends

    def acked_records(self) -> int:
        return sum(c.records for c in list(self.chunks) if c.end is not None)

    def failed_records(self) -> int:
        return sum(c.records for c in list(self.chunks) if c.end is None)

    def achieved_rate(self) -> float:
        chunks = [c for c in list(self.chunks) if c.end is not None]
        if len(chunks) < 2:
            return 0.0
        span = chunks[-1].done_s - chunks[0].sent_s
        return sum(c.records for c in chunks) / span if span > 0 else 0.0


class LatencyProbe:
    """Read every partition of ``topic`` from its end with ``consumer`` (in the target
    region) in a thread; one ``(arrived_s, latency_ms)`` sample per record."""

    def __init__(self, consumer: Any, topic: str, *, partitions: int, origin: float | None = None,
                 clock_ms: Callable[[], float] = lambda: time.time() * 1000) -> None:
        self.consumer = consumer
        self.topic = topic
        self.partitions = partitions
        self.origin = time.monotonic() if origin is None else origin
        self.clock_ms = clock_ms
        self.samples: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LatencyProbe:
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        self.consumer.assign(tps)
        self.consumer.seek_to_end(*tps)
        self._thread = threading.Thread(target=self._run, name=f"latency-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = self.consumer.poll(timeout_ms=200)
            except MqError as exc:  # a fail-over or a cut: noted, and the probe goes on
                self.errors.append(f"{exc.code.name}: {exc}")
                self._stop.wait(0.2)
                continue
            now_ms, now_s = self.clock_ms(), time.monotonic() - self.origin
            self.samples.extend((now_s, now_ms - r.timestamp) for r in records)

    def stop(self) -> LatencyProbe:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        return self

    def between(self, from_s: float, to_s: float) -> list[float]:
        return [lat for t, lat in list(self.samples) if from_s <= t < to_s]

    def summary(self, from_s: float = 0.0, to_s: float = float("inf")) -> dict[str, Any]:
        window = self.between(from_s, to_s)
        return {"records": len(window), "p50_ms": _round(percentile(window, 50)),
                "p99_ms": _round(percentile(window, 99)), "max_ms": _round(max(window, default=None))}

    def buckets(self, width_s: float = 0.25) -> list[tuple[float, float, float]]:
        """``(time, p50, p99)`` per ``width_s`` bucket: the curve to plot."""
        groups: dict[int, list[float]] = {}
        for t, lat in list(self.samples):
            groups.setdefault(int(t // width_s), []).append(lat)
        return [(k * width_s, percentile(v, 50) or 0.0, percentile(v, 99) or 0.0)
                for k, v in sorted(groups.items())]


def ends_of(admin: Any, topic: str, partitions: int) -> dict[int, int]:
    """High watermarks of ``topic``'s partitions, by ``admin`` (of one region)."""
    found = admin.list_offsets({TopicPartition(topic, p): LATEST_TIMESTAMP for p in range(partitions)})
    return {tp.partition: info.offset for tp, info in found.items()}


def at_risk(acked: Mapping[int, int], target_ends: Mapping[int, int]) -> int:
    """Records acknowledged in the source and missing in the target (never negative per
    partition: the target may hold records acknowledged after the instant)."""
    return sum(max(0, end - target_ends.get(p, 0)) for p, end in acked.items())


def sample_at_risk(load: SteadyLoad, target_admin: Any, *, seconds: float, every_s: float = 0.05
                   ) -> list[tuple[float, int]]:
    """Every ``every_s`` for ``seconds``: ``(t, records at risk)`` — the target's ends
    read, then compared with what the source had acknowledged when the read began."""
    out: list[tuple[float, int]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = load.now_s()
        ends = ends_of(target_admin, load.topic, load.partitions)
        out.append((t, at_risk(load.acked_ends(t), ends)))
        time.sleep(every_s)
    return out


def committed(admin: Any, group: str, topic: str) -> dict[int, int]:
    return {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items() if tp.topic == topic}


def sample_rereads(source_admin: Any, target_admin: Any, group: str, topic: str, *, seconds: float,
                   every_s: float = 0.1, origin: float | None = None) -> list[tuple[float, int]]:
    """Every ``every_s``: ``(t, records the group would read again after a fail-over
    now)`` = its committed offsets in the source minus those synced into the target (a
    partition with nothing synced yet starts at 0 there)."""
    origin = time.monotonic() if origin is None else origin
    out: list[tuple[float, int]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic() - origin
        source = committed(source_admin, group, topic)
        target = committed(target_admin, group, topic)
        out.append((t, sum(max(0, o - target.get(p, 0)) for p, o in source.items())))
        time.sleep(every_s)
    return out


def periods(times: Sequence[float]) -> list[float]:
    """Differences between consecutive times (e.g. of a group's syncs in the mirror's log)."""
    return [b - a for a, b in itertools.pairwise(times)]


class GroupReader:
    """A group member in a thread that polls ``topic`` and commits after every poll, so
    its committed offsets follow what it has read within one poll."""

    def __init__(self, consumer: Any, topic: str) -> None:
        self.consumer = consumer
        self.topic = topic
        self.records = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GroupReader:
        self.consumer.subscribe([self.topic])
        self._thread = threading.Thread(target=self._run, name=f"group-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = self.consumer.poll(timeout_ms=100)
                if records:
                    self.consumer.commit()
                    self.records += len(records)
            except MqError as exc:
                self.errors.append(f"{exc.code.name}: {exc}")
                self._stop.wait(0.2)

    def stop(self) -> GroupReader:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        return self


class EndsRecorder:
    """Every ``every_s`` in a thread: ``(t, source total end, target total end)`` of one
    topic, read with one admin per region (a region that does not answer repeats its
    last figure)."""

    def __init__(self, admins: Sequence[Any], topic: str, partitions: int, *, every_s: float = 0.1,
                 origin: float | None = None) -> None:
        self.admins = list(admins)
        self.topic = topic
        self.partitions = partitions
        self.every_s = every_s
        self.origin = time.monotonic() if origin is None else origin
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> EndsRecorder:
        self._thread = threading.Thread(target=self._run, name=f"ends-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        last = [0] * len(self.admins)
        while not self._stop.wait(self.every_s):
            t = time.monotonic() - self.origin
            for i, admin in enumerate(self.admins):
                try:
                    last[i] = sum(ends_of(admin, self.topic, self.partitions).values())
                except MqError:
                    pass  # the region is cut off or busy: keep its last figure
            self.samples.append((t, *last))  # type: ignore[arg-type]

    def stop(self) -> EndsRecorder:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        return self


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min and max: how noisy a repeated figure was."""
    if not values:
        return {"runs": 0, "median": None, "min": None, "max": None}
    return {"runs": len(values), "median": _round(statistics.median(values)), "min": _round(min(values)),
            "max": _round(max(values))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


__all__ = ["Chunk", "EndsRecorder", "GroupReader", "LatencyProbe", "SteadyLoad", "at_risk", "committed", "ends_of",
           "percentile", "periods", "sample_at_risk", "sample_rereads", "spread"]
