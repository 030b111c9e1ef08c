"""The flow's status file, ``<data_dir>/mirror-<flow>/status.json``, and its table.

The mirror rewrites the file every second (write to a temporary file, then rename: a
reader never sees half a file). ``python -m mirror status``, ``mq mirror status`` and
``mq status`` read it; so does fail-over, for the last known figures when the source
region does not answer. The document::

    {"flow": "east->west", "source": "east", "target": "west", "pid": 4242,
     "state": "running" | "stalled" | "blocked" | "starting" | "stopped",
     "reason": "...", "updated_ms": <wall ms>, "metrics": "127.0.0.1:9464",
     "topics": {"orders": 6}, "problems": {"audit": "..."}, "skipped": {...},
     "heartbeats": {"enabled": true, "reason": "", "latency_p50_ms": 41, "latency_p99_ms": 60},
     "groups": {"billing": {"synced_ms": ..., "committed": 12, "clamped": 0, "skipped": ""}},
     "totals": {"records_mirrored": ..., "bytes_mirrored": ..., "lag_records": ..., "gap_records": ...},
     "partitions": [{"topic": "orders", "partition": 0, "state": "running", "reason": "",
                     "source_end": 1000, "source_log_start": 0, "mirrored_end": 990,
                     "lag_records": 10, "lag_seconds": 0.05, "latency_p50_ms": 40,
                     "latency_p99_ms": 75, "records_mirrored": ..., "bytes_mirrored": ...,
                     "gap_records": 0, "gaps": [[from, to], ...], "source_seen_wall_ms": ...}]}
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mirror.flow_config import flow_dir_name


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


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell under a ruled header (mq.cli.output's style,
    without its terminal library: ``mirror`` may not import it)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [" ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             " ".join("─" * w for w in widths)]
    lines += [" ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


PARTITION_COLUMNS = ("topic", "partition", "state", "source end", "mirrored end", "lag",
                     "lag s", "p50 ms", "p99 ms", "reason")


def describe(doc: Mapping[str, Any], *, now_ms: int) -> str:
    """One flow's status for people: a header line, the partitions, problems and gaps."""
    age = (now_ms - int(doc.get("updated_ms", now_ms))) / 1000
    head = (f"flow {doc.get('flow')}: {doc.get('source')} -> {doc.get('target')}  "
            f"state {doc.get('state')}  pid {doc.get('pid')}  updated {age:.1f} s ago")
    if doc.get("reason"):
        head += f"\n  {doc['reason']}"
    if age > 5 and doc.get("state") != "stopped":
        head += "\n  (the status is old: is the mirror process running?)"
    rows = [[p.get("topic"), p.get("partition"), p.get("state"), p.get("source_end"),
             p.get("mirrored_end"), p.get("lag_records"), p.get("lag_seconds"),
             p.get("latency_p50_ms"), p.get("latency_p99_ms"), p.get("reason") or ""]
            for p in doc.get("partitions", [])]
    out = [head, format_table(PARTITION_COLUMNS, rows)]
    hb = doc.get("heartbeats") or {}
    if hb:
        out.append(f"heartbeats: replication latency p50 {_cell(hb.get('latency_p50_ms'))} ms, "
                   f"p99 {_cell(hb.get('latency_p99_ms'))} ms"
                   + ("" if hb.get("enabled", True) else f" (not written: {hb.get('reason')})"))
    for name, why in sorted((doc.get("problems") or {}).items()):
        out.append(f"problem: {name}: {why}")
    for p in doc.get("partitions", []):
        for lo, hi in p.get("gaps") or []:
            out.append(f"gap: {p['topic']}-{p['partition']}: offsets [{lo}, {hi}) deleted in the "
                       f"source before they were mirrored ({hi - lo} records lost)")
    for group, g in sorted((doc.get("groups") or {}).items()):
        if g.get("skipped"):
            out.append(f"group {group}: {g['skipped']}")
    return "\n".join(out)
