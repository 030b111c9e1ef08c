"""The share-partition state machine: acquire, acknowledge, lock expiry, dead letters."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mq.coordinator.share_partition import (
    REASON_EXHAUSTED,
    REASON_REJECTED,
    AckType,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from mq.core.errors import ErrorCode

CONFIG = SharePartitionConfig(record_lock_duration_ms=1000, delivery_attempt_limit=3, max_record_locks=50)


def fresh(start: int = 0) -> SharePartition:
    sp = SharePartition(start, CONFIG)
    sp.keep_transitions = True
    return sp


def test_acquire_new_records_locks_them_for_the_member():
    sp = fresh()
    got = sp.acquire("a", max_records=5, new_batches=[(0, 9)], scanned_to=10, now_ms=0)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(0, 4, 1)]
    assert sp.end_offset == 5 and sp.start_offset == 0
    assert sp.held_by("a") == [0, 1, 2, 3, 4]
    other = sp.acquire("b", max_records=10, new_batches=[(0, 9)], scanned_to=10, now_ms=0)
    assert [(a.first_offset, a.last_offset) for a in other] == [(5, 9)]


def test_accept_moves_the_start_offset():
    sp = fresh()
    sp.acquire("a", max_records=3, new_batches=[(0, 2)], scanned_to=3, now_ms=0)
    assert sp.acknowledge("a", 1, 2, AckType.ACCEPT) == ErrorCode.NONE
    assert sp.start_offset == 0  # 0 still held
    assert sp.acknowledge("a", 0, 0, AckType.ACCEPT) == ErrorCode.NONE
    assert sp.start_offset == 3 and not sp.records


def test_ack_of_a_record_not_held_is_invalid_record_state_and_changes_nothing():
    sp = fresh()
    sp.acquire("a", max_records=3, new_batches=[(0, 2)], scanned_to=3, now_ms=0)
    before = sp.snapshot()
    assert sp.acknowledge("b", 0, 0, AckType.ACCEPT) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", 2, 7, AckType.ACCEPT) == ErrorCode.INVALID_RECORD_STATE  # 3..7 never handed out
    assert sp.snapshot() == before
    assert sp.acknowledge("a", 0, 0, AckType.ACCEPT) == ErrorCode.NONE
    assert sp.acknowledge("a", 0, 0, AckType.ACCEPT) == ErrorCode.INVALID_RECORD_STATE  # twice


def test_lock_expiry_releases_and_redelivery_counts():
    sp = fresh()
    sp.acquire("a", max_records=1, new_batches=[(0, 0)], scanned_to=1, now_ms=0)
    assert sp.expire_locks(999) == []
    assert sp.expire_locks(1000) == [0]
    again = sp.acquire("b", max_records=1, new_batches=[], scanned_to=1, now_ms=1000)
    assert [(a.first_offset, a.delivery_count) for a in again] == [(0, 2)]
    assert sp.acknowledge("a", 0, 0, AckType.ACCEPT) == ErrorCode.INVALID_RECORD_STATE  # the old owner


def test_delivery_limit_turns_the_record_into_a_dead_letter_then_archived():
    sp = fresh()
    for attempt in range(1, 4):
        got = sp.acquire("a", max_records=1, new_batches=[(0, 0)], scanned_to=1, now_ms=0)
        assert got[0].delivery_count == attempt and not got[0].dead_letter_reason
        sp.acknowledge("a", 0, 0, AckType.RELEASE)
    dead = sp.acquire("b", max_records=1, new_batches=[], scanned_to=1, now_ms=0)
    assert dead[0].dead_letter_reason == REASON_EXHAUSTED and dead[0].delivery_count == 3
    sp.expire_locks(5000)  # the DLQ writer died: offered again, not counted
    dead = sp.acquire("c", max_records=1, new_batches=[], scanned_to=1, now_ms=5000)
    assert dead[0].delivery_count == 3
    assert sp.acknowledge("c", 0, 0, AckType.ACCEPT) == ErrorCode.NONE
    assert sp.take_transitions()[-1].state == RecordState.ARCHIVED and sp.start_offset == 1


def test_reject_dead_letters_at_once():
    sp = fresh()
    sp.acquire("a", max_records=2, new_batches=[(0, 1)], scanned_to=2, now_ms=0)
    sp.acknowledge("a", 0, 0, AckType.REJECT)
    got = sp.acquire("a", max_records=5, new_batches=[], scanned_to=2, now_ms=0)
    assert [(a.first_offset, a.dead_letter_reason) for a in got] == [(0, REASON_REJECTED)]


def test_gaps_and_control_offsets_are_skipped():
    sp = fresh(10)
    got = sp.acquire("a", max_records=10, new_batches=[(10, 11), (13, 14)], scanned_to=16, now_ms=0)
    assert [(a.first_offset, a.last_offset) for a in got] == [(10, 11), (13, 14)]
    assert sp.end_offset == 16
    sp.acknowledge("a", 10, 11, AckType.ACCEPT)
    sp.acknowledge("a", 13, 14, AckType.ACCEPT)
    assert sp.start_offset == 16


def test_max_record_locks_bounds_the_window():
    sp = SharePartition(0, SharePartitionConfig(max_record_locks=4))
    assert sum(a.last_offset - a.first_offset + 1
               for a in sp.acquire("a", max_records=10, new_batches=[(0, 9)], scanned_to=10, now_ms=0)) == 4
    assert sp.acquire("a", max_records=10, new_batches=[(4, 9)], scanned_to=10, now_ms=0) == []
    assert sp.end_offset == 4


def test_snapshot_restore_keeps_acks_and_releases_locks():
    sp = fresh()
    sp.acquire("a", max_records=6, new_batches=[(0, 5)], scanned_to=6, now_ms=0)
    sp.acknowledge("a", 1, 1, AckType.ACCEPT)
    sp.acknowledge("a", 3, 3, AckType.REJECT)
    back = SharePartition.restore(sp.snapshot(), CONFIG)
    assert back.start_offset == 0 and back.end_offset == 6
    assert back.records[1].state == RecordState.ACKNOWLEDGED
    assert back.records[0].state == RecordState.AVAILABLE and back.records[0].delivery_count == 1
    assert back.records[3].dead_letter_reason == REASON_REJECTED
    got = back.acquire("b", max_records=10, new_batches=[], scanned_to=6, now_ms=0)
    assert [(a.first_offset, a.last_offset, a.delivery_count, a.dead_letter_reason) for a in got] == [
        (0, 0, 2, ""), (2, 2, 2, ""), (3, 3, 1, REASON_REJECTED), (4, 5, 2, "")]


def test_retention_moves_the_start_and_archives_what_was_deleted():
    sp = fresh()
    sp.acquire("a", max_records=4, new_batches=[(0, 3)], scanned_to=4, now_ms=0)
    sp.move_start_to(2)
    assert sp.start_offset == 2 and sorted(sp.records) == [2, 3]
    assert [t.offset for t in sp.take_transitions()] == [0, 1]


# ------------------------------------------------------------ properties

ACTIONS = st.lists(st.tuples(
    st.sampled_from(["fetch", "accept", "release", "reject", "gap", "expire", "crash", "restore", "bogus"]),
    st.integers(0, 2),  # member
    st.integers(1, 6)), min_size=1, max_size=80)


@settings(max_examples=300, deadline=None)
@given(ACTIONS, st.integers(1, 30))
def test_every_record_ends_accepted_or_archived_never_lost_with_exact_delivery_counts(actions, total):
    """A model: every offset below the log end is, at the end, ACKNOWLEDGED (a member
    accepted it) or ARCHIVED (dead-lettered or gap); delivery counts equal the number
    of times the record was handed out for processing; an ack not held changes nothing."""
    config = SharePartitionConfig(record_lock_duration_ms=10, delivery_attempt_limit=3, max_record_locks=8)
    sp = SharePartition(0, config)
    sp.keep_transitions = True
    held: dict[str, set[int]] = {"m0": set(), "m1": set(), "m2": set()}
    deliveries: dict[int, int] = {}
    final: dict[int, RecordState] = {}
    now = 0

    def step(kind: str, member: str, n: int) -> None:
        nonlocal sp, now
        if kind == "fetch":
            for a in sp.acquire(member, max_records=n, new_batches=[(0, total - 1)], scanned_to=total, now_ms=now):
                for o in range(a.first_offset, a.last_offset + 1):
                    held[member].add(o)
                    if not a.dead_letter_reason:
                        deliveries[o] = deliveries.get(o, 0) + 1
                    assert a.delivery_count == deliveries[o]
        elif kind in ("accept", "release", "reject", "gap"):
            mine = sorted(held[member])[:n]
            for o in mine:
                ack = {"accept": AckType.ACCEPT, "release": AckType.RELEASE, "reject": AckType.REJECT,
                       "gap": AckType.GAP}[kind]
                assert sp.acknowledge(member, o, o, ack) == ErrorCode.NONE
                held[member].discard(o)
        elif kind == "expire":
            now += 10
            for o in sp.expire_locks(now):
                for h in held.values():
                    h.discard(o)
        elif kind == "crash":
            sp.release_member(member)
            held[member].clear()
        elif kind == "restore":
            sp = SharePartition.restore(sp.snapshot(), config)
            sp.keep_transitions = True
            for h in held.values():
                h.clear()
        else:
            before = sp.snapshot()
            assert sp.acknowledge(member, total + 5, total + 5, AckType.ACCEPT) == ErrorCode.INVALID_RECORD_STATE
            assert sp.snapshot() == before
        for t in sp.take_transitions():
            assert t.offset not in final, "a record finished twice"
            final[t.offset] = t.state
            if t.state == RecordState.ARCHIVED and t.dead_letter_reason == REASON_EXHAUSTED:
                assert t.delivery_count == config.delivery_attempt_limit

    for kind, m, n in actions:
        step(kind, f"m{m}", n)
    # drain: one member accepts whatever it gets until nothing is left
    for _ in range(10 * total + 10):
        if sp.start_offset >= total:
            break
        step("expire", "m0", 0)
        step("fetch", "m0", 8)
        step("accept", "m0", 8)
    assert sp.start_offset == total and not sp.records
    assert sorted(final) == list(range(total)), "every record finished exactly once"
    for o, state in final.items():
        assert state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        assert deliveries.get(o, 0) <= config.delivery_attempt_limit
