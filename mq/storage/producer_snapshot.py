"""Producer-state snapshot files: ``<20-digit offset>.snapshot`` beside the segments.

Written when a segment rolls (the offset in the name is the new segment's base
offset: the snapshot holds the state of every batch below it, Kafka's naming), and on
a clean close at the log end offset. On open the state is the last snapshot at or
below the log end plus the batches after it; without one, the whole log is read.

Format (big-endian)::

    version            i16   1
    crc                u32   CRC-32C of everything after this field
    producer_count     i32
    per producer, by producer id:
      producer_id               i64
      producer_epoch            i16
      last_timestamp_ms         i64
      coordinator_epoch         i32
      current_txn_first_offset  i64   -1: no open transaction
      batch_count               i8    at most 5, oldest first
      per batch: first_seq i32 | last_seq i32 | first_offset i64 | last_offset i64 | timestamp_ms i64

Unlike Kafka (which snapshots only each producer's last batch), all 5 cached batches
are kept, so a restarted leader dedupes every retry of an in-flight window. Files are
written to ``.tmp``, fsynced and renamed; an unreadable file is ignored (the state is
rebuilt from an older snapshot or the log, which is only slower).
"""

from __future__ import annotations

import posixpath
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from mq.protocol.batch_format import checksum
from mq.storage.fileio import FileIO
from mq.storage.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from mq.storage.segment import LogSegment

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqqq")
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024


class SnapshotError(ValueError):
    """A snapshot file is damaged or of an unknown version."""


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    offset: int
    entries: list[ProducerStateEntry]


def snapshot_path(directory: str, offset: int) -> str:
    return posixpath.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def snapshot_offsets(fileio: FileIO, directory: str) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    out = []
    for name in fileio.listdir(directory):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def encode_snapshot(entries: list[ProducerStateEntry]) -> bytes:
    parts = [_COUNT.pack(len(entries))]
    for e in sorted(entries, key=lambda e: e.producer_id):
        parts.append(_ENTRY.pack(e.producer_id, e.producer_epoch, e.last_timestamp_ms, e.coordinator_epoch,
                                 e.current_txn_first_offset, len(e.batches)))
        parts.extend(_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms)
                     for b in e.batches)
    body = b"".join(parts)
    return _HEAD.pack(VERSION, checksum(body)) + body


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _HEAD.size + _COUNT.size:
        raise SnapshotError(f"{len(data)} bytes is shorter than a snapshot header")
    version, crc = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise SnapshotError(f"snapshot version {version}, expected {VERSION}")
    body = memoryview(data)[_HEAD.size:]
    if checksum(body) != crc:
        raise SnapshotError("snapshot CRC mismatch")
    (count,) = _COUNT.unpack_from(body, 0)
    pos, entries = _COUNT.size, []
    try:
        for _ in range(count):
            pid, epoch, last_ts, coord_epoch, txn_first, n = _ENTRY.unpack_from(body, pos)
            pos += _ENTRY.size
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            entries.append(ProducerStateEntry(pid, epoch, tuple(batches), last_ts, coord_epoch, txn_first))
    except struct.error as exc:
        raise SnapshotError(f"snapshot is short: {exc}") from None
    if pos != len(body):
        raise SnapshotError(f"{len(body) - pos} trailing bytes after {count} producers")
    return entries


def write_snapshot(fileio: FileIO, directory: str, offset: int, entries: list[ProducerStateEntry]) -> None:
    path = snapshot_path(directory, offset)
    tmp = path + ".tmp"
    handle = fileio.open(tmp)
    try:
        handle.truncate(0)
        handle.append(encode_snapshot(entries))
        handle.fsync()
    finally:
        handle.close()
    fileio.rename(tmp, path)


def read_snapshot(fileio: FileIO, directory: str, offset: int) -> ProducerSnapshot:
    """Raises ``SnapshotError`` for a damaged file, ``OSError`` when it cannot be read."""
    handle = fileio.open(snapshot_path(directory, offset))
    try:
        size = handle.size()
        if size > MAX_SNAPSHOT_BYTES:
            raise SnapshotError(f"snapshot of {size} bytes is larger than {MAX_SNAPSHOT_BYTES}")
        data = handle.pread(0, size)
    finally:
        handle.close()
    return ProducerSnapshot(offset, decode_snapshot(data))


def latest_snapshot(fileio: FileIO, directory: str, *, at_most: int) -> ProducerSnapshot | None:
    """The newest readable snapshot at or below ``at_most``; damaged ones are skipped."""
    for offset in reversed(snapshot_offsets(fileio, directory)):
        if offset > at_most:
            continue
        try:
            return read_snapshot(fileio, directory, offset)
        except SnapshotError:
            continue
    return None


def delete_snapshots(fileio: FileIO, directory: str, *, below: int | None = None, above: int | None = None) -> None:
    """Remove snapshot files with offsets < ``below`` (the oldest is kept when it is the
    only one at or below it: the state of producers older than the log start lives
    there) or > ``above`` (after a truncation they describe batches that are gone)."""
    offsets = snapshot_offsets(fileio, directory)
    doomed = []
    if above is not None:
        doomed += [o for o in offsets if o > above]
    if below is not None:
        older = [o for o in offsets if o < below]
        # The state is cumulative: a snapshot at or above ``below`` holds what older ones do.
        newer = any(below <= o and (above is None or o <= above) for o in offsets)
        doomed += older if newer else older[:-1]
    for offset in sorted(set(doomed)):
        fileio.remove(snapshot_path(directory, offset))


def rebuild_producer_state(
    state: ProducerStateManager, fileio: FileIO, directory: str, segments: Sequence[LogSegment], *,
    log_start_offset: int, log_end_offset: int,
) -> int:
    """Make ``state`` that of the log: the newest snapshot at or below the log end
    (newer ones describe batches that are gone and are deleted), then the headers of
    every batch after it. Returns the offset of the snapshot used (-1: none)."""
    delete_snapshots(fileio, directory, above=log_end_offset)
    snapshot = latest_snapshot(fileio, directory, at_most=log_end_offset)
    if snapshot is None:
        state.clear(log_start_offset)
        start = log_start_offset
    else:
        state.load(snapshot.entries, snapshot.offset)
        start = max(snapshot.offset, log_start_offset)
    if start < log_end_offset:
        # Only the segments that can hold offsets >= start, found by base offsets alone:
        # older segments stay unopened (opening is lazy for them, see mq.storage.loader).
        for i, segment in enumerate(segments):
            if i + 1 == len(segments) or segments[i + 1].base_offset > start:
                for header in segment.headers_from(start):
                    state.update(header)
    state.map_end_offset = log_end_offset
    return -1 if snapshot is None else snapshot.offset
