"""Replication latency samples over a sliding window: p50 and p99 for the status file.

A sample is (wall time of arrival in the target, latency in ms). The window keeps the
samples of the last ``max_age_ms`` (at most ``max_samples``, the newest), so the
percentiles describe the flow now, not since start. Sans-IO: time is an argument.
"""

from __future__ import annotations

import math
from collections import deque


class LatencyWindow:
    def __init__(self, *, max_age_ms: int = 60_000, max_samples: int = 4096) -> None:
        self.max_age_ms = max_age_ms
        self._samples: deque[tuple[int, int]] = deque(maxlen=max_samples)
        self.last_ms: int | None = None  # the newest sample's latency

    def add(self, wall_ms: int, latency_ms: int) -> None:
        self._samples.append((wall_ms, latency_ms))
        self.last_ms = latency_ms

    def _expire(self, wall_ms: int) -> None:
        horizon = wall_ms - self.max_age_ms
        samples = self._samples
        while samples and samples[0][0] < horizon:
            samples.popleft()

    def percentile(self, q: float, wall_ms: int) -> int | None:
        """The ``q`` quantile (0..1, nearest rank) of the window's latencies; None if empty."""
        self._expire(wall_ms)
        if not self._samples:
            return None
        ordered = sorted(latency for _, latency in self._samples)
        rank = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
        return ordered[rank]

    def count(self, wall_ms: int) -> int:
        self._expire(wall_ms)
        return len(self._samples)
