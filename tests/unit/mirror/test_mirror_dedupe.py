"""Exactly-once copies into a remote partition without transactions: a simulated flow,
built from the pure cores (forwarding rule, dedupe index, offset syncs, start-up scan),
is crashed at every step of a write sequence and restarted from what the target holds;
the flow's records in the target must be the source's forwardable records, in order,
each once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.dedupe import DedupeIndex, ScanPhase, TailScan, scan_log, written_by
from mirror.remote import (
    Headers,
    Provenance,
    Route,
    decode_provenance,
    encode_provenance,
    forward_headers,
)
from mirror.translation import OffsetSync, OffsetSyncEmitter, OffsetSyncStore
from mq.core.types import TopicPartition

TP = TopicPartition("orders", 0)
SOURCE, TARGET = "east", "west"


def prov(path: tuple[str, ...], partition: int, offset: int) -> tuple[tuple[str, bytes], ...]:
    return encode_provenance(Provenance(path[0], partition, offset, 1_000, path))


def test_the_index_drops_what_is_not_past_the_highest_origin_offset_per_origin() -> None:
    index = DedupeIndex()
    a = Provenance("east", 0, 5, 0, ("east", "west"))
    assert index.admit(a) and not index.admit(a)
    assert index.admit(Provenance("south", 0, 1, 0, ("south", "east", "west")))  # another origin
    assert not index.admit(Provenance("east", 0, 4, 0, ("east", "west")))
    assert index.admit(Provenance("east", 1, 0, 0, ("east", "west")))  # another partition
    assert index.duplicates == 2 and index.high == {("east", 0): 5, ("south", 0): 1, ("east", 1): 0}


def test_ownership_is_the_last_hop_of_the_path() -> None:
    assert written_by(Provenance("east", 0, 0, 0, ("east", "west")), SOURCE, TARGET)
    assert written_by(Provenance("south", 0, 0, 0, ("south", "east", "west")), SOURCE, TARGET)
    assert not written_by(Provenance("south", 0, 0, 0, ("south", "west")), SOURCE, TARGET)
    assert not written_by(None, SOURCE, TARGET)


# ---------------------------------------------------------------------------- scans


def log_of(*entries: tuple[tuple[str, bytes], ...], start: int = 0) -> list[tuple[int, Headers]]:
    return [(start + i, headers) for i, headers in enumerate(entries)]


def scan(log, sync=None, *, source_log_start=0, first_window=2):
    end = log[-1][0] + 1 if log else 0
    start = log[0][0] if log else 0
    return TailScan(source_region=SOURCE, target_region=TARGET, log_start=start, end=end, sync=sync,
                    source_log_start=source_log_start, first_window=first_window)


def test_an_empty_remote_partition_copies_from_the_source_log_start() -> None:
    s = scan([], source_log_start=7)
    assert s.phase is ScanPhase.DONE and s.result is not None and s.result.fetch_offset == 7


def test_a_sync_and_the_flows_records_after_it_give_the_resume_point_and_the_index() -> None:
    log = log_of(prov(("east", "west"), 0, 10), prov(("south", "east", "west"), 0, 3),
                 prov(("east", "west"), 0, 12), (("local", b"x"),))
    s = scan(log, OffsetSync(TP, 10, 0))
    assert s.next_read() == (0, 4)
    result = scan_log(s, log)
    # the last record of the flow came straight from east: resume right after it
    assert result.fetch_offset == 13 and result.index.high == {("east", 0): 12, ("south", 0): 3}
    forwarded_last = log_of(prov(("east", "west"), 0, 10), prov(("south", "east", "west"), 0, 3))
    assert scan_log(scan(forwarded_last, OffsetSync(TP, 10, 0)), forwarded_last).fetch_offset == 11


def test_a_stale_sync_is_not_trusted() -> None:
    log = log_of(prov(("east", "west"), 0, 40), prov(("east", "west"), 0, 41))
    result = scan_log(scan(log, OffsetSync(TP, 99, 0)), log)  # at target 0 is source 40, not 99
    assert result.fetch_offset == 42 and "last record" in result.reason
    assert scan_log(scan(log, OffsetSync(TP, 5, 9)), log).fetch_offset == 42  # past the end


def test_without_a_sync_the_scan_walks_back_in_doubling_windows() -> None:
    others = [(("local", b"%d" % i),) for i in range(20)]
    log = log_of(prov(("east", "west"), 0, 7), *others)
    s = scan(log)
    reads = []
    while (window := s.next_read()) is not None:
        reads.append(window)
        s.feed(log[window[0]:window[1]])
        s.finish_read()
    assert reads == [(19, 21), (15, 19), (7, 15), (0, 7)]
    assert s.result is not None and s.result.fetch_offset == 8


def test_a_forwarded_last_record_without_a_sync_indexes_everything_and_rereads_the_source() -> None:
    log = log_of(prov(("south", "east", "west"), 1, 3), prov(("south", "east", "west"), 0, 9),
                 (("local", b""),))
    result = scan_log(scan(log, source_log_start=2), log)
    assert result.fetch_offset == 2 and result.index.high == {("south", 1): 3, ("south", 0): 9}
    assert scan_log(scan(log_of((("local", b""),))), log_of((("local", b""),))).fetch_offset == 0


# ---------------------------------------------------------------------------- simulation


@dataclass
class World:
    source: list[tuple[int, Headers]]  # the source partition, offsets with holes
    route: Route
    target: list[tuple[int, Headers]] = field(default_factory=list)
    syncs: list[OffsetSync] = field(default_factory=list)
    foreign: list[Headers] = field(default_factory=list)  # other writers' records, interleaved

    def expected(self) -> list[tuple[str, int, int]]:
        out = []
        for offset, headers in self.source:
            decision, copy = forward_headers(headers, self.route, partition=0, offset=offset, timestamp=0)
            if decision:
                p = decode_provenance(copy)
                out.append((p.origin_region, p.origin_partition, p.origin_offset))
        return out

    def written(self) -> list[tuple[str, int, int]]:
        out = []
        for _, headers in self.target:
            p = decode_provenance(headers)
            if written_by(p, SOURCE, TARGET):
                out.append((p.origin_region, p.origin_partition, p.origin_offset))
        return out

    def append_target(self, records: list[Headers]) -> list[int]:
        base = len(self.target)
        self.target += [(base + i, h) for i, h in enumerate(records)]
        return [base + i for i in range(len(records))]


def run_flow(world: World, batch: int, lag_max: int) -> Iterator[str]:
    """One mirror process for the partition; each ``yield`` is a point where it can die."""
    store = OffsetSyncStore()
    for s in world.syncs:
        store.add(s)
    kept = store.syncs(TP)
    resume = scan_log(TailScan(source_region=SOURCE, target_region=TARGET, log_start=0, end=len(world.target),
                               sync=kept[-1] if kept else None, source_log_start=world.source[0][0]),
                      world.target)
    fetch, index = resume.fetch_offset, resume.index
    emitter = OffsetSyncEmitter(TP, offset_lag_max=lag_max, interval_ms=10**9)
    yield "started"
    while True:
        fetched = [(o, h) for o, h in world.source if o >= fetch][:batch]
        if not fetched:
            return
        writes: list[tuple[int, Headers]] = []
        for offset, headers in fetched:
            decision, copy = forward_headers(headers, world.route, partition=0, offset=offset, timestamp=0)
            if decision and index.admit(decode_provenance(copy)):
                writes.append((offset, copy))
        fetch = fetched[-1][0] + 1
        yield "decided"
        if world.foreign:
            world.append_target([world.foreign.pop(0)])
        if not writes:
            continue
        offsets = world.append_target([h for _, h in writes])
        yield "appended (not acknowledged yet)"
        syncs = emitter.on_written([(s, t) for (s, _), t in zip(writes, offsets, strict=True)], 0)
        yield "acknowledged"
        for sync in syncs:
            world.syncs.append(sync)
            yield "sync written"


def run_with_crashes(world: World, crashes: set[int], batch: int, lag_max: int) -> int:
    step = 0
    while True:
        crashed = False
        for _ in run_flow(world, batch, lag_max):
            step += 1
            if step in crashes:
                crashed = True
                break
        if not crashed:
            return step


@st.composite
def worlds(draw) -> World:
    offset = draw(st.integers(0, 5))
    origin_next = {("south", 0): 0, ("south", 1): 0, ("west", 0): 0}
    source: list[tuple[int, Headers]] = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["local"] * 4 + ["south", "south1", "back", "been-in-west", "hole"]))
        if kind == "hole":
            offset += draw(st.integers(1, 3))
            continue
        if kind == "local":
            headers: Headers = (("n", b"%d" % offset),)
        else:
            key = {"south": ("south", 0), "south1": ("south", 1), "back": ("west", 0),
                   "been-in-west": ("south", 0)}[kind]
            path = {"back": ("west", "east"), "been-in-west": ("south", "west", "east")}.get(kind,
                                                                                        ("south", "east"))
            origin_next[key] += draw(st.integers(1, 3))  # origin offsets grow per origin
            headers = prov(path, key[1], origin_next[key])
        source.append((offset, headers))
        offset += 1
    if not source:
        source.append((offset, (("n", b"only"),)))
    foreign = draw(st.lists(st.sampled_from([(("app", b"1"),), prov(("south", "west"), 0, 1)]), max_size=5))
    return World(source, Route(SOURCE, TARGET, forward=draw(st.booleans())), foreign=foreign)


@settings(max_examples=150, deadline=None)
@given(worlds(), st.integers(1, 6), st.integers(1, 5), st.data())
def test_restarts_at_random_points_never_duplicate_and_never_lose(world: World, batch: int, lag_max: int,
                                                                   data: st.DataObject) -> None:
    crashes = set(data.draw(st.lists(st.integers(1, 120), max_size=6)))
    run_with_crashes(world, crashes, batch, lag_max)
    assert world.written() == world.expected()


def test_a_restart_at_every_point_of_a_write_sequence_never_duplicates_and_never_loses() -> None:
    def make() -> World:
        source: list[tuple[int, Headers]] = []
        for i in range(30):
            offset = i + (i // 7) * 2  # holes every 7 records
            if i % 5 == 3:
                headers = prov(("south", "east"), 0, i)  # forwarded
            elif i % 11 == 4:
                headers = prov(("west", "east"), 0, i)  # from the target: never back
            else:
                headers = (("n", b"%d" % i),)
            source.append((offset, headers))
        return World(source, Route(SOURCE, TARGET, forward=True), foreign=[(("app", b"x"),)] * 3)

    steps = run_with_crashes(make(), set(), batch=4, lag_max=3)
    expected = make().expected()
    assert len(expected) == 27
    for crash in range(1, steps + 1):
        world = make()
        run_with_crashes(world, {crash}, batch=4, lag_max=3)
        assert world.written() == expected, f"crash at step {crash}"
    for first in range(1, steps + 1, 3):  # and two crashes, the second right after the restart
        world = make()
        run_with_crashes(world, {first, first + 1, first + 2}, batch=4, lag_max=3)
        assert world.written() == expected, f"crashes at steps {first}-{first + 2}"


def test_without_the_index_a_restart_would_duplicate() -> None:
    """The simulation can fail: a flow that trusts only the last sync writes twice."""
    world = World([(i, (("n", b"%d" % i),)) for i in range(10)], Route(SOURCE, TARGET))
    emitter = OffsetSyncEmitter(TP, offset_lag_max=100)
    offsets = world.append_target([prov(("east", "west"), 0, i) for i in range(6)])
    world.syncs += emitter.on_written([(0, offsets[0])], 0)  # only the first write got a sync
    naive_fetch = world.syncs[-1].source_offset + 1
    rewritten = [o for o, _ in world.source if o >= naive_fetch]
    assert len(world.written()) + len(rewritten) > len(world.expected())
    run_with_crashes(world, set(), batch=3, lag_max=100)
    assert world.written() == world.expected()
