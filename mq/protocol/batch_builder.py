"""Building record batches: what a producer does per record, kept minimal.

``append`` stores the record as a small list and adds to a running size estimate;
``build`` packs every record with one msgpack call, compresses the payload once and
writes the 61-byte header (see ``mq.protocol.batch_format``) with its CRC-32C.
Payload records are ``[offset_delta, timestamp_delta, key, value, headers]`` with
headers a list of ``[str, bytes]``; deltas are relative to the batch's base offset
and first timestamp.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import crc32c
import msgpack

from mq.core.types import CompressionType
from mq.protocol.batch_format import (
    BODY_HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    PREFIX,
    TRANSACTIONAL_BIT,
)
from mq.protocol.compression import codec_of, compress

RECORD_OVERHEAD = 12
"""Estimated msgpack bytes of one record besides its key, value and headers."""
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_BYTES_TYPES = (bytes, bytearray, memoryview)

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
    ) -> None:
        self._codec = codec_of(int(compression))
        self._records: list[list[object]] = []
        self._size = HEADER_SIZE + 5  # + the msgpack array header
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._attributes = int(self._codec) | (TRANSACTIONAL_BIT if is_transactional else 0)
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
            records.append([len(records), delta, key, value, headers])
        else:
            if type(timestamp_ms) is not int:
                raise TypeError(f"timestamp_ms must be an int, not {type(timestamp_ms).__name__}")
            self._first_timestamp = timestamp_ms
            records.append([0, 0, key, value, headers])
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
