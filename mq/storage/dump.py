"""What is in a segment file, as dicts (``mq dump-log``; Kafka's DumpLogSegments).

``.log``: one ``{"type": "batch", ...}`` per batch with offsets, timestamps, codec,
size, position, CRC status (``crc_ok``), leader epoch and producer fields, and
with ``decode=True`` a ``"records"`` list (offset, timestamp, key, value, headers).
A tail that cannot be parsed ends the dump with ``{"type": "error", "valid": False}``.
``.index`` / ``.timeindex``: one dict per entry, checked against the ``.log`` next
to it when there is one (``"valid"`` false if the entry points at no batch ending
there, or breaks the order).
``.snapshot`` (producer state, ``mq.storage.producer_snapshot``): one
``{"type": "producer", ...}`` per producer id with its epoch, last sequence and offset,
open transaction and cached batches; a damaged file gives ``{"type": "error"}``.
A control batch (transaction marker) adds ``"control": {"marker", "coordinator_epoch"}``.
``.txnindex`` (``mq.storage.txn_index``): one ``{"type": "aborted_txn", ...}`` per
aborted transaction (producer id, first offset, marker offset, last stable offset).
"""

from __future__ import annotations

import posixpath
import struct
from collections.abc import Iterator
from typing import Any

from mq.core.errors import ErrorCode, MqError
from mq.protocol.control_batch import marker_of
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import HEADER_SIZE, BatchHeader, crc_ok, decode_records, read_header
from mq.storage.fileio import FileIO
from mq.storage.producer_snapshot import SNAPSHOT_SUFFIX, SnapshotError, read_snapshot
from mq.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from mq.storage.txn_index import ENTRY_SIZE, decode_entries

CHUNK = 8 * 1024 * 1024
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def dump_segment(fileio: FileIO, path: str, *, decode: bool = False) -> Iterator[dict[str, Any]]:
    """Describe the ``.log``, ``.index`` or ``.timeindex`` file at ``path``."""
    if not fileio.exists(path):
        raise MqError(ErrorCode.INVALID_REQUEST, f"{path}: no such file")
    name = posixpath.basename(path)
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX, TXN_INDEX_SUFFIX):
        stem = name[: -len(suffix)]
        if name.endswith(suffix) and len(stem) == 20 and stem.isdigit():
            break
    else:
        raise MqError(
            ErrorCode.INVALID_REQUEST,
            f"{path}: not a segment file (expected <20-digit offset>.log, .index, .timeindex, .txnindex or .snapshot)",
        )
    base_offset = int(stem)
    if suffix == SNAPSHOT_SUFFIX:
        return _dump_snapshot(fileio, posixpath.dirname(path), base_offset)
    if suffix == LOG_SUFFIX:
        return _dump_log(fileio, path, decode=decode)
    if suffix == TXN_INDEX_SUFFIX:
        return _dump_txn_index(fileio, path)
    return _dump_index(fileio, path, suffix, base_offset)


def _dump_snapshot(fileio: FileIO, directory: str, offset: int) -> Iterator[dict[str, Any]]:
    try:
        snapshot = read_snapshot(fileio, directory, offset)
    except SnapshotError as exc:
        yield {"type": "error", "valid": False, "message": f"{exc} (the broker ignores this snapshot and "
                                                         "rebuilds the state from an older one and the log)"}
        return
    for e in snapshot.entries:
        yield {
            "type": "producer", "producer_id": e.producer_id, "producer_epoch": e.producer_epoch,
            "last_sequence": e.last_seq, "last_offset": e.last_offset, "last_timestamp": e.last_timestamp_ms,
            "current_txn_first_offset": e.current_txn_first_offset,
            "batches": [{"first_sequence": b.first_seq, "last_sequence": b.last_seq,
                         "first_offset": b.first_offset, "last_offset": b.last_offset} for b in e.batches],
        }


def _batches(fileio: FileIO, path: str) -> Iterator[tuple[int, BatchHeader | None, bytes | str]]:
    """``(position, header, batch bytes)`` per batch; ``(position, None, problem)`` at
    an unparsable tail."""
    handle = fileio.open(path)
    try:
        size, pos = handle.size(), 0
        buf, buf_pos = b"", 0
        while pos < size:
            if pos + HEADER_SIZE > buf_pos + len(buf):
                buf_pos, buf = pos, handle.pread(pos, CHUNK)
            try:
                header = read_header(buf, pos - buf_pos)
            except ProtocolError as exc:
                yield pos, None, exc.message
                return
            if pos + header.size > size:
                yield pos, None, f"batch of {header.size} bytes runs past the end of the file ({size})"
                return
            if pos + header.size > buf_pos + len(buf):
                buf_pos, buf = pos, handle.pread(pos, max(CHUNK, header.size))
            start = pos - buf_pos
            yield pos, header, buf[start : start + header.size]
            pos += header.size
    finally:
        handle.close()


def _dump_log(fileio: FileIO, path: str, *, decode: bool) -> Iterator[dict[str, Any]]:
    for pos, header, data in _batches(fileio, path):
        if header is None:
            yield {"type": "error", "position": pos, "message": data, "valid": False}
            return
        assert isinstance(data, bytes)
        ok = crc_ok(data, 0, header)
        entry: dict[str, Any] = {
            "type": "batch", "position": pos, "base_offset": header.base_offset,
            "last_offset": header.last_offset, "count": header.record_count,
            "first_timestamp": header.first_timestamp, "max_timestamp": header.max_timestamp,
            "timestamp_type": header.timestamp_type.name, "codec": header.compression.name.lower(),
            "size": header.size, "crc": header.crc, "crc_ok": ok,
            "partition_leader_epoch": header.partition_leader_epoch,
            "producer_id": header.producer_id, "producer_epoch": header.producer_epoch,
            "base_sequence": header.base_sequence, "is_transactional": header.is_transactional,
            "is_control": header.is_control,
        }
        if header.is_control and ok:
            try:
                kind, coordinator_epoch = marker_of(data)
                entry["control"] = {"marker": kind.name, "coordinator_epoch": coordinator_epoch}
            except ProtocolError as exc:
                entry["records_error"] = exc.message
        if decode and ok:
            try:
                entry["records"] = [
                    {
                        "offset": r.offset, "timestamp": r.timestamp, "key": r.key,
                        "value": r.value, "headers": list(r.headers),
                    }
                    for r in decode_records(data)
                ]
            except ProtocolError as exc:
                entry["records_error"] = exc.message
        yield entry


def _dump_txn_index(fileio: FileIO, path: str) -> Iterator[dict[str, Any]]:
    handle = fileio.open(path)
    try:
        data = handle.pread(0, handle.size())
    finally:
        handle.close()
    entries = decode_entries(data)
    for e in entries:
        yield {"type": "aborted_txn", "producer_id": e.producer_id, "first_offset": e.first_offset,
               "last_offset": e.last_offset, "last_stable_offset": e.last_stable_offset}
    whole = len(entries) * ENTRY_SIZE
    if whole != len(data):
        yield {"type": "error", "position": whole, "valid": False,
               "message": f"{len(data) - whole} trailing bytes (not a whole {ENTRY_SIZE}-byte entry)"}


def _log_batch_ends(fileio: FileIO, log_path: str) -> dict[int, int] | None:
    """``{position: last offset}`` of the batches of the ``.log`` beside an index."""
    if not fileio.exists(log_path):
        return None
    return {pos: h.last_offset for pos, h, _ in _batches(fileio, log_path) if h is not None}


def _dump_index(fileio: FileIO, path: str, suffix: str, base_offset: int) -> Iterator[dict[str, Any]]:
    log_path = path[: -len(suffix)] + LOG_SUFFIX
    ends = _log_batch_ends(fileio, log_path)
    last_offsets = set(ends.values()) if ends is not None else None
    handle = fileio.open(path)
    try:
        data = handle.pread(0, handle.size())
    finally:
        handle.close()
    is_offset_index = suffix == INDEX_SUFFIX
    layout = _OFFSET_ENTRY if is_offset_index else _TIME_ENTRY
    whole = len(data) - len(data) % layout.size
    previous = None
    for first, second in layout.iter_unpack(data[:whole]):
        if is_offset_index:
            offset, position = base_offset + first, second
            entry: dict[str, Any] = {"type": "index_entry", "offset": offset, "position": position}
            if ends is not None:
                entry["valid"] = ends.get(position) == offset
            key = (offset, position)
        else:
            timestamp, offset = first, base_offset + second
            entry = {"type": "time_index_entry", "timestamp": timestamp, "offset": offset}
            if last_offsets is not None:
                entry["valid"] = offset in last_offsets
            key = (timestamp, offset)
        if previous is not None and not key[0] > previous[0]:
            entry["valid"] = False
        previous = key
        yield entry
    if whole != len(data):
        yield {
            "type": "error", "position": whole, "valid": False,
            "message": f"{len(data) - whole} trailing bytes (not a whole {layout.size}-byte entry)",
        }
