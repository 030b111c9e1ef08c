"""Where a compacted log's clean and dirty sections are, and whether to clean it now.

The *clean* section is everything below the first dirty offset (the cleaner
checkpoint: what the last pass reached); the *dirty* section runs from there to the
first uncleanable offset: the base offset of the first segment, from the first dirty
one on, that is the active segment, reaches the high watermark, or holds a record
younger than ``min.compaction.lag.ms`` (whole segments, as Kafka's cleaner groups
them). The dirty ratio is dirty bytes / (clean + dirty bytes).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from mq.core.types import CleanupPolicy
from mq.storage.cleaner_checkpoint import CleanerCheckpoint, read_cleaner_checkpoint
from mq.storage.log import Log
from mq.storage.segment import LogSegment

__all__ = ["CleanableLog", "cleanable_log", "is_compacted"]


def is_compacted(log: Log) -> bool:
    return log.config.cleanup_policy in (CleanupPolicy.COMPACT, CleanupPolicy.COMPACT_DELETE)


@dataclass(frozen=True, slots=True)
class CleanableLog:
    """Kafka's LogToClean: where the clean and dirty sections of a log are."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    oldest_dirty_ms: int | None
    """Timestamp of the first batch of the dirty section (for max.compaction.lag.ms)."""
    next_horizon_ms: int | None
    """Earliest tombstone delete horizon in the cleanable section."""
    checkpoint: CleanerCheckpoint

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def due(self, *, min_dirty_ratio: float, max_lag_ms: int, now_ms: int) -> bool:
        """Whether a pass is worth it now: enough dirty bytes, a dirty record older
        than ``max.compaction.lag.ms``, or tombstones whose horizon has passed."""
        if self.next_horizon_ms is not None and self.next_horizon_ms <= now_ms:
            return True
        if self.dirty_bytes <= 0:
            return False
        if self.dirty_ratio >= min_dirty_ratio:
            return True
        return self.oldest_dirty_ms is not None and now_ms - self.oldest_dirty_ms > max_lag_ms


def cleanable_log(log: Log, *, high_watermark: int, now_ms: int) -> CleanableLog:
    """The log's clean and dirty sections now (reads the cleaner checkpoint)."""
    checkpoint = read_cleaner_checkpoint(log.fileio, log.directory)
    segments = log.segments
    last = len(segments) - 1  # the active segment
    first_dirty = min(max(checkpoint.first_dirty_offset, log.log_start_offset), segments[-1].base_offset)
    dirty_i = max(0, bisect_right(segments, first_dirty, key=_base) - 1)
    lag = log.config.min_compaction_lag_ms
    end_i = dirty_i
    while end_i < last:
        segment = segments[end_i]
        if segments[end_i + 1].base_offset > high_watermark:
            break
        if lag > 0 and segment.max_timestamp > now_ms - lag:
            break
        end_i += 1
    bases = {s.base_offset for s in segments[:end_i]}
    horizons = [ms for base, ms in checkpoint.horizons if base in bases]
    return CleanableLog(
        first_dirty_offset=segments[dirty_i].base_offset,
        first_uncleanable_offset=segments[end_i].base_offset,
        clean_bytes=sum(s.size for s in segments[:dirty_i]),
        dirty_bytes=sum(s.size for s in segments[dirty_i:end_i]),
        oldest_dirty_ms=segments[dirty_i].first_batch_timestamp if end_i > dirty_i else None,
        next_horizon_ms=min(horizons, default=None),
        checkpoint=checkpoint,
    )


def _base(segment: LogSegment) -> int:
    return segment.base_offset
