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

**Holes** (``fetch_offset``). Compaction (``cleanup.policy=compact``) drops whole
batches, so a compacted source has offsets that hold no record: consecutive batches
need not be contiguous, and a fetch from offset X may return a first batch starting
after X. A request that names the offset it was fetched from (``fetch_offset`` >= 0)
says "these are all the source's batches from ``fetch_offset`` on, up to the last
one": what lies between them holds nothing in the source either. So when
``fetch_offset`` is at or below the log end, batches may leave holes (each still
starts after the previous one ends) and the first new batch may start past the log
end, as a Kafka follower appends whatever its leader returned for its fetch offset.
The duplicate check then also covers the holes below the log end: the target must
hold nothing where the source has nothing (else ``MIRROR_DIVERGED``). A
``fetch_offset`` past the log end means the mirror skipped offsets: ``MIRROR_OFFSET_GAP``,
unless ``start_offset`` (at or after ``fetch_offset``; typically both are the source's
log start after OFFSET_OUT_OF_RANGE) restarts the partition there, or at the first
batch if that starts before it. Without ``fetch_offset`` the batches must be
contiguous and start at the log end or below, as before.

The request itself must be sound: whole batches, valid CRCs, none larger than
``max.message.bytes``, non-negative offsets, each batch starting where the previous
one ended (or after it, with ``fetch_offset``). Anything wrong refuses the whole request
and changes nothing. The CRC is the source's and still holds: only the partition leader
epoch, outside it, changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError
from mq.protocol.batch_format import BatchHeader, crc_ok, iter_batches
from mq.protocol.errors import ProtocolError

StoredBatch = Callable[[int], "BatchHeader | None"]
"""The header of the first stored batch that holds the argument or starts after it,
below the log end (None: no such batch). Called only with offsets in [log start, log end)."""


@dataclass(frozen=True, slots=True)
class MirrorPlan:
    duplicates: int  # leading batches already in the log (acknowledged, not appended)
    appended: int  # batches to append after them
    append_from: int  # byte position of the first batch to append
    restart_at: int | None  # restart the empty log at this offset before appending
    end_offset: int  # the offset after the request's last batch (-1: no batch)


def checked_headers(
    records: bytes | bytearray | memoryview, *, max_message_bytes: int, holes: bool = False,
) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of every batch, after checking structure, CRC, size and
    order (contiguous, or only increasing when ``holes``); ``MqError`` naming the first
    problem."""
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
        if expected is not None and holes and header.base_offset < expected:
            raise MqError(ErrorCode.INVALID_RECORD,
                          f"{span}: the batches of one MirrorAppend must be in offset order, "
                          f"the previous one ended before offset {expected}")
        if expected is not None and not holes and header.base_offset != expected:
            raise MqError(ErrorCode.INVALID_RECORD,
                          f"{span}: the batches of one MirrorAppend must be contiguous, "
                          f"the previous one ended before offset {expected} (a compacted source leaves "
                          "holes: send fetch_offset, the offset these batches were fetched from)")
        expected = header.next_offset
    return headers


def plan_append(
    records: bytes | bytearray | memoryview, *, log_start_offset: int, log_end_offset: int,
    start_offset: int, max_message_bytes: int, stored_batch: StoredBatch, fetch_offset: int = -1,
) -> MirrorPlan:
    headers = checked_headers(records, max_message_bytes=max_message_bytes, holes=fetch_offset >= 0)
    if not headers:
        if start_offset < 0:
            raise MqError(ErrorCode.INVALID_RECORD,
                          "the request holds no record batch (an empty MirrorAppend only moves start_offset)")
        restart = start_offset if start_offset > log_end_offset else None
        return MirrorPlan(0, 0, len(records), restart, -1)
    first = headers[0][1]
    end_offset = headers[-1][1].next_offset
    if fetch_offset >= 0 and first.last_offset < fetch_offset:
        raise MqError(ErrorCode.INVALID_RECORD,
                      f"fetch_offset={fetch_offset} but the first batch {first.base_offset}-{first.last_offset} ends "
                      "before it: a fetch returns the batch holding its offset or later ones")
    if fetch_offset > log_end_offset:
        # Skipped offsets: only a restart may follow (the source's retention removed
        # them). The new log starts at start_offset, where the fetch began or later
        # (the fetch says nothing about offsets before it), or at the first batch if
        # that starts before it (a log start inside a batch).
        restart = min(start_offset, first.base_offset)
        if start_offset >= fetch_offset and restart > log_end_offset:
            return MirrorPlan(0, len(headers), 0, restart, end_offset)
        raise MqError(ErrorCode.MIRROR_OFFSET_GAP, _skipped_message(fetch_offset, log_end_offset, start_offset))
    # The offsets from here to a batch's base are known empty in the source: the fetch
    # offset, then the end of each duplicate (always at or below the log end).
    cursor = fetch_offset if fetch_offset >= 0 else first.base_offset
    duplicates = 0
    for _pos, header in headers:
        if header.base_offset >= log_end_offset:
            if cursor < log_end_offset:
                _check_hole(cursor, header, log_start_offset, log_end_offset, stored_batch)
            break
        _check_duplicate(header, cursor, log_start_offset, log_end_offset, stored_batch)
        duplicates += 1
        cursor = header.next_offset
    restart = None
    if duplicates < len(headers):
        base = headers[duplicates][1].base_offset
        if base > log_end_offset and fetch_offset < 0:  # only the first batch (contiguity)
            if start_offset != base:
                raise MqError(ErrorCode.MIRROR_OFFSET_GAP, _gap_message(base, log_end_offset, start_offset))
            restart = base
    append_from = headers[duplicates][0] if duplicates < len(headers) else len(records)
    return MirrorPlan(duplicates, len(headers) - duplicates, append_from, restart, end_offset)


def _check_duplicate(
    header: BatchHeader, cursor: int, log_start: int, log_end: int, stored_batch: StoredBatch,
) -> None:
    span = f"{header.base_offset}-{header.last_offset}"
    if header.base_offset < log_start:
        raise MqError(ErrorCode.OFFSET_OUT_OF_RANGE,
                      f"batch {span} is below the log start {log_start} of the mirror topic and cannot be "
                      f"compared any more; resume from its log end {log_end}")
    # From the cursor (at or before this batch's base, or inside it after a fetch from
    # the middle of a batch): the first stored batch must be this very batch.
    stored = stored_batch(max(cursor, log_start)) if header.last_offset < log_end else None
    if (stored is not None and stored.base_offset == header.base_offset
            and stored.last_offset == header.last_offset and stored.crc == header.crc):
        return
    if stored is None:
        found = "no stored batch starts there"
    elif stored.base_offset == header.base_offset:
        found = f"the stored batch {stored.base_offset}-{stored.last_offset} has crc {stored.crc:#010x}"
    elif stored.last_offset < header.base_offset:
        found = (f"the mirror topic holds batch {stored.base_offset}-{stored.last_offset} where the source has "
                 f"no record (offsets {cursor}-{header.base_offset - 1} are a hole in the source)")
    else:
        found = f"no stored batch starts there (the stored batch {stored.base_offset}-{stored.last_offset} overlaps it)"
    raise MqError(ErrorCode.MIRROR_DIVERGED, _diverged_message(f"batch {span} (crc {header.crc:#010x})", log_end, found))


def _check_hole(cursor: int, header: BatchHeader, log_start: int, log_end: int, stored_batch: StoredBatch) -> None:
    """The source holds nothing from ``cursor`` up to the new batch ``header``: neither
    may the mirror topic below its log end."""
    lookup = max(cursor, log_start)
    stored = stored_batch(lookup) if lookup < log_end else None
    if stored is None:
        return
    raise MqError(ErrorCode.MIRROR_DIVERGED, _diverged_message(
        f"the source has no record at offsets {cursor}-{header.base_offset - 1}", log_end,
        f"the mirror topic holds batch {stored.base_offset}-{stored.last_offset} there"))


def _diverged_message(what: str, log_end: int, found: str) -> str:
    return (f"{what} differs from the mirror topic's log (end {log_end}): {found}. The regions hold "
            "different records at these offsets: export the divergent tail and cut it (MirrorTruncate, "
            "mq mirror failback) before mirroring again")


def _gap_message(base: int, log_end: int, start_offset: int) -> str:
    text = (f"the first batch starts at offset {base} but the mirror topic's log ends at {log_end}: "
            f"offsets {log_end}-{base - 1} are missing")
    if start_offset >= 0:
        return text + f" (start_offset={start_offset} must equal the first batch's base offset {base})"
    return (text + f"; if the source deleted them (retention), send start_offset={base} to restart the partition "
            f"there; if the batches were fetched from offset {log_end} of a compacted source, send "
            f"fetch_offset={log_end}")


def _skipped_message(fetch_offset: int, log_end: int, start_offset: int) -> str:
    text = (f"the batches were fetched from offset {fetch_offset} but the mirror topic's log ends at {log_end}: "
            f"offsets {log_end}-{fetch_offset - 1} were never fetched")
    if start_offset >= 0:
        return text + f" (start_offset={start_offset} must be at or after fetch_offset={fetch_offset})"
    return (text + f"; fetch from {log_end}, or if the source deleted them (retention), send "
            f"start_offset={fetch_offset} to restart the partition there")
