"""Sparse indexes of a segment: offset → file position, and timestamp → offset.

Both are Kafka's formats, loaded into arrays on first use so a lookup is a binary
search in memory. Added entries go to memory at once and are buffered until the
segment operation that added them ends (``write_pending``: one write per produce
request, not one per entry), so the files show them while the broker runs, as
Kafka's mmapped indexes do (``mq dump-log`` on a live broker). They are fsynced only
on ``flush()``: an index is only trusted on disk for segments below the recovery
point (flushed), and is checked, and rebuilt from the log, for the others.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from operator import lt

from mq.storage.fileio import FileHandle, FileIO

_SWAP = sys.byteorder == "little"  # files are big-endian
MAX_RELATIVE_OFFSET = 2**31 - 1
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def _big_endian(values: array) -> bytes:
    if _SWAP:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _increasing(values: array) -> bool:
    return all(map(lt, values, values[1:]))


class _IndexFile:
    """An index file: entries in memory, entries not yet written buffered (until the
    owner's ``write_pending``), lazy loading. Outside a segment operation the file
    holds exactly the in-memory entries (or is marked for a rewrite, ``_written < 0``)."""

    ENTRY_SIZE = 0

    def __init__(self, fileio: FileIO, path: str, base_offset: int, *, max_entries: int) -> None:
        self.fileio = fileio
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_entries)
        self._handle: FileHandle | None = None
        self._loaded = False
        self._written = 0  # entries already in the file
        self._pending = bytearray()

    # ---- the file

    def _file(self) -> FileHandle:
        if self._handle is None:
            self._handle = self.fileio.open(self.path)
        return self._handle

    def _read_file(self) -> bytes | None:
        """The whole file, or None when it is missing or not a whole number of entries."""
        if not self.fileio.exists(self.path):
            return None
        handle = self._file()
        size = handle.size()
        if size % self.ENTRY_SIZE:
            return None
        return handle.pread(0, size)

    def _replace_columns(self, data: bytes) -> None:
        raise NotImplementedError

    def load(self) -> bool:
        """Read the file into memory; False (and an empty index) if it is missing or
        malformed, so the caller rebuilds it from the log."""
        data = self._read_file()
        if self._handle is not None:  # reopened on the next write: fewer descriptors held
            self._handle.close()
            self._handle = None
        self._loaded = True
        self._pending.clear()
        ok = data is not None and self._replace_columns(data)
        if not ok:
            self._replace_columns(b"")
            self._written = -1  # the file is unusable: rewrite it on the next flush
            return False
        self._written = len(self)
        return True

    def ensure_loaded(self) -> bool:
        return True if self._loaded else self.load()

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        self.ensure_loaded()
        return len(self) >= self.max_entries

    def _append_bytes(self, entry: bytes) -> None:
        self._pending += entry

    def _truncate_entries(self, keep: int) -> None:
        if self._written < 0:
            return  # rewritten whole on the next flush
        if keep < self._written:
            self._file().truncate(keep * self.ENTRY_SIZE)
            self._written = keep
            self._pending.clear()
            self._pending += self._entries_bytes(keep, len(self))
        else:
            del self._pending[(keep - self._written) * self.ENTRY_SIZE :]

    def _entries_bytes(self, start: int, end: int) -> bytes:
        raise NotImplementedError

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._loaded = True
        self._replace_columns(b"")
        self._file().truncate(0)
        self._written = 0
        self._pending.clear()

    def flush(self) -> None:
        """Write buffered entries and fsync."""
        if self._loaded:
            self.write_pending()
            self._file().fsync()

    def write_pending(self) -> None:
        """Write the buffered entries (no fsync): the segment calls this once at the
        end of each operation that adds entries."""
        if not self._loaded or (not self._pending and self._written >= 0):
            return
        handle = self._file()
        if self._written < 0:
            handle.truncate(0)
            self._written = 0
            self._pending = bytearray(self._entries_bytes(0, len(self)))
        if self._pending:
            handle.append(self._pending)
            self._written += len(self._pending) // self.ENTRY_SIZE
            self._pending.clear()

    def close(self) -> None:
        """Write buffered entries and release the file (it is reloaded on next use)."""
        self.write_pending()
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def unload(self) -> None:
        """Close and forget the in-memory entries (a closed segment's index)."""
        self.close()
        self._loaded = False
        self._replace_columns(b"")

    def delete(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self.fileio.exists(self.path):
            self.fileio.remove(self.path)


class OffsetIndex(_IndexFile):
    """Sparse map from offset to the file position of the batch holding it.

    File ``<base offset, 20 digits>.index``: 8-byte entries, big-endian,
    ``relative_offset i32 | position i32``, where ``relative_offset`` is the *last*
    offset of an indexed batch minus the segment's base offset and ``position`` is
    where that batch starts in the ``.log``. Entries increase in both fields. One
    entry is added each time more than ``index.interval.bytes`` were appended since
    the previous one, so a lookup is a binary search followed by a short scan of
    batch headers. ``segment.index.bytes`` // 8 entries fill it: the segment rolls.
    """

    ENTRY_SIZE = 8

    def __init__(self, fileio: FileIO, path: str, base_offset: int, *, max_entries: int) -> None:
        super().__init__(fileio, path, base_offset, max_entries=max_entries)
        self._offsets = array("i")
        self._positions = array("i")

    def __len__(self) -> int:
        return len(self._offsets)

    def _replace_columns(self, data: bytes) -> bool:
        both = array("i", data)
        if _SWAP:
            both.byteswap()
        self._offsets, self._positions = both[0::2], both[1::2]
        return (
            min(self._offsets, default=0) >= 0
            and min(self._positions, default=0) >= 0
            and _increasing(self._offsets)
            and _increasing(self._positions)
        )

    def _entries_bytes(self, start: int, end: int) -> bytes:
        both = array("i", bytes(8 * (end - start)))
        both[0::2] = self._offsets[start:end]
        both[1::2] = self._positions[start:end]
        return _big_endian(both)

    def entries(self) -> list[tuple[int, int]]:
        """``(absolute offset, position)`` of every entry."""
        self.ensure_loaded()
        base = self.base_offset
        return [(base + rel, pos) for rel, pos in zip(self._offsets, self._positions)]

    @property
    def last_entry(self) -> tuple[int, int] | None:
        self.ensure_loaded()
        if not self._offsets:
            return None
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset ≤ ``offset``, or (base offset, 0)."""
        self.ensure_loaded()
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def append(self, offset: int, position: int) -> None:
        self.ensure_loaded()
        rel = offset - self.base_offset
        if self._offsets and (rel <= self._offsets[-1] or position <= self._positions[-1]):
            return  # never out of order: a lookup relies on it
        if (
            len(self._offsets) >= self.max_entries
            or not 0 <= rel <= MAX_RELATIVE_OFFSET
            or not 0 <= position <= MAX_RELATIVE_OFFSET
        ):
            return  # full: a sparser index is still correct; the segment rolls next
        self._offsets.append(rel)
        self._positions.append(position)
        self._append_bytes(_OFFSET_ENTRY.pack(rel, position))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries of batches at or after ``position``."""
        self.ensure_loaded()
        keep = bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]
        self._truncate_entries(keep)


class TimeIndex(_IndexFile):
    """Sparse map from timestamp to offset.

    File ``<base offset, 20 digits>.timeindex``: 12-byte entries, big-endian,
    ``timestamp i64 | relative_offset i32``: the largest timestamp seen in the segment
    up to that point and the (last) offset of the batch that carried it. Timestamps
    strictly increase, so the batches before an entry's batch all have smaller
    timestamps: a lookup for ``t`` finds the last entry with timestamp ≤ ``t`` and
    scans forward from that batch. An entry is added alongside each offset-index
    entry (when the timestamp grew) and once more when the segment rolls.
    """

    ENTRY_SIZE = 12

    def __init__(self, fileio: FileIO, path: str, base_offset: int, *, max_entries: int) -> None:
        super().__init__(fileio, path, base_offset, max_entries=max_entries)
        self._timestamps = array("q")
        self._offsets = array("i")

    def __len__(self) -> int:
        return len(self._offsets)

    def _replace_columns(self, data: bytes) -> bool:
        columns = tuple(zip(*_TIME_ENTRY.iter_unpack(data))) or ((), ())
        timestamps, offsets = array("q", columns[0]), array("i", columns[1])
        self._timestamps, self._offsets = timestamps, offsets
        return (
            min(offsets, default=0) >= 0
            and _increasing(timestamps)
            and all(map(lambda a, b: a <= b, offsets, offsets[1:]))
        )

    def _entries_bytes(self, start: int, end: int) -> bytes:
        pack = _TIME_ENTRY.pack
        return b"".join(map(pack, self._timestamps[start:end], self._offsets[start:end]))

    def entries(self) -> list[tuple[int, int]]:
        """``(timestamp, absolute offset)`` of every entry."""
        self.ensure_loaded()
        base = self.base_offset
        return [(ts, base + rel) for ts, rel in zip(self._timestamps, self._offsets)]

    @property
    def last_entry(self) -> tuple[int, int] | None:
        self.ensure_loaded()
        if not self._offsets:
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The entry with the largest timestamp ≤ ``timestamp``, or (-1, base offset)."""
        self.ensure_loaded()
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self.base_offset + self._offsets[i]

    def maybe_append(self, timestamp: int, offset: int, *, force: bool = False) -> None:
        """Add an entry if ``timestamp`` is larger than the last one. ``force`` ignores
        the entry cap (the final entry written when a segment rolls)."""
        self.ensure_loaded()
        rel = offset - self.base_offset
        if self._timestamps and (timestamp <= self._timestamps[-1] or rel < self._offsets[-1]):
            return
        if not 0 <= rel <= MAX_RELATIVE_OFFSET or (len(self) >= self.max_entries and not force):
            return
        self._timestamps.append(timestamp)
        self._offsets.append(rel)
        self._append_bytes(_TIME_ENTRY.pack(timestamp, rel))

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries pointing at ``offset`` or later."""
        self.ensure_loaded()
        keep = bisect_left(self._offsets, offset - self.base_offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._truncate_entries(keep)
