"""The mirror's view of fetched bytes: record batches read by their headers only.

A source fetch answers with whole record batches, the same bytes the source leader has
on disk. The mirror never decodes the records in them: it reads each batch's 61-byte
header (``mq.protocol.record_batch.read_header``) for the base offset, last offset, record
count and max timestamp, checks the CRC (a C-level pass, so a batch damaged on the way is
fetched again instead of written), and hands the bytes on to the target unchanged.

``split_fetched`` turns one partition's fetched bytes into a ``Chunk``: the run of batches
that starts exactly at the offset the mirror asked for. A fetch may begin with a batch
that ends before that offset (the broker answers with the whole batch holding the fetch
offset); such batches are already mirrored and are skipped. A batch that starts *past*
the expected offset is a hole that compaction left in the source log: the chunk keeps it,
and the append names the offset it was fetched from (``fetch_offset``) so the target
accepts the same hole. A batch that *straddles* the expected offset (the source's batch
boundaries moved, e.g. compaction rewrote them) is reported as ``Misaligned``, never
papered over.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import LOG_OVERHEAD, compute_crc, read_header


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole batches of one partition, fetched from ``base_offset`` up to ``next_offset``
    (in offset order; a compacted source leaves holes between them)."""

    data: bytes
    base_offset: int
    next_offset: int
    record_count: int
    first_timestamp: int  # of the first batch: the age of the oldest record not yet mirrored
    max_timestamps: tuple[int, ...]  # one per batch: replication latency is measured per batch
    start_offset: int = -1  # >= 0: ask the target to start the partition here (a gap before it)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def batch_count(self) -> int:
        return len(self.max_timestamps)


@dataclass(frozen=True, slots=True)
class Misaligned:
    """The fetched batches do not continue at ``expected_offset``."""

    expected_offset: int
    batch_base_offset: int
    batch_next_offset: int

    @property
    def reason(self) -> str:
        return (f"a source batch [{self.batch_base_offset}, {self.batch_next_offset}) straddles "
                f"the mirrored end {self.expected_offset}: batch boundaries differ between the regions")


class CorruptFetch(Exception):
    """A fetched batch failed its header check or CRC (retriable: fetch it again)."""


def split_fetched(data: bytes | memoryview, expected_offset: int) -> Chunk | Misaligned | None:
    """The batches of ``data`` from ``expected_offset`` on, as one ``Chunk`` (None when
    nothing new was fetched). Raises ``CorruptFetch`` on a bad header or CRC."""
    view = memoryview(data)
    pos, end = 0, len(view)
    start = -1
    base = next_offset = expected_offset
    records = 0
    first_ts = -1
    max_ts: list[int] = []
    while pos < end:
        try:
            header = read_header(view, pos)
        except ProtocolError as exc:
            raise CorruptFetch(f"batch header at byte {pos}: {exc}") from None
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > end:
            raise CorruptFetch(f"batch at byte {pos} needs {size} bytes, {end - pos} remain")
        if compute_crc(view, pos, size) != header.crc:
            raise CorruptFetch(f"batch [{header.base_offset}, {header.next_offset}) failed its CRC")
        if header.next_offset <= next_offset and start < 0:
            pos += size  # wholly below the expected offset: already mirrored
            continue
        if header.base_offset < next_offset:  # straddles: the boundaries moved
            if start >= 0:
                break  # mirror the good batches first, report it next time
            return Misaligned(next_offset, header.base_offset, header.next_offset)
        # base_offset > next_offset is a hole compaction left: the target takes it as is
        # (MirrorAppend's fetch_offset says the source had nothing in between)
        if start < 0:
            start = pos
            first_ts = header.first_timestamp
        next_offset = header.next_offset
        records += header.record_count
        max_ts.append(header.max_timestamp)
        pos += size
    if start < 0:
        return None
    return Chunk(bytes(view[start:pos]), base, next_offset, records, first_ts, tuple(max_ts))


def batch_start(data: bytes | memoryview, offset: int) -> int | None:
    """The base offset of the first batch of ``data`` holding offsets at or past
    ``offset`` (None: there is none, or a header is damaged: ``split_fetched`` says so)."""
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        try:
            header = read_header(view, pos)
        except ProtocolError:
            return None
        if header.next_offset > offset:
            return header.base_offset
        pos += header.batch_length + LOG_OVERHEAD
    return None


def join_chunks(chunks: list[Chunk]) -> Chunk:
    """Consecutive chunks as one (one MirrorAppend for several fetches' worth)."""
    if len(chunks) == 1:
        return chunks[0]
    for before, after in pairwise(chunks):
        if before.next_offset != after.base_offset or after.start_offset >= 0:
            raise ValueError("only consecutive chunks without a gap between them can be joined")
    first = chunks[0]
    return Chunk(b"".join(c.data for c in chunks), first.base_offset, chunks[-1].next_offset,
                 sum(c.record_count for c in chunks), first.first_timestamp,
                 tuple(ts for c in chunks for ts in c.max_timestamps), first.start_offset)
