"""Plots and tables for labs (matplotlib; falls back to the Agg backend headless)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt

from mq.lab.segments import Segment
from mq.lab.spread import Spread, spread
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


def plot_spread(runs: Mapping[str, Any], *, ax: Any = None, title: str = "records / s",
                ylabel: str = "records / s", log_scale: bool = False, color: str = "tab:green",
                modelled: Sequence[str] = ()) -> Any:
    """A bar per measurement at the median of its runs (``Spread`` or a list of
    values), every run as a dot and a whisker from the lowest to the highest: a
    difference smaller than the whiskers is noise, and the plot shows it. Bars named
    in ``modelled`` are calculated, not measured: drawn grey and hatched."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2))
    spreads = {k: v if isinstance(v, Spread) else spread(v) for k, v in runs.items()}
    names = list(spreads)
    medians = [s.median for s in spreads.values()]
    bars = ax.bar(names, medians, color=[("lightgrey" if n in modelled else color) for n in names], alpha=0.6)
    for bar, name in zip(bars, names):
        if name in modelled:
            bar.set_hatch("//")
    ax.errorbar(names, medians, yerr=[[s.median - s.low for s in spreads.values()],
                                      [s.high - s.median for s in spreads.values()]],
                fmt="none", ecolor="black", capsize=4, linewidth=1)
    for i, s in enumerate(spreads.values()):
        offsets = [(j - (s.n - 1) / 2) * 0.08 for j in range(s.n)]
        ax.scatter([i + o for o in offsets], s.samples, s=10, color="black", zorder=3)
    for i, s in enumerate(spreads.values()):
        ax.annotate(f"{s.median:,.0f}" if s.median >= 100 else f"{s.median:.3g}", (i, s.high),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    ax.margins(y=0.15)
    if log_scale:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    runs_n = sorted({s.n for s in spreads.values()})
    ax.set_title(f"{title}\n(median of {'/'.join(map(str, runs_n))} runs; dots: each run)", fontsize=10)
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


_EVENT_COLORS = {"kill": "tab:red", "power_loss": "darkred", "pause": "tab:purple",
                 "resume": "tab:green", "restart": "tab:olive", "election": "black", "isr": "tab:gray",
                 "fenced": "tab:orange", "unfenced": "tab:cyan"}


def mark_events(ax: Any, events: Sequence[Mapping[str, Any]], *, kinds: Sequence[str] | None = None,
                labels: bool = True) -> None:
    """Vertical lines at each event (colour by ``kind``), labelled along the top."""
    for n, event in enumerate(sorted(events, key=lambda e: e["t_s"])):
        if kinds is not None and event["kind"] not in kinds:
            continue
        color = _EVENT_COLORS.get(event["kind"], "tab:brown")
        ax.axvline(event["t_s"], color=color, linestyle=":" if event["kind"] in ("isr", "fenced", "unfenced") else "--",
                   linewidth=1, alpha=0.8)
        if labels:
            ax.annotate(event["label"], (event["t_s"], 1.0), xycoords=("data", "axes fraction"),
                        xytext=(2, -4 - 9 * (n % 3)), textcoords="offset points", fontsize=7,
                        color=color, va="top")


def plot_replicas(timeline: Any, *, axes: Sequence[Any] | None = None, title: str | None = None,
                  kinds: Sequence[str] | None = None) -> Sequence[Any]:
    """Two panels over time for one partition: each replica's log end offset (solid)
    and high watermark (dashed); below, a lane per replica, thick where it was in the
    ISR and starred where it led. Events (kill, pause, election...) as vertical lines."""
    if axes is None:
        _, axes = plt.subplots(2, 1, figsize=(9, 5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top, lanes = axes
    brokers = timeline.brokers()
    colors = {b: f"C{i}" for i, b in enumerate(brokers)}
    for b in brokers:
        t, leo = timeline.series(b, "log_end_offset")
        top.plot(t, leo, color=colors[b], linewidth=1.4, label=f"broker {b} log end")
        t, hw = timeline.series(b, "high_watermark")
        top.plot(t, hw, color=colors[b], linewidth=1, linestyle="--", label=f"broker {b} HW")
    top.set_ylabel("offset")
    top.set_title(title or f"{timeline.topic}-{timeline.partition}: replicas over time")
    top.grid(alpha=0.3)
    top.legend(fontsize=7, ncol=3, loc="lower right")
    mark_events(top, timeline.events, kinds=kinds)
    for lane, b in enumerate(brokers):
        rows = [r for r in timeline.rows if r["broker"] == b]
        t_isr = [r["t_s"] for r in rows if r["in_isr"]]
        t_out = [r["t_s"] for r in rows if not r["in_isr"]]
        t_lead = [r["t_s"] for r in rows if r["is_leader"]]
        t_gone = [r["t_s"] for r in rows if r["state"] != "up"]
        lanes.scatter(t_isr, [lane] * len(t_isr), marker="s", s=18, color=colors[b])
        lanes.scatter(t_out, [lane] * len(t_out), marker="s", s=18, facecolors="none", edgecolors=colors[b])
        lanes.scatter(t_lead, [lane + 0.3] * len(t_lead), marker="*", s=20, color="black")
        lanes.scatter(t_gone, [lane - 0.3] * len(t_gone), marker="x", s=12, color="tab:red")
    lanes.set_yticks(range(len(brokers)), [f"broker {b}" for b in brokers], fontsize=8)
    lanes.set_ylim(-0.7, len(brokers) - 0.3)
    lanes.set_xlabel("time (s)   ■ in ISR   □ out of ISR   ★ leader   × down/paused")
    mark_events(lanes, timeline.events, kinds=kinds, labels=False)
    return axes


def plot_acks(runs: Mapping[str, Any], *, ax: Any = None, events: Sequence[Mapping[str, Any]] = (),
              title: str = "acknowledged records") -> Any:
    """Cumulative acknowledged records over time, one line per ``ProduceLoad``; a flat
    stretch is the producer waiting (retrying) for a leader."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    for label, load in runs.items():
        points = load.ack_times()
        ax.step([t for t, _ in points], [n for _, n in points], where="post", label=label)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("records acknowledged")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(runs) > 1:
        ax.legend(fontsize=8)
    mark_events(ax, events)
    return ax


def plot_loss(results: Sequence[Mapping[str, Any]], *, ax: Any = None, title: str = "acknowledged, then lost") -> Any:
    """Bars of lost acknowledged records per run (``{"run", "acked", "lost"}`` rows),
    labelled "lost of acked"."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2))
    names = [r["run"] for r in results]
    lost = [r["lost"] for r in results]
    bars = ax.bar(names, lost, color=["tab:red" if n else "tab:green" for n in lost])
    ax.bar_label(bars, labels=[f"{r['lost']:,} of {r['acked']:,}" for r in results], fontsize=8)
    ax.set_ylabel("acknowledged records lost")
    ax.set_title(title)
    ax.set_ylim(0, max([1, *lost]) * 1.25)
    return ax


# ---------------------------------------------------------------- consumer groups


def plot_assignment(ownership: Sequence[Any], *, ax: Any = None, marks: Sequence[Mapping[str, Any]] = (),
                    until_s: float | None = None, title: str = "assignment over time") -> Any:
    """A lane per partition, coloured by the member that owned it when
    (``GroupLab.ownership()``); white where nobody did. ``marks`` as vertical lines."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4))
    tps = sorted({o.tp for o in ownership})
    members = sorted({o.member for o in ownership}, key=lambda m: (len(m), m))
    colors = {m: f"C{i % 10}" for i, m in enumerate(members)}
    end = until_s if until_s is not None else max(
        [o.end_s for o in ownership if o.end_s is not None] + [o.start_s for o in ownership] + [0.0])
    lane = {tp: i for i, tp in enumerate(tps)}
    for o in ownership:
        stop = o.end_s if o.end_s is not None else end
        ax.broken_barh([(o.start_s, max(stop - o.start_s, 1e-3))], (lane[o.tp] - 0.4, 0.8),
                       color=colors[o.member])
    for m in members:
        ax.bar(0, 0, color=colors[m], label=m)  # legend entries
    ax.set_yticks(range(len(tps)), [f"{tp.topic}-{tp.partition}" for tp in tps],
                  fontsize=7 if len(tps) <= 24 else 0)
    if len(tps) > 24:
        ax.set_ylabel(f"{len(tps)} partitions")
    ax.set_xlabel("time (s)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=min(len(members), 6), loc="upper left", bbox_to_anchor=(0, -0.15))
    mark_events(ax, marks)
    return ax


def plot_consuming(series: Mapping[str, tuple[Sequence[float], Sequence[int]]], *, ax: Any = None,
                   partitions: int | None = None, title: str = "partitions being consumed") -> Any:
    """One line per run: how many partitions had records polled in the last moment,
    against time since the rebalance began (``GroupLab.consuming_series``)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    for label, (t, counts) in series.items():
        ax.step(t, counts, where="post", label=label)
    if partitions:
        ax.axhline(partitions, color="grey", linewidth=0.8, linestyle=":")
        ax.set_ylim(0, partitions * 1.08)
    ax.axvline(0, color="tab:red", linestyle="--", linewidth=1)
    ax.set_xlabel("time since the member joined (s)")
    ax.set_ylabel("partitions consuming")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_pauses(stats: Mapping[str, Any], *, ax: Any = None,
                title: str = "longest gap in consumption, per partition") -> Any:
    """Each partition's longest gap during the rebalance (``PauseStats.gaps``), sorted:
    one curve per run, with the "kept consuming" threshold dashed."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    for i, (label, s) in enumerate(stats.items()):
        gaps = sorted(s.gaps.values())
        ax.step(range(1, len(gaps) + 1), gaps, where="mid", color=f"C{i}",
                label=f"{label}: {s.kept_consuming_fraction:.0%} kept consuming, max {s.max_gap_s:.2f} s")
        ax.axhline(s.threshold_s, color=f"C{i}", linestyle="--", linewidth=0.8)
    ax.set_xlabel("partitions, sorted by their longest gap")
    ax.set_ylabel("longest gap (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_lag(rows: Sequence[Mapping[str, Any]], *, ax: Any = None, names: Mapping[str, str] | None = None,
             marks: Sequence[Mapping[str, Any]] = (), span: tuple[float, float] | None = None,
             seconds: bool = False, title: str = "consumer lag per partition") -> Any:
    """A line per partition (``LagSampler.rows``): lag in records, or with ``seconds``
    the age of the next unread record; coloured by the member that owned the partition
    most of the time (``names`` maps member ids to names); ``span`` shaded (a stall)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2))
    names = names or {}
    key = "lag_seconds" if seconds else "lag"
    rows = sorted(rows, key=lambda r: r["t_s"])
    owner: dict[int, str] = {}
    for p in sorted({r["partition"] for r in rows}):
        held = [names.get(r["member_id"], "?") for r in rows if r["partition"] == p and r["member_id"]]
        owner[p] = max(sorted(set(held)), key=held.count) if held else "unassigned"
    members = sorted(set(owner.values()))
    styles = ["-", "--", ":", "-."]
    for p, member in owner.items():
        mine = [r for r in rows if r["partition"] == p and r[key] is not None]
        nth = [q for q, m in owner.items() if m == member].index(p)
        ax.plot([r["t_s"] for r in mine], [r[key] for r in mine], color=f"C{members.index(member) % 10}",
                linestyle=styles[nth % len(styles)], linewidth=1.3, label=f"partition {p} ({member})")
    if span is not None:
        ax.axvspan(*span, color="tab:red", alpha=0.08)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("lag (s)" if seconds else "lag (records)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    mark_events(ax, marks)
    return ax
