"""The record batch header: Kafka's RecordBatch v2 layout, big-endian, 61 bytes.

::

    offset  size  field
         0     8  base_offset             i64  offset of the first record
         8     4  batch_length            i32  bytes after this field (= size - 12)
        12     4  partition_leader_epoch  i32  stamped by the leader (outside the CRC)
        16     1  magic                   i8   always 2
        17     4  crc                     u32  CRC-32C of bytes 21..end
        21     2  attributes              i16  bits 0-2 codec, 3 timestamp type,
                                               4 transactional, 5 control
        23     4  last_offset_delta       i32  offset of the last record - base_offset
        27     8  first_timestamp         i64
        35     8  max_timestamp           i64
        43     8  producer_id             i64
        51     2  producer_epoch          i16
        53     4  base_sequence           i32
        57     4  record_count            i32
        61     …  payload                      records, compressed by the codec

``base_offset`` and ``partition_leader_epoch`` lie before the CRC'd range so the
leader can assign offsets in place without recomputing it; appending with
LogAppendTime changes ``attributes`` and ``max_timestamp`` and so recomputes it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from mq.core.errors import ErrorCode
from mq.core.types import CompressionType, TimestampType
from mq.protocol.compression import codec_of
from mq.protocol.errors import ProtocolError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
LOG_OVERHEAD = 12
"""``base_offset`` and ``batch_length``: the bytes ``batch_length`` does not count."""
MAGIC = 2
CRC_START = 21
"""The CRC covers ``attributes`` to the end of the batch."""

PREFIX = struct.Struct(">qiibI")  # base_offset .. crc
BODY_HEADER = struct.Struct(">hiqqqhii")  # attributes .. record_count
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
BATCH_LENGTH_AT = 8
LEADER_EPOCH_AT = 12
CRC_AT = 17
ATTRIBUTES_AT = 21
MAX_TIMESTAMP_AT = 35

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

assert HEADER.size == HEADER_SIZE and PREFIX.size == CRC_START


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_BIT) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


def _corrupt(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.CORRUPT_MESSAGE, message)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos``; checks the header only (not the CRC, not
    that the whole batch is in ``buf``)."""
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise _corrupt(f"batch header at {pos} is short: {max(0, len(buf) - pos)} bytes")
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise _corrupt(f"batch at {pos} has magic {header.magic}, expected {MAGIC}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise _corrupt(f"batch at {pos} has batch_length {header.batch_length}")
    if header.record_count < 0 or header.last_offset_delta < 0:
        raise _corrupt(f"batch at {pos} has a negative record_count or last_offset_delta")
    codec_of(header.attributes & CODEC_MASK)
    return header


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of each batch in ``buf``, which must hold whole batches.

    Headers are checked, CRCs are not (see ``crc_ok``); a malformed or incomplete
    batch raises ProtocolError(CORRUPT_MESSAGE).
    """
    pos, end = 0, len(buf)
    while pos < end:
        header = read_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > end:
            raise _corrupt(f"batch at {pos} needs {size} bytes, {end - pos} remain")
        yield pos, header
        pos += size


def valid_prefix(buf: bytes | bytearray | memoryview) -> int:
    """Bytes at the start of ``buf`` made of complete batches with valid headers and
    CRCs: where recovery truncates a torn or corrupt log tail. Never raises."""
    pos, end = 0, len(buf)
    while pos < end:
        try:
            header = read_header(buf, pos)
        except ProtocolError:
            break
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > end or compute_crc(buf, pos, size) != header.crc:
            break
        pos += size
    return pos


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of the batch of ``size`` bytes at ``pos`` (its ``attributes`` to its end)."""
    with memoryview(buf) as view:
        return crc32c.crc32c(view[pos + CRC_START : pos + size])


def checksum(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C of ``data``: for other stored files (producer-state snapshots) that
    cannot import the codec themselves."""
    return crc32c.crc32c(data)


def crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    return len(buf) - pos >= header.size and compute_crc(buf, pos, header.size) == header.crc


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign offsets in place (the leader's job); the CRC stays valid."""
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the leader epoch in place; the CRC stays valid."""
    _I32.pack_into(buf, pos + LEADER_EPOCH_AT, epoch)


PRODUCER_AT = 43
_PRODUCER = struct.Struct(">qhi")  # producer_id, producer_epoch, base_sequence


def with_producer_state(batch: bytes | bytearray | memoryview, producer_id: int, producer_epoch: int,
                        base_sequence: int) -> bytes:
    """A copy of one whole batch stamped with an idempotent producer's id, epoch and
    base sequence (inside the CRC'd range, so the CRC is recomputed). The producer
    stamps a batch when it first sends it, and again after an epoch bump."""
    data = bytearray(batch)
    _PRODUCER.pack_into(data, PRODUCER_AT, producer_id, producer_epoch, base_sequence)
    (batch_length,) = _I32.unpack_from(data, BATCH_LENGTH_AT)
    _U32.pack_into(data, CRC_AT, compute_crc(data, 0, batch_length + LOG_OVERHEAD))
    return bytes(data)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as its max_timestamp (every
    record then reads as that time), and recompute the CRC."""
    (attributes,) = _I16.unpack_from(buf, pos + ATTRIBUTES_AT)
    _I16.pack_into(buf, pos + ATTRIBUTES_AT, attributes | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_AT, timestamp_ms)
    (batch_length,) = _I32.unpack_from(buf, pos + BATCH_LENGTH_AT)
    _U32.pack_into(buf, pos + CRC_AT, compute_crc(buf, pos, batch_length + LOG_OVERHEAD))
