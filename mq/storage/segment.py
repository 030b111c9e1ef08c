"""One segment of a partition's log: a ``.log`` of record batches and its indexes.

Files are named by the segment's base offset as 20 digits
(``00000000000000000042.log``, ``.index``, ``.timeindex``). The ``.log`` holds whole
record batches back to back, exactly as producers sent them after the leader
stamped offsets; nothing else. Batches stay opaque bytes: the segment only reads
their 61-byte headers (to hop from batch to batch) and checks CRCs.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass

from mq.core.config import TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.types import CleanupPolicy
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import HEADER_SIZE, BatchHeader, crc_ok, decode_records, read_header
from mq.storage.fileio import FileHandle, FileIO
from mq.storage.index import MAX_RELATIVE_OFFSET, OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
HEADER_WINDOW = 16 * 1024
CRC_WINDOW = 8 * 1024 * 1024
MAX_SEGMENT_BYTES = 2**31 - 1
"""Index positions are i32 (as Kafka, which caps segment.bytes there too)."""


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogCorruptedError(MqError):
    """Stored bytes failed a check (CRC, structure, offset order): never served. The
    broker treats the replica as dirty (KAFKA_STORAGE_ERROR, retriable for clients)."""

    def __init__(self, path: str, position: int, problem: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, f"{path} at position {position}: {problem}")
        self.path = path
        self.position = position
        self.problem = problem


@dataclass(slots=True)
class ScanResult:
    """Where a scan of batch headers stopped, and why (None: at the end of the file)."""

    end: int = 0
    problem: str | None = None


class LogSegment:
    """A ``.log`` file and its sparse ``OffsetIndex`` and ``TimeIndex``."""

    def __init__(
        self, fileio: FileIO, directory: str, base_offset: int, config: TopicConfig, *,
        created_ms: int, file_suffix: str = "",
    ) -> None:
        """``file_suffix`` follows each file name (``.cleaned``: the log cleaner's output
        before it is swapped in, see ``mq.storage.swap``)."""
        self.fileio = fileio
        self.base_offset = base_offset
        prefix = posixpath.join(directory, segment_name(base_offset))
        self.log_path = prefix + LOG_SUFFIX + file_suffix
        self.txn_index_path = prefix + TXN_INDEX_SUFFIX + file_suffix
        self.index_interval_bytes = config.index_interval_bytes
        self.offset_index = OffsetIndex(
            fileio, prefix + INDEX_SUFFIX + file_suffix, base_offset,
            max_entries=config.segment_index_bytes // 8,
        )
        self.time_index = TimeIndex(
            fileio, prefix + TIME_INDEX_SUFFIX + file_suffix, base_offset,
            max_entries=config.segment_index_bytes // 12,
        )
        self.created_ms = created_ms
        self._handle: FileHandle = fileio.open(self.log_path)
        self._size = self._handle.size()
        self._tail_loaded = False
        self.tail_clean = True  # the last header hop reached the end of the file
        self._next_offset = base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index = 0
        self._rolling_timestamp: int | None = None

    @classmethod
    def create(
        cls, fileio: FileIO, directory: str, base_offset: int, config: TopicConfig, *, now_ms: int,
        file_suffix: str = "",
    ) -> LogSegment:
        """A new empty segment (stale files of the same name are emptied)."""
        segment = cls(fileio, directory, base_offset, config, created_ms=now_ms, file_suffix=file_suffix)
        if segment._size:
            segment._handle.truncate(0)
            segment._size = 0
        segment.offset_index.reset()
        segment.time_index.reset()
        segment._tail_loaded = True
        return segment

    # ---- state derived from the files

    @property
    def size(self) -> int:
        return self._size

    @property
    def next_offset(self) -> int:
        """One past the last offset stored here (the base offset when empty)."""
        self._load_tail()
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch max_timestamp in the segment (-1 when empty)."""
        self._load_tail()
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        self._load_tail()
        return self._offset_of_max_timestamp

    def tail_clean_at_open(self) -> bool:
        """Whether a hop over the headers after the last index entry reached the end
        of the file (no torn or garbled tail visible without checking CRCs)."""
        self._load_tail()
        return self.tail_clean

    def _load_tail(self) -> None:
        """Recompute end offset and max timestamp from the last index entries plus a
        hop over the batch headers after them; rebuild indexes that fail checks."""
        if self._tail_loaded:
            return
        self._tail_loaded = True
        start = self._checked_index_start()
        if start is None:
            self.rebuild_indexes()
            return
        last_time = self.time_index.last_entry
        self._max_timestamp, self._offset_of_max_timestamp = last_time or (-1, self.base_offset)
        entry = self.offset_index.last_entry
        self._next_offset = entry[0] + 1 if entry else self.base_offset
        self._bytes_since_index = 0
        scan = ScanResult()
        for pos, header in self._scan(start, scan, check_crc=False):
            self._index_batch(pos, header.size, header.last_offset, header.max_timestamp)
        self._write_index_entries()
        self.tail_clean = scan.problem is None

    def _checked_index_start(self) -> int | None:
        """Position of the last offset-index entry if both indexes look sane, else None."""
        if not (self.offset_index.ensure_loaded() and self.time_index.ensure_loaded()):
            return None
        entry = self.offset_index.last_entry
        if entry is None:
            return 0 if len(self.time_index) <= 1 else None  # one: the entry written at roll
        offset, pos = entry
        try:
            header = read_header(self._handle.pread(pos, HEADER_SIZE))
        except ProtocolError:
            return None
        if header.last_offset != offset or pos + header.size > self._size:
            return None
        return pos

    def rebuild_indexes(self) -> ScanResult:
        """Rebuild both indexes by hopping over every batch header (no CRC check: that
        is ``recover``'s job for unflushed data, and every read's for the rest)."""
        return self._reindex(check_crc=False)

    def recover(self) -> int:
        """Re-read the whole segment, checking every batch's structure, CRC and offset
        order; rebuild the indexes; truncate a torn or corrupt tail. Returns the number
        of bytes truncated."""
        scan = self._reindex(check_crc=True)
        truncated = self._size - scan.end
        if truncated:
            self._handle.truncate(scan.end)
            self._size = scan.end
        return truncated

    def _reindex(self, *, check_crc: bool) -> ScanResult:
        self.offset_index.reset()
        self.time_index.reset()
        self._tail_loaded = True
        self._next_offset = self.base_offset
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._bytes_since_index = 0
        self._rolling_timestamp = None
        scan = ScanResult()
        for pos, header in self._scan(0, scan, check_crc=check_crc):
            self._index_batch(pos, header.size, header.last_offset, header.max_timestamp)
        self._write_index_entries()
        self.tail_clean = scan.problem is None
        return scan

    def _index_batch(self, pos: int, size: int, last_offset: int, max_timestamp: int) -> None:
        if pos == 0:
            self._rolling_timestamp = max_timestamp
        if max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(last_offset, pos)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self._next_offset = last_offset + 1

    def _write_index_entries(self) -> None:
        """Put the entries just added into the index files (page cache, no fsync), so
        a reader of the files (``mq dump-log``) sees them at once. Batched per
        operation: one small write per produce request, whatever its batch count."""
        self.offset_index.write_pending()
        self.time_index.write_pending()

    # ---- walking batch headers

    def _scan(
        self, start: int, result: ScanResult, *, check_crc: bool
    ) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each sound batch from ``start``; stops at the end
        of the file or at the first problem, recorded in ``result``."""
        size, pread = self._size, self._handle.pread
        window = CRC_WINDOW if check_crc else HEADER_WINDOW
        buf, buf_pos = b"", start
        pos, prev_next = start, self.base_offset
        problem = None
        while pos < size:
            if pos + HEADER_SIZE > buf_pos + len(buf):
                buf_pos, buf = pos, pread(pos, window)
                if check_crc:
                    self._handle.prefetch(pos + len(buf), 2 * CRC_WINDOW)
                window = min(window * 2, CRC_WINDOW)
            try:
                header = read_header(buf, pos - buf_pos)
            except ProtocolError as exc:
                problem = f"malformed batch header ({exc.message})"
                break
            batch_size = header.size
            if pos + batch_size > size:
                problem = f"batch of {batch_size} bytes runs past the end of the file ({size})"
                break
            if header.base_offset < prev_next or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                problem = f"offset {header.base_offset} out of order (expected >= {prev_next})"
                break
            if check_crc:
                if pos + batch_size > buf_pos + len(buf):
                    buf_pos, buf = pos, pread(pos, max(CRC_WINDOW, batch_size))
                    self._handle.prefetch(buf_pos + len(buf), 2 * CRC_WINDOW)
                if not crc_ok(buf, pos - buf_pos, header):
                    problem = f"CRC mismatch in batch at offset {header.base_offset}"
                    break
            yield pos, header
            prev_next = header.next_offset
            pos += batch_size
        result.end, result.problem = pos, problem

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is ≥ ``offset``
        (None if the segment holds nothing at or after it)."""
        entry_offset, start = self.offset_index.lookup(offset)
        scan = ScanResult()
        for pos, header in self._scan(start, scan, check_crc=False):
            if pos == start and start > 0 and header.last_offset != entry_offset:
                raise LogCorruptedError(self.log_path, pos, "index entry does not match the batch")
            if header.last_offset >= offset:
                return pos, header
        if scan.problem is not None:
            raise LogCorruptedError(self.log_path, scan.end, scan.problem)
        return None

    def headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches whose last offset is ≥ ``offset``, in order (a hop
        over headers, no CRC check: rebuilding producer state from the log)."""
        found = self.translate_offset(offset)
        if found is None:
            return
        scan = ScanResult()
        for _pos, header in self._scan(found[0], scan, check_crc=False):
            yield header
        if scan.problem is not None:
            raise LogCorruptedError(self.log_path, scan.end, scan.problem)

    # ---- appending

    def append(self, data: bytes | bytearray | memoryview, batches: list[tuple[int, int, int, int]]) -> None:
        """Append validated batches; ``batches`` lists ``(position in data, size, last
        offset, max timestamp)`` for each, so no header is parsed again."""
        self._load_tail()
        base_pos = self._handle.append(data)
        self._size = base_pos + len(data)
        for rel_pos, size, last_offset, max_timestamp in batches:
            self._index_batch(base_pos + rel_pos, size, last_offset, max_timestamp)
        self._write_index_entries()

    def should_roll(
        self, config: TopicConfig, *, incoming_bytes: int, max_timestamp: int, last_offset: int,
        now_ms: int,
    ) -> bool:
        """Kafka's roll rules: size, age (segment.ms, or max.compaction.lag.ms when
        compacted and shorter; from the first batch's timestamp), a full index, or
        offsets too far from the base for a 32-bit relative offset."""
        if last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return True
        if self._size == 0:
            return False
        if self._size + incoming_bytes > min(config.segment_bytes, MAX_SEGMENT_BYTES):
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        max_age = config.segment_ms
        if config.cleanup_policy != CleanupPolicy.DELETE:
            # Kafka (KIP-354): the active segment is never cleaned, so it rolls in time
            # for its records to be compacted within max.compaction.lag.ms.
            max_age = min(max_age, config.max_compaction_lag_ms)
        return self.age_ms(now_ms, max_timestamp) > max_age

    @property
    def first_batch_timestamp(self) -> int | None:
        """max_timestamp of the first batch (None when empty or unreadable)."""
        return self._first_batch_timestamp()

    def age_ms(self, now_ms: int, incoming_timestamp: int) -> int:
        rolling = self._first_batch_timestamp()
        if rolling is not None and rolling >= 0 and incoming_timestamp >= 0:
            return incoming_timestamp - rolling
        return now_ms - self.created_ms

    def _first_batch_timestamp(self) -> int | None:
        if self._rolling_timestamp is None and self._size >= HEADER_SIZE:
            try:
                self._rolling_timestamp = read_header(self._handle.pread(0, HEADER_SIZE)).max_timestamp
            except ProtocolError:
                return None
        return self._rolling_timestamp

    def on_become_inactive(self) -> None:
        """The segment stops being active: a final time-index entry (so its largest
        timestamp is known without reading the log), buffered entries written out."""
        self._load_tail()
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, force=True)
        self.offset_index.close()
        self.time_index.close()

    # ---- reading

    def read(
        self, offset: int, *, max_bytes: int, max_offset: int | None = None,
        min_one_batch: bool = True, limit_offset: int | None = None,
    ) -> tuple[bytes, int] | None:
        """Whole batches from the one holding ``offset``: at most ``max_bytes`` unless
        the first batch alone is larger and ``min_one_batch``; none whose base offset
        is ≥ ``max_offset``. Every batch's CRC and offset order is checked before it
        is served (``limit_offset``: the next segment's base, which no batch here may
        reach). Returns ``(bytes, base offset of the first batch)``, or None when the
        segment holds nothing at or after ``offset``."""
        found = self.translate_offset(offset)
        if found is None:
            return None
        pos, first = found
        if max_offset is not None and first.base_offset >= max_offset:
            return b"", offset
        want = min(max(max_bytes, 0), self._size - pos)
        if first.size > want:
            if not min_one_batch:
                return b"", offset
            want = first.size
        data = self._handle.pread(pos, want)
        return self._whole_batches(data, pos, max_offset, limit_offset), first.base_offset

    def _whole_batches(
        self, data: bytes, start: int, max_offset: int | None, limit_offset: int | None
    ) -> bytes:
        """The longest prefix of ``data`` made of sound batches below ``max_offset``.
        A problem in the first batch raises (the next read would hit it anyway).
        Offsets outside the CRC are checked by order: when a batch starts below the
        previous one's end either may be the damaged one, so neither is served."""
        cut, prev_cut, end, prev_next = 0, 0, len(data), -1
        file_end = self._size - start
        while True:
            if cut + HEADER_SIZE > end:
                if 0 < cut < file_end and not self._next_in_order(start + cut, prev_next):
                    cut = prev_cut
                    if cut == 0:
                        raise LogCorruptedError(self.log_path, start, "offsets out of order")
                break
            problem = None
            try:
                header = read_header(data, cut)
            except ProtocolError as exc:
                problem = f"malformed batch header ({exc.message})"
            else:
                if header.base_offset < prev_next:
                    problem, cut = f"offset {header.base_offset} out of order", prev_cut
                elif limit_offset is not None and header.last_offset >= limit_offset:
                    problem = f"offset {header.last_offset} runs into the next segment"
                elif cut + header.size > end:
                    if cut + header.size <= file_end:
                        break  # cut by max_bytes
                    problem = "batch runs past the end of the file"
                elif max_offset is not None and header.base_offset >= max_offset:
                    break
                elif not crc_ok(data, cut, header):
                    problem = f"CRC mismatch in batch at offset {header.base_offset}"
            if problem is not None:
                if cut == 0:
                    raise LogCorruptedError(self.log_path, start, problem)
                break
            prev_cut, prev_next = cut, header.next_offset
            cut += header.size
        return data if cut == end else data[:cut]

    def _next_in_order(self, pos: int, prev_next: int) -> bool:
        """Whether the batch header at ``pos`` (just past what a read returns) starts
        at or after ``prev_next``; an unreadable header is left to the next read."""
        try:
            return read_header(self._handle.pread(pos, HEADER_SIZE)).base_offset >= prev_next
        except ProtocolError:
            return True

    def find_offset_by_timestamp(self, timestamp_ms: int, start_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``start_offset`` whose
        timestamp is ≥ ``timestamp_ms`` (decodes only the batch that holds it)."""
        _, entry_offset = self.time_index.lookup(timestamp_ms)
        found = self.translate_offset(max(entry_offset, start_offset))
        if found is None:
            return None
        scan = ScanResult()
        for pos, header in self._scan(found[0], scan, check_crc=False):
            if header.max_timestamp < timestamp_ms or header.last_offset < start_offset:
                continue
            data = self._handle.pread(pos, header.size)
            try:
                records = decode_records(data)
            except ProtocolError as exc:
                raise LogCorruptedError(self.log_path, pos, exc.message) from None
            for record in records:
                if record.timestamp >= timestamp_ms and record.offset >= start_offset:
                    return record.offset, record.timestamp
        if scan.problem is not None:
            raise LogCorruptedError(self.log_path, scan.end, scan.problem)
        return None

    # ---- changing and checking

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is ≥ ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos, header = found
        self.offset_index.truncate_to_position(pos)
        self.time_index.truncate_to_offset(header.base_offset)
        removed = self._size - pos
        self._handle.truncate(pos)
        self._size = pos
        self._tail_loaded = False
        if pos == 0:
            self._rolling_timestamp = None
        self._load_tail()
        return removed

    def first_damaged(self) -> tuple[int, LogCorruptedError] | None:
        """Read every batch, checking structure, CRC and offset order (nothing is
        changed): ``(offset where the sound data ends, what is wrong and where)``, or
        None when the whole file is sound."""
        scan = ScanResult()
        sound_until = self.base_offset
        for _, header in self._scan(0, scan, check_crc=True):
            sound_until = header.next_offset
        if scan.end == self._size:
            return None
        return sound_until, LogCorruptedError(self.log_path, scan.end, scan.problem or "unreadable tail")

    def verify(self) -> list[str]:
        """Deep check: every batch's structure, CRC and offset order, and that every
        index entry points where it claims. Returns the problems found."""
        problems = []
        scan = ScanResult()
        batches = {pos: header for pos, header in self._scan(0, scan, check_crc=True)}
        if scan.problem is not None:
            problems.append(f"{self.log_path} at position {scan.end}: {scan.problem}")
        for offset, pos in self.offset_index.entries():
            header = batches.get(pos)
            if header is None or header.last_offset != offset:
                problems.append(f"{self.offset_index.path}: entry ({offset}, {pos}) points at no batch ending there")
        end = max((h.next_offset for h in batches.values()), default=self.base_offset)
        for _, offset in self.time_index.entries():
            if not self.base_offset <= offset < end:
                problems.append(f"{self.time_index.path}: entry offset {offset} outside the segment")
        return problems

    def flush(self, *, indexes: bool = True) -> None:
        """Fsync the ``.log`` and, with ``indexes``, the index files. The active
        segment's indexes need no fsync to be correct: they are checked on open and
        rebuilt when short, so ``Log.flush`` leaves them as written at append time
        (one fsync per group commit instead of three)."""
        self._handle.fsync()
        if indexes:
            self.offset_index.flush()
            self.time_index.flush()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self._handle.close()

    def delete(self) -> None:
        self._handle.close()
        self.offset_index.delete()
        self.time_index.delete()
        if self.fileio.exists(self.log_path):
            self.fileio.remove(self.log_path)
        if self.fileio.exists(self.txn_index_path):
            self.fileio.remove(self.txn_index_path)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size})"
