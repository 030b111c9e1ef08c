"""Lag snapshots: one record per consumer group (or mirror flow) and partition per export round.

The lag exporter (``mq lag export``, started by ``mq up``) writes them to the topic
``__lag_snapshots``, keyed by ``kind:name:topic:partition``, with the round's time as the
record timestamp, and the PySpark job (``mq analytics lag``) reads them back. The value
is one JSON object (UTF-8), version 1::

    {"v": 1, "ts_ms": 1764000000000, "kind": "group", "region": "east",
     "group": "billing", "flow": null, "topic": "orders", "partition": 3,
     "committed": 1200, "log_end": 1450, "lag": 250, "lag_seconds": 4.2,
     "members": 2, "member_id": "consumer-1-...", "state": "Stable",
     "latency_p50_ms": null, "latency_p99_ms": null}

``kind`` is ``group`` (a consumer group: ``committed`` is its committed offset, ``log_end``
the high watermark, ``lag_seconds`` the age of the next unread record, ``members`` and
``state`` the group's) or ``mirror`` (a mirror flow, ``flow`` names it and ``region`` is
its target: ``committed`` is the mirrored end, ``log_end`` the source's high watermark,
``latency_*`` the replication latency the mirror measured; ``state`` is the partition's
state, or ``stale`` when the mirror's status file is older than ``STALE_STATUS_MS``).
Fields are ``null`` where there is nothing to say (no commit yet, topic deleted).

Pure functions only: the caller passes ``now_ms`` and the answers it collected.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

SNAPSHOT_TOPIC = "__lag_snapshots"
SNAPSHOT_VERSION = 1
STALE_STATUS_MS = 10_000
KINDS = ("group", "mirror")


@dataclass(frozen=True)
class LagSnapshot:
    ts_ms: int
    kind: str
    region: str
    topic: str
    partition: int
    group: str | None = None
    flow: str | None = None
    committed: int | None = None
    log_end: int | None = None
    lag: int | None = None
    lag_seconds: float | None = None
    members: int | None = None
    member_id: str | None = None
    state: str = ""
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None

    @property
    def name(self) -> str:
        """The group id or the flow name."""
        return (self.group if self.kind == "group" else self.flow) or ""

    @property
    def key(self) -> bytes:
        return f"{self.kind}:{self.name}:{self.topic}:{self.partition}".encode()

    def to_json(self) -> dict[str, Any]:
        return {"v": SNAPSHOT_VERSION, **asdict(self)}

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()


FIELD_NAMES = tuple(f.name for f in fields(LagSnapshot))


def decode(value: bytes | str) -> LagSnapshot:
    """A snapshot from its record value; ValueError naming what is wrong."""
    try:
        doc = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a lag snapshot: {exc}") from None
    if not isinstance(doc, dict) or doc.get("v") != SNAPSHOT_VERSION:
        raise ValueError(f"not a version {SNAPSHOT_VERSION} lag snapshot: {str(doc)[:80]}")
    try:
        return LagSnapshot(**{k: doc[k] for k in FIELD_NAMES if k in doc})
    except TypeError as exc:
        raise ValueError(f"not a lag snapshot: {exc}") from None


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)


def group_snapshots(region: str, group_id: str, state: str, members: int, lags: Iterable[Any],
                    now_ms: int) -> list[LagSnapshot]:
    """One snapshot per partition of ``lags`` (``mq.client.group_admin.PartitionLag``)."""
    return [LagSnapshot(now_ms, "group", region, r.tp.topic, r.tp.partition, group=group_id,
                        committed=r.committed, log_end=r.log_end, lag=r.lag,
                        lag_seconds=_seconds(r.lag_seconds), members=members, member_id=r.member_id,
                        state=state)
            for r in sorted(lags, key=lambda r: r.tp)]


def mirror_snapshots(status: Mapping[str, Any], now_ms: int) -> list[LagSnapshot]:
    """One snapshot per partition of a mirror's ``status.json`` document (its format is
    documented in ``mirror/status.py``; mq reads the file, it never imports the mirror)."""
    flow = str(status.get("flow") or "")
    region = str(status.get("target") or "")
    stale = status.get("state") != "stopped" and now_ms - int(status.get("updated_ms") or 0) > STALE_STATUS_MS
    out = []
    for p in status.get("partitions") or []:
        if not isinstance(p, dict) or "topic" not in p or "partition" not in p:
            continue
        out.append(LagSnapshot(
            now_ms, "mirror", region, str(p["topic"]), int(p["partition"]), flow=flow,
            committed=_int(p.get("mirrored_end")), log_end=_int(p.get("source_end")),
            lag=_int(p.get("lag_records")), lag_seconds=_seconds(p.get("lag_seconds")),
            state="stale" if stale else str(p.get("state") or ""),
            latency_p50_ms=_float(p.get("latency_p50_ms")), latency_p99_ms=_float(p.get("latency_p99_ms"))))
    return sorted(out, key=lambda s: (s.topic, s.partition))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


# ---------------------------------------------------------------- Prometheus text format


@dataclass(frozen=True)
class ExporterStats:
    """What the exporter reports about itself, per region."""

    region: str
    rounds: int = 0
    snapshots: int = 0
    errors: Mapping[str, int] | None = None
    last_round_ms: int | None = None  # wall time of the last finished round
    last_round_seconds: float | None = None  # how long it took


GAUGES = (
    # (name, help, kind, value of a snapshot)
    ("mq_consumergroup_current_offset", "Committed offset of the group (the next record it reads)", "group",
     "committed"),
    ("mq_consumergroup_log_end_offset", "High watermark of the partition", "group", "log_end"),
    ("mq_consumergroup_lag", "Records between the committed offset and the high watermark", "group", "lag"),
    ("mq_consumergroup_lag_seconds", "Age of the next record the group will read (0 when caught up)", "group",
     "lag_seconds"),
    ("mq_mirror_flow_lag", "Records of the source not yet mirrored (source end - mirrored end)", "mirror", "lag"),
    ("mq_mirror_flow_lag_seconds", "Age of the oldest source record not yet mirrored", "mirror", "lag_seconds"),
    ("mq_mirror_flow_replication_latency_p50_seconds", "Median replication latency the mirror measured",
     "mirror", "latency_p50_ms"),
    ("mq_mirror_flow_replication_latency_p99_seconds", "99th percentile replication latency the mirror measured",
     "mirror", "latency_p99_ms"),
)


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name: str, labels: Mapping[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{_label_value(str(v))}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {float(value)!r}"


def _family(name: str, help_text: str, kind: str, samples: Sequence[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def metrics_text(snapshots: Sequence[LagSnapshot], stats: Sequence[ExporterStats]) -> str:
    """The latest snapshots and the exporter's own counters in Prometheus' text format 0.0.4
    (the exporter's ``/metrics``)."""
    lines: list[str] = []
    for name, help_text, kind, attr in GAUGES:
        samples = []
        for s in snapshots:
            value = getattr(s, attr)
            if s.kind != kind or value is None:
                continue
            if attr.endswith("_ms"):
                value = value / 1000
            owner = {"group": s.group} if kind == "group" else {"flow": s.flow}
            samples.append(_sample(name, {"region": s.region, **owner, "topic": s.topic,
                                          "partition": str(s.partition)}, value))
        lines += _family(name, help_text, "gauge", samples)
    groups = sorted({(s.region, s.group or "", s.members or 0, s.state) for s in snapshots if s.kind == "group"})
    lines += _family("mq_consumergroup_members", "Members of the group", "gauge",
                     [_sample("mq_consumergroup_members", {"region": r, "group": g}, n) for r, g, n, _ in groups])
    lines += _family("mq_consumergroup_state", "1 for the group's state", "gauge",
                     [_sample("mq_consumergroup_state", {"region": r, "group": g, "state": st}, 1)
                      for r, g, _, st in groups])
    lines += _exporter_families(stats)
    return "\n".join(lines) + "\n"


def _exporter_families(stats: Sequence[ExporterStats]) -> list[str]:
    lines = _family("mq_lag_exporter_rounds_total", "Export rounds finished", "counter",
                    [_sample("mq_lag_exporter_rounds_total", {"region": s.region}, s.rounds) for s in stats])
    lines += _family("mq_lag_exporter_snapshots_total", "Snapshots written to __lag_snapshots", "counter",
                     [_sample("mq_lag_exporter_snapshots_total", {"region": s.region}, s.snapshots) for s in stats])
    lines += _family("mq_lag_exporter_errors_total", "Failed steps of export rounds, by kind", "counter",
                     [_sample("mq_lag_exporter_errors_total", {"region": s.region, "kind": k}, n)
                      for s in stats for k, n in sorted((s.errors or {}).items())])
    lines += _family("mq_lag_exporter_last_round_timestamp_seconds", "Wall time the last round finished",
                     "gauge", [_sample("mq_lag_exporter_last_round_timestamp_seconds", {"region": s.region},
                                       s.last_round_ms / 1000) for s in stats if s.last_round_ms is not None])
    lines += _family("mq_lag_exporter_last_round_duration_seconds", "How long the last round took", "gauge",
                     [_sample("mq_lag_exporter_last_round_duration_seconds", {"region": s.region},
                              s.last_round_seconds) for s in stats if s.last_round_seconds is not None])
    return lines
