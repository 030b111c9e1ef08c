"""Checking record batches before they are appended (Kafka's LogValidator).

The leader checks each batch's header and CRC, size, record count and timestamps,
then assigns offsets by rewriting ``base_offset`` (and the leader epoch, and for
LogAppendTime the max timestamp) in one copy of the request bytes. Everything is
checked before anything is written: a bad batch in a request appends nothing.
The work is per batch, never per record: records stay opaque bytes. (A topic's
``compression.type`` is applied before this, by ``mq.broker.recompress``.)

A mirror topic's leader (``validate_as_mirror``) keeps the source region's offsets,
timestamps and bytes: the batches must continue the log exactly (or leave the holes a
compacted source has), and only the partition leader epoch, outside the CRC, is stamped.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.core.config import TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.types import NO_TIMESTAMP, TimestampType
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import (
    BatchHeader,
    crc_ok,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

NO_TIMESTAMP_DIFFERENCE_LIMIT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did: offsets assigned, timestamps, size."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    size_bytes: int
    duplicate: bool = False
    """An idempotent producer's retry of batches already in the log: nothing was
    appended; the offsets are the original ones."""


@dataclass(slots=True)
class ValidatedRecords:
    """Batches ready to append: the bytes and, per batch, ``(position, size, last
    offset, max timestamp)`` for the indexes."""

    data: bytes | bytearray | memoryview
    batches: list[tuple[int, int, int, int]]
    info: LogAppendInfo


def _headers(records: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    try:
        headers = list(iter_batches(records))
    except ProtocolError as exc:
        raise MqError(exc.code, exc.message) from None
    if not headers:
        raise MqError(ErrorCode.INVALID_RECORD, "the request holds no record batch")
    for pos, header in headers:
        if not crc_ok(records, pos, header):
            raise MqError(ErrorCode.CORRUPT_MESSAGE, f"CRC mismatch in the batch at byte {pos}")
    return headers


def _check_client_batch(header: BatchHeader, config: TopicConfig, now_ms: int, *, markers: bool = False) -> None:
    if header.size > config.max_message_bytes:
        raise MqError(
            ErrorCode.RECORD_TOO_LARGE,
            f"batch of {header.size} bytes exceeds max.message.bytes={config.max_message_bytes}",
        )
    if header.record_count == 0 or header.last_offset_delta != header.record_count - 1:
        raise MqError(
            ErrorCode.INVALID_RECORD,
            f"batch has {header.record_count} records but last_offset_delta {header.last_offset_delta}",
        )
    if header.is_control != markers:
        raise MqError(ErrorCode.INVALID_RECORD, "clients may not write control batches" if header.is_control
                      else "a transaction marker request holds a batch that is not a control batch")
    limit = config.message_timestamp_difference_max_ms
    if (
        config.message_timestamp_type == TimestampType.CREATE_TIME
        and limit < NO_TIMESTAMP_DIFFERENCE_LIMIT
    ):
        # Per batch, not per record: first_timestamp and max_timestamp bound the
        # records' timestamps (deltas are never negative in batches we build).
        for ts in (header.first_timestamp, header.max_timestamp):
            if abs(ts - now_ms) > limit:
                raise MqError(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"timestamp {ts} is more than {limit} ms from the broker's time {now_ms}",
                )


def validate_as_leader(
    records: bytes | bytearray | memoryview, *, next_offset: int, leader_epoch: int,
    now_ms: int, config: TopicConfig, markers: bool = False,
) -> ValidatedRecords:
    """Check every batch, then assign offsets from ``next_offset`` in a copy. With
    ``markers`` the batches must be control batches (WriteTxnMarkers), else none may be."""
    headers = _headers(records)
    for _, header in headers:
        _check_client_batch(header, config, now_ms, markers=markers)
    data = bytearray(records)
    log_append_time = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    batches = []
    offset, max_timestamp, count = next_offset, NO_TIMESTAMP, 0
    for pos, header in headers:
        set_base_offset(data, pos, offset)
        set_partition_leader_epoch(data, pos, leader_epoch)
        batch_max = header.max_timestamp
        if log_append_time:
            set_log_append_time(data, pos, now_ms)
            batch_max = now_ms
        last = offset + header.last_offset_delta
        batches.append((pos, header.size, last, batch_max))
        max_timestamp = max(max_timestamp, batch_max)
        count += header.record_count
        offset = last + 1
    info = LogAppendInfo(
        first_offset=next_offset, last_offset=offset - 1, max_timestamp=max_timestamp,
        log_append_time_ms=now_ms if log_append_time else NO_TIMESTAMP,
        record_count=count, size_bytes=len(data),
    )
    return ValidatedRecords(data, batches, info)


def validate_as_follower(
    records: bytes | bytearray | memoryview, *, log_end_offset: int
) -> ValidatedRecords:
    """Check structure, CRCs and offset order; keep the leader's offsets and bytes."""
    headers = _headers(records)
    batches = []
    expected, max_timestamp, count = log_end_offset, NO_TIMESTAMP, 0
    for pos, header in headers:
        if header.base_offset < expected:
            code = ErrorCode.OFFSET_OUT_OF_RANGE if pos == 0 else ErrorCode.INVALID_RECORD
            raise MqError(code, f"batch at offset {header.base_offset} is below {expected}")
        batches.append((pos, header.size, header.last_offset, header.max_timestamp))
        max_timestamp = max(max_timestamp, header.max_timestamp)
        count += header.record_count
        expected = header.next_offset
    info = LogAppendInfo(
        first_offset=headers[0][1].base_offset, last_offset=expected - 1,
        max_timestamp=max_timestamp, log_append_time_ms=NO_TIMESTAMP, record_count=count,
        size_bytes=len(records),
    )
    return ValidatedRecords(records, batches, info)


def validate_as_mirror(
    records: bytes | bytearray | memoryview, *, log_end_offset: int, leader_epoch: int, max_message_bytes: int,
    holes: bool = False,
) -> ValidatedRecords:
    """Check structure, CRCs and sizes; the first batch must start at ``log_end_offset``
    and each next one where the previous ended (with ``holes``: at or after, as the
    batches of a compacted source, from which the cleaner removed whole batches). Keeps
    offsets, timestamps and attributes; stamps ``leader_epoch`` in a copy (outside the CRC)."""
    headers = _headers(records)
    data = bytearray(records)
    batches = []
    expected, max_timestamp, count = log_end_offset, NO_TIMESTAMP, 0
    for pos, header in headers:
        if header.size > max_message_bytes:
            raise MqError(ErrorCode.RECORD_TOO_LARGE,
                          f"batch of {header.size} bytes at offset {header.base_offset} exceeds "
                          f"max.message.bytes={max_message_bytes} of the mirror topic")
        if header.base_offset < expected or (header.base_offset > expected and not holes):
            raise MqError(ErrorCode.INVALID_RECORD,
                          f"batch at byte {pos} starts at offset {header.base_offset}, expected "
                          f"{'at least ' if holes else ''}{expected}")
        set_partition_leader_epoch(data, pos, leader_epoch)
        batches.append((pos, header.size, header.last_offset, header.max_timestamp))
        max_timestamp = max(max_timestamp, header.max_timestamp)
        count += header.record_count
        expected = header.next_offset
    info = LogAppendInfo(
        first_offset=headers[0][1].base_offset, last_offset=expected - 1, max_timestamp=max_timestamp,
        log_append_time_ms=NO_TIMESTAMP, record_count=count, size_bytes=len(data),
    )
    return ValidatedRecords(data, batches, info)
