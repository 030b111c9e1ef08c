"""Compaction of a log holding transactions: markers are kept (they are not keyed
records), the aborted-transaction index of merged segments is carried over to the
cleaned segment, and a read_committed reader still sees only committed values with the
LSO where it was; reopening finds the same state."""

from __future__ import annotations

from cleaner_helpers import append, open_compacted
from storage_helpers import NOW

from mq.protocol.batch_format import iter_batches
from mq.protocol.control_batch import ControlType, build_marker
from mq.protocol.record_batch import build_batch
from mq.sim.txn_copier_scenario import read_committed
from mq.storage import Log, MemoryFileIO
from mq.storage.cleaner import clean_now


def _txn(log: Log, pid: int, seq: int, epoch: int, records: list[tuple[bytes, bytes]], *, commit: bool) -> None:
    batch = build_batch([(k, v, (), NOW) for k, v in records], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    log.append_as_leader(batch, leader_epoch=1, now_ms=NOW)
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    log.append_markers_as_leader(build_marker(pid, epoch + 1, kind, coordinator_epoch=0, timestamp_ms=NOW),
                                 leader_epoch=1, now_ms=NOW)


def _markers(log: Log) -> int:
    count, offset = 0, log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=1 << 20).records
        headers = [h for _, h in iter_batches(data)]
        count += sum(h.is_control for h in headers)
        offset = headers[-1].next_offset
    return count


def test_compaction_keeps_markers_and_the_aborted_index() -> None:
    fs = MemoryFileIO()
    log = open_compacted(fs)
    epoch = 0
    for round_ in range(6):
        _txn(log, 7, 0, epoch, [(b"k%d" % (i % 3), b"c%d-%d" % (round_, i)) for i in range(3)], commit=True)
        epoch += 1
        _txn(log, 7, 0, epoch, [(b"k%d" % (i % 3), b"a%d-%d" % (round_, i)) for i in range(3)], commit=False)
        epoch += 1
        append(log, (b"plain", b"p%d" % round_))
    log.roll(NOW)
    before_markers = _markers(log)
    before_aborted = log.aborted_transactions(0, log.log_end_offset)
    assert len(log.segments) > 3 and len(before_aborted) == 6
    clean_now(log, high_watermark=log.log_end_offset, now_ms=NOW)
    assert _markers(log) == before_markers == 12
    assert log.aborted_transactions(0, log.log_end_offset) == before_aborted
    assert log.last_stable_offset(log.log_end_offset) == log.log_end_offset
    seen = read_committed(log)
    assert not any(v.startswith(b"a") for v in seen)  # aborted values stay hidden
    assert b"c5-2" in seen and b"p5" in seen  # the latest committed values survive
    log.close()
    again = Log.open(fs, log.directory, log.config, now_ms=NOW)
    assert again.aborted_transactions(0, again.log_end_offset) == before_aborted
    assert read_committed(again) == seen
