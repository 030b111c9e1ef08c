"""The flow's status file, ``<data_dir>/mirror-<flow>/status.json``, and its table.

The mirror rewrites the file every second (write to a temporary file, then rename: a
reader never sees half a file). ``python -m mirror status``, ``mq mirror status`` and
``mq status`` read it; so does fail-over, for the last known figures when the source
region does not answer. The document::

    {"flow": "east->west", "source": "east", "target": "west", "pid": 4242,
     "state": "running" | "stalled" | "blocked" | "starting" | "stopped",
     "reason": "...", "updated_ms": <wall ms>, "metrics": "127.0.0.1:9464",
     "topics": {"orders": 6}, "problems": {"audit": "..."}, "skipped": {...},
     "source_unreachable": false, "source_heard_at_ms": ..., "source_silent_s": 0.2,
     "lag_records": 10, "lag_records_lower_bound": false, "lag_as_of_ms": ...,
     "source_rate_per_s": 380.0, "lag_records_estimate": null,
     "heartbeats": {"enabled": true, "reason": "", "latency_p50_ms": 41, "latency_p99_ms": 60},
     "groups": {"billing": {"synced_ms": ..., "committed": 12, "clamped": 0, "skipped": ""}},
     "totals": {"records_mirrored": ..., "bytes_mirrored": ..., "lag_records": ..., "gap_records": ...},
     "partitions": [{"topic": "orders", "partition": 0, "state": "running", "reason": "",
                     "source_end": 1000, "source_log_start": 0, "mirrored_end": 990,
                     "lag_records": 10, "lag_seconds": 0.05, "latency_p50_ms": 40,
                     "latency_p99_ms": 75, "records_mirrored": ..., "bytes_mirrored": ...,
                     "gap_records": 0, "gaps": [[from, to], ...], "source_seen_wall_ms": ...,
                     "source_unreachable": false, "source_silent_s": 0.2,
                     "source_rate_per_s": 60.0, "lag_records_estimate": null}]}

While the source is not heard (the link is cut, the region is down: ``source_unreachable``)
the lags are the last known source end minus the mirrored end: lower bounds, as of
``source_seen_wall_ms`` (``lag_as_of_ms`` for the flow); ``lag_records_estimate`` adds the
last known produce rate x the seconds since the source was last heard, an estimate
(``mirror.source_rate``). The tables say so: ``>=`` before a lower bound, ``~`` before an
estimate, and a line with the time of the last answer.
"""

from __future__ import annotations

import glob
import json
import os
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mirror.flow_config import flow_dir_name
from mirror.source_rate import lag_estimate


def write_status(path: str, doc: Mapping[str, Any]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def read_status(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def status_paths(data_dir: str, flows: Iterable[str] = ()) -> list[str]:
    """The status files of ``flows`` (all flows found in ``data_dir`` when none are named)."""
    names = list(flows)
    if names:
        return [os.path.join(data_dir, flow_dir_name(f), "status.json") for f in names]
    return sorted(glob.glob(os.path.join(glob.escape(data_dir), "mirror-*", "status.json")))


def flow_state(partition_states: Sequence[str]) -> str:
    if "blocked" in partition_states:
        return "blocked"
    if "stalled" in partition_states:
        return "stalled"
    if "waiting" in partition_states:
        return "starting"
    return "running"


# ---------------------------------------------------------------- the table


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, width: int | None = None,
                 priorities: Sequence[int] | None = None) -> str:
    """Columns padded to their widest cell under a ruled header (mq.cli.output's style,
    without its terminal library: ``mirror`` may not import it). Cells never wrap: when
    the table is wider than ``width``, whole columns go, the highest ``priorities`` number
    first (0: always kept; the rightmost of equals first), and a last line says which."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    keep = list(range(len(headers)))
    ranks = list(priorities) if priorities is not None else [0] * len(headers)
    while width is not None and sum(widths[i] for i in keep) + len(keep) - 1 > width:
        droppable = [i for i in keep if ranks[i] > 0]
        if not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (ranks[i], i)))
    lines = [" ".join(headers[i].ljust(widths[i]) for i in keep).rstrip(),
             " ".join("─" * widths[i] for i in keep)]
    lines += [" ".join(row[i].ljust(widths[i]) for i in keep).rstrip() for row in cells]
    dropped = [headers[i] for i in range(len(headers)) if i not in keep]
    if dropped:
        lines.append(textwrap.fill(f"({', '.join(dropped)} left out to fit {width} columns; --json has every "
                                   f"field)", width or 80, break_on_hyphens=False))
    return "\n".join(lines)


STOPPED_STATES = ("stopped", "failed-over")

# (header, priority): 0 always shown, higher numbers left out first on a narrow terminal
PARTITION_COLUMNS = (("TOPIC", 0), ("PARTITION", 0), ("STATE", 0), ("SOURCE-END", 2), ("MIRRORED-END", 1),
                     ("LAG", 0), ("LAG-ESTIMATE", 1), ("LAG-S", 3), ("P50-MS", 4), ("P99-MS", 3),
                     ("HEARD-S-AGO", 1))


def clock(ms: Any) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000)) if isinstance(ms, (int, float)) else "unknown"


def partition_estimate(p: Mapping[str, Any], now_ms: int) -> int | None:
    """A silent partition's lag estimate as of ``now_ms`` (the file's is as of its writing)."""
    if not p.get("source_unreachable"):
        return None
    lag, rate, seen = p.get("lag_records"), p.get("source_rate_per_s"), p.get("source_seen_wall_ms")
    if seen is None:
        return p.get("lag_records_estimate")
    return lag_estimate(lag, rate, now_ms - seen)


def flow_estimate(doc: Mapping[str, Any], now_ms: int) -> int | None:
    """The flow's lag estimate as of ``now_ms``: silent partitions' estimates plus the
    others' lags (None when the source is heard, or a figure is missing)."""
    parts = doc.get("partitions") or []
    if not doc.get("source_unreachable") or not parts:
        return doc.get("lag_records_estimate") if doc.get("source_unreachable") else None
    values = [partition_estimate(p, now_ms) if p.get("source_unreachable") else p.get("lag_records")
              for p in parts]
    return None if any(v is None for v in values) else sum(values)  # type: ignore[misc]


def partition_row(p: Mapping[str, Any], now_ms: int) -> list[Any]:
    """One partition as ``PARTITION_COLUMNS``: while its source is not heard, the lag is
    marked a lower bound (``>=``) and the estimate (``~``) is shown."""
    unheard = bool(p.get("source_unreachable"))
    lag = p.get("lag_records")
    estimate = partition_estimate(p, now_ms)
    seen = p.get("source_seen_wall_ms")
    return [p.get("topic"), p.get("partition"), p.get("state"), p.get("source_end"), p.get("mirrored_end"),
            f">={lag}" if unheard and lag is not None else lag,
            f"~{estimate}" if unheard and estimate is not None else None,
            p.get("lag_seconds"), p.get("latency_p50_ms"), p.get("latency_p99_ms"),
            round(max(0, now_ms - seen) / 1000, 1) if isinstance(seen, (int, float)) else None]


def unheard_line(doc: Mapping[str, Any], now_ms: int) -> str:
    """A flow whose source is not heard: since when, the lag as a lower bound as of then,
    and the estimate, each called what it is."""
    source = doc.get("source")
    heard = doc.get("source_heard_at_ms")
    if isinstance(heard, (int, float)):
        text = f"source {source} not heard for {max(0, now_ms - heard) / 1000:.1f} s (last answer at {clock(heard)})"
    else:
        text = f"source {source} never heard"
    if doc.get("lag_records") is not None:
        text += (f"; lag >= {doc['lag_records']} records as of {clock(doc.get('lag_as_of_ms'))}, a lower "
                 f"bound ({source} may have taken more since)")
    rate, estimate = doc.get("source_rate_per_s"), flow_estimate(doc, now_ms)
    if rate is not None and estimate is not None and isinstance(heard, (int, float)):
        text += (f"; estimate ~{estimate} records (last known produce rate {rate:g} rec/s x "
                 f"{max(0, now_ms - heard) / 1000:.1f} s)")
    else:
        text += "; no estimate (the produce rate was not measured before the source went silent)"
    return text


def describe(doc: Mapping[str, Any], *, now_ms: int, width: int | None = None) -> str:
    """One flow's status for people: a header line, what is known of a silent source, the
    partitions (fitted to ``width``), their reasons, problems and gaps."""
    def prose(text: str, indent: str = "") -> str:  # words wrap at the terminal's width, never mid-word
        if width is None:
            return indent + text
        return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "    ",
                             break_on_hyphens=False)

    age = (now_ms - int(doc.get("updated_ms", now_ms))) / 1000
    # A flow that no longer runs says what it knew when it stopped, not an extrapolation to now.
    live = doc.get("state") not in STOPPED_STATES
    at = now_ms if live else int(doc.get("updated_ms", now_ms))
    head = [(f"flow {doc.get('flow')}: {doc.get('source')} -> {doc.get('target')}  "
             f"state {doc.get('state')}  pid {doc.get('pid')}  updated {age:.1f} s ago")]
    if doc.get("reason"):
        head.append(prose(doc["reason"], "  "))
    if doc.get("source_unreachable"):
        when = "" if live else f"when the flow stopped ({clock(at)}): "
        head.append(prose(when + unheard_line(doc, at), "  "))
    if age > 5 and doc.get("state") != "stopped":
        head.append("  (the status is old: is the mirror process running?)")
    partitions = doc.get("partitions", [])
    rows = [partition_row(p, at) for p in partitions]
    table = format_table([h for h, _ in PARTITION_COLUMNS], rows, width=width,
                         priorities=[r for _, r in PARTITION_COLUMNS])
    out = ["\n".join(head), table]
    reasons: dict[str, list[str]] = {}
    for p in partitions:
        if p.get("reason"):
            reasons.setdefault(p["reason"], []).append(f"{p['topic']}-{p['partition']}")
    for why, where in reasons.items():
        out.append(prose(f"{', '.join(where)}: {why}"))
    hb = doc.get("heartbeats") or {}
    if hb:
        out.append(f"heartbeats: replication latency p50 {_cell(hb.get('latency_p50_ms'))} ms, "
                   f"p99 {_cell(hb.get('latency_p99_ms'))} ms"
                   + ("" if hb.get("enabled", True) else f" (not written: {hb.get('reason')})"))
    for name, why in sorted((doc.get("problems") or {}).items()):
        out.append(f"problem: {name}: {why}")
    for p in partitions:
        for lo, hi in p.get("gaps") or []:
            out.append(f"gap: {p['topic']}-{p['partition']}: offsets [{lo}, {hi}) deleted in the "
                       f"source before they were mirrored ({hi - lo} records lost)")
    for group, g in sorted((doc.get("groups") or {}).items()):
        if g.get("skipped"):
            out.append(f"group {group}: {g['skipped']}")
    return "\n".join(out)
