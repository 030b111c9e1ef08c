"""The producer-state core: sequence checks, duplicates, epochs, expiry, snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.core.errors import ErrorCode, MqError
from mq.protocol.batch_format import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader
from mq.storage.fileio import MemoryFileIO
from mq.storage.producer_snapshot import (
    SnapshotError,
    decode_snapshot,
    delete_snapshots,
    encode_snapshot,
    latest_snapshot,
    snapshot_offsets,
    write_snapshot,
)
from mq.storage.producer_state import (
    DuplicateBatch,
    ProducerStateManager,
    increment_sequence,
)


def hdr(offset: int, pid: int, epoch: int, seq: int, count: int = 1, *, ts: int = 1000,
        attributes: int = 0) -> BatchHeader:
    return BatchHeader(offset, 100, 0, 2, 0, attributes, count - 1, ts, ts, pid, epoch, seq, count)


def appended(state: ProducerStateManager, *headers: BatchHeader) -> None:
    assert state.check_leader_append(headers) is None
    for h in headers:
        state.update(h)


def test_in_sequence_batches_append_and_are_remembered() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, 7, 0, 0, 3), hdr(3, 7, 0, 3, 2))
    entry = state.entry(7)
    assert entry is not None and entry.last_seq == 4 and entry.last_offset == 4
    assert state.map_end_offset == 5


def test_duplicate_of_any_of_the_last_five_is_answered_with_its_original_offsets() -> None:
    state = ProducerStateManager()
    offset = 0
    for seq in range(0, 14, 2):  # 7 batches of 2: the last 5 are seqs 4..13
        appended(state, hdr(offset, 1, 0, seq, 2))
        offset += 2 + 10  # other producers' records in between
    assert state.check_leader_append([hdr(999, 1, 0, 4, 2)]) == DuplicateBatch(24, 25, 1000)
    assert state.check_leader_append([hdr(999, 1, 0, 12, 2)]) == DuplicateBatch(72, 73, 1000)
    # Older than the window: not found, and not in sequence either.
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(999, 1, 0, 2, 2)])
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_several_duplicates_in_one_request_answer_from_the_first() -> None:
    state = ProducerStateManager()
    appended(state, hdr(10, 1, 0, 0, 2), hdr(12, 1, 0, 2, 3))
    assert state.check_leader_append([hdr(0, 1, 0, 0, 2), hdr(2, 1, 0, 2, 3)]) == DuplicateBatch(10, 14, 1000)


def test_duplicates_mixed_with_new_batches_are_refused() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, 1, 0, 0, 2))
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(50, 1, 0, 0, 2), hdr(52, 1, 0, 2, 1)])
    assert err.value.code == ErrorCode.INVALID_REQUEST
    assert "resend" in err.value.message


def test_sequence_gap_is_out_of_order() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, 1, 0, 0, 5))
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(5, 1, 0, 6)])
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "expected 5" in err.value.message


def test_gap_inside_one_request_is_out_of_order() -> None:
    state = ProducerStateManager()
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(0, 1, 0, 0, 2), hdr(2, 1, 0, 3, 1)])
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.entry(1) is None  # a check changes nothing


def test_stale_epoch_is_refused() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, 1, 3, 0, 1))
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(1, 1, 2, 1)])
    assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_zero() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, 1, 0, 0, 4))
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(4, 1, 1, 4)])
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    appended(state, hdr(4, 1, 1, 0, 2))
    entry = state.entry(1)
    assert entry is not None and entry.producer_epoch == 1 and [b.first_seq for b in entry.batches] == [0]


def test_unknown_producer_with_non_zero_sequence() -> None:
    state = ProducerStateManager()
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(0, 9, 0, 42)])
    assert err.value.code == ErrorCode.UNKNOWN_PRODUCER_ID
    appended(state, hdr(0, 9, 0, 0))


def test_batches_without_producer_id_are_not_checked() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, -1, -1, -1, 10))
    assert len(state) == 0 and state.map_end_offset == 10


def test_idempotent_batch_without_sequence_is_invalid() -> None:
    with pytest.raises(MqError) as err:
        ProducerStateManager().check_leader_append([hdr(0, 5, 0, -1)])
    assert err.value.code == ErrorCode.INVALID_RECORD


def test_sequence_wraps_to_zero() -> None:
    top = 2**31 - 1
    assert increment_sequence(top, 1) == 0
    state = ProducerStateManager()
    state.update(hdr(0, 1, 0, top - 1, 2))
    appended(state, hdr(2, 1, 0, 0, 1))
    entry = state.entry(1)
    assert entry is not None and entry.last_seq == 0


def test_expiry_drops_silent_producers_but_not_open_transactions() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, 1, 0, 0, ts=1_000), hdr(1, 2, 0, 0, ts=50_000))
    state.update(hdr(2, 3, 0, 0, ts=1_000, attributes=TRANSACTIONAL_BIT))
    assert state.remove_expired(now_ms=60_000, expiration_ms=20_000) == [1]
    assert state.entry(1) is None and state.entry(2) is not None and state.entry(3) is not None
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(3, 1, 0, 1)])
    assert err.value.code == ErrorCode.UNKNOWN_PRODUCER_ID


def test_transaction_hook_first_unstable_offset() -> None:
    state = ProducerStateManager()
    state.update(hdr(5, 1, 0, 0, 2, attributes=TRANSACTIONAL_BIT))
    state.update(hdr(7, 1, 0, 2, 1, attributes=TRANSACTIONAL_BIT))
    state.update(hdr(8, 2, 0, 0, 1, attributes=TRANSACTIONAL_BIT))
    assert state.first_unstable_offset() == 5
    done = state.update(hdr(9, 1, 0, -1, 1, attributes=TRANSACTIONAL_BIT | CONTROL_BIT))
    assert done is not None and (done.producer_id, done.first_offset, done.last_offset) == (1, 5, 9)
    assert state.first_unstable_offset() == 8
    entry = state.entry(1)
    assert entry is not None and entry.last_seq == 2  # a marker keeps the sequence window


def test_truncate_head_forgets_batches_below_the_log_start() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, 1, 0, 0), hdr(1, 1, 0, 1), hdr(2, 1, 0, 2))
    state.truncate_head(2)
    entry = state.entry(1)
    assert entry is not None and [b.first_offset for b in entry.batches] == [2]
    with pytest.raises(MqError) as err:  # no longer a known duplicate; the sequence still continues at 3
        state.check_leader_append([hdr(9, 1, 0, 0)])
    assert err.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    appended(state, hdr(3, 1, 0, 3))


def test_snapshot_round_trip_and_damage() -> None:
    state = ProducerStateManager()
    for i in range(7):
        state.update(hdr(i * 3, 1, 2, i * 3, 3))
    state.update(hdr(40, 5, 0, 0, 1, attributes=TRANSACTIONAL_BIT))
    data = encode_snapshot(state.entries)
    assert decode_snapshot(data) == state.entries
    flipped = bytearray(data)
    flipped[-1] ^= 1
    with pytest.raises(SnapshotError):
        decode_snapshot(bytes(flipped))
    with pytest.raises(SnapshotError):
        decode_snapshot(data[:-3])


def test_snapshot_files_latest_and_delete() -> None:
    fs = MemoryFileIO()
    fs.makedirs("/d")
    state = ProducerStateManager()
    state.update(hdr(0, 1, 0, 0))
    write_snapshot(fs, "/d", 1, state.entries)
    state.update(hdr(1, 2, 0, 0))
    write_snapshot(fs, "/d", 2, state.entries)
    write_snapshot(fs, "/d", 9, state.entries)
    assert snapshot_offsets(fs, "/d") == [1, 2, 9]
    found = latest_snapshot(fs, "/d", at_most=5)
    assert found is not None and found.offset == 2 and len(found.entries) == 2
    delete_snapshots(fs, "/d", above=5)
    assert snapshot_offsets(fs, "/d") == [1, 2]
    delete_snapshots(fs, "/d", below=5)
    assert snapshot_offsets(fs, "/d") == [2]  # the newest below the log start stays


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4), st.booleans()), min_size=1, max_size=40))
def test_model_retries_never_append_twice(steps: list[tuple[int, int, bool]]) -> None:
    """A producer per id sends batches in order; some are resent (a lost answer).
    Whatever the interleaving, each batch is appended once and a resend within the
    window is answered with the original offsets."""
    state = ProducerStateManager()
    next_seq: dict[int, int] = {}
    sent: dict[int, list[tuple[int, int, int]]] = {}  # pid -> (seq, count, offset)
    log_end = 0
    for pid, count, resend in steps:
        if resend and sent.get(pid):
            seq, n, offset = sent[pid][-1]
            found = state.check_leader_append([hdr(log_end, pid, 0, seq, n)])
            assert found is not None and found.first_offset == offset
            continue
        seq = next_seq.get(pid, 0)
        h = hdr(log_end, pid, 0, seq, count)
        assert state.check_leader_append([h]) is None
        state.update(h)
        sent.setdefault(pid, []).append((seq, count, log_end))
        next_seq[pid] = seq + count
        log_end += count
    assert state.map_end_offset == log_end


def test_last_sequence_comes_from_the_offset_delta_as_after_compaction() -> None:
    state = ProducerStateManager()
    compacted = BatchHeader(0, 100, 0, 2, 0, 0, 4, 1000, 1000, 3, 0, 0, 2)  # 5 offsets, 2 records left
    state.update(compacted)
    entry = state.entry(3)
    assert entry is not None and entry.last_seq == 4
    appended(state, hdr(5, 3, 0, 5))


def test_transaction_markers_need_a_current_epoch_not_a_sequence() -> None:
    state = ProducerStateManager()
    appended(state, hdr(0, 1, 2, 0, 2, attributes=TRANSACTIONAL_BIT))
    marker = hdr(2, 1, 2, -1, 1, attributes=TRANSACTIONAL_BIT | CONTROL_BIT)
    assert state.check_leader_append([marker]) is None
    with pytest.raises(MqError) as err:
        state.check_leader_append([hdr(2, 1, 1, -1, 1, attributes=TRANSACTIONAL_BIT | CONTROL_BIT)])
    assert err.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    state.update(marker)
    assert state.first_unstable_offset() is None
