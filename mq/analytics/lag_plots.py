"""The lag job's figures (matplotlib, from small pandas frames the job collected).

``lag_over_time``: per consumer (up to ``MAX_PANELS``), each partition's lag in seconds,
the threshold, the breach windows shaded and, with locust's history, the request rate on
a second axis. ``percentile_bars``: lag in seconds p50/p90/p99/max per consumer.
``skew_bars``: per partition, its share of the consumer's lag. ``mirror_lag``: per flow,
lag in records and the replication latency p99 over time.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

MAX_PANELS = 6


def _label(row: Any) -> str:
    return f"{row['kind']} {row['name']} ({row['region']})" if row["region"] else f"{row['kind']} {row['name']}"


def lag_over_time(snapshots: Any, breaches: Any, threshold_s: float, load: Any = None) -> Any:
    """``snapshots``/``breaches``/``load``: pandas frames (load: time, requests_per_s, users)."""
    keys = snapshots[["kind", "region", "name"]].drop_duplicates().head(MAX_PANELS)
    fig, axes = plt.subplots(max(1, len(keys)), 1, figsize=(10, 2.8 * max(1, len(keys))), squeeze=False)
    t0 = snapshots["ts_ms"].min() if len(snapshots) else 0
    for ax, (_, key) in zip(axes[:, 0], keys.iterrows(), strict=False):
        mine = snapshots[(snapshots["kind"] == key["kind"]) & (snapshots["region"] == key["region"])
                         & (snapshots["name"] == key["name"])]
        for (topic, partition), part in mine.groupby(["topic", "partition"]):
            part = part.sort_values("ts_ms")
            ax.plot((part["ts_ms"] - t0) / 1000, part["lag_seconds"], lw=1.2, label=f"{topic}-{partition}")
        ax.axhline(threshold_s, color="red", ls="--", lw=1, label=f"threshold {threshold_s:g} s")
        if len(breaches):
            mine_b = breaches[(breaches["kind"] == key["kind"]) & (breaches["region"] == key["region"])
                              & (breaches["name"] == key["name"])]
            for _, b in mine_b.iterrows():
                ax.axvspan((b["start_ms"] - t0) / 1000, (b["end_ms"] - t0) / 1000, color="red", alpha=0.12)
        ax.set_title(_label(key), fontsize=10)
        ax.set_ylabel("lag (s)")
        if load is not None and len(load):
            twin = ax.twinx()
            twin.plot((load["ts_ms"] - t0) / 1000, load["requests_per_s"], color="grey", lw=1, alpha=0.7)
            twin.set_ylabel("requests/s", color="grey")
        ax.legend(fontsize=7, loc="upper left", ncol=4)
    axes[-1, 0].set_xlabel("seconds since the first snapshot")
    fig.tight_layout()
    return fig


def percentile_bars(percentiles: Any) -> Any:
    fig, ax = plt.subplots(figsize=(8, 3.2))
    labels = [_label(r) for _, r in percentiles.iterrows()]
    columns = ["lag_seconds_p50", "lag_seconds_p90", "lag_seconds_p99", "lag_seconds_max"]
    width = 0.8 / len(columns)
    for i, column in enumerate(columns):
        ax.bar([x + i * width for x in range(len(labels))], percentiles[column].fillna(0), width,
               label=column.removeprefix("lag_seconds_"))
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))], labels, fontsize=8)
    ax.set_ylabel("lag (s)")
    ax.set_title("lag in seconds per consumer")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def skew_bars(share: Any) -> Any:
    """The consumer whose lag is the most concentrated: its partitions' shares."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    if len(share):
        worst = share.sort_values("share", ascending=False).iloc[0]
        mine = share[(share["kind"] == worst["kind"]) & (share["region"] == worst["region"])
                     & (share["name"] == worst["name"])].sort_values(["topic", "partition"])
        ax.bar([f"{t}-{p}" for t, p in zip(mine["topic"], mine["partition"], strict=True)], mine["share"])
        ax.set_title(f"share of the lag per partition: {_label(worst)}", fontsize=10)
    ax.set_ylabel("share of lag")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    return fig


def mirror_lag(consumers: Any) -> Any:
    flows = consumers[consumers["kind"] == "mirror"]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    t0 = consumers["ts_ms"].min() if len(consumers) else 0
    twin = ax.twinx()
    for name, flow in flows.groupby("name"):
        flow = flow.sort_values("ts_ms")
        ax.plot((flow["ts_ms"] - t0) / 1000, flow["lag"], label=f"{name}: lag (records)")
        twin.plot((flow["ts_ms"] - t0) / 1000, flow["latency_p99_ms"], ls=":", label=f"{name}: latency p99 (ms)")
    ax.set_xlabel("seconds since the first snapshot")
    ax.set_ylabel("lag (records)")
    twin.set_ylabel("replication latency p99 (ms)")
    ax.set_title("mirror flows")
    ax.legend(fontsize=8, loc="upper left")
    twin.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig
