"""Where a MirrorAppend's batches go: a pure decision, taken before anything is written.

The mirror sends record batches exactly as the source region's leader stored them. The
target's log must end up holding the same batches at the same offsets, so each batch is
judged against the log end (``plan_append``), in order:

- base offset == log end: appended there (offsets preserved);
- base offset < log end: a retry of something already appended. The batch stored at
  that base offset must have the same last offset and CRC (a *duplicate*, acknowledged
  and skipped); anything else means the two regions hold different records at those
  offsets (``MIRROR_DIVERGED``). Below the log start nothing is left to compare with
  (``OFFSET_OUT_OF_RANGE``: the mirror resumes from the log end);
- base offset > log end: offsets are missing (``MIRROR_OFFSET_GAP``), unless the
  request carries ``start_offset`` equal to that base offset and the log ends below
  it: then the partition restarts empty there first (Kafka's truncateFullyAndStartAt),
  because retention removed the source's records before they were mirrored.

The request itself must be sound: whole batches, valid CRCs, none larger than
``max.message.bytes``, non-negative offsets, each batch starting where the previous
one ended. Anything wrong refuses the whole request and changes nothing. The CRC is
the source's and still holds: only the partition leader epoch, outside it, changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError
from mq.protocol.batch_format import BatchHeader, crc_ok, iter_batches
from mq.protocol.errors import ProtocolError

StoredBatch = Callable[[int], "BatchHeader | None"]
"""The header of the stored batch whose base offset is the argument (None: no batch
starts there)."""


@dataclass(frozen=True, slots=True)
class MirrorPlan:
    duplicates: int  # leading batches already in the log (acknowledged, not appended)
    appended: int  # batches to append after them
    append_from: int  # byte position of the first batch to append
    restart_at: int | None  # restart the empty log at this offset before appending
    end_offset: int  # the offset after the request's last batch (-1: no batch)


def checked_headers(records: bytes | bytearray | memoryview, *, max_message_bytes: int) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of every batch, after checking structure, CRC, size and
    contiguity; ``MqError`` naming the first problem."""
    try:
        headers = list(iter_batches(records))
    except ProtocolError as exc:
        raise MqError(ErrorCode.CORRUPT_MESSAGE, f"malformed record batches: {exc.message}") from None
    expected = None
    for pos, header in headers:
        span = f"batch {header.base_offset}-{header.last_offset} at byte {pos}"
        if not crc_ok(records, pos, header):
            raise MqError(ErrorCode.CORRUPT_MESSAGE, f"{span}: CRC mismatch (the bytes changed on the way)")
        if header.size > max_message_bytes:
            raise MqError(ErrorCode.RECORD_TOO_LARGE,
                          f"{span}: {header.size} bytes exceed max.message.bytes={max_message_bytes} of the "
                          "mirror topic (copy the source topic's max.message.bytes to it)")
        if header.base_offset < 0:
            raise MqError(ErrorCode.INVALID_RECORD, f"{span}: negative base offset")
        if expected is not None and header.base_offset != expected:
            raise MqError(ErrorCode.INVALID_RECORD,
                          f"{span}: the batches of one MirrorAppend must be contiguous, "
                          f"the previous one ended before offset {expected}")
        expected = header.next_offset
    return headers


def plan_append(
    records: bytes | bytearray | memoryview, *, log_start_offset: int, log_end_offset: int,
    start_offset: int, max_message_bytes: int, stored_batch: StoredBatch,
) -> MirrorPlan:
    headers = checked_headers(records, max_message_bytes=max_message_bytes)
    if not headers:
        if start_offset < 0:
            raise MqError(ErrorCode.INVALID_RECORD,
                          "the request holds no record batch (an empty MirrorAppend only moves start_offset)")
        restart = start_offset if start_offset > log_end_offset else None
        return MirrorPlan(0, 0, len(records), restart, -1)
    duplicates = 0
    for _pos, header in headers:
        if header.base_offset >= log_end_offset:
            break
        _check_duplicate(header, log_start_offset, log_end_offset, stored_batch)
        duplicates += 1
    restart = None
    if duplicates < len(headers):
        base = headers[duplicates][1].base_offset
        if base > log_end_offset:  # only the first batch can be past the end (contiguity)
            if start_offset != base:
                raise MqError(ErrorCode.MIRROR_OFFSET_GAP, _gap_message(base, log_end_offset, start_offset))
            restart = base
    append_from = headers[duplicates][0] if duplicates < len(headers) else len(records)
    return MirrorPlan(duplicates, len(headers) - duplicates, append_from, restart, headers[-1][1].next_offset)


def _check_duplicate(header: BatchHeader, log_start: int, log_end: int, stored_batch: StoredBatch) -> None:
    span = f"{header.base_offset}-{header.last_offset}"
    if header.base_offset < log_start:
        raise MqError(ErrorCode.OFFSET_OUT_OF_RANGE,
                      f"batch {span} is below the log start {log_start} of the mirror topic and cannot be "
                      f"compared any more; resume from its log end {log_end}")
    stored = stored_batch(header.base_offset) if header.last_offset < log_end else None
    if stored is not None and stored.last_offset == header.last_offset and stored.crc == header.crc:
        return
    found = ("no stored batch starts there" if stored is None else
             f"the stored batch {stored.base_offset}-{stored.last_offset} has crc {stored.crc:#010x}")
    raise MqError(ErrorCode.MIRROR_DIVERGED,
                  f"batch {span} (crc {header.crc:#010x}) differs from the mirror topic's log (end {log_end}): "
                  f"{found}. The regions hold different records at these offsets: export the divergent "
                  "tail and cut it (MirrorTruncate, mq mirror failback) before mirroring again")


def _gap_message(base: int, log_end: int, start_offset: int) -> str:
    text = (f"the first batch starts at offset {base} but the mirror topic's log ends at {log_end}: "
            f"offsets {log_end}-{base - 1} are missing")
    if start_offset >= 0:
        return text + f" (start_offset={start_offset} must equal the first batch's base offset {base})"
    return text + f"; if the source deleted them (retention), send start_offset={base} to restart the partition there"
