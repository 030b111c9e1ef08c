"""The log cleaner's per-partition state: ``cleaner-offset-checkpoint``.

Kafka keeps one cleaner checkpoint per log directory with the offset each partition
is cleaned up to; here, like the other checkpoints, it lives in the partition's own
directory, and it also carries the tombstone horizons. Text::

    0                       version
    <first dirty offset>    every offset below it was cleaned
    <base offset> <ms>      one line per segment holding tombstones: they may be
    ...                     dropped by a cleaning at or after <ms>

Written to ``.tmp``, fsynced and renamed (the loader removes a stale ``.tmp``).
A missing or unreadable file reads as "nothing cleaned, no horizon": the cleaner
then reads more, and keeps tombstones longer, which is always safe.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from mq.storage.checkpoint import TMP_SUFFIX
from mq.storage.fileio import FileIO

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
VERSION = 0
_MAX_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class CleanerCheckpoint:
    first_dirty_offset: int = 0
    horizons: tuple[tuple[int, int], ...] = ()
    """``(segment base offset, delete horizon ms)``, sorted by base offset."""

    def horizon(self, base_offset: int) -> int | None:
        for base, ms in self.horizons:
            if base == base_offset:
                return ms
        return None


def read_cleaner_checkpoint(fileio: FileIO, directory: str) -> CleanerCheckpoint:
    path = posixpath.join(directory, CLEANER_CHECKPOINT_FILE)
    if not fileio.exists(path):
        return CleanerCheckpoint()
    handle = fileio.open(path)
    try:
        text = handle.pread(0, _MAX_BYTES)
    finally:
        handle.close()
    lines = text.split(b"\n")
    if len(lines) < 3 or lines[0] != str(VERSION).encode() or lines[-1] != b"":
        return CleanerCheckpoint()
    try:
        first_dirty = int(lines[1])
        horizons = tuple(sorted((int(a), int(b)) for a, b in (line.split() for line in lines[2:-1])))
    except ValueError:
        return CleanerCheckpoint()
    return CleanerCheckpoint(max(0, first_dirty), horizons)


def write_cleaner_checkpoint(fileio: FileIO, directory: str, checkpoint: CleanerCheckpoint) -> None:
    path = posixpath.join(directory, CLEANER_CHECKPOINT_FILE)
    tmp = path + TMP_SUFFIX
    body = "".join(f"{base} {ms}\n" for base, ms in checkpoint.horizons)
    handle = fileio.open(tmp)
    try:
        handle.truncate(0)
        handle.append(f"{VERSION}\n{checkpoint.first_dirty_offset}\n{body}".encode())
        handle.fsync()
    finally:
        handle.close()
    fileio.rename(tmp, path)


def truncate_cleaner_checkpoint(fileio: FileIO, directory: str, *, active_base: int) -> None:
    """After a truncation (``Log.truncate_to``): nothing from the new active segment on
    counts as cleaned, and no horizon there applies to the records written next."""
    if not fileio.exists(posixpath.join(directory, CLEANER_CHECKPOINT_FILE)):
        return
    old = read_cleaner_checkpoint(fileio, directory)
    new = CleanerCheckpoint(
        min(old.first_dirty_offset, active_base),
        tuple(h for h in old.horizons if h[0] < active_base),
    )
    if new != old:
        write_cleaner_checkpoint(fileio, directory, new)
