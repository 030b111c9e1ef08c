"""The history checker of TESTING.md, for partition logs: linear in the history.

Offsets already order every partition, so no search is needed (Jepsen's Kafka
checker builds the same "version order" from acks and polls). One pass over the
history collects sends, acks, reads and fault windows; a second pass over the
collected values counts the anomalies:

- ``lost``: acknowledged, never read, although a reader got past its offset.
- ``unseen``: acknowledged, never read, beyond the highest offset any reader reached
  (the final drain reads to the end, so after it this is loss at the tail).
- ``duplicates``: a value read at two or more offsets.
- ``unexplained_duplicates``: duplicates whose send was not in flight during a fault
  window (a client retry can only duplicate a batch whose answer a fault ate).
- ``inconsistent_offsets``: one (partition, offset) read with two different values.
- ``reorders``: one reader's offsets going backwards (or repeating) in a partition.
- ``skips``: one reader's offsets jumping forward over offsets not declared as gaps.
- ``unexpected``: a value read that nobody sent.
- ``failed_read``: a value read whose send definitely failed.
- ``offset_mismatches``: acknowledged at offset X but read only elsewhere.

A history holds one topic. Read values are strings (what the workload sent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from .history import Op, read_history

ANOMALIES = ("lost", "unseen", "duplicates", "unexplained_duplicates", "inconsistent_offsets",
             "reorders", "skips", "unexpected", "failed_read", "offset_mismatches")
TALLIES = ("attempted", "acked", "failed", "indeterminate", "recovered", "read_records",
           "distinct_read", "faults")
MAX_EXAMPLES = 32

Gaps = Mapping[int, Sequence[tuple[int, int]]]


@dataclass(frozen=True)
class CheckResult:
    """Counts of every anomaly and tally, up to 32 examples of each anomaly, and what a
    reader needs to replay the run (seed, history path)."""

    counts: Mapping[str, int]
    examples: Mapping[str, tuple[str, ...]]
    seed: int | None = None
    history_path: str | None = None

    def __getattr__(self, name: str) -> int:
        counts = self.__dict__.get("counts", {})
        if name in counts:
            return counts[name]
        raise AttributeError(name)

    @property
    def lost_total(self) -> int:
        """Acknowledged values not in the log at the end: lost + unseen."""
        return self.counts["lost"] + self.counts["unseen"]

    def summary(self) -> str:
        parts = [f"{k}={self.counts[k]}" for k in (*TALLIES, *ANOMALIES)]
        return " ".join(parts)

    def failures(self, *, allow_lost: bool = False, allow_fault_duplicates: bool = False) -> list[str]:
        allowed = set()
        if allow_lost:
            allowed |= {"lost", "unseen", "offset_mismatches"}
        if allow_fault_duplicates:
            allowed.add("duplicates")  # unexplained_duplicates stays checked
        return [k for k in ANOMALIES if self.counts[k] and k not in allowed]

    def assert_ok(self, *, allow_lost: bool = False, allow_fault_duplicates: bool = False) -> None:
        """Raise AssertionError listing counts, examples, the seed and the history path
        when any anomaly not allowed is non-zero. ``allow_lost`` accepts lost, unseen and
        moved acks (a measurement, not a guarantee); ``allow_fault_duplicates`` accepts
        duplicates as long as each one comes from a send in flight during a fault."""
        bad = self.failures(allow_lost=allow_lost, allow_fault_duplicates=allow_fault_duplicates)
        if not bad:
            return
        lines = [f"history check failed: {', '.join(f'{k}={self.counts[k]}' for k in bad)}",
                 f"counts: {self.summary()}",
                 f"replay: MQ_SEED={self.seed}  history: {self.history_path}"]
        for k in bad:
            lines.append(f"{k} (first {len(self.examples[k])}):")
            lines.extend(f"  {e}" for e in self.examples[k][:8])
        raise AssertionError("\n".join(lines))


@dataclass
class _Send:
    invoke_ms: int
    end_ms: int | None = None
    status: str = "pending"  # ok | fail | info | pending (never completed: unknown)
    partition: int | None = None
    offset: int | None = None


@dataclass
class _Collected:
    sends: dict[str, _Send] = field(default_factory=dict)
    windows: list[tuple[int, float]] = field(default_factory=list)
    at: dict[tuple[int, int], str] = field(default_factory=dict)
    inconsistent: dict[tuple[int, int], set[str]] = field(default_factory=dict)
    positions: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    max_read: dict[int, int] = field(default_factory=dict)
    read_records: int = 0
    end_ms: int = 0


class _Examples:
    def __init__(self) -> None:
        self.counts = dict.fromkeys(ANOMALIES, 0)
        self.examples: dict[str, list[str]] = {k: [] for k in ANOMALIES}

    def add(self, kind: str, text: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append(text)


def _covered(start: int, stop: int, gaps: Sequence[tuple[int, int]]) -> bool:
    """Whether every offset in [start, stop) lies in one of the half-open ``gaps``."""
    pos = start
    for lo, hi in sorted(gaps):
        if lo <= pos < hi:
            pos = hi
        if pos >= stop:
            return True
    return pos >= stop


def _collect(ops: Iterable[Op], found: _Examples, gaps: Gaps) -> _Collected:
    c = _Collected()
    nemesis_open: dict[str, list[int]] = {}
    streams: dict[tuple[str, int], int] = {}
    for op in ops:
        c.end_ms = max(c.end_ms, op.time_ms)
        if op.op == "send":
            if op.value is None:
                continue
            if op.type == "invoke":
                c.sends[op.value] = _Send(op.time_ms)
                continue
            send = c.sends.setdefault(op.value, _Send(op.time_ms))
            send.status, send.end_ms = op.type, op.time_ms
            send.partition, send.offset = op.partition, op.offset
        elif op.op == "nemesis":
            key = str(op.value)
            if op.type == "invoke":
                nemesis_open.setdefault(key, []).append(op.time_ms)
            elif nemesis_open.get(key):
                c.windows.append((nemesis_open[key].pop(0), op.time_ms))
        elif op.op == "read" and op.type == "ok" and op.value is not None:
            _read(c, op, streams, found, gaps)
    c.windows.extend((start, float("inf")) for starts in nemesis_open.values() for start in starts)
    return c


def _read(c: _Collected, op: Op, streams: dict[tuple[str, int], int], found: _Examples,
          gaps: Gaps) -> None:
    p, off, value = int(op.partition or 0), int(op.offset if op.offset is not None else -1), op.value
    assert value is not None
    c.read_records += 1
    seen = c.at.setdefault((p, off), value)
    if seen != value:
        c.inconsistent.setdefault((p, off), {seen}).add(value)
    where = c.positions.setdefault(value, [])
    if (p, off) not in where:
        where.append((p, off))
    c.max_read[p] = max(c.max_read.get(p, -1), off)
    stream = (str(op.process), p)
    last = streams.get(stream)
    streams[stream] = off
    if last is None:
        return
    if off <= last:
        found.add("reorders", f"reader {op.process} p{p}: offset {off} after {last}")
    elif off > last + 1 and not _covered(last + 1, off, gaps.get(p, ())):
        found.add("skips", f"reader {op.process} p{p}: jumped from {last} to {off}")


def check(ops: Iterable[Op], *, allowed_gaps: Gaps | None = None, seed: int | None = None,
          history_path: str | Path | None = None) -> CheckResult:
    """Check a history (ops in the order they were recorded). ``allowed_gaps`` maps a
    partition to half-open offset ranges a reader may jump over (deleted records,
    transaction markers, compaction)."""
    found = _Examples()
    c = _collect(ops, found, allowed_gaps or {})
    for (p, off), values in sorted(c.inconsistent.items()):
        found.add("inconsistent_offsets", f"p{p}@{off} read as {sorted(values)}")
    tallies = dict.fromkeys(TALLIES, 0)
    tallies.update(attempted=len(c.sends), read_records=c.read_records,
                   distinct_read=len(c.positions), faults=len(c.windows))
    for value, send in c.sends.items():
        read_at = c.positions.get(value)
        if send.status == "ok":
            tallies["acked"] += 1
            _check_acked(value, send, read_at, c, found)
        elif send.status == "fail":
            tallies["failed"] += 1
            if read_at:
                found.add("failed_read", f"{value} failed but read at {_where(read_at)}")
        else:
            tallies["indeterminate"] += 1
            tallies["recovered"] += bool(read_at)
        if read_at and len(read_at) > 1:
            found.add("duplicates", f"{value} read at {_where(read_at)}")
            end = send.end_ms if send.end_ms is not None else c.end_ms
            if not any(send.invoke_ms <= hi and lo <= end for lo, hi in c.windows):
                found.add("unexplained_duplicates",
                          f"{value} read at {_where(read_at)}, sent {send.invoke_ms}-{end} ms "
                          f"outside every fault window")
    for value, read_at in c.positions.items():
        if value not in c.sends:
            found.add("unexpected", f"{value} read at {_where(read_at)} but never sent")
    counts = {**tallies, **found.counts}
    examples = {k: tuple(v) for k, v in found.examples.items()}
    return CheckResult(MappingProxyType(counts), MappingProxyType(examples), seed,
                       str(history_path) if history_path is not None else None)


def _check_acked(value: str, send: _Send, read_at: list[tuple[int, int]] | None, c: _Collected,
                 found: _Examples) -> None:
    p, off = int(send.partition or 0), send.offset if send.offset is not None else -1
    if not read_at:
        highest = c.max_read.get(p, -1)
        if off <= highest:
            found.add("lost", f"{value} acked at p{p}@{off}, never read (readers reached {highest})")
        else:
            found.add("unseen", f"{value} acked at p{p}@{off}, beyond every read (max {highest})")
    elif (p, off) not in read_at:
        found.add("offset_mismatches", f"{value} acked at p{p}@{off} but read at {_where(read_at)}")


def _where(positions: list[tuple[int, int]]) -> str:
    return ", ".join(f"p{p}@{off}" for p, off in positions)


def check_file(path: str | Path, *, allowed_gaps: Gaps | None = None, seed: int | None = None) -> CheckResult:
    return check(read_history(path), allowed_gaps=allowed_gaps, seed=seed, history_path=path)
