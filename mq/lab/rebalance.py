"""Measuring a rebalance from what a group's members recorded (pure functions).

``GroupLab`` (mq.lab.groups) records, per partition, when a poll returned its records
and who owned it when; these turn that into the figures the lab and the benchmark
report: the longest gap in consumption per partition over a window, how many
partitions stayed under a threshold ("kept consuming"), and how many were owned by
some member at every instant ("kept assigned": the cooperative protocol's promise for
every partition that does not move).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mq.core.types import TopicPartition


@dataclass(frozen=True)
class Ownership:
    """``member`` held ``tp`` from ``start_s`` to ``end_s`` (None: still holds it)."""

    member: str
    tp: TopicPartition
    start_s: float
    end_s: float | None


@dataclass(frozen=True)
class PauseStats:
    """One rebalance, measured over ``[start_s, end_s]`` (see ``GroupLab.pause``)."""

    start_s: float
    end_s: float
    threshold_s: float
    partitions: int
    kept_consuming: int  # longest gap <= threshold_s
    kept_assigned: int  # some member owned it at every instant of the window
    median_gap_s: float
    p90_gap_s: float
    max_gap_s: float
    gaps: dict[TopicPartition, float]

    @property
    def kept_consuming_fraction(self) -> float:
        return self.kept_consuming / self.partitions if self.partitions else 0.0

    @property
    def kept_assigned_fraction(self) -> float:
        return self.kept_assigned / self.partitions if self.partitions else 0.0

    def row(self) -> dict[str, Any]:
        """The figures as one flat dict (a table row, a JSON line)."""
        return {"window_s": round(self.end_s - self.start_s, 3), "partitions": self.partitions,
                "kept_consuming_fraction": round(self.kept_consuming_fraction, 3),
                "kept_assigned_fraction": round(self.kept_assigned_fraction, 3),
                "threshold_s": round(self.threshold_s, 3), "median_gap_s": round(self.median_gap_s, 3),
                "p90_gap_s": round(self.p90_gap_s, 3), "max_gap_s": round(self.max_gap_s, 3)}


def longest_gaps(times: Mapping[TopicPartition, Sequence[float]], tps: Iterable[TopicPartition],
                 start_s: float, end_s: float) -> dict[TopicPartition, float]:
    """Per partition, the longest stretch of ``[start_s, end_s]`` without a poll that
    returned its records. The first stretch runs from the last such poll at or before
    ``start_s`` (if any), so a partition that had just gone quiet is not flattered;
    the last one ends at ``end_s``. ``times`` must be sorted per partition."""
    out = {}
    for tp in sorted(tps):
        seen = times.get(tp, ())
        before = [t for t in seen if t <= start_s]
        points = [before[-1] if before else start_s]
        points += [t for t in seen if start_s < t < end_s]
        points.append(end_s)
        out[tp] = max(b - a for a, b in itertools.pairwise(points))
    return out


def never_lapsed(intervals: Iterable[Ownership], tp: TopicPartition, start_s: float, end_s: float) -> bool:
    """True when the union of ``tp``'s ownership intervals covers ``[start_s, end_s]``."""
    spans = sorted((o.start_s, math.inf if o.end_s is None else o.end_s)
                   for o in intervals if o.tp == tp)
    covered = start_s
    for a, b in spans:
        if a > covered:
            return False
        covered = max(covered, b)
        if covered >= end_s:
            return True
    return covered >= end_s


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of unsorted values."""
    ordered = sorted(values)
    rank = max(1, math.ceil(round(p * len(ordered) / 100, 9)))
    return ordered[min(rank, len(ordered)) - 1]


def pause_stats(times: Mapping[TopicPartition, Sequence[float]], intervals: Sequence[Ownership],
                tps: Sequence[TopicPartition], start_s: float, end_s: float, *,
                threshold_s: float) -> PauseStats:
    gaps = longest_gaps(times, tps, start_s, end_s)
    values = list(gaps.values()) or [0.0]
    return PauseStats(
        start_s=start_s, end_s=end_s, threshold_s=threshold_s, partitions=len(gaps),
        kept_consuming=sum(1 for g in gaps.values() if g <= threshold_s),
        kept_assigned=sum(1 for tp in gaps if never_lapsed(intervals, tp, start_s, end_s)),
        median_gap_s=statistics.median(values), p90_gap_s=percentile(values, 90),
        max_gap_s=max(values), gaps=gaps)


def is_balanced(assignment: Mapping[str, Sequence[TopicPartition]], tps: Iterable[TopicPartition]) -> bool:
    """Every partition owned by exactly one member, and member sizes within one."""
    owned = [tp for parts in assignment.values() for tp in parts]
    sizes = [len(parts) for parts in assignment.values()]
    return (bool(sizes) and len(owned) == len(set(owned)) and set(owned) == set(tps)
            and max(sizes) - min(sizes) <= 1)


def activity(times: Mapping[TopicPartition, Sequence[float]], tps: Sequence[TopicPartition],
             start_s: float, end_s: float, *, window_s: float = 0.25,
             step_s: float = 0.05) -> tuple[list[float], list[int]]:
    """``(t - start_s, partitions with a poll in (t - window_s, t])`` every ``step_s``:
    the number of partitions being consumed, over time."""
    out_t, out_n = [], []
    steps = int((end_s - start_s) / step_s) + 1
    for k in range(steps):
        t = start_s + k * step_s
        n = sum(1 for tp in tps if any(t - window_s < x <= t for x in times.get(tp, ())))
        out_t.append(round(t - start_s, 4))
        out_n.append(n)
    return out_t, out_n
