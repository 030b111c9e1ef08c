"""Record batches: the same bytes on the wire and on disk (Kafka's RecordBatch v2).

The header layout is documented in ``mq.protocol.batch_format`` and the payload in
``mq.protocol.batch_builder``; this module is the public face of both and decodes
records. Decoding is validated in bulk (C-level passes over the unpacked columns
instead of a Python loop per record) because a consumer decodes millions of
records a second: the record count must match ``record_count``, offset deltas must
increase within ``[0, last_offset_delta]``, keys and values must be bytes or nil,
headers ``(str, bytes)`` pairs; anything else is ``CORRUPT_MESSAGE``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add, lt
from typing import Any

import msgpack

from mq.core.errors import ErrorCode
from mq.protocol.batch_builder import BatchBuilder, build_batch, rebuild_batch
from mq.protocol.batch_format import (
    CODEC_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    compute_crc,
    crc_ok,
    iter_batches,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    valid_prefix,
)
from mq.protocol.compression import decompress
from mq.protocol.errors import ProtocolError
from mq.protocol.schema import fast_constructor

__all__ = [
    "HEADER_SIZE", "LOG_OVERHEAD", "MAGIC", "BatchBuilder", "BatchHeader", "Record",
    "RecordColumns", "RecordTuple", "build_batch", "compute_crc", "crc_ok",
    "decode_record_columns", "decode_record_tuples",
    "decode_records", "iter_batches", "iter_records", "read_header", "rebuild_batch", "set_base_offset",
    "set_log_append_time", "set_partition_leader_epoch", "valid_prefix",
]

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_KEY_TYPES = frozenset((bytes, type(None)))

RecordTuple = tuple[int, int, "bytes | None", "bytes | None", tuple[tuple[str, bytes], ...]]
"""``(offset, timestamp, key, value, headers)``: a record without the object around it."""


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


_new_record = fast_constructor(Record)


def _corrupt(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.CORRUPT_MESSAGE, message)


def _unpack_payload(payload: bytes | memoryview) -> object:
    limit = len(payload)
    try:
        return msgpack.unpackb(
            payload, raw=False, use_list=False, strict_map_key=True, timestamp=0,
            max_str_len=limit, max_bin_len=limit, max_array_len=limit, max_map_len=limit,
            max_ext_len=limit,
        )
    except Exception as exc:  # noqa: BLE001 - msgpack raises many types; all mean "malformed"
        raise _corrupt(f"undecodable record payload: {type(exc).__name__}") from None


def _check_headers(headers: tuple[object, ...]) -> None:
    for record_headers in headers:
        for pair in record_headers:  # type: ignore[attr-defined]
            if type(pair) is not tuple or len(pair) != 2:
                raise _corrupt("a record header must be a [name, value] pair")
            if type(pair[0]) is not str or type(pair[1]) is not bytes:
                raise _corrupt("a record header must be (str, bytes)")


def _columns(recs: object, header: BatchHeader) -> tuple[Any, ...]:
    """The payload's records as five validated columns (C-level passes, no Python loop
    per record: see the module docstring). msgpack booleans pass as the ints 0 and 1."""
    count = header.record_count
    if type(recs) is not tuple or len(recs) != count:
        raise _corrupt(f"payload does not hold record_count={count} records")
    if count == 0:
        return ((), (), (), (), ())
    try:
        # A strict zip raises unless every record has as many fields as the first, and
        # unpacking into five names raises unless that number is five.
        deltas, ts_deltas, keys, values, headers = zip(*recs, strict=True)
        # A sum of ints is an int; a float makes it a float, anything else raises.
        if type(sum(deltas)) is not int or type(sum(ts_deltas)) is not int:
            raise ValueError
    except (TypeError, ValueError):
        raise _corrupt(
            "a record must be [offset_delta (int), timestamp_delta (int), key, value, headers]"
        ) from None
    if deltas[0] < 0 or deltas[-1] > header.last_offset_delta:
        raise _corrupt("record offset delta outside [0, last_offset_delta]")
    if count > 1 and not (deltas[-1] == count - 1 and deltas == tuple(range(count))) \
            and not all(map(lt, deltas, deltas[1:])):
        raise _corrupt("record offset deltas must increase")
    if (keys.count(None) != count and not set(map(type, keys)) <= _KEY_TYPES) \
            or not set(map(type, values)) <= _KEY_TYPES:
        raise _corrupt("record keys and values must be bytes or nil")
    if headers.count(()) != count:  # some record has headers (or something else)
        if set(map(type, headers)) != {tuple}:
            raise _corrupt("record headers must be an array")
        _check_headers(headers)
    return deltas, ts_deltas, keys, values, headers


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """A batch's records as parallel columns, the form decoding produces: consumers
    build their own record objects from it in C-level passes (``zip``/``map``)
    without a tuple per record in between. ``offsets`` is a ``range`` when the batch
    has no gaps; ``timestamps`` shares one int when every record has the same time."""

    offsets: Sequence[int]
    timestamps: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    headers: Sequence[tuple[tuple[str, bytes], ...]]

    def __len__(self) -> int:
        return len(self.offsets)

    def since(self, offset: int) -> RecordColumns:
        """The records at or after ``offset`` (a fetch returns the whole batch that
        contains the fetch offset)."""
        offsets = self.offsets
        if not offsets or offsets[0] >= offset:
            return self
        i = bisect_left(offsets, offset)
        return RecordColumns(offsets[i:], self.timestamps[i:], self.keys[i:], self.values[i:],
                             self.headers[i:])


_EMPTY = RecordColumns((), (), (), (), ())


def decode_record_columns(
    batch: bytes | bytearray | memoryview,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    verify_crc: bool = True,
) -> RecordColumns:
    """The records of the batch at the start of ``batch`` as validated columns
    (CORRUPT_MESSAGE on a bad CRC or structure, RECORD_TOO_LARGE when decompression
    exceeds the cap): the fast path for consumers."""
    header = read_header(batch)
    size = header.batch_length + LOG_OVERHEAD
    if len(batch) < size:
        raise _corrupt(f"batch needs {size} bytes, {len(batch)} given")
    if verify_crc and compute_crc(batch, 0, size) != header.crc:
        raise _corrupt("batch CRC mismatch")
    with memoryview(batch) as view:
        payload = view[HEADER_SIZE:size]
        codec = header.attributes & CODEC_MASK
        if codec:
            payload = decompress(codec, payload, max_bytes=max_decompressed_bytes)
        recs = _unpack_payload(payload)
        del payload
    deltas, ts_deltas, keys, values, headers = _columns(recs, header)
    count = len(deltas)
    if not count:
        return _EMPTY
    base = header.base_offset
    if deltas[-1] == count - 1:  # 0..n-1, as built (a compacted batch has gaps)
        offsets: Sequence[int] = range(base, base + count)
    else:
        offsets = tuple(map(add, repeat(base), deltas))
    if header.attributes & TIMESTAMP_TYPE_BIT:
        timestamps: Sequence[int] = (header.max_timestamp,) * count
    elif ts_deltas.count(0) == count:  # one timestamp for the batch (send_many)
        timestamps = (header.first_timestamp,) * count
    else:
        first = header.first_timestamp
        if not (_INT64_MIN <= first + min(ts_deltas) and first + max(ts_deltas) <= _INT64_MAX):
            raise _corrupt("record timestamp outside the 64-bit range")
        timestamps = tuple(map(add, repeat(first), ts_deltas))
    return RecordColumns(offsets, timestamps, keys, values, headers)


def decode_record_tuples(
    batch: bytes | bytearray | memoryview,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    verify_crc: bool = True,
) -> list[RecordTuple]:
    """The records of the batch at the start of ``batch`` as ``RecordTuple``s."""
    c = decode_record_columns(batch, max_decompressed_bytes=max_decompressed_bytes,
                              verify_crc=verify_crc)
    return list(zip(c.offsets, c.timestamps, c.keys, c.values, c.headers))


def decode_records(
    batch: bytes | bytearray | memoryview,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    verify_crc: bool = True,
) -> list[Record]:
    """The records of the batch at the start of ``batch`` (CORRUPT_MESSAGE on a bad CRC
    or structure, RECORD_TOO_LARGE when decompression exceeds the cap)."""
    c = decode_record_columns(batch, max_decompressed_bytes=max_decompressed_bytes,
                              verify_crc=verify_crc)
    return list(map(_new_record, c.offsets, c.timestamps, c.keys, c.values, c.headers))


def iter_records(
    buf: bytes | bytearray | memoryview,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    verify_crc: bool = True,
) -> Iterator[Record]:
    """Every record of every batch in ``buf`` (whole batches, as a fetch returns them)."""
    with memoryview(buf) as view:
        for pos, header in iter_batches(view):
            yield from decode_records(
                view[pos : pos + header.size],
                max_decompressed_bytes=max_decompressed_bytes, verify_crc=verify_crc,
            )
