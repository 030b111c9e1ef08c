"""A consumer group's lag over time, sampled the way an operator would.

``LagSampler`` asks ``Admin.group_lag(group)`` — what ``mq group describe`` prints — every
``interval_s`` from a thread of its own, and keeps one row per partition per sample:
time, partition, owning member id, committed offset, log end, lag in records and in
seconds. ``plot_lag`` (``mq.lab.plots``) draws them.

    with LagSampler(admin, "billing", interval_s=0.2) as lag:
        ...                     # members run, one stalls
    lag.rows                    # [{"t_s": 1.2, "partition": 3, "lag": 140, ...}, ...]
"""

from __future__ import annotations

import threading
import time
from typing import Any, Self


class LagSampler:
    """Samples a group's lag in a background thread (see the module docstring)."""

    def __init__(self, admin: Any, group_id: str, *, interval_s: float = 0.2,
                 origin: float | None = None) -> None:
        self.admin = admin
        self.group_id = group_id
        self.interval_s = interval_s
        self.origin = time.monotonic() if origin is None else origin
        self.rows: list[dict[str, Any]] = []
        self.marks: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lag-{group_id}", daemon=True)

    def now_s(self) -> float:
        return time.monotonic() - self.origin

    def mark(self, label: str, *, kind: str = "event") -> float:
        """Note what the lab did now (vertical lines on the plot); returns the time."""
        t = self.now_s()
        self.marks.append({"t_s": round(t, 3), "kind": kind, "label": label})
        return t

    def sample(self) -> list[dict[str, Any]]:
        """One sample now (also what the thread does every ``interval_s``)."""
        t = round(self.now_s(), 3)
        rows = [{"t_s": t, "partition": r.tp.partition, "topic": r.tp.topic, "member_id": r.member_id,
                 "committed": r.committed, "log_end": r.log_end, "lag": r.lag, "lag_seconds": r.lag_seconds}
                for r in self.admin.group_lag(self.group_id)]
        self.rows.extend(rows)
        return rows

    def latest(self) -> dict[int, dict[str, Any]]:
        """The last row of each partition."""
        return {row["partition"]: row for row in self.rows}

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample()
            except Exception as error:  # noqa: BLE001 - a missed sample is noted, not fatal
                self.errors.append(f"{self.now_s():.1f} s: {error}")
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> LagSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
