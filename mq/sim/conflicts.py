"""A seeded simulation of active-active writes to one keyed topic, merged by table views.

Regions write the same keys concurrently, each with its own skewed wall clock and
hybrid logical clocks (one per producer); every region's log is copied to every other
region over links with their own latency and jitter. Each region's table view
(``mq.client.internals.table.TableState``) applies its own records as they are written
and the others' as they arrive: records of one source partition in order (a remote topic
keeps partitions and their order), different partitions and regions interleaved as the
delays fall. Some writes read the key first (a read-modify-write): the producer's clock
observes the stamp it read, so the write happens after it.

Under ``home-region`` a region's broker refuses keys whose home is elsewhere (the pure rule
the broker applies: ``mq.core.conflict``), so each key has a single writer. After every
record is delivered, ``SimResult`` compares the regions' tables: the digests must be equal
under ``home-region`` and ``last-writer-wins``; under ``none`` the differing keys are the
divergence. Everything comes from ``Rng(seed)``: a seed replays the same run.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from mq.client.internals.table import TableState
from mq.core.conflict import ConflictPolicy, ConflictRules, home_region
from mq.core.hashing import murmur2, to_positive
from mq.core.hlc import HLC_HEADER, Hlc, HybridLogicalClock
from mq.core.rng import Rng

REGIONS = ("east", "west", "south")
LATENCY_MS = {frozenset(("east", "west")): 30, frozenset(("east", "south")): 80,
              frozenset(("west", "south")): 120}
"""One-way link latency between two regions (the three-region mesh of regions/)."""
EPOCH_MS = 1_700_000_000_000  # true time 0 of a run, as a wall clock reads it


@dataclass(frozen=True)
class SimConfig:
    policy: ConflictPolicy
    regions: tuple[str, ...] = REGIONS
    keys: int = 1_000
    writes_per_key: int = 1  # per region
    producers_per_region: int = 2
    partitions: int = 4
    window_ms: int = 2_000  # writes fall uniformly in [0, window_ms) of true time
    max_skew_ms: int = 500  # each producer's clock is off by up to this, either way
    jitter_ms: int = 40  # extra delivery delay per record, uniform in [0, jitter_ms]
    tombstone_ratio: float = 0.05
    read_before_write_ratio: float = 0.2
    sample_every_ms: int = 0  # > 0: record how many keys the regions disagree on, over time


@dataclass
class Write:
    region: str
    key: bytes
    value: bytes | None
    hlc: Hlc
    partition: int
    seq: int  # order of writes (ties of the event queue)
    observed: tuple[Hlc, str] | None = None  # the entry a read-modify-write read first


@dataclass
class SimResult:
    seed: int
    policy: ConflictPolicy
    digests: dict[str, str]
    tables: dict[str, dict[bytes, bytes]]
    written: int = 0
    refused: int = 0
    drained_at_ms: int = 0  # true time of the last delivery
    last_write_ms: int = 0  # true time of the last write
    timeline: list[tuple[int, int]] = field(default_factory=list)  # (true time ms, keys disagreed on)
    diverged_keys: int = 0
    causal_violations: list[str] = field(default_factory=list)

    @property
    def converged(self) -> bool:
        return len(set(self.digests.values())) == 1


def _skews(rng: Rng, config: SimConfig) -> dict[tuple[str, int], int]:
    return {(r, p): rng.randint(-config.max_skew_ms, config.max_skew_ms)
            for r in config.regions for p in range(config.producers_per_region)}


def run(seed: int, config: SimConfig) -> SimResult:
    rng = Rng(seed)
    rules = ConflictRules(config.policy, config.regions)
    skews = _skews(rng.fork("skews"), config)
    clocks = {rp: HybridLogicalClock() for rp in skews}
    tables = {r: TableState(rules) for r in config.regions}
    result = SimResult(seed, config.policy, {}, {})
    # (true time ms, kind order, seq, region, payload): writes at their time, deliveries later
    events: list[tuple[int, int, int, str, object]] = []
    order = rng.fork("writes")
    seq = 0
    for i in range(config.keys):
        key = f"key-{i:05d}".encode()
        for region in config.regions:
            for _ in range(config.writes_per_key):
                seq += 1
                heapq.heappush(events, (order.randint(0, config.window_ms - 1), 0, seq, region, key))
    last_delivery: dict[tuple[str, int, str], int] = {}  # (source, partition, target) -> time
    delays = rng.fork("delays")
    values = rng.fork("values")
    overwritten: list[tuple[bytes, Hlc, str]] = []  # (key, stamp, origin) read, then replaced
    pushed = seq
    every, next_sample = config.sample_every_ms, 0
    while events:
        now, kind, seq, region, payload = heapq.heappop(events)
        while every > 0 and next_sample <= now:  # the tables as they stand before ``now``
            result.timeline.append((next_sample, _disagreeing(tables)))
            next_sample += every
        if kind == 1:  # a record arrives from another region
            write: Write = payload  # type: ignore[assignment]
            tables[region].apply(write.key, write.value, _headers(write), region=write.region)
            result.drained_at_ms = max(result.drained_at_ms, now)
            continue
        key: bytes = payload  # type: ignore[assignment]
        if config.policy is ConflictPolicy.HOME_REGION and home_region(key, config.regions) != region:
            result.refused += 1  # NOT_HOME_REGION: nothing written
            continue
        producer = (region, values.randint(0, config.producers_per_region - 1))
        clock, pt = clocks[producer], EPOCH_MS + now + skews[producer]
        observed = None
        entry = tables[region].entries.get(key)
        if entry is not None and entry.hlc is not None and values.random() < config.read_before_write_ratio:
            observed = (entry.hlc, entry.region)
            clock.observe(entry.hlc, pt)
        value = None if values.random() < config.tombstone_ratio else f"{region}:{seq}".encode()
        write = Write(region, key, value, clock.now(pt), to_positive(murmur2(key)) % config.partitions,
                      seq, observed)
        result.written += 1
        result.last_write_ms = now
        tables[region].apply(key, value, _headers(write), region=region)
        for target in config.regions:
            if target == region:
                continue
            link = LATENCY_MS.get(frozenset((region, target)), 50)
            at = now + link + delays.randint(0, config.jitter_ms)
            stream = (region, write.partition, target)
            at = max(at, last_delivery.get(stream, 0))  # a partition's order is kept
            last_delivery[stream] = at
            pushed += 1  # ties at one time: in the order written (a stream's order)
            heapq.heappush(events, (at, 1, pushed, target, write))
        if observed is not None:
            _check_causality(write, observed, result)
            overwritten.append((key, *observed))
    if every > 0:
        result.timeline.append((next_sample, _disagreeing(tables)))
    result.digests = {r: t.digest() for r, t in tables.items()}
    result.tables = {r: t.view() for r, t in tables.items()}
    result.diverged_keys = _diverged(result.tables)
    if config.policy is ConflictPolicy.LAST_WRITER_WINS:
        _check_final(tables, overwritten, result)
    return result


def _headers(write: Write) -> tuple[tuple[str, bytes], ...]:
    return ((HLC_HEADER, write.hlc.encode()),)


def _check_causality(write: Write, observed: tuple[Hlc, str], result: SimResult) -> None:
    """A write made after reading an entry must be stamped above it (HLC's happens-before)."""
    if write.hlc <= observed[0]:
        result.causal_violations.append(f"{write.key!r}: wrote {write.hlc} after reading {observed[0]}")


def _check_final(tables: dict[str, TableState], overwritten: list[tuple[bytes, Hlc, str]],
                 result: SimResult) -> None:
    """Under last-writer-wins no region may end on an entry that some write overwrote
    after reading it: a value causally overwritten never survives, whatever the clocks."""
    for region, table in tables.items():
        for key, stamp, origin in overwritten:
            entry = table.entries[key]
            if (entry.hlc, entry.region) == (stamp, origin):
                result.causal_violations.append(
                    f"{region}: {key!r} ends on {stamp}@{origin}, which a later write read and replaced")


def _disagreeing(tables: dict[str, TableState]) -> int:
    """Keys whose value (``None``: absent or deleted) is not the same in every region."""
    states = list(tables.values())
    keys = set().union(*(t.entries for t in states))
    return sum(1 for k in keys if len({t.get(k) for t in states}) > 1)


def _diverged(tables: dict[str, dict[bytes, bytes]]) -> int:
    keys = set().union(*tables.values())
    views = list(tables.values())
    return sum(1 for k in sorted(keys) if len({v.get(k) for v in views}) > 1)
