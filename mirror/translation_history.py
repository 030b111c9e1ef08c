"""Fail-over translation measured on a simulated copy history (pure): mq's ``translate``
against MirrorMaker 2's rule and against offset preservation, on the same offset syncs.

``simulate_history`` copies one source partition into its remote partition the way an
active-active flow does: the source takes ``rate_per_s`` records, the mirror writes what
arrived every ``batch_ms``, and each write is fed to the real ``OffsetSyncEmitter``
(``offset.lag.max``, ``offset.sync.interval.ms``). Three things make a copy *not*
one-for-one, each a parameter: the remote partition already holding records
(``target_base``, a topic that had an earlier life), holes in the source offsets (a compacted
source, ``hole_ratio``), and mirror restarts (``restart_every_ms``: the emitter starts over,
so no run reaches back before the restart; dedupe keeps the target free of duplicates).

``measure`` then fails over at ``samples`` instants drawn from ``rng``: the group's committed
offset is a little behind what the mirror had written (``consumer_lag_ms``), the syncs are
those emitted by then, and each rule gives a target offset. The truth is the target offset
of the first copied record at or after the committed one: a rule that gives less makes the
group *re-read* the difference; one that gives more *loses* it.

* ``mq``: ``mirror.translation.translate`` (exact inside a sync's one-for-one run, else the
  previous sync plus one);
* ``mm2``: MirrorMaker 2 since KAFKA-12468 -- the last sync at or before the committed offset,
  plus one unless the offset is the synced one (its translation is never ahead either);
* ``preserved``: an offset-preserving mirror topic (lab 05): the same offset on both sides.

This measures translation alone. Every mode also re-reads what the group committed after
the last checkpoint (``sync.group.offsets.interval.ms``), which lab 05 measures.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from mirror.translation import OffsetSync, OffsetSyncEmitter, OffsetSyncStore, translate
from mq.core.rng import Rng
from mq.core.types import TopicPartition

TP = TopicPartition("orders", 0)
RULES = ("preserved", "mq", "mm2")


@dataclass(frozen=True)
class History:
    """One partition's copy: ``written[i] = (source offset, target offset, time ms)`` in
    write order; ``syncs[i] = (time ms, sync)`` in emission order."""

    written: tuple[tuple[int, int, int], ...]
    syncs: tuple[tuple[int, OffsetSync], ...]
    target_base: int

    @property
    def end_ms(self) -> int:
        return self.written[-1][2] if self.written else 0


def simulate_history(rng: Rng, *, seconds: float = 20.0, rate_per_s: int = 2_000, batch_ms: int = 50,
                     offset_lag_max: int = 100, interval_ms: int = 1_000, hole_ratio: float = 0.0,
                     restart_every_ms: int = 0, target_base: int = 0) -> History:
    emitter = OffsetSyncEmitter(TP, offset_lag_max=offset_lag_max, interval_ms=interval_ms)
    written: list[tuple[int, int, int]] = []
    syncs: list[tuple[int, OffsetSync]] = []
    source, target = 0, target_base
    per_batch = rate_per_s * batch_ms / 1000
    owed = 0.0
    next_restart = restart_every_ms or None
    now = 0
    while now < seconds * 1000:
        now += batch_ms
        if next_restart is not None and now >= next_restart:
            emitter.reset()
            next_restart += restart_every_ms
        owed += per_batch
        pairs = []
        while owed >= 1:
            owed -= 1
            if hole_ratio and rng.random() < hole_ratio:
                source += 1  # compacted away in the source: the mirror never sees it
                continue
            pairs.append((source, target))
            written.append((source, target, now))
            source += 1
            target += 1
        syncs.extend((now, s) for s in emitter.on_written(pairs, now))
    return History(tuple(written), tuple(syncs), target_base)


def mm2_translate(committed: int, syncs: Sequence[OffsetSync]) -> int | None:
    """MirrorMaker 2's rule (``OffsetSyncStore.translateDownstream`` after KAFKA-12468):
    the last sync at or before ``committed``; its target offset when it is exactly there,
    else one past it; None before every sync."""
    j = bisect_right(syncs, committed, key=lambda s: s.source_offset)
    if j == 0:
        return None
    s = syncs[j - 1]
    return s.target_offset if s.source_offset == committed else s.target_offset + 1


@dataclass(frozen=True)
class Outcome:
    rule: str
    rereads: tuple[int, ...]  # per fail-over
    lost: int  # fail-overs that would skip records (translated ahead of the truth)
    untranslated: int  # fail-overs before any sync (no checkpoint: the group's reset policy)

    @property
    def median(self) -> float:
        return statistics.median(self.rereads) if self.rereads else 0.0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.rereads) if self.rereads else 0.0

    @property
    def worst(self) -> int:
        return max(self.rereads, default=0)


def measure(history: History, rng: Rng, *, samples: int = 500, consumer_lag_ms: int = 200,
            rate_per_s: int = 2_000) -> dict[str, Outcome]:
    """Fail over ``samples`` times (module docstring); ``{rule: Outcome}``."""
    times = [w[2] for w in history.written]
    sources = [w[0] for w in history.written]
    found: dict[str, list[int]] = {r: [] for r in RULES}
    lost = dict.fromkeys(RULES, 0)
    untranslated = dict.fromkeys(RULES, 0)
    store = OffsetSyncStore()  # fed the syncs as they are emitted, as the mirror's store is
    fed = 0
    for at in sorted(rng.randint(1, max(1, history.end_ms)) for _ in range(samples)):
        while fed < len(history.syncs) and history.syncs[fed][0] <= at:
            store.add(history.syncs[fed][1])
            fed += 1
        n = bisect_right(times, at)  # records written by then
        if n == 0:
            continue
        head = sources[n - 1] + 1  # the group has read up to here at most
        committed = max(0, head - rng.randint(0, rate_per_s * consumer_lag_ms // 1000))
        i = bisect_left(sources, committed, hi=n)
        truth = history.written[i][1] if i < n else history.written[n - 1][1] + 1
        syncs = store.syncs(TP)
        translated = {"mq": translate(committed, syncs), "mm2": mm2_translate(committed, syncs)}
        found["preserved"].append(0)  # same offsets on both sides: the committed offset itself
        for rule, offset in translated.items():
            if offset is None:
                untranslated[rule] += 1
                continue
            if offset > truth:
                lost[rule] += 1
            found[rule].append(max(0, truth - offset))
    return {r: Outcome(r, tuple(found[r]), lost[r], untranslated[r]) for r in RULES}
