"""The pure decision behind MirrorAppend: append, duplicate, diverged, gap, restart
higher, and every malformed request refused before anything is written."""

from __future__ import annotations

import struct

import pytest

from mq.broker.mirror_plan import MirrorPlan, plan_append
from mq.core.errors import ErrorCode, MqError
from mq.protocol.batch_format import BatchHeader, read_header
from mq.protocol.record_batch import build_batch

T0 = 1_700_000_000_000


def batch(base: int, count: int = 3, *, tag: bytes = b"v") -> bytes:
    return build_batch([(None, tag + b"%d" % (base + i), (), T0 + base + i) for i in range(count)],
                       base_offset=base, partition_leader_epoch=7)


class Log:
    """The stored batches the plan may look up, by base offset."""

    def __init__(self, *batches: bytes, start: int = 0) -> None:
        self.headers = {read_header(b).base_offset: read_header(b) for b in batches}
        self.start = start
        self.end = max((h.next_offset for h in self.headers.values()), default=start)

    def stored(self, base: int) -> BatchHeader | None:
        return self.headers.get(base)

    def plan(self, records: bytes, *, start_offset: int = -1, max_message_bytes: int = 1 << 20) -> MirrorPlan:
        return plan_append(records, log_start_offset=self.start, log_end_offset=self.end,
                           start_offset=start_offset, max_message_bytes=max_message_bytes,
                           stored_batch=self.stored)


def refused(log: Log, records: bytes, code: ErrorCode, **kwargs) -> str:
    with pytest.raises(MqError) as info:
        log.plan(records, **kwargs)
    assert info.value.code == code, info.value
    return info.value.message


def test_batches_at_the_log_end_are_appended():
    plan = Log(batch(0)).plan(batch(3) + batch(6, 2))
    assert plan == MirrorPlan(duplicates=0, appended=2, append_from=0, restart_at=None, end_offset=8)


def test_a_resent_batch_is_a_duplicate_and_what_follows_is_appended():
    first, second = batch(0), batch(3)
    plan = Log(first, second).plan(second + batch(6))
    assert (plan.duplicates, plan.appended, plan.append_from, plan.end_offset) == (1, 1, len(second), 9)
    only_dups = Log(first, second).plan(first + second)
    assert (only_dups.duplicates, only_dups.appended, only_dups.append_from) == (2, 0, len(first + second))


def test_a_different_batch_at_stored_offsets_is_diverged():
    log = Log(batch(0), batch(3))
    message = refused(log, batch(3, tag=b"other"), ErrorCode.MIRROR_DIVERGED)
    assert "3-5" in message and "differs" in message and "MirrorTruncate" in message
    # batch boundaries that differ (a batch starting inside a stored one) diverge too
    assert "no stored batch starts there" in refused(log, batch(1, 2), ErrorCode.MIRROR_DIVERGED)
    # a batch straddling the log end cannot be a duplicate
    refused(log, batch(3, 5), ErrorCode.MIRROR_DIVERGED)


def test_a_batch_past_the_log_end_is_a_gap_unless_start_offset_names_it():
    log = Log(batch(0))
    message = refused(log, batch(10), ErrorCode.MIRROR_OFFSET_GAP)
    assert "offsets 3-9 are missing" in message and "start_offset=10" in message
    assert log.plan(batch(10), start_offset=10).restart_at == 10
    assert "must equal" in refused(log, batch(10), ErrorCode.MIRROR_OFFSET_GAP, start_offset=8)


def test_start_offset_is_ignored_when_the_batch_continues_the_log():
    assert Log(batch(0)).plan(batch(3), start_offset=10).restart_at is None


def test_an_empty_request_only_moves_the_start():
    log = Log(batch(0))
    assert log.plan(b"", start_offset=50) == MirrorPlan(0, 0, 0, 50, -1)
    assert log.plan(b"", start_offset=2).restart_at is None  # never backwards
    assert "no record batch" in refused(log, b"", ErrorCode.INVALID_RECORD)


def test_below_the_log_start_nothing_can_be_compared():
    log = Log(batch(3), start=3)
    message = refused(log, batch(0), ErrorCode.OFFSET_OUT_OF_RANGE)
    assert "below the log start 3" in message and "resume from its log end 6" in message


@pytest.mark.parametrize("records", [
    b"\x00" * 10,  # shorter than a header
    batch(3)[:-1],  # a torn batch
    batch(3) + b"\x01\x02",  # trailing garbage
    bytes(12) + struct.pack(">i", 100) + bytes(100),  # magic 0
], ids=["short", "torn", "trailing", "bad-magic"])
def test_malformed_bytes_are_corrupt_message(records):
    refused(Log(batch(0)), records, ErrorCode.CORRUPT_MESSAGE)


def test_a_wrong_crc_is_corrupt_message():
    data = bytearray(batch(3))
    data[-1] ^= 0xFF
    assert "CRC mismatch" in refused(Log(batch(0)), bytes(data), ErrorCode.CORRUPT_MESSAGE)


def test_batches_of_one_request_must_be_contiguous():
    message = refused(Log(batch(0)), batch(3) + batch(7), ErrorCode.INVALID_RECORD)
    assert "contiguous" in message
    refused(Log(batch(0)), batch(3) + batch(3), ErrorCode.INVALID_RECORD)


def test_an_oversized_batch_is_record_too_large():
    big = batch(3)
    assert "max.message.bytes=64" in refused(Log(batch(0)), big, ErrorCode.RECORD_TOO_LARGE,
                                              max_message_bytes=64)


def test_a_negative_base_offset_is_invalid():
    refused(Log(), build_batch([(None, b"x", (), T0)], base_offset=-5), ErrorCode.INVALID_RECORD)
