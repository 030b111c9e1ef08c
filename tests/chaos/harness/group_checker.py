"""The consumer-group checker of TESTING.md (R21, R22): linear in the history.

A group workload records what its consumers saw, one event per callback or record:

- ``Assigned(t, member, generation, tps)``: ``on_assign`` (eager: the whole new
  assignment; cooperative: the partitions added in that generation).
- ``Revoked(t, member, generation, tps)``: ``on_revoke`` / ``on_lost``. Within one
  generation record revocations before assignments (Kafka's callback order).
- ``Consumed(t, member, generation, tp, offset, value)``: one per record returned by poll.
- ``Committed(t, member, generation, tp, offset)``: acknowledged commits only
  (committed offset = the next record to read).
- ``Started(t, member)`` (optional): a new consumer process took the slot ``member``
  (first start or restart after a kill); it holds nothing yet. Record it whenever a
  slot is restarted without its revocations having been recorded, else the dead
  process's partitions are still counted as held by the slot.

``member`` is a stable name for the consumer slot (a static member's instance id, or
the worker's name), not the coordinator's member id. ``t`` is milliseconds; events are
checked in ``t`` order (a stable sort keeps the recorded order of ties), so histories of
several processes can simply be concatenated.

Together with the acknowledged produces ``(tp, offset, value)`` the checker counts:

- ``lost``: acknowledged, never consumed, below the final committed offset of its
  partition (the group moved past it). ``unconsumed``: acknowledged, never consumed, at
  or above the final committed offset (the group did not get there: after a final
  drain that commits to the end this is loss at the tail too).
- ``duplicates``: extra consumptions of a record (a record read three times counts 2),
  split into ``explained_duplicates`` — re-read by a member after the partition was
  handed to it (an ``Assigned`` after the previous read) at or above the last commit
  acknowledged before that hand-off, which is where the new owner had to restart — and
  ``unexplained_duplicates`` (re-read without a hand-off, or below an acknowledged
  commit).
- ``owners_conflicts``: a (generation, partition) held by two members. A member holds a
  partition in generation g when it consumed it with generation g, or when it records
  ``Assigned`` for g while holding it (what it held and did not revoke, plus what was
  added: so cooperative members keeping partitions count too). A zombie consuming with
  its stale generation is not a holder of the new one.
- ``commit_regressions``: an acknowledged commit of a partition below the previous
  acknowledged commit of that partition, whoever made either.
- ``inconsistent``: a record consumed with a value other than the acknowledged one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from mq.core.types import TopicPartition

from .history import Op

ANOMALIES = ("lost", "unconsumed", "duplicates", "unexplained_duplicates", "owners_conflicts",
             "commit_regressions", "inconsistent")
MAX_EXAMPLES = 32


@dataclass(frozen=True, slots=True)
class Assigned:
    t: int
    member: str
    generation: int
    tps: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Revoked:
    t: int
    member: str
    generation: int
    tps: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Consumed:
    t: int
    member: str
    generation: int
    tp: TopicPartition
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class Committed:
    t: int
    member: str
    generation: int
    tp: TopicPartition
    offset: int


@dataclass(frozen=True, slots=True)
class Started:
    t: int
    member: str


GroupEvent = Assigned | Revoked | Consumed | Committed | Started
Produced = tuple[TopicPartition, int, str]


@dataclass(frozen=True)
class GroupCheckResult:
    """Anomaly counts, tallies, and up to 32 examples of each anomaly."""

    lost: int
    unconsumed: int
    duplicates: int
    explained_duplicates: int
    unexplained_duplicates: int
    owners_conflicts: int
    commit_regressions: int
    inconsistent: int
    acked: int
    consumed: int
    distinct_consumed: int
    commits: int
    generations: int
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    seed: int | None = None

    def summary(self) -> str:
        keys = ("acked", "consumed", "distinct_consumed", "commits", "generations", "lost",
                "unconsumed", "duplicates", "explained_duplicates", "unexplained_duplicates",
                "owners_conflicts", "commit_regressions", "inconsistent")
        return " ".join(f"{k}={getattr(self, k)}" for k in keys)

    def failures(self, *, allow_explained_duplicates: bool = True,
                 allow_unconsumed: bool = False) -> list[str]:
        """Non-zero anomalies not allowed. Explained duplicates are allowed by default
        (at-least-once across a rebalance); ``unexplained_duplicates`` always counts."""
        allowed = set()
        if allow_explained_duplicates:
            allowed.add("duplicates")
        if allow_unconsumed:
            allowed.add("unconsumed")
        return [k for k in ANOMALIES if getattr(self, k) and k not in allowed]

    def assert_ok(self, *, allow_explained_duplicates: bool = True,
                  allow_unconsumed: bool = False) -> None:
        bad = self.failures(allow_explained_duplicates=allow_explained_duplicates,
                            allow_unconsumed=allow_unconsumed)
        if not bad:
            return
        lines = [f"group check failed: {', '.join(f'{k}={getattr(self, k)}' for k in bad)}",
                 f"counts: {self.summary()}", f"replay: MQ_SEED={self.seed}"]
        for k in bad:
            shown = self.examples.get(k, ())
            lines.append(f"{k} (first {len(shown)}):")
            lines.extend(f"  {e}" for e in shown[:8])
        raise AssertionError("\n".join(lines))


class _Found:
    def __init__(self) -> None:
        self.counts = dict.fromkeys(ANOMALIES, 0)
        self.examples: dict[str, list[str]] = {k: [] for k in ANOMALIES}

    def add(self, kind: str, text: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append(text)


@dataclass
class _State:
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    # (member, tp) -> (event index of its latest Assigned, committed offset at that moment)
    handed: dict[tuple[str, TopicPartition], tuple[int, int | None]] = field(default_factory=dict)
    last_read: dict[tuple[TopicPartition, int], int] = field(default_factory=dict)
    reads: dict[tuple[TopicPartition, int], int] = field(default_factory=dict)
    holders: dict[tuple[int, TopicPartition], list[str]] = field(default_factory=dict)
    held: dict[str, set[TopicPartition]] = field(default_factory=dict)
    values: dict[tuple[TopicPartition, int], set[str]] = field(default_factory=dict)
    consumed: int = 0
    commits: int = 0


def check_group(events: Iterable[GroupEvent], produced: Iterable[Produced], *,
                seed: int | None = None) -> GroupCheckResult:
    """Check a group history against the acknowledged produces (see the module doc)."""
    acked: dict[tuple[TopicPartition, int], str] = {(tp, off): v for tp, off, v in produced}
    found = _Found()
    s = _State()
    ordered = sorted(events, key=lambda e: e.t)
    for index, event in enumerate(ordered):
        if isinstance(event, Assigned):
            held = s.held.setdefault(event.member, set())
            for tp in event.tps:
                s.handed[(event.member, tp)] = (index, s.committed.get(tp))
                held.add(tp)
            for tp in sorted(held):
                _hold(s, event.generation, tp, event.member)
        elif isinstance(event, Revoked):
            s.held.setdefault(event.member, set()).difference_update(event.tps)
        elif isinstance(event, Started):
            s.held[event.member] = set()
        elif isinstance(event, Consumed):
            _consumed(s, found, index, event, acked)
        elif isinstance(event, Committed):
            s.commits += 1
            before = s.committed.get(event.tp)
            if before is not None and event.offset < before:
                found.add("commit_regressions", f"{event.tp} committed {event.offset} after {before} "
                          f"by {event.member} gen {event.generation} at t={event.t}")
            s.committed[event.tp] = event.offset
        else:
            raise TypeError(f"not a group event: {event!r}")
    for (generation, tp), members in sorted(s.holders.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(members) > 1:
            found.add("owners_conflicts", f"{tp} held by {', '.join(members)} in generation {generation}")
    for (tp, off) in sorted(acked):
        if (tp, off) in s.reads:
            continue
        final = s.committed.get(tp)
        if final is not None and off < final:
            found.add("lost", f"{tp}@{off} acked, never consumed, final commit {final}")
        else:
            found.add("unconsumed", f"{tp}@{off} acked, never consumed, final commit {final}")
    generations = {g for g, _ in s.holders}
    c = found.counts
    return GroupCheckResult(
        lost=c["lost"], unconsumed=c["unconsumed"], duplicates=c["duplicates"],
        explained_duplicates=c["duplicates"] - c["unexplained_duplicates"],
        unexplained_duplicates=c["unexplained_duplicates"], owners_conflicts=c["owners_conflicts"],
        commit_regressions=c["commit_regressions"], inconsistent=c["inconsistent"],
        acked=len(acked), consumed=s.consumed, distinct_consumed=len(s.reads), commits=s.commits,
        generations=len(generations),
        examples=MappingProxyType({k: tuple(v) for k, v in found.examples.items()}), seed=seed)


def _hold(s: _State, generation: int, tp: TopicPartition, member: str) -> None:
    members = s.holders.setdefault((generation, tp), [])
    if member not in members:
        members.append(member)


def _consumed(s: _State, found: _Found, index: int, e: Consumed,
              acked: Mapping[tuple[TopicPartition, int], str]) -> None:
    key = (e.tp, e.offset)
    s.consumed += 1
    _hold(s, e.generation, e.tp, e.member)
    expected = acked.get(key)
    if expected is not None and e.value != expected:
        seen = s.values.setdefault(key, set())
        if e.value not in seen:
            seen.add(e.value)
            found.add("inconsistent", f"{e.tp}@{e.offset} acked as {expected!r}, consumed as "
                      f"{e.value!r} by {e.member}")
    previous = s.last_read.get(key)
    s.last_read[key] = index
    s.reads[key] = s.reads.get(key, 0) + 1
    if previous is None:
        return
    found.add("duplicates", f"{e.tp}@{e.offset} re-read by {e.member} gen {e.generation} at t={e.t}")
    handed = s.handed.get((e.member, e.tp))
    if handed is not None and handed[0] > previous and (handed[1] is None or e.offset >= handed[1]):
        return
    if handed is None or handed[0] < previous:
        why = "no hand-off since the previous read"
    else:
        why = f"below the commit {handed[1]} acknowledged before the hand-off"
    found.add("unexplained_duplicates", f"{e.tp}@{e.offset} re-read by {e.member} gen "
              f"{e.generation} at t={e.t}: {why}")


# --- inputs -----------------------------------------------------------------------------


def acked_records(ops: Iterable[Op], topic: str) -> list[Produced]:
    """The acknowledged sends of a producer-side history (one topic) as produced records."""
    return [(TopicPartition(topic, int(op.partition or 0)), int(op.offset), str(op.value))
            for op in ops
            if op.op == "send" and op.type == "ok" and op.offset is not None and op.value is not None]


def event_to_json(event: GroupEvent) -> str:
    if isinstance(event, Started):
        return json.dumps({"event": "started", "t": event.t, "member": event.member},
                          separators=(",", ":"))
    d: dict[str, Any] = {"event": type(event).__name__.lower(), "t": event.t,
                         "member": event.member, "generation": event.generation}
    if isinstance(event, Assigned | Revoked):
        d["tps"] = [[tp.topic, tp.partition] for tp in event.tps]
    else:
        d["tp"] = [event.tp.topic, event.tp.partition]
        d["offset"] = event.offset
        if isinstance(event, Consumed):
            d["value"] = event.value
    return json.dumps(d, separators=(",", ":"))


INFORMATIONAL_EVENTS = ("commit_failed", "closed", "error")


def event_from_dict(d: Mapping[str, Any]) -> GroupEvent | None:
    """One JSON event (the format of ``tests/chaos/group_member.py``; extra fields are
    ignored). ``lost`` is a revocation; ``commit_failed``, ``closed`` and ``error`` are
    informational (None)."""
    kind = d["event"]
    if kind in INFORMATIONAL_EVENTS:
        return None
    if kind == "started":
        return Started(int(d["t"]), str(d["member"]))
    if kind not in ("assigned", "revoked", "lost", "consumed", "committed"):
        raise ValueError(f"unknown group event {kind!r}")
    head = (int(d["t"]), str(d["member"]), int(d["generation"]))
    if kind in ("assigned", "revoked", "lost"):
        tps = tuple(TopicPartition(t, int(p)) for t, p in d["tps"])
        return Assigned(*head, tps) if kind == "assigned" else Revoked(*head, tps)
    tp = TopicPartition(d["tp"][0], int(d["tp"][1]))
    if kind == "consumed":
        return Consumed(*head, tp, int(d["offset"]), str(d["value"]))
    return Committed(*head, tp, int(d["offset"]))


def events_from_dicts(dicts: Iterable[Mapping[str, Any]]) -> list[GroupEvent]:
    """The checkable events of decoded JSON lines, informational ones dropped."""
    return [e for e in map(event_from_dict, dicts) if e is not None]


def write_group_history(path: str | Path, events: Iterable[GroupEvent]) -> Path:
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(event_to_json(e) + "\n" for e in events)
    return path


def read_group_history(path: str | Path) -> list[GroupEvent]:
    """Every event of a JSON-lines group history; a torn last line is ignored."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out: list[GroupEvent] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = event_from_dict(json.loads(line))
        except json.JSONDecodeError:
            if number >= len(lines) - 1:
                break  # the line being written when the writer died
            raise
        if event is not None:
            out.append(event)
    return out


def check_group_file(path: str | Path, produced: Iterable[Produced] | Sequence[Op], *,
                     topic: str | None = None, seed: int | None = None) -> GroupCheckResult:
    """Check a group history file; ``produced`` may be a producer-side ``Op`` history of
    ``topic``."""
    items = list(produced)
    if items and isinstance(items[0], Op):
        if topic is None:
            raise ValueError("a producer Op history needs its topic")
        items = acked_records(items, topic)  # type: ignore[arg-type]
    return check_group(read_group_history(path), items, seed=seed)  # type: ignore[arg-type]
