"""Result lines, percentiles and version stamps shared by the benchmarks.

Percentiles are exact (nearest rank over every sorted sample), not an HdrHistogram
approximation: the sample counts here are at most a few hundred thousand, so
sorting them costs milliseconds and there is no bucketing error to explain.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024


def percentile(sorted_samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted samples (p in 0..100)."""
    if not sorted_samples:
        raise ValueError("no samples")
    # round away float noise first: 99.9% of 1,000 is rank 999, not 999.0000000000001 -> 1000
    rank = max(1, math.ceil(round(p * len(sorted_samples) / 100, 9)))
    return sorted_samples[min(rank, len(sorted_samples)) - 1]


def latency_summary(samples_ns: Sequence[int], *, of: str) -> dict[str, Any] | None:
    """p50/p99/p999/max in milliseconds, and what one sample measures."""
    if not samples_ns:
        return None
    ordered = sorted(samples_ns)
    ms = [s / 1e6 for s in ordered]
    return {
        "of": of, "samples": len(ms),
        "p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3),
        "p999_ms": round(percentile(ms, 99.9), 3), "max_ms": round(ms[-1], 3),
    }


@dataclass
class Result:
    """One measured run of one workload on one system."""

    workload: str  # P1, P1b, P2, P5
    system: str  # mq, nats-jetstream, redis-streams
    operation: str  # produce | consume
    run: int
    records: int
    size_bytes: int
    seconds: float
    latency: dict[str, Any] | None = None
    server_rss_mb: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def rec_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_json(self, versions: dict[str, str]) -> dict[str, Any]:
        total = self.records * self.size_bytes
        return {
            "workload": self.workload, "system": self.system, "operation": self.operation,
            "run": self.run, "records": self.records, "bytes": total,
            "seconds": round(self.seconds, 4), "rec_per_s": round(self.rec_per_s),
            "mb_per_s": round(total / MIB / self.seconds, 2) if self.seconds > 0 else 0.0,
            "latency": self.latency, "broker_rss_mb": self.server_rss_mb,
            "settings": self.settings, "versions": versions,
        }


def emit(line: dict[str, Any], out: Any = None) -> None:
    """Print one JSON line and flush (results stream out as they are measured)."""
    stream = out or sys.stdout
    stream.write(json.dumps(line, sort_keys=False) + "\n")
    stream.flush()


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def binary_version(argv: Sequence[str]) -> str:
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=10,
                                check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "absent"
    return (result.stdout or result.stderr).strip().splitlines()[0] if result.returncode == 0 else "absent"


def versions() -> dict[str, str]:
    """What ran: interpreter, mq, event loop and the peers' clients (servers are added
    by the peer handles once they start)."""
    import mq

    return {
        "python": platform.python_version(), "mq": mq.__version__,
        "uvloop": _package_version("uvloop"), "nats-py": _package_version("nats-py"),
        "redis-py": _package_version("redis"), "machine": f"{platform.machine()} {platform.system()}",
    }


def load_average() -> float:
    """The 1-minute load average, printed with every figure (a busy machine skews them)."""
    return round(os.getloadavg()[0], 2)
