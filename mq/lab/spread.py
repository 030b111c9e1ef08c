"""Several runs of one measurement, and whether two of them really differ.

A lab that compares two ways of doing something measures each several times and
shows the spread, so that a difference smaller than the run-to-run noise is called
that instead of being read as a result. ``compare`` says which it is: the two sets of
runs either do not overlap at all (a real difference, given as the ratio of the
medians) or they do (within noise).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """The runs of one measurement: median, lowest, highest."""

    samples: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        return min(self.samples)

    @property
    def high(self) -> float:
        return max(self.samples)

    def overlaps(self, other: Spread) -> bool:
        return self.low <= other.high and other.low <= self.high

    def row(self, name: str, *, unit: str = "") -> dict[str, object]:
        """For ``table``: name, median, low, high, runs."""
        suffix = f" ({unit})" if unit else ""
        return {"": name, f"median{suffix}": round(self.median, 3), f"lowest{suffix}": round(self.low, 3),
                f"highest{suffix}": round(self.high, 3), "runs": self.n}

    def __str__(self) -> str:
        return f"{_num(self.median)} (runs {_num(self.low)}–{_num(self.high)}, n={self.n})"


def spread(samples: Iterable[float]) -> Spread:
    values = tuple(float(s) for s in samples)
    if not values:
        raise ValueError("spread of no runs")
    return Spread(values)


def compare(name_a: str, a: Spread, name_b: str, b: Spread, *, higher: str = "faster") -> str:
    """One sentence: "a is 3.1× faster than b (runs do not overlap)" or "within
    noise: …"; ``higher`` names what a larger value means (``faster``, ``slower``)."""
    if a.overlaps(b):
        return (f"{name_a} and {name_b} are within noise of each other: their runs overlap "
                f"({name_a} {a}; {name_b} {b})")
    big, small = (name_a, a), (name_b, b)
    if a.median < b.median:
        big, small = small, big
    ratio = big[1].median / small[1].median if small[1].median else float("inf")
    times = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.1f}"
    return (f"{big[0]} is {times}× {higher} than {small[0]} "
            f"(medians of {big[1].n} and {small[1].n} runs; the runs do not overlap)")


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"
