"""The aborted-transaction index of one segment (Kafka's ``TransactionIndex``).

File ``<base offset, 20 digits>.txnindex``, one 34-byte entry per transaction aborted
by a marker in this segment, in marker order, big-endian (Kafka's ``AbortedTxn``)::

    version i16 (0) | producer_id i64 | first_offset i64 | last_offset i64 | last_stable_offset i64

``first_offset`` is the transaction's first data offset, ``last_offset`` its ABORT
marker's offset, ``last_stable_offset`` the partition's LSO once the marker was
appended. A ``read_committed`` fetch from offset F up to U returns every entry of
every segment with ``last_offset >= F`` and ``first_offset < U``: the consumer drops
those producers' transactional records from ``first_offset`` up to their marker.

The file is appended as markers are appended (on leaders and followers alike) and
rebuilt for the log tail on open from the log itself, so a torn tail is harmless:
an entry whose length is short is ignored, and entries are never appended twice
(``append`` skips one not after the last).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mq.storage.fileio import FileIO
from mq.storage.segment import TXN_INDEX_SUFFIX

__all__ = ["TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
VERSION = 0
assert ENTRY_SIZE == 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """Whole entries of a ``.txnindex`` file's bytes (a short tail is ignored)."""
    return [AbortedTxn(*_ENTRY.unpack_from(data, pos)[1:]) for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE)]


class TransactionIndex:
    """See the module docstring. The entries are kept in memory (a few per segment)."""

    def __init__(self, fileio: FileIO, path: str) -> None:
        self.fileio = fileio
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            entries: list[AbortedTxn] = []
            if self.fileio.exists(self.path):
                handle = self.fileio.open(self.path)
                try:
                    size = handle.size()
                    entries = decode_entries(handle.pread(0, size))
                    if size != len(entries) * ENTRY_SIZE:
                        handle.truncate(len(entries) * ENTRY_SIZE)  # a torn entry
                finally:
                    handle.close()
            self._entries = entries
        return self._entries

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._load())

    def append(self, txn: AbortedTxn) -> bool:
        """Add ``txn`` unless an entry at or after its marker exists (replayed twice)."""
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            return False
        handle = self.fileio.open(self.path)
        try:
            handle.append(_ENTRY.pack(VERSION, txn.producer_id, txn.first_offset, txn.last_offset,
                                      txn.last_stable_offset))
        finally:
            handle.close()
        entries.append(txn)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset``."""
        entries = self._load()
        kept = [e for e in entries if e.last_offset < offset]
        if len(kept) != len(entries):
            self._rewrite(kept)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        handle = self.fileio.open(self.path)
        try:
            handle.truncate(0)
            if entries:
                handle.append(b"".join(_ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset,
                                                   e.last_stable_offset) for e in entries))
            handle.fsync()
        finally:
            handle.close()
        self._entries = list(entries)

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Make the file hold exactly ``entries`` (the cleaner merged segments)."""
        self._rewrite(sorted(entries, key=lambda e: e.last_offset))

    def flush(self) -> None:
        if self._entries and self.fileio.exists(self.path):
            handle = self.fileio.open(self.path)
            try:
                handle.fsync()
            finally:
                handle.close()

    def delete(self) -> None:
        if self.fileio.exists(self.path):
            self.fileio.remove(self.path)
        self._entries = []

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Entries overlapping ``[fetch_offset, upper_bound)``."""
        return [e for e in self._load() if e.last_offset >= fetch_offset and e.first_offset < upper_bound]
