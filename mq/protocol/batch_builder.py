"""Building record batches: what a producer does per record, kept minimal.

``append`` stores the record as a tuple (untracked by the cyclic GC once all its
fields are plain) and adds to a running size estimate; ``extend_columns`` adds many
records at once, validated column by column in C-level passes (``send_many``);
``build`` packs every record with one msgpack call, compresses the payload once and
writes the 61-byte header (see ``mq.protocol.batch_format``) with its CRC-32C.
Payload records are ``[offset_delta, timestamp_delta, key, value, headers]`` with
headers a list of ``[str, bytes]``; deltas are relative to the batch's base offset
and first timestamp.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import add, itemgetter

import crc32c
import msgpack

from mq.core.types import CompressionType
from mq.protocol.batch_format import (
    BODY_HEADER,
    CODEC_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    PREFIX,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from mq.protocol.compression import codec_of, compress

RECORD_OVERHEAD = 12
"""Estimated msgpack bytes of one record besides its key, value and headers."""
EMPTY_BATCH_SIZE = HEADER_SIZE + 5
"""``estimated_size`` of a batch with no records (header + the msgpack array header)."""
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_BYTES_TYPES = (bytes, bytearray, memoryview)
_COLUMN_TYPES = frozenset((bytes, type(None)))
_first, _second, _third = itemgetter(0), itemgetter(1), itemgetter(2)

Header = tuple[str, bytes]


class BatchBuilder:
    """Accumulates records for one partition and builds one batch from them."""

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_built",
        "_codec",
        "_first_timestamp",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
        "_records",
        "_size",
    )

    def __init__(
        self,
        *,
        compression: CompressionType | int = CompressionType.NONE,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        partition_leader_epoch: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
    ) -> None:
        self._codec = codec_of(int(compression))
        self._records: list[tuple[object, ...]] = []
        self._size = EMPTY_BATCH_SIZE
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._attributes = (int(self._codec) | (TRANSACTIONAL_BIT if is_transactional else 0)
                            | (CONTROL_BIT if is_control else 0))
        self._built: bytes | None = None
        self._first_timestamp = 0

    def append(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
    ) -> int:
        """Add a record; returns the estimated batch size so far (uncompressed)."""
        if self._built is not None:
            raise RuntimeError("the batch was already built")
        size = self._size + RECORD_OVERHEAD
        if key is not None:
            if type(key) is not bytes and not isinstance(key, _BYTES_TYPES):
                raise TypeError(f"key must be bytes or None, not {type(key).__name__}")
            size += len(key)
        if value is not None:
            if type(value) is not bytes and not isinstance(value, _BYTES_TYPES):
                raise TypeError(f"value must be bytes or None, not {type(value).__name__}")
            size += len(value)
        if headers:
            size += _headers_size(headers)
        records = self._records
        if records:  # the payload holds deltas from the first timestamp
            delta = timestamp_ms - self._first_timestamp
            records.append((len(records), delta, key, value, headers))
        else:
            if type(timestamp_ms) is not int:
                raise TypeError(f"timestamp_ms must be an int, not {type(timestamp_ms).__name__}")
            self._first_timestamp = timestamp_ms
            records.append((0, 0, key, value, headers))
        self._size = size
        return size

    def extend_columns(
        self,
        timestamp_ms: int,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Sequence[Header]] | None = None,
    ) -> int:
        """Add ``len(values)`` records stamped ``timestamp_ms`` from parallel columns
        (``columns_of`` makes them); returns the estimated batch size so far. Types are
        checked per column in C-level passes, so a bulk append costs no Python-level
        call per record."""
        if self._built is not None:
            raise RuntimeError("the batch was already built")
        if type(timestamp_ms) is not int:
            raise TypeError(f"timestamp_ms must be an int, not {type(timestamp_ms).__name__}")
        n = len(values)
        if len(keys) != n or (headers is not None and len(headers) != n):
            raise ValueError("keys, values and headers must have one entry per record")
        if not n:
            return self._size
        size = self._size + n * RECORD_OVERHEAD + sum(map(len, filter(None, _checked(values, "value"))))
        if keys.count(None) != n:
            size += sum(map(len, filter(None, _checked(keys, "key"))))
        if headers is not None and headers.count(()) != n:
            headers = [tuple(h) if h else () for h in headers]
            size += sum(map(_headers_size, filter(None, headers)))
        records = self._records
        if not records:
            self._first_timestamp = timestamp_ms
        start = len(records)
        records.extend(zip(range(start, start + n), repeat(timestamp_ms - self._first_timestamp),
                           keys, values, repeat(()) if headers is None else headers))
        self._size = size
        return size

    @property
    def record_count(self) -> int:
        return len(self._records)

    @property
    def estimated_size(self) -> int:
        """Bytes of the batch before compression (an estimate within a few %)."""
        return self._size

    def build(self) -> bytes:
        """The batch as bytes (built once; later calls return the same bytes)."""
        if self._built is not None:
            return self._built
        records = self._records
        if not records:
            raise ValueError("a batch needs at least one record")
        deltas = [r[1] for r in records]
        if type(sum(deltas)) is not int:  # a float timestamp makes the sum a float
            raise ValueError("record timestamps must be ints")
        first = self._first_timestamp
        max_timestamp = first + max(deltas)
        if not _INT64_MIN <= first + min(deltas) <= max_timestamp <= _INT64_MAX:
            raise ValueError("record timestamps must fit in 64 bits")
        if not _INT64_MIN <= first <= _INT64_MAX:
            raise ValueError("record timestamps must fit in 64 bits")
        try:
            payload = msgpack.packb(records, use_bin_type=True)
        except OverflowError:
            raise ValueError("record timestamps too far apart for one batch") from None
        payload = compress(self._codec, payload)
        body = BODY_HEADER.pack(
            self._attributes, len(records) - 1, first, max_timestamp, self._producer_id,
            self._producer_epoch, self._base_sequence, len(records),
        )
        crc = crc32c.crc32c(payload, crc32c.crc32c(body))
        batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
        prefix = PREFIX.pack(
            self._base_offset, batch_length, self._partition_leader_epoch, MAGIC, crc
        )
        self._built = b"".join((prefix, body, payload))
        return self._built


def _checked(column: Sequence[object], what: str) -> Sequence[object]:
    """``column`` if every entry is bytes, bytearray, memoryview or None (one C-level
    pass); TypeError naming the first offender otherwise."""
    if not set(map(type, column)) <= _COLUMN_TYPES:
        for item in column:
            if item is not None and not isinstance(item, _BYTES_TYPES):
                raise TypeError(f"{what} must be bytes or None, not {type(item).__name__}")
    return column


def columns_of(
    records: Sequence[tuple],
) -> tuple[Sequence[bytes | None], Sequence[bytes | None], Sequence[Sequence[Header]] | None]:
    """``(keys, values, headers or None)`` of ``(key, value)`` or ``(key, value, headers)``
    tuples, transposed in C; ValueError when the records do not all have that shape."""
    if not records:
        return (), (), None
    # itemgetter passes, not zip(*records): no iterator object per record for the GC.
    try:
        widths = set(map(len, records))
    except TypeError:
        widths = set()
    if widths == {2}:
        return tuple(map(_first, records)), tuple(map(_second, records)), None
    if widths == {3}:
        return (tuple(map(_first, records)), tuple(map(_second, records)),
                tuple(map(_third, records)))
    raise ValueError("records must all be (key, value) or all (key, value, headers)")


def record_sizes(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]] | None = None,
) -> list[int]:
    """Each record's share of ``estimated_size`` (for cutting columns into batches)."""
    n = len(values)
    value_types = set(map(type, values))
    sizes = list(map(len, values)) if type(None) not in value_types else \
        [0 if v is None else len(v) for v in values]
    if keys.count(None) != n:
        sizes = [s + (0 if k is None else len(k)) for s, k in zip(sizes, keys)]
    if headers is not None and headers.count(()) != n:
        sizes = [s + (_headers_size(h) if h else 0) for s, h in zip(sizes, headers)]
    return list(map(add, sizes, repeat(RECORD_OVERHEAD)))


def _headers_size(headers: Sequence[Header]) -> int:
    size = 1
    for name, value in headers:
        if type(name) is not str or not isinstance(value, _BYTES_TYPES):
            raise TypeError("headers must be (str, bytes) pairs")
        size += len(name) + len(value) + 4
    return size


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None, Sequence[Header], int]],
    *,
    compression: CompressionType | int = CompressionType.NONE,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """One batch from ``(key, value, headers, timestamp_ms)`` tuples."""
    builder = BatchBuilder(
        compression=compression, base_offset=base_offset, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch, is_transactional=is_transactional,
    )
    append = builder.append
    for key, value, headers, timestamp_ms in records:
        append(timestamp_ms, key, value, headers)
    return builder.build()


def rebuild_batch(
    header: BatchHeader,
    records: Sequence[tuple[int, int, bytes | None, bytes | None, Sequence[Header]]],
) -> bytes:
    """A batch holding ``records`` — ``(offset, timestamp, key, value, headers)``, some of
    the records of the batch ``header`` belongs to, in offset order, possibly none —
    that keeps every field of ``header`` except ``record_count`` and the CRC: base
    offset and last offset delta (so offsets stay where they were: what log compaction
    leaves is holes inside a batch, and an empty batch still ends where it did),
    partition leader epoch, attributes (codec, timestamp type, transactional,
    control), first and max timestamps, producer id, epoch and base sequence. Offset
    deltas may skip values; the decoder accepts any increasing deltas."""
    base, first = header.base_offset, header.first_timestamp
    payload = msgpack.packb(
        [(offset - base, timestamp - first, key, value, tuple(headers))
         for offset, timestamp, key, value, headers in records],
        use_bin_type=True,
    )
    payload = compress(codec_of(header.attributes & CODEC_MASK), payload)
    body = BODY_HEADER.pack(
        header.attributes, header.last_offset_delta, first, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, len(records),
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(body))
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    prefix = PREFIX.pack(base, batch_length, header.partition_leader_epoch, MAGIC, crc)
    return b"".join((prefix, body, payload))


def build_batch_columns(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]],
    *,
    compression: CompressionType | int = CompressionType.NONE,
) -> bytes:
    """One batch (base offset 0, CreateTime) from parallel columns, each record with its
    own timestamp: what ``build_batch`` makes from the same records, built in C-level
    passes (``zip``/``map``, one msgpack call) with no Python step per record. The caller
    vouches for the columns' types (they come from a decoded batch, or from templates):
    keys and values bytes or None, headers tuples of ``(str, bytes)``. A copier that
    rewrites decoded batches (the active-active mirror) builds its writes with it."""
    n = len(values)
    if not n or len(keys) != n or len(timestamps) != n or len(headers) != n:
        raise ValueError("a batch needs at least one record, and one entry per record in every column")
    first = timestamps[0]
    low, high = min(timestamps), max(timestamps)
    if type(first) is not int or not _INT64_MIN <= low <= high <= _INT64_MAX:
        raise ValueError("record timestamps must be ints that fit in 64 bits")
    deltas = repeat(0, n) if low == high else map(add, timestamps, repeat(-first))
    try:
        payload = msgpack.packb(list(zip(range(n), deltas, keys, values, headers)), use_bin_type=True)
    except OverflowError:
        raise ValueError("record timestamps too far apart for one batch") from None
    codec = codec_of(int(compression))
    payload = compress(codec, payload)
    body = BODY_HEADER.pack(int(codec), n - 1, first, high, -1, -1, -1, n)
    crc = crc32c.crc32c(payload, crc32c.crc32c(body))
    prefix = PREFIX.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(payload), -1, MAGIC, crc)
    return b"".join((prefix, body, payload))
