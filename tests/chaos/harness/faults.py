"""Faults with their windows written to the history.

Each method does one fault to a ``BrokerNode`` and records ``invoke``/``ok`` nemesis
lines around it, so the checker can tell which sends were in flight during a fault
(the only ones a client retry may duplicate) and a reader of the history can line
anomalies up with what was done. ``schedule`` turns a seed into fault times, so
``MQ_SEED=<seed>`` replays the same plan.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from mq.core.rng import Rng

from .history import History
from .processes import BrokerNode


@dataclass(frozen=True)
class PlannedFault:
    at_s: float  # seconds after the start of the run
    kind: str  # kill | pause | terminate | power_loss
    hold_s: float  # how long the node stays down or paused


class Nemesis:
    def __init__(self, history: History, *, rng: random.Random | None = None) -> None:
        self.history = history
        self.rng = rng or random.Random(0)
        self.power_loss_reports: list[dict[str, int]] = []

    def _window(self, what: str, fault: Callable[[], None]) -> None:
        with self.window(what):
            fault()

    @contextmanager
    def window(self, what: str) -> Iterator[None]:
        """A fault window of any shape (a partition through the link proxy, several
        nodes at once): ``with nemesis.window("isolate n1"): ...`` writes its start and
        end to the history, even when the body raises."""
        self.history.nemesis_start(what)
        try:
            yield
        finally:
            self.history.nemesis_end(what)

    def kill(self, node: BrokerNode, *, down_s: float = 0.5) -> None:
        """SIGKILL, stay down ``down_s``, start again (same port and data dir)."""
        def fault() -> None:
            node.kill()
            time.sleep(down_s)  # the fault's duration, not a wait for a condition
            node.start()
        self._window(f"kill {node.name}", fault)

    def terminate(self, node: BrokerNode, *, down_s: float = 0.5) -> None:
        """SIGTERM (controlled shutdown), stay down ``down_s``, start again."""
        def fault() -> None:
            node.terminate()
            time.sleep(down_s)
            node.start()
        self._window(f"terminate {node.name}", fault)

    def pause(self, node: BrokerNode, *, hold_s: float = 2.0) -> None:
        """SIGSTOP for ``hold_s``, then SIGCONT."""
        def fault() -> None:
            node.pause()
            try:
                time.sleep(hold_s)
            finally:
                node.resume()
        self._window(f"pause {node.name}", fault)

    def power_loss(self, node: BrokerNode, *, down_s: float = 0.2, torn: bool = False) -> None:
        """SIGKILL, truncate every file to its fsynced length (``torn``: keep a random
        part of the unsynced tail), start again."""
        def fault() -> None:
            report = node.power_loss(rng=Rng(self.rng.getrandbits(32)) if torn else None)
            self.power_loss_reports.append(report)
            time.sleep(down_s)
            node.start()
        self._window(f"power_loss {node.name}", fault)

    def apply(self, fault: PlannedFault, node: BrokerNode) -> None:
        if fault.kind == "kill":
            self.kill(node, down_s=fault.hold_s)
        elif fault.kind == "terminate":
            self.terminate(node, down_s=fault.hold_s)
        elif fault.kind == "pause":
            self.pause(node, hold_s=fault.hold_s)
        elif fault.kind == "power_loss":
            self.power_loss(node, down_s=fault.hold_s)
        else:
            raise ValueError(f"unknown fault {fault.kind!r}")

    def run(self, plan: Sequence[PlannedFault], node: BrokerNode, *, start: float | None = None) -> None:
        """Apply ``plan`` in order, each at its ``at_s`` after ``start`` (monotonic)."""
        t0 = time.monotonic() if start is None else start
        for fault in plan:
            time.sleep(max(0.0, t0 + fault.at_s - time.monotonic()))  # the schedule itself
            self.apply(fault, node)


def schedule(rng: random.Random, kinds: Sequence[str], *, first_s: float, every_s: float,
             jitter_s: float, hold_s: float | Mapping[str, float]) -> list[PlannedFault]:
    """One fault per entry of ``kinds`` (in that order), ``every_s`` ± ``jitter_s``
    apart, starting near ``first_s``: the seed fixes every time. ``hold_s`` is one
    duration or one per kind (``{"kill": 0.5, "pause": 2.0}``)."""
    plan, at = [], first_s
    for kind in kinds:
        hold = hold_s[kind] if isinstance(hold_s, Mapping) else hold_s
        plan.append(PlannedFault(round(at + rng.uniform(-jitter_s, jitter_s), 3), kind, hold))
        at += every_s
    return plan

