"""Offset syncs, translation and checkpoints, without a cluster. The properties run on
random mirror histories (source holes, records left out, restarts, idle time) against the
truth: where each source record really landed in the target."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.translated_failover import plan_partitions
from mirror.translation import (
    MALFORMED_SYNC,
    Checkpoint,
    OffsetSync,
    OffsetSyncEmitter,
    OffsetSyncStore,
    TranslationFormatError,
    checkpoints_topic,
    decode_checkpoint,
    decode_offset_sync,
    encode_checkpoint,
    encode_offset_sync,
    latest_checkpoints,
    offset_syncs_topic,
    plan_checkpoints,
    translate,
    translate_bounded,
)
from mq.core.types import TopicPartition

TP = TopicPartition("orders", 3)


# ---------------------------------------------------------------------------- emission


def test_names_of_the_internal_topics() -> None:
    assert offset_syncs_topic("east") == "mq-offset-syncs.east.internal"
    assert checkpoints_topic("east") == "east.checkpoints.internal"


def test_the_first_record_after_a_start_gets_a_sync_then_every_offset_lag_max() -> None:
    e = OffsetSyncEmitter(TP, offset_lag_max=10, interval_ms=1_000)
    syncs = e.on_written([(s, s + 500) for s in range(25)], now_ms=0)
    assert [(x.source_offset, x.target_offset, x.run) for x in syncs] == [(0, 500, 0), (10, 510, 10),
                                                                            (20, 520, 20)]
    assert e.tick(999) is None and e.next_deadline_ms() == 1_000
    idle = e.tick(1_000)  # the tail waited the interval: a sync at the last record
    assert idle == OffsetSync(TP, 24, 524, 24) and e.tick(5_000) is None
    e.reset()  # a restart: the next record is synced again, and its run starts over
    assert e.on_written([(30, 530)], now_ms=5_000) == [OffsetSync(TP, 30, 530, 0)]


def test_the_time_rule_fires_on_a_write_too_and_runs_stop_at_breaks() -> None:
    e = OffsetSyncEmitter(TP, offset_lag_max=100, interval_ms=50)
    assert len(e.on_written([(0, 0), (1, 1)], now_ms=0)) == 1
    # source offset 2 was left out, 3 landed at 2: the run starts again at 3
    assert e.on_written([(3, 2), (4, 3)], now_ms=60) == [OffsetSync(TP, 4, 3, 1)]
    with pytest.raises(ValueError, match="in order"):
        e.on_written([(4, 9)], now_ms=70)


# ---------------------------------------------------------------------------- histories


@dataclass
class History:
    written: list[tuple[int, int]]  # (source offset, target offset), in order
    syncs: list[OffsetSync]
    source_end: int
    target_end: int

    def truth(self, committed: int) -> int:
        """The target offset of the first copy of a source record at or after ``committed``."""
        i = bisect_left(self.written, committed, key=lambda w: w[0])
        return self.written[i][1] if i < len(self.written) else self.target_end

    def rereads(self, translated: int, committed: int) -> int:
        """Target records a group re-reads when it starts at ``translated`` instead of the
        record that stands for ``committed``."""
        return max(0, self.truth(committed) - translated)


@st.composite
def histories(draw, *, holes: bool = True, drops: bool = True, restarts: bool = True) -> History:
    n = draw(st.integers(1, 250))
    lag_max = draw(st.integers(1, 40))
    e = OffsetSyncEmitter(TP, offset_lag_max=lag_max, interval_ms=draw(st.integers(0, 300)))
    source = draw(st.integers(0, 50))
    target = draw(st.integers(0, 50))
    now = 0
    written: list[tuple[int, int]] = []
    syncs: list[OffsetSync] = []
    batch: list[tuple[int, int]] = []
    for _ in range(n):
        kind = draw(st.sampled_from(["copy"] * 8 + ["hole"] * holes + ["drop"] * drops + ["restart"] * restarts
                                    + ["flush", "idle"]))
        if kind == "hole":
            source += draw(st.integers(1, 5))  # offsets compaction removed in the source
            continue
        if kind == "drop":
            source += 1  # a record the flow left out (forwarding rule, duplicate)
            continue
        if kind in ("flush", "restart", "idle"):
            syncs += e.on_written(batch, now)
            batch = []
            if kind == "restart":
                e.reset()
            if kind == "idle":
                now += draw(st.integers(0, 500))
                sync = e.tick(now)
                syncs += [sync] if sync else []
            continue
        batch.append((source, target))
        written.append((source, target))
        source += 1
        target += 1
        now += draw(st.integers(0, 20))
    syncs += e.on_written(batch, now)
    return History(written, syncs, source, target)


def store_of(h: History, max_syncs: int = 1024) -> OffsetSyncStore:
    store = OffsetSyncStore(max_syncs=max_syncs)
    for s in h.syncs:
        store.add(s)
    return store


def mm2_translate(committed: int, syncs: list[OffsetSync]) -> int | None:
    """MirrorMaker 2 (3.5+): the last sync at or before the offset; +1 past it."""
    i = bisect_left(syncs, committed + 1, key=lambda s: s.source_offset)
    if i == 0:
        return None
    s = syncs[i - 1]
    return s.target_offset if s.source_offset == committed else s.target_offset + 1


@settings(max_examples=150, deadline=None)
@given(histories(), st.sampled_from([1024, 2, 5]))
def test_translation_is_never_ahead_monotonic_exact_at_syncs_and_rereads_are_bounded(h: History,
                                                                                      max_syncs: int) -> None:
    store = store_of(h, max_syncs)
    kept = store.syncs(TP)
    assert len(kept) <= max_syncs
    for s in kept:
        assert store.translate(TP, s.source_offset) == s.target_offset  # exact at sync points
    previous: int | None = None
    for c in range(h.source_end + 3):
        r = store.translate(TP, c)
        if r is None:
            assert previous is None, "untranslatable only before every sync"
            continue
        assert r <= h.truth(c), f"translated {c} to {r}, ahead of the record at {h.truth(c)}: loss"
        assert previous is None or r >= previous, "not monotonic"
        previous = r
        i = bisect_left(kept, c, key=lambda s: s.source_offset)  # the previous sync: kept[i - 1]
        bound = c - kept[i - 1].source_offset - 1 if i else 0
        assert h.rereads(r, c) <= bound, f"{h.rereads(r, c)} re-reads for {c}, over the distance {bound}"


@settings(max_examples=150, deadline=None)
@given(histories(), st.sampled_from([1024, 3]))
def test_the_reported_reread_bound_holds_and_is_zero_where_exact(h: History, max_syncs: int) -> None:
    store = store_of(h, max_syncs)
    for c in range(h.source_end + 3):
        t = store.translate_bounded(TP, c)
        assert (t is None) == (store.translate(TP, c) is None)
        if t is None:
            continue
        assert t.offset == store.translate(TP, c) and t.committed == c and t.reread_bound >= 0
        assert h.rereads(t.offset, c) <= t.reread_bound, f"{h.rereads(t.offset, c)} re-reads for {c}: {t}"
        if t.exact:
            assert t.reread_bound == 0 and t.offset == h.truth(c)


def test_reread_bound_is_the_distance_to_the_previous_sync() -> None:
    syncs = [OffsetSync(TP, 10, 100, 0), OffsetSync(TP, 50, 130, 20)]
    assert translate_bounded(5, syncs) is None
    assert translate_bounded(10, syncs) == translate_bounded(10, syncs[:1])  # at a sync: exact
    assert translate_bounded(10, syncs).reread_bound == 0 and translate_bounded(10, syncs).exact
    assert translate_bounded(25, syncs).offset == 101 and translate_bounded(25, syncs).reread_bound == 14
    assert translate_bounded(40, syncs).offset == 120 and translate_bounded(40, syncs).exact  # in the run
    late = translate_bounded(80, syncs)
    assert (late.offset, late.reread_bound, late.exact) == (131, 29, False)


@settings(max_examples=100, deadline=None)
@given(histories())
def test_never_more_rereads_than_mirrormaker_2_on_the_same_syncs(h: History) -> None:
    kept = list(store_of(h).syncs(TP))
    for c in range(h.source_end + 3):
        ours, theirs = translate(c, kept), mm2_translate(c, kept)
        if theirs is None:
            continue
        assert ours is not None and h.rereads(ours, c) <= h.rereads(theirs, c)


@settings(max_examples=100, deadline=None)
@given(histories(holes=False, drops=False, restarts=False))
def test_a_one_for_one_copy_translates_exactly_up_to_the_last_sync(h: History) -> None:
    kept = store_of(h).syncs(TP)
    assert bool(kept) == bool(h.written)  # the first write always gets a sync
    if not kept:
        return
    for c in range(kept[0].source_offset, kept[-1].source_offset + 1):
        assert translate(c, kept) == h.truth(c)
    # past the last sync, re-reads are bounded by the distance to it
    for c in range(kept[-1].source_offset + 1, h.source_end + 1):
        assert h.rereads(translate(c, kept), c) <= c - kept[-1].source_offset - 1


def test_mirrormaker_2_rewinds_where_a_run_is_exact() -> None:
    syncs = [OffsetSync(TP, 0, 100, 0), OffsetSync(TP, 100, 200, 100)]
    assert translate(50, syncs) == 150  # inside the run: exact
    assert mm2_translate(50, syncs) == 101  # 49 re-reads
    assert translate(120, syncs) == 201 and translate(-1, syncs) is None


# ---------------------------------------------------------------------------- store


def test_a_sync_that_goes_back_drops_what_it_contradicts() -> None:
    store = OffsetSyncStore()
    for s in (OffsetSync(TP, 10, 10), OffsetSync(TP, 20, 20, 10), OffsetSync(TP, 30, 30, 10)):
        store.add(s)
    store.add(OffsetSync(TP, 5, 40))  # the source topic was re-created: offsets start over
    assert store.syncs(TP) == (OffsetSync(TP, 5, 40),)
    store.add(OffsetSync(TP, 50, 0))  # the target topic was re-created
    assert store.syncs(TP) == (OffsetSync(TP, 50, 0),)


def test_a_run_never_reaches_the_previous_sync() -> None:
    store = OffsetSyncStore()
    store.add(OffsetSync(TP, 10, 10))
    store.add(OffsetSync(TP, 20, 15, 19))  # claims more than fits: cut to what is above (10, 10)
    assert store.syncs(TP)[-1].run == 4
    assert [store.translate(TP, c) for c in (10, 11, 15, 16, 20)] == [10, 11, 11, 11, 15]


def test_old_syncs_are_thinned_not_dropped() -> None:
    store = OffsetSyncStore(max_syncs=8)
    for i in range(100):
        store.add(OffsetSync(TP, i * 10, i * 10))
    kept = store.syncs(TP)
    assert len(kept) <= 8 and kept[-1].source_offset == 990
    assert kept[0].source_offset == 0 and store.translate(TP, 5) == 1  # the oldest is kept


# ---------------------------------------------------------------------------- records


@given(st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 1000))
def test_offset_syncs_round_trip(part: int, source: int, target: int, run: int) -> None:
    sync = OffsetSync(TopicPartition("east.orders", part), source + run, target + run, run)
    assert decode_offset_sync(*encode_offset_sync(sync)) == sync


@pytest.mark.parametrize(("key", "value", "message"), [
    (None, b"{}", "offset sync key is missing"),
    (b"x" * 5000, b"{}", "5000 bytes"),
    (b"[", b"{}", "not JSON"),
    (b'{"topic":"a"}', b"{}", "has no 'partition'"),
    (b'{"topic":"","partition":0}', b"{}", "expected a non-empty string"),
    (b'{"topic":"a","partition":0}', b'{"source_offset":-1,"target_offset":0,"run":0}',
     r"'source_offset' is -1: expected an integer in \[0, 2\^63\)"),
    (b'{"topic":"a","partition":0}', b'{"source_offset":1,"target_offset":0,"run":true}', "'run' is True"),
    (b'{"topic":"a","partition":0}', b'{"source_offset":1,"target_offset":0,"run":1}', "below offset 0"),
])
def test_malformed_offset_syncs_are_named(key, value, message) -> None:
    with pytest.raises(TranslationFormatError, match=message) as info:
        decode_offset_sync(key, value)
    assert info.value.code == MALFORMED_SYNC


# ---------------------------------------------------------------------------- checkpoints


def test_checkpoints_translate_committed_offsets_and_are_written_again_only_on_change() -> None:
    store = OffsetSyncStore()
    store.add(OffsetSync(TP, 100, 1000, 100))
    other = TopicPartition("audit", 0)
    committed = {("billing", TP): (60, "m"), ("billing", other): (5, ""), ("ops", TP): (10, "")}
    first = plan_checkpoints(committed, store, {"orders": "east.orders"}, {})
    assert first == [Checkpoint("billing", TP, "east.orders", 60, 960, "m"),
                     Checkpoint("ops", TP, "east.orders", 10, 910, "")]  # audit is not mirrored
    emitted = {(c.group, c.tp): c for c in first}
    assert plan_checkpoints(committed, store, {"orders": "east.orders"}, emitted) == []
    moved = plan_checkpoints({**committed, ("ops", TP): (100, "")}, store, {"orders": "east.orders"}, emitted)
    assert [c.downstream_offset for c in moved] == [1000]
    assert plan_checkpoints({("g", TP): (7, "")}, OffsetSyncStore(), {"orders": "east.orders"}, {}) == []
    # nothing consumed (an empty partition): the start of the remote partition, no sync needed
    assert plan_checkpoints({("g", TP): (0, "")}, OffsetSyncStore(), {"orders": "east.orders"}, {}) == [
        Checkpoint("g", TP, "east.orders", 0, 0, "")]
    for cp in first:
        assert decode_checkpoint(*encode_checkpoint(cp)) == cp
    latest = latest_checkpoints([*first, *moved], "ops")
    assert latest == {TopicPartition("east.orders", 3): moved[0]}


def test_a_malformed_checkpoint_is_named() -> None:
    with pytest.raises(TranslationFormatError, match="checkpoint value has no 'remote_topic'"):
        decode_checkpoint(b'{"group":"g","topic":"t","partition":0}', b"{}")


def test_a_translated_fail_over_plans_each_partition_and_starts_unconsumed_ones_at_zero() -> None:
    store = OffsetSyncStore()
    store.add(OffsetSync(TP, 100, 1000, 100))
    empty, later = TopicPartition("orders", 0), TopicPartition("orders", 1)
    store.add(OffsetSync(later, 50, 20, 0))
    rows = {r.partition: r for r in plan_partitions({TP: 60, empty: 0, later: 10}, store,
                                                    {"orders": "east.orders"}, {})}
    assert (rows[3].translated, rows[3].reread_bound, rows[3].action) == (960, 0, "committed")
    assert (rows[0].translated, rows[0].reread_bound, rows[0].exact, rows[0].action) == (0, 0, True, "committed")
    assert rows[1].translated is None and rows[1].action == "untranslatable"  # before every sync, not 0
