"""Plots and tables for labs (matplotlib; falls back to the Agg backend headless)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt

from mq.lab.segments import Segment
from mq.lab.workloads import ThroughputPoint


def plot_throughput(runs: Mapping[str, Sequence[ThroughputPoint]], *, ax: Any = None,
                    title: str = "produce throughput") -> Any:
    """One line per run: records per second of each chunk against elapsed time."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    for label, points in runs.items():
        ax.plot([p.elapsed_s for p in points], [p.rec_per_s for p in points], marker=".",
                linewidth=1, label=label)
    ax.set_xlabel("elapsed (s)")
    ax.set_ylabel("records / s")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if len(runs) > 1:
        ax.legend()
    return ax


def plot_rates(rates: Mapping[str, float], *, ax: Any = None, title: str = "records / s",
               log_scale: bool = True) -> Any:
    """One labelled bar per rate (for "the same work done different ways")."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2))
    bars = ax.bar(list(rates), list(rates.values()), color="tab:green")
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in rates.values()], fontsize=8)
    if log_scale:
        ax.set_yscale("log")
    ax.set_ylabel("records / s")
    ax.set_title(title)
    return ax


def plot_segments(segments: Sequence[Segment], *, ax: Any = None, title: str = "segments",
                  deleted: Sequence[Segment] = ()) -> Any:
    """A bar per segment (KiB of ``.log``), labelled by base offset; ``deleted``
    segments are drawn hatched and grey so retention's work is visible."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    everything = sorted([*deleted, *segments], key=lambda s: s.base_offset)
    gone = {s.base_offset for s in deleted}
    labels = [str(s.base_offset) for s in everything]
    sizes = [s.log_bytes / 1024 for s in everything]
    colors = ["lightgrey" if s.base_offset in gone else "tab:blue" for s in everything]
    bars = ax.bar(labels, sizes, color=colors)
    for bar, segment in zip(bars, everything):
        if segment.base_offset in gone:
            bar.set_hatch("//")
    if segments:
        bars[labels.index(str(segments[-1].base_offset))].set_color("tab:orange")  # active
    ax.set_xlabel("base offset")
    ax.set_ylabel(".log KiB")
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    return ax


def table(rows: Sequence[Mapping[str, Any]], *, columns: Sequence[str] | None = None,
          limit: int | None = None) -> str:
    """Rows of dicts as a fixed-width text table (for ``print`` in a notebook)."""
    rows = list(rows)[:limit] if limit is not None else list(rows)
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        text = raw[:24].decode("utf-8", errors="replace")
        return text + ("…" if len(raw) > 24 else "")
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)
