"""Sample a partition's replicas over time, with the faults a lab injects marked.

``Timeline`` asks the region for ``partition_state`` every ``interval_s`` in a
background thread and keeps plain rows (a list of dicts, one per replica per sample,
with ``t_s``), so a notebook can print, filter or plot them without pandas. It notes
on its own when the leader or the ISR changes (``kind`` ``election`` / ``isr``) and
when the controller fences or unfences a broker (``fenced`` / ``unfenced``), and
``mark("kill 2", kind="kill")`` adds what the lab did, on the same clock.

    with cluster.timeline("orders", origin=load.origin) as timeline:
        ...
        timeline.mark(f"kill {leader}", kind="kill")
    plot_replicas(timeline)
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, Self

Sampler = Callable[[], list[dict[str, Any]]]


class Timeline:
    def __init__(self, sample: Sampler, *, topic: str, partition: int = 0, interval_s: float = 0.1,
                 origin: float | None = None) -> None:
        self._sample = sample
        self.topic = topic
        self.partition = partition
        self.interval_s = interval_s
        self.origin = time.monotonic() if origin is None else origin
        self.rows: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[int, int, tuple[int, ...]] | None = None  # leader, epoch, ISR
        self._fenced: set[int] = set()

    def now_s(self) -> float:
        return time.monotonic() - self.origin

    def mark(self, label: str, *, kind: str = "event") -> float:
        """Note an event at the current time; returns that time."""
        t = self.now_s()
        with self._lock:
            self.events.append({"t_s": round(t, 3), "kind": kind, "label": label})
        return t

    def sample_once(self) -> list[dict[str, Any]]:
        t = self.now_s()
        rows = [{"t_s": round(t, 3), **row} for row in self._sample()]
        with self._lock:
            self.rows.extend(rows)
            self._note_changes(t, rows)
        return rows

    def _note_changes(self, t: float, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        leader = next((r["broker"] for r in rows if r["is_leader"]), -1)
        epoch = rows[0]["leader_epoch"]
        isr = tuple(r["broker"] for r in rows if r["in_isr"])
        now = (leader, epoch, isr)
        if self._last is not None and now != self._last:
            if (leader, epoch) != self._last[:2]:
                self.events.append({"t_s": round(t, 3), "kind": "election",
                                    "label": f"leader {self._last[0]}→{leader} (epoch {epoch})"})
            if isr != self._last[2]:
                self.events.append({"t_s": round(t, 3), "kind": "isr", "label": f"ISR {list(isr)}"})
        self._last = now
        fenced = {r["broker"] for r in rows if r.get("fenced")}
        for b in sorted(fenced - self._fenced):
            self.events.append({"t_s": round(t, 3), "kind": "fenced", "label": f"{b} fenced"})
        for b in sorted(self._fenced - fenced):
            self.events.append({"t_s": round(t, 3), "kind": "unfenced", "label": f"{b} unfenced"})
        self._fenced = fenced

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name=f"timeline-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Self:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def series(self, broker: int, key: str) -> tuple[list[float], list[Any]]:
        """``(times, values)`` of one column for one replica; NaN where it was unknown
        (down or paused), so a plotted line breaks there instead of bridging the gap."""
        with self._lock:
            picked = [(r["t_s"], r[key]) for r in self.rows if r["broker"] == broker]
        return [t for t, _ in picked], [math.nan if v is None else v for _, v in picked]

    def brokers(self) -> list[int]:
        with self._lock:
            return sorted({r["broker"] for r in self.rows})

    def first(self, kind: str, *, after_s: float = 0.0) -> dict[str, Any] | None:
        """The first event of ``kind`` at or after ``after_s``."""
        with self._lock:
            return next((e for e in sorted(self.events, key=lambda e: e["t_s"])
                         if e["kind"] == kind and e["t_s"] >= after_s), None)
