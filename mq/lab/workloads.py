"""Seeded data and the produce/consume loops labs run, with progress bars.

Labs produce in chunks through ``send_many`` and note the time after each chunk,
so the same run gives both the data and a throughput curve to plot.
"""

from __future__ import annotations

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
