"""Plots of the geo lab (notebooks/05_geo_failover.py): replication latency against the
link, the two sides of the loss-versus-duplicates dial, and both regions' ends through
a cut, a fail-over and a fail-back. Figures for the docs go through ``mq.lab.figures.save_figure``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt

from mq.lab.plots import mark_events

DPI = 90


def plot_latency_steps(buckets: Sequence[tuple[float, float, float]], steps: Sequence[Mapping[str, Any]], *,
                       ax: Any = None, title: str = "replication latency while the link slows down") -> Any:
    """p50 and p99 of each time bucket (``LatencyProbe.buckets()``) against time, the link's
    one-way latency as a step line, each change marked (``{"t_s", "latency_ms"}`` rows)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot([b[0] for b in buckets], [b[1] for b in buckets], color="tab:blue", linewidth=1.4, label="p50")
    ax.plot([b[0] for b in buckets], [b[2] for b in buckets], color="tab:red", linewidth=1, label="p99")
    if steps:
        end = buckets[-1][0] if buckets else steps[-1]["t_s"]
        times = [s["t_s"] for s in steps] + [end]
        values = [s["latency_ms"] for s in steps] + [steps[-1]["latency_ms"]]
        ax.step(times, values, where="post", color="black", linestyle="--", linewidth=1,
                label="link latency, one way")
    mark_events(ax, [{"t_s": s["t_s"], "kind": "link", "label": f"link {s['latency_ms']:g} ms"} for s in steps])
    ax.set_xlabel("time (s)")
    ax.set_ylabel("ms: produced in east -> read in west")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax


def plot_at_risk(rows: Sequence[Mapping[str, Any]], *, ax: Any = None,
                 title: str = "records lost by a fail-over at a random instant") -> Any:
    """Records at risk against the link's one-way latency, a line per load: the median of
    the samples, a bar up to their p99, and the model (rate x replication latency) dashed.
    Rows: ``{"rate", "latency_ms", "median", "p99", "expected"}``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    for i, rate in enumerate(sorted({r["rate"] for r in rows})):
        mine = sorted((r for r in rows if r["rate"] == rate), key=lambda r: r["latency_ms"])
        x = [r["latency_ms"] for r in mine]
        med = [r["median"] for r in mine]
        ax.errorbar(x, med, yerr=[[0] * len(mine), [r["p99"] - r["median"] for r in mine]], marker="o",
                    color=f"C{i}", capsize=3, label=f"{rate:,} rec/s measured (median, bar to p99)")
        ax.plot(x, [r["expected"] for r in mine], linestyle="--", color=f"C{i}", alpha=0.7,
                label=f"{rate:,} rec/s x replication latency p50")
    ax.set_xlabel("link latency, one way (ms)")
    ax.set_ylabel("records at risk (RPO)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def plot_rereads(rows: Sequence[Mapping[str, Any]], *, ax: Any = None,
                 title: str = "records read again after a fail-over at a random instant") -> Any:
    """Re-reads against the offset-sync interval: every sample (dots), their maximum, and
    the bound (consume rate x (the longest sync period + twice a sync's duration +
    replication lag)) dashed. Rows:
    ``{"interval_ms", "samples": [...], "bound"}``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    for r in rows:
        ax.scatter([r["interval_ms"]] * len(r["samples"]), r["samples"], s=8, alpha=0.35, color="tab:blue")
    x = [r["interval_ms"] for r in rows]
    ax.plot(x, [max(r["samples"], default=0) for r in rows], marker="o", color="tab:blue", label="measured max")
    ax.plot(x, [r["bound"] for r in rows], linestyle="--", color="black", label="bound: rate x (sync period + 2 x sync + lag)")
    ax.set_xlabel("sync.group.offsets.interval.ms")
    ax.set_ylabel("records read again in west")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_regions(samples: Sequence[tuple[float, int, int]], events: Sequence[Mapping[str, Any]], *,
                 ax: Any = None, title: str = "orders in both regions: cut, fail-over, fail-back") -> Any:
    """The total end offset of a topic in east and in west over time (``(t, east, west)``
    samples), with the operator's actions marked."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot([s[0] for s in samples], [s[1] for s in samples], color="tab:orange", label="east (end offsets)")
    ax.plot([s[0] for s in samples], [s[2] for s in samples], color="tab:green", label="west (end offsets)")
    mark_events(ax, events)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("records (sum of partition ends)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax


__all__ = ["plot_at_risk", "plot_latency_steps", "plot_regions", "plot_rereads"]
