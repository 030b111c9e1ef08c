"""Shared helpers for the log cleaner tests: keyed batches and a compacted log."""

from __future__ import annotations

from storage_helpers import DIR, NOW, config

from mq.core.config import TopicConfig
from mq.core.types import CleanupPolicy
from mq.protocol.record_batch import Record, build_batch
from mq.storage import Log, MemoryFileIO

DAY = 86_400_000


def compact_config(**overrides: object) -> TopicConfig:
    base: dict[str, object] = {
        "cleanup_policy": CleanupPolicy.COMPACT, "segment_bytes": 400, "index_interval_bytes": 64,
        "delete_retention_ms": 1000, "retention_ms": -1,
    }
    base.update(overrides)
    return config(**base)


def open_compacted(fs: MemoryFileIO | None = None, cfg: TopicConfig | None = None) -> Log:
    return Log.open(fs or MemoryFileIO(), DIR, cfg or compact_config(), now_ms=NOW)


def append(log: Log, *records: tuple[bytes | None, bytes | None], ts: int = NOW) -> int:
    """Append one batch of ``(key, value)`` records; returns its first offset."""
    info = log.append_as_leader(
        build_batch([(k, v, (), ts) for k, v in records]), leader_epoch=1, now_ms=ts
    )
    return info.first_offset


def fill(log: Log, n: int, *, keys: int = 5, ts: int = NOW, tombstone_every: int = 0) -> None:
    """``n`` single-record batches cycling over ``keys`` keys, values ``v<offset>``."""
    for i in range(n):
        offset = log.log_end_offset
        value = None if tombstone_every and i % tombstone_every == tombstone_every - 1 else b"v%d" % offset
        append(log, (b"k%d" % (i % keys), value), ts=ts)


def latest(records: list[Record]) -> dict[bytes | None, Record]:
    out: dict[bytes | None, Record] = {}
    for r in records:
        out[r.key] = r
    return out
