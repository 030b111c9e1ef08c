"""Control batches: the transaction markers (Kafka's ``EndTransactionMarker``).

A transaction coordinator ends a transaction by having each partition leader append
one *control batch* for the producer: attributes have the transactional bit (4) and
the control bit (5) set, ``producer_id`` and ``producer_epoch`` are the producer's,
``base_sequence`` is -1, and it holds exactly one record, as in Kafka:

::

    key    i16 version (0) | i16 type      0 = ABORT, 1 = COMMIT
    value  i16 version (0) | i32 coordinator_epoch

Consumers never see control records; a ``read_committed`` consumer uses an ABORT
marker to stop dropping its producer's records (see ``mq.client.internals.fetcher``).
"""

from __future__ import annotations

import enum
import struct

from mq.core.errors import ErrorCode
from mq.protocol.batch_builder import BatchBuilder
from mq.protocol.batch_format import read_header
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import decode_record_columns

__all__ = ["ControlType", "build_marker", "marker_of"]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CURRENT_VERSION = 0


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


def build_marker(producer_id: int, producer_epoch: int, control_type: ControlType, *,
                 coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """One control batch ending ``producer_id``'s transaction (offsets assigned by the leader)."""
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                           is_transactional=True, is_control=True)
    builder.append(timestamp_ms, _KEY.pack(CURRENT_VERSION, int(control_type)),
                   _VALUE.pack(CURRENT_VERSION, coordinator_epoch))
    return builder.build()


def marker_of(batch: bytes | bytearray | memoryview) -> tuple[ControlType, int]:
    """``(type, coordinator_epoch)`` of the control batch at the start of ``batch``."""
    header = read_header(batch)
    if not header.is_control:
        raise ProtocolError(ErrorCode.CORRUPT_MESSAGE, f"batch at offset {header.base_offset} is not a control batch")
    cols = decode_record_columns(batch, verify_crc=False)
    if len(cols.keys) != 1 or cols.keys[0] is None or len(cols.keys[0]) != _KEY.size:
        raise ProtocolError(ErrorCode.CORRUPT_MESSAGE,
                            f"control batch at offset {header.base_offset} does not hold one 4-byte marker key")
    _, kind = _KEY.unpack(cols.keys[0])
    try:
        control_type = ControlType(kind)
    except ValueError:
        raise ProtocolError(ErrorCode.CORRUPT_MESSAGE,
                            f"control batch at offset {header.base_offset} has unknown type {kind}") from None
    value = cols.values[0]
    epoch = _VALUE.unpack(value)[1] if value is not None and len(value) == _VALUE.size else -1
    return control_type, epoch
