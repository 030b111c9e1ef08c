"""Opening a partition directory: find segments, recover what was not flushed.

Kafka's LogLoader, reduced to its rules:

- Segments are the ``<20-digit base>.log`` files, in offset order; stray index
  files and checkpoint temp files are removed.
- Every segment that may hold offsets at or above the recovery point is re-read in
  full: each batch's structure, CRC and offset order is checked, the indexes are
  rebuilt, and a torn or corrupt tail is truncated. Once one segment is truncated,
  the segments after it are deleted (the log must stay a prefix). An empty segment
  after a gap is deleted too: its base offset claims offsets that were lost.
- The active segment is exempt when a hop over its headers from the last index
  entry ends exactly at the end of the file at an offset ≤ the recovery point (a
  clean shutdown): opening is then O(1) in the log size.
- A log cleaner swap cut short by a crash is finished or rolled back first (see
  ``mq.storage.swap``).
- Segments below the recovery point are trusted and opened lazily; their indexes
  are checked when first used and rebuilt if missing or malformed. Their bytes are
  still CRC-checked on every read (see ``LogSegment.read``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from mq.core.config import TopicConfig
from mq.storage.checkpoint import (
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    TMP_SUFFIX,
    read_checkpoint,
)
from mq.storage.fileio import FileIO
from mq.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)
from mq.storage.swap import recover_swaps


@dataclass(slots=True)
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    bytes_truncated: int
    segments_recovered: int
    checkpointed_recovery_point: int | None
    checkpointed_log_start_offset: int | None


def _base_offset(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)]
    if not name.endswith(suffix) or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def _scan_directory(fileio: FileIO, directory: str) -> list[int]:
    """Base offsets of the segments; removes leftovers that belong to no segment."""
    names = fileio.listdir(directory)
    bases = sorted(b for b in (_base_offset(n, LOG_SUFFIX) for n in names) if b is not None)
    present = set(bases)
    for name in names:
        orphan = any(
            (base := _base_offset(name, suffix)) is not None and base not in present
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        )
        if orphan or name.endswith(TMP_SUFFIX):
            fileio.remove(posixpath.join(directory, name))
    return bases


def load_log(
    fileio: FileIO, directory: str, config: TopicConfig, *, now_ms: int,
    recovery_point: int | None,
) -> LoadedLog:
    fileio.makedirs(directory)
    recover_swaps(fileio, directory)
    bases = _scan_directory(fileio, directory)
    checkpointed_recovery_point = read_checkpoint(fileio, directory, RECOVERY_POINT_FILE)
    if recovery_point is None:
        recovery_point = checkpointed_recovery_point or 0
    start_checkpoint = read_checkpoint(fileio, directory, LOG_START_OFFSET_FILE)
    segments = [LogSegment(fileio, directory, b, config, created_ms=now_ms) for b in bases]
    truncated, recovered = _recover(segments, recovery_point)
    if not segments:
        base = start_checkpoint or 0
        segments.append(LogSegment.create(fileio, directory, base, config, now_ms=now_ms))
    log_start = max(start_checkpoint or 0, segments[0].base_offset)
    log_end = segments[-1].next_offset
    if log_start > log_end:
        # Everything below the checkpointed log start was deleted by the user: the
        # log restarts there rather than reuse deleted offsets.
        for segment in segments:
            segment.delete()
        segments[:] = [LogSegment.create(fileio, directory, log_start, config, now_ms=now_ms)]
        log_end = log_start
    return LoadedLog(
        segments, log_start, min(recovery_point, log_end), truncated, recovered,
        checkpointed_recovery_point, start_checkpoint,
    )


def _recover(segments: list[LogSegment], recovery_point: int) -> tuple[int, int]:
    """Recover segments from the one holding ``recovery_point``; returns (bytes
    truncated, segments recovered). Deletes segments after a truncation."""
    truncated_total = recovered = 0
    i = 0
    while i < len(segments):
        segment = segments[i]
        is_last = i + 1 == len(segments)
        if is_last:
            needs = not (segment.tail_clean_at_open() and segment.next_offset <= recovery_point)
        else:
            needs = segments[i + 1].base_offset > recovery_point
        if not needs:
            i += 1
            continue
        truncated = segment.recover()
        recovered += 1
        truncated_total += truncated
        if i > 0 and segment.size == 0 and segments[i - 1].next_offset < segment.base_offset:
            _delete_from(segments, i)
            break
        if truncated:
            _delete_from(segments, i + 1)
            break
        i += 1
    return truncated_total, recovered


def _delete_from(segments: list[LogSegment], start: int) -> None:
    for segment in segments[start:]:
        segment.delete()
    del segments[start:]
