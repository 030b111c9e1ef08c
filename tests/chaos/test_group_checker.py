"""The group checker on hand-written histories.

A clean history (three members, a rebalance with a commit on revoke, a hand-off that
re-reads after the last acknowledged commit) must pass; each mutation seeds exactly one
anomaly (a lost record, a double owner, a commit regression, an unexplained re-read, a
wrong value) and must be counted as that anomaly and nothing else.
"""

from __future__ import annotations

import dataclasses

import pytest

from mq.core.types import TopicPartition

from .harness.group_checker import (
    ANOMALIES,
    Assigned,
    Committed,
    Consumed,
    Revoked,
    Started,
    acked_records,
    check_group,
    check_group_file,
    events_from_dicts,
    read_group_history,
    write_group_history,
)
from .harness.history import Op

T = "clicks"
P0, P1, P2 = (TopicPartition(T, p) for p in range(3))
RECORDS = 6  # per partition


def value(tp: TopicPartition, offset: int) -> str:
    return f"{tp.partition}-{offset}"


def produced(partitions=(P0, P1, P2), n=RECORDS):
    return [(tp, off, value(tp, off)) for tp in partitions for off in range(n)]


def consume(t, member, generation, tp, offsets):
    return [Consumed(t + i, member, generation, tp, off, value(tp, off)) for i, off in enumerate(offsets)]


def clean_history():
    """Generation 1: a owns p0, p1; b owns p2. Generation 2 (c joins, eager): a keeps
    p0, p1 moves to c, b keeps p2. a committed p1 at 3 before revoking, so c re-reads
    nothing; b's commit of p2 at 4 was not acknowledged, so b re-reads 2..3 from the
    acknowledged commit 2 after its re-assignment (explained duplicates)."""
    ev = [Assigned(0, "a", 1, (P0, P1)), Assigned(0, "b", 1, (P2,))]
    ev += consume(10, "a", 1, P0, range(3)) + consume(10, "a", 1, P1, range(3))
    ev += consume(10, "b", 1, P2, range(4))
    ev += [Committed(20, "a", 1, P0, 3), Committed(20, "a", 1, P1, 3), Committed(20, "b", 1, P2, 2)]
    ev += [Revoked(30, "a", 1, (P0, P1)), Revoked(30, "b", 1, (P2,))]
    ev += [Assigned(40, "a", 2, (P0,)), Assigned(40, "b", 2, (P2,)), Assigned(40, "c", 2, (P1,))]
    ev += consume(50, "a", 2, P0, range(3, 6)) + consume(50, "c", 2, P1, range(3, 6))
    ev += consume(50, "b", 2, P2, range(2, 6))
    ev += [Committed(60, "a", 2, P0, 6), Committed(60, "c", 2, P1, 6), Committed(60, "b", 2, P2, 6)]
    return ev


def only(result, **expected):
    nonzero = {k: getattr(result, k) for k in ANOMALIES if getattr(result, k)}
    assert nonzero == expected, result.summary()


def test_clean_history_passes_with_explained_duplicates():
    result = check_group(clean_history(), produced())
    only(result, duplicates=2)
    assert result.explained_duplicates == 2 and result.unexplained_duplicates == 0
    result.assert_ok()
    with pytest.raises(AssertionError, match="duplicates=2"):
        result.assert_ok(allow_explained_duplicates=False)
    assert result.acked == 18 and result.consumed == 20 and result.distinct_consumed == 18
    assert result.commits == 6 and result.generations == 2
    assert "lost=0" in result.summary() and "explained_duplicates=2" in result.summary()


def test_seeded_lost_record_is_counted():
    ev = [e for e in clean_history() if not (isinstance(e, Consumed) and e.tp == P1 and e.offset == 4)]
    result = check_group(ev, produced())
    only(result, lost=1, duplicates=2)
    assert result.examples["lost"] == ("clicks-1@4 acked, never consumed, final commit 6",)
    with pytest.raises(AssertionError, match="lost=1"):
        result.assert_ok()


def test_unconsumed_tail_is_not_lost_but_still_fails():
    result = check_group(clean_history(), produced(n=RECORDS + 2))  # 2 more per partition
    only(result, unconsumed=6, duplicates=2)
    result.assert_ok(allow_unconsumed=True)
    with pytest.raises(AssertionError, match="unconsumed=6"):
        result.assert_ok()


def test_seeded_double_owner_is_counted():
    ev = clean_history() + [Assigned(45, "c", 2, (P0,))]  # p0 given to a and c in generation 2
    result = check_group(ev, produced())
    only(result, owners_conflicts=1, duplicates=2)
    assert result.examples["owners_conflicts"] == ("clicks-0 held by a, c in generation 2",)


def test_consuming_with_a_generation_counts_as_holding():
    # A member that consumes p2 in generation 2 without being assigned it: two holders.
    ev = clean_history() + [Consumed(70, "a", 2, P2, 5, value(P2, 5))]
    result = check_group(ev, produced())
    assert result.owners_conflicts == 1
    # A zombie still consuming with its old generation is not a holder of the new one:
    # a held p1 in generation 1, c holds it in generation 2.
    zombie = clean_history() + [Consumed(70, "a", 1, P1, 5, value(P1, 5))]
    assert check_group(zombie, produced()).owners_conflicts == 0


def test_seeded_commit_regression_is_counted():
    ev = clean_history() + [Committed(70, "c", 2, P1, 4)]  # after the final 6
    result = check_group(ev, produced())
    only(result, commit_regressions=1, duplicates=2)
    assert result.examples["commit_regressions"][0].startswith("clicks-1 committed 4 after 6")
    # Committed offsets equal to the previous one are not a regression.
    assert check_group(clean_history() + [Committed(70, "c", 2, P1, 6)], produced()).commit_regressions == 0


def test_reread_without_a_hand_off_is_unexplained():
    ev = clean_history() + consume(70, "a", 2, P0, [5])  # a reads p0@5 again, same ownership
    result = check_group(ev, produced())
    only(result, duplicates=3, unexplained_duplicates=1)
    assert "no hand-off since the previous read" in result.examples["unexplained_duplicates"][0]


def test_reread_below_the_acknowledged_commit_is_unexplained():
    # c was handed p1 after a's acknowledged commit at 3, yet starts at 2 (off by one).
    ev = clean_history()
    at = next(i for i, e in enumerate(ev) if isinstance(e, Consumed) and e.member == "c")
    ev = ev[:at] + consume(49, "c", 2, P1, [2]) + ev[at:]
    result = check_group(ev, produced())
    only(result, duplicates=3, unexplained_duplicates=1)
    assert "below the commit 3" in result.examples["unexplained_duplicates"][0]


def test_wrong_value_is_inconsistent():
    ev = clean_history()
    ev[2] = dataclasses.replace(ev[2], value="forged")
    result = check_group(ev, produced())
    only(result, inconsistent=1, duplicates=2)


def test_cooperative_hand_off_is_clean():
    """KIP-429: generation 2 withholds p1 (a still owns it), a revokes it; generation 3
    gives it to c. a keeps consuming p0 throughout without a new Assigned for it."""
    ev = [Assigned(0, "a", 1, (P0, P1))]
    ev += consume(10, "a", 1, P0, range(2)) + consume(10, "a", 1, P1, range(3))
    ev += [Revoked(20, "a", 2, (P1,)), Committed(20, "a", 2, P1, 3), Assigned(21, "a", 2, ()),
           Assigned(21, "c", 2, ())]
    ev += consume(30, "a", 2, P0, range(2, 4))
    ev += [Assigned(40, "c", 3, (P1,)), Assigned(40, "a", 3, ())]
    ev += consume(50, "c", 3, P1, range(3, 6)) + consume(50, "a", 3, P0, range(4, 6))
    ev += [Committed(60, "a", 3, P0, 6), Committed(60, "c", 3, P1, 6)]
    result = check_group(ev, produced(partitions=(P0, P1)))
    result.assert_ok(allow_explained_duplicates=False)
    # The bug the two phases prevent: generation 2 gives p1 to c while a keeps it (a
    # revokes nothing, so it still holds p1 when it records generation 2).
    bad = [e for e in ev if not isinstance(e, Revoked)]
    bad = [Assigned(21, "c", 2, (P1,)) if e == Assigned(21, "c", 2, ()) else e for e in bad]
    result = check_group(bad, produced(partitions=(P0, P1)))
    assert result.owners_conflicts == 2  # and a never revoked p1, so generation 3 too
    assert result.examples["owners_conflicts"] == ("clicks-1 held by a, c in generation 2",
                                                   "clicks-1 held by c, a in generation 3")


def test_a_restarted_slot_holds_nothing_until_assigned():
    # b is killed while holding p2 (no Revoked recorded) and restarts; generation 2 gives
    # it p0 only, and p2 to c. Without Started, the dead process's p2 would count as b's.
    ev = [Assigned(0, "b", 1, (P0, P2))] + consume(10, "b", 1, P2, range(2))
    later = [Assigned(40, "b", 2, (P0,)), Assigned(40, "c", 2, (P2,))]
    assert check_group(ev + later, produced()).owners_conflicts == 1
    assert check_group(ev + [Started(30, "b")] + later, produced()).owners_conflicts == 0


def test_events_sorted_by_time_so_process_logs_can_be_concatenated():
    ev = clean_history()
    by_member = sorted(ev, key=lambda e: e.member)  # one log per member, concatenated
    assert check_group(by_member, produced()) == check_group(ev, produced())


def test_file_round_trip_torn_line_and_producer_ops(tmp_path):
    events = [Started(0, "a"), *clean_history()]
    path = write_group_history(tmp_path / "group.jsonl", events)
    with open(path, "a") as f:
        f.write('{"event":"consumed","t":9')  # the writer died mid-line
    assert read_group_history(path) == events
    ops = [Op("invoke", "send", value(tp, off), None, None, 0, 0) for tp, off, _ in produced()]
    ops += [Op("ok", "send", value(tp, off), tp.partition, off, 1, 0) for tp, off, _ in produced()]
    ops.append(Op("fail", "send", "never", None, None, 2, 0))
    assert sorted(acked_records(ops, T)) == sorted(produced())
    result = check_group_file(path, ops, topic=T, seed=7)
    assert result.duplicates == 2 and result.seed == 7 and result.lost == 0
    with pytest.raises(ValueError):
        check_group_file(path, ops)


def test_large_history_is_fast():
    tps = [TopicPartition(T, p) for p in range(12)]
    ev = [Assigned(0, f"m{p % 3}", 1, (tp,)) for p, tp in enumerate(tps)]
    for p, tp in enumerate(tps):
        ev += consume(1, f"m{p % 3}", 1, tp, range(1_000))
        ev.append(Committed(10_000, f"m{p % 3}", 1, tp, 1_000))
    result = check_group(ev, produced(partitions=tps, n=1_000))
    result.assert_ok(allow_explained_duplicates=False)
    assert result.consumed == 12_000


def test_member_process_event_format():
    """The lines ``tests/chaos/group_member.py`` writes: extra fields ignored, ``lost``
    is a revocation, informational events dropped."""
    common = {"member": "s0", "incarnation": "s0.2", "member_id": "x-1"}
    lines = [
        {"event": "started", "t": 1, **common, "instance_id": "s0", "assignor": "range"},
        {"event": "assigned", "t": 2, **common, "generation": 3, "tps": [[T, 0]],
         "assignment": [[T, 0]]},
        {"event": "consumed", "t": 3, **common, "generation": 3, "tp": [T, 0], "offset": 0,
         "value": "0-0"},
        {"event": "committed", "t": 4, **common, "generation": 3, "tp": [T, 0], "offset": 1,
         "sent": 3},
        {"event": "commit_failed", "t": 5, **common, "generation": 3, "offsets": {}, "error": "x"},
        {"event": "lost", "t": 6, **common, "generation": 3, "tps": [[T, 0]]},
        {"event": "closed", "t": 7, **common},
    ]
    assert events_from_dicts(lines) == [
        Started(1, "s0"), Assigned(2, "s0", 3, (P0,)), Consumed(3, "s0", 3, P0, 0, "0-0"),
        Committed(4, "s0", 3, P0, 1), Revoked(6, "s0", 3, (P0,))]
    with pytest.raises(ValueError):
        events_from_dicts([{"event": "teleported", "t": 1, "member": "a", "generation": 1}])
