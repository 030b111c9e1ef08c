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
    """The stored batches the plan may look up: as ``Log.read``, the first one holding
    an offset or after it."""

    def __init__(self, *batches: bytes, start: int = 0, end: int | None = None) -> None:
        self.headers = sorted((read_header(b) for b in batches), key=lambda h: h.base_offset)
        self.start = start
        self.end = max((h.next_offset for h in self.headers), default=start) if end is None else end
        self.lookups: list[int] = []

    def stored(self, offset: int) -> BatchHeader | None:
        assert self.start <= offset < self.end, f"lookup at {offset} outside [{self.start}, {self.end})"
        self.lookups.append(offset)
        return next((h for h in self.headers if h.last_offset >= offset), None)

    def plan(self, records: bytes, *, start_offset: int = -1, fetch_offset: int = -1,
             max_message_bytes: int = 1 << 20) -> MirrorPlan:
        return plan_append(records, log_start_offset=self.start, log_end_offset=self.end,
                           start_offset=start_offset, max_message_bytes=max_message_bytes,
                           stored_batch=self.stored, fetch_offset=fetch_offset)


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


# ---------------------------------------------------------------- holes (fetch_offset)
# A compacted source: the cleaner removed whole batches, so 3-9, 13-19 and 23-29 hold
# no record there. A fetch from offset X returns the source's batches from X on.

HOLEY = (batch(0), batch(10), batch(20))


def test_holes_are_appended_with_fetch_offset_at_the_log_end():
    log = Log(batch(0))  # ends at 3
    plan = log.plan(batch(10) + batch(20) + batch(30, 2), fetch_offset=3)
    assert plan == MirrorPlan(duplicates=0, appended=3, append_from=0, restart_at=None, end_offset=32)
    # a fetch from the start of an empty log whose first batch was compacted away
    assert Log().plan(batch(5), fetch_offset=0) == MirrorPlan(0, 1, 0, None, 8)


def test_holes_are_refused_without_fetch_offset():
    log = Log(batch(0))
    assert "send fetch_offset" in refused(log, batch(3) + batch(10), ErrorCode.INVALID_RECORD)
    message = refused(log, batch(10), ErrorCode.MIRROR_OFFSET_GAP)
    assert "offsets 3-9 are missing" in message and "fetch_offset=3" in message


def test_fetch_offset_past_the_log_end_is_a_gap():
    log = Log(batch(0))
    message = refused(log, batch(10), ErrorCode.MIRROR_OFFSET_GAP, fetch_offset=5)
    assert "fetched from offset 5" in message and "offsets 3-4 were never fetched" in message
    assert "start_offset=5" in message
    # a start before the fetch offset would claim offsets the fetch never covered
    assert "at or after fetch_offset=5" in refused(log, batch(10), ErrorCode.MIRROR_OFFSET_GAP,
                                                   fetch_offset=5, start_offset=4)


def test_start_offset_restarts_at_the_fetch_offset_or_the_first_batch():
    log = Log(batch(0))
    # retention removed 3-4 at the source (log start 5, what the mirror fetched from);
    # compaction removed 5-9: the log restarts at 5, the first batch at 10 leaves a hole
    assert log.plan(batch(10) + batch(20), fetch_offset=5, start_offset=5) == MirrorPlan(0, 2, 0, 5, 23)
    assert log.plan(batch(10) + batch(20), fetch_offset=5, start_offset=10) == MirrorPlan(0, 2, 0, 10, 23)
    # the source's log start fell inside a batch: the restart is at that batch
    assert log.plan(batch(10), fetch_offset=11, start_offset=11) == MirrorPlan(0, 1, 0, 10, 13)
    # never at or below the log end
    refused(Log(batch(0), batch(3)), batch(5), ErrorCode.MIRROR_OFFSET_GAP, fetch_offset=7, start_offset=7)


def test_a_resent_request_with_holes_is_all_duplicates():
    log = Log(*HOLEY)  # ends at 23
    resent = b"".join(HOLEY)
    assert log.plan(resent, fetch_offset=0) == MirrorPlan(3, 0, len(resent), None, 23)
    # resent and longer (the source grew, with a hole after the log end)
    plan = log.plan(resent + batch(40), fetch_offset=0)
    assert (plan.duplicates, plan.appended, plan.append_from, plan.end_offset) == (3, 1, len(resent), 43)
    # fetched from inside a hole, or from the middle of a batch
    assert log.plan(batch(10) + batch(20), fetch_offset=4).duplicates == 2
    assert log.plan(batch(10) + batch(20) + batch(30), fetch_offset=11).duplicates == 2
    # a fetch from below the log end returning only new batches: the target holds nothing in between
    restarted = Log(start=23)  # empty, restarted at 23 (start_offset)
    assert restarted.plan(batch(30), fetch_offset=20) == MirrorPlan(0, 1, 0, None, 33)
    assert Log(start=15, end=23).plan(batch(30), fetch_offset=20) == MirrorPlan(0, 1, 0, None, 33)


def test_a_stored_batch_in_a_source_hole_is_diverged():
    log = Log(*HOLEY)
    # the source has nothing at 10-12 any more (compacted after the first copy)
    message = refused(log, batch(0) + batch(20), ErrorCode.MIRROR_DIVERGED, fetch_offset=0)
    assert "holds batch 10-12 where the source has no record" in message and "3-19" in message
    # the source's batches from 0 are all new but the target holds 0-2: diverged
    message = refused(log, batch(30), ErrorCode.MIRROR_DIVERGED, fetch_offset=0)
    assert "no record at offsets 0-29" in message and "holds batch 0-2" in message
    # a different batch where the source has one
    refused(log, batch(0) + batch(10, tag=b"other"), ErrorCode.MIRROR_DIVERGED, fetch_offset=0)
    # a batch straddling the log end
    refused(log, batch(20, 5), ErrorCode.MIRROR_DIVERGED, fetch_offset=20)


def test_holes_keep_the_order_and_the_fetch_offset_rules():
    log = Log(batch(0))
    message = refused(log, batch(10) + batch(11), ErrorCode.INVALID_RECORD, fetch_offset=3)
    assert "offset order" in message
    refused(log, batch(10) + batch(10), ErrorCode.INVALID_RECORD, fetch_offset=3)
    assert "ends before it" in refused(log, batch(0), ErrorCode.INVALID_RECORD, fetch_offset=3)


def test_lookups_stay_inside_the_log():
    log = Log(batch(10), batch(20), start=10)  # the log start moved to 10 (retention)
    assert log.plan(batch(10) + batch(20), fetch_offset=2).duplicates == 2
    assert log.lookups == [10, 13]
    refused(log, batch(0) + batch(10), ErrorCode.OFFSET_OUT_OF_RANGE, fetch_offset=0)
