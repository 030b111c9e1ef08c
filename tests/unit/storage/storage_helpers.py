"""Shared helpers for the storage tests: batches and reading a whole log back."""

from __future__ import annotations

from mq.core.config import TopicConfig
from mq.protocol.record_batch import Record, build_batch, iter_batches, iter_records
from mq.storage import Log, MemoryFileIO

DIR = "/data/orders-0"
NOW = 1_700_000_000_000


def batch(count: int = 3, *, ts: int = NOW, tag: str = "v", size: int = 8) -> bytes:
    """A client batch of ``count`` records with values ``f"{tag}{i}"`` padded to ``size``."""
    return build_batch(
        [(b"k", f"{tag}{i}".encode().ljust(size, b"."), (), ts + i) for i in range(count)]
    )


def config(**overrides: object) -> TopicConfig:
    base: dict[str, object] = {
        "segment_bytes": 4096, "index_interval_bytes": 256, "segment_index_bytes": 4096,
    }
    base.update(overrides)
    return TopicConfig(**base)  # type: ignore[arg-type]


def open_log(fs: MemoryFileIO | None = None, cfg: TopicConfig | None = None, **kw: object) -> Log:
    return Log.open(fs or MemoryFileIO(), DIR, cfg or config(), now_ms=NOW, **kw)  # type: ignore[arg-type]


def read_all(log: Log, start: int | None = None, *, max_bytes: int = 1000) -> list[Record]:
    """Every record from ``start`` (default: log start) to the log end, via ``read``."""
    offset = log.log_start_offset if start is None else start
    records: list[Record] = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=max_bytes).records
        assert data, f"empty read at {offset} < {log.log_end_offset}"
        batch_records = [r for r in iter_records(data) if r.offset >= offset]
        records += batch_records
        last = [h for _, h in iter_batches(data)][-1]
        offset = last.next_offset
    return records


def values(records: list[Record]) -> list[bytes]:
    return [r.value.rstrip(b".") for r in records if r.value is not None]
