"""Seeded data and the produce/consume loops labs run, with progress bars.

Labs produce in chunks through ``send_many`` and note the time after each chunk,
so the same run gives both the data and a throughput curve to plot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from mq.core.rng import Rng
from mq.core.types import RecordMetadata, TopicPartition


def make_values(seed: int, count: int, *, size_bytes: int = 100) -> list[bytes]:
    """``count`` values of ``size_bytes`` each, the same for the same seed: readable
    text (``order-<n>`` followed by seeded letters) so dumps are easy to read."""
    rng = Rng(seed)
    letters = b"abcdefghijklmnopqrstuvwxyz"
    values = []
    for n in range(count):
        head = f"order-{n:07d} ".encode()
        tail = bytes(letters[b % 26] for b in rng.randbytes(max(0, size_bytes - len(head))))
        values.append((head + tail)[:size_bytes])
    return values


@dataclass(frozen=True)
class ThroughputPoint:
    """After ``records`` records, ``elapsed_s`` had passed; ``rec_per_s`` is the rate of
    the chunk that ended here."""

    elapsed_s: float
    records: int
    rec_per_s: float


@dataclass(frozen=True)
class ProduceRun:
    records: int
    seconds: float
    first: RecordMetadata | None
    last: RecordMetadata | None
    points: list[ThroughputPoint] = field(default_factory=list)

    @property
    def rec_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def produce(producer: Any, topic: str, values: Sequence[bytes], *, keys: Sequence[bytes] | None = None,
            partition: int | None = None, chunk_records: int = 500, progress: bool = True,
            desc: str | None = None) -> ProduceRun:
    """Send ``values`` with ``producer.send_many`` in chunks, waiting for each chunk's
    acknowledgements; returns the first and last metadata and a throughput curve."""
    points: list[ThroughputPoint] = []
    first = last = None
    start = previous = time.perf_counter()
    with tqdm(total=len(values), desc=desc or f"produce {topic}", unit="rec",
              disable=not progress, mininterval=0.5) as bar:
        for begin in range(0, len(values), chunk_records):
            chunk = values[begin:begin + chunk_records]
            chunk_keys = keys[begin:begin + chunk_records] if keys is not None else [None] * len(chunk)
            metadata = producer.send_many(topic, list(zip(chunk_keys, chunk)), partition=partition)
            now = time.perf_counter()
            first = first or metadata[0]
            last = metadata[-1]
            rate = len(chunk) / max(now - previous, 1e-9)
            points.append(ThroughputPoint(now - start, begin + len(chunk), rate))
            previous = now
            bar.update(len(chunk))
    return ProduceRun(len(values), time.perf_counter() - start, first, last, points)


def consume(consumer: Any, topic: str, *, count: int, partition: int = 0, offset: int | None = None,
            timeout_s: float = 30.0, progress: bool = True, desc: str | None = None) -> list[Any]:
    """Assign one partition, start at ``offset`` (default: the beginning) and poll until
    ``count`` records arrived; ``TimeoutError`` if they do not within ``timeout_s``."""
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    if offset is None:
        consumer.seek_to_beginning(tp)
    else:
        consumer.seek(tp, offset)
    return poll_records(consumer, count=count, timeout_s=timeout_s, progress=progress,
                        desc=desc or f"consume {topic}")


def poll_records(consumer: Any, *, count: int, timeout_s: float = 30.0, progress: bool = True,
                 desc: str = "consume") -> list[Any]:
    """Poll an already positioned consumer until ``count`` records arrived."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    with tqdm(total=count, desc=desc, unit="rec", disable=not progress, mininterval=0.5) as bar:
        while len(records) < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(records)} of {count} records arrived within {timeout_s:g} s")
            batch = consumer.poll(timeout_ms=200)
            taken = batch[: count - len(records)]
            records.extend(taken)
            bar.update(len(taken))
    return records


@dataclass(frozen=True)
class AckedChunk:
    """One ``send_many`` call of a ``ProduceLoad``: sent at ``sent_s``, answered at
    ``done_s`` (seconds on the load's clock), acknowledged or failed with ``error``."""

    sent_s: float
    done_s: float
    values: tuple[bytes, ...]
    offsets: tuple[int, ...] = ()
    error: str | None = None


class ProduceLoad:
    """Produce ``values`` in a background thread, ``chunk_records`` per ``send_many``,
    noting when each chunk was sent and answered, so a lab can fault the region meanwhile
    and ask afterwards what was acknowledged, when, and what failed.

        load = ProduceLoad(producer, "orders", values).start()
        ...                      # kill a broker
        load.join()
        load.acked_values()      # every value the region acknowledged

    Time is ``time.monotonic()`` minus ``origin`` (default: when the load was made), so
    a ``Timeline`` given the same origin puts both on one axis.
    """

    def __init__(self, producer: Any, topic: str, values: Sequence[bytes], *, chunk_records: int = 100,
                 partition: int | None = 0, origin: float | None = None, rate_per_s: float | None = None) -> None:
        self.producer = producer
        self.topic = topic
        self.values = list(values)
        self.chunk_records = chunk_records
        self.partition = partition
        self.origin = time.monotonic() if origin is None else origin
        self.rate_per_s = rate_per_s
        self.chunks: list[AckedChunk] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def now_s(self) -> float:
        return time.monotonic() - self.origin

    def start(self) -> ProduceLoad:
        self._thread = threading.Thread(target=self._run, name=f"produce-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        started = self.now_s()
        sent = 0
        for begin in range(0, len(self.values), self.chunk_records):
            if self._stop.is_set():
                break
            if self.rate_per_s:  # open loop: hold the rate, never burst to catch up
                wait = started + sent / self.rate_per_s - self.now_s()
                if wait > 0 and self._stop.wait(wait):
                    break
            chunk = tuple(self.values[begin:begin + self.chunk_records])
            sent_s = self.now_s()
            try:
                metadata = self.producer.send_many(self.topic, [(None, v) for v in chunk],
                                                   partition=self.partition)
                self.chunks.append(AckedChunk(sent_s, self.now_s(), chunk, tuple(m.offset for m in metadata)))
            except Exception as error:  # noqa: BLE001 - a failed chunk is a result, not a crash
                self.chunks.append(AckedChunk(sent_s, self.now_s(), chunk, error=f"{type(error).__name__}: {error}"))
            sent += len(chunk)

    def stop(self) -> None:
        """Send no further chunks (the one in flight completes); ``join`` waits for it."""
        self._stop.set()

    def join(self, timeout_s: float | None = None) -> ProduceLoad:
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def acked_values(self) -> list[bytes]:
        return [v for c in self.chunks if c.error is None for v in c.values]

    def failed_values(self) -> list[bytes]:
        return [v for c in self.chunks if c.error is not None for v in c.values]

    def acked_count(self) -> int:
        return sum(len(c.values) for c in self.chunks if c.error is None)

    def first_ack_after(self, t_s: float) -> float | None:
        """When the first chunk answered after ``t_s`` was acknowledged (None: none was)."""
        times = [c.done_s for c in self.chunks if c.error is None and c.done_s > t_s]
        return min(times) if times else None

    def ack_times(self) -> list[tuple[float, int]]:
        """``(done_s, acknowledged so far)`` after each acknowledged chunk: a cumulative curve."""
        total, out = 0, []
        for chunk in sorted(self.chunks, key=lambda c: c.done_s):
            if chunk.error is None:
                total += len(chunk.values)
                out.append((chunk.done_s, total))
        return out


def lost_records(acked: Sequence[bytes], present: Sequence[bytes]) -> list[bytes]:
    """Acknowledged values missing from what the log holds now (a retried chunk may be
    there twice: duplicates are not loss)."""
    there = set(present)
    return [v for v in acked if v not in there]


def read_all(consumer: Any, topic: str, *, partition: int = 0, idle_s: float = 1.0,
             timeout_s: float = 30.0) -> list[Any]:
    """Every record of one partition from the beginning up to the high watermark: poll
    until the consumer reaches the end offset it saw when it started."""
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while consumer.position(tp) < end:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"read {len(records)} records of {topic}-{partition}; the end is {end}")
        records.extend(consumer.poll(timeout_ms=int(idle_s * 1000)))
    return records
