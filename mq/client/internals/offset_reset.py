"""Reset plans for a consumer group's committed offsets (``mq group reset-offsets``).

Pure computation, as ``kafka-consumer-groups --reset-offsets`` does it: which
partitions, where each one's new offset comes from, and the clamp of every new
offset into ``[log start, log end]``. The caller gathers the facts (committed offsets,
log start/end, offsets for a time) and applies the plan; nothing here talks to a broker.

Strategies: ``to-earliest``, ``to-latest``, ``to-offset N``, ``shift-by N`` (from the
committed offset; a partition without one is an error, as in Kafka), ``to-datetime``
and ``by-duration`` (the first offset whose timestamp is at or after the time; the log
end when there is none), ``from-file`` (``topic,partition,offset`` lines).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from enum import Enum

from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition


class ResetStrategy(Enum):
    TO_EARLIEST = "to-earliest"
    TO_LATEST = "to-latest"
    TO_OFFSET = "to-offset"
    SHIFT_BY = "shift-by"
    TO_DATETIME = "to-datetime"
    BY_DURATION = "by-duration"
    FROM_FILE = "from-file"

    @property
    def needs_time_lookup(self) -> bool:
        return self in (ResetStrategy.TO_DATETIME, ResetStrategy.BY_DURATION)


@dataclass(frozen=True)
class ResetSpec:
    """``value``: the offset (to-offset), the shift (shift-by), a time in epoch ms
    (to-datetime) or a duration in ms (by-duration); ``offsets`` for from-file."""

    strategy: ResetStrategy
    value: int = 0
    offsets: Mapping[TopicPartition, int] | None = None

    def target_time_ms(self, *, now_ms: int) -> int | None:
        """The time whose offsets a to-datetime / by-duration reset looks up."""
        if self.strategy == ResetStrategy.TO_DATETIME:
            return self.value
        if self.strategy == ResetStrategy.BY_DURATION:
            return now_ms - self.value
        return None


@dataclass(frozen=True)
class OffsetRange:
    log_start: int
    log_end: int


@dataclass(frozen=True)
class PlannedReset:
    tp: TopicPartition
    current: int | None  # committed offset now (None: nothing committed)
    new: int
    clamped: bool = False  # the requested offset was outside [log start, log end]


def _bad(message: str) -> MqError:
    return MqError(ErrorCode.INVALID_REQUEST, message)


def clamp(offset: int, bounds: OffsetRange) -> tuple[int, bool]:
    """Kafka's rule: below the log start → log start; past the log end → log end."""
    if offset < bounds.log_start:
        return bounds.log_start, True
    if offset > bounds.log_end:
        return bounds.log_end, True
    return offset, False


def plan_reset(
    tps: Iterable[TopicPartition],
    spec: ResetSpec,
    *,
    current: Mapping[TopicPartition, int],
    bounds: Mapping[TopicPartition, OffsetRange],
    offsets_for_time: Mapping[TopicPartition, int | None] | None = None,
) -> list[PlannedReset]:
    """The new committed offset of every partition in ``tps`` (sorted).

    ``current``: committed offsets (absent: none); ``bounds``: every partition's log
    start and end; ``offsets_for_time``: for to-datetime / by-duration, the first
    offset at or after the time (None or -1: no such record, so the log end)."""
    plan = []
    for tp in sorted(set(tps)):
        if tp not in bounds:
            raise MqError(ErrorCode.UNKNOWN_TOPIC, f"{tp}: no such topic-partition")
        b = bounds[tp]
        committed = current.get(tp)
        s = spec.strategy
        if s == ResetStrategy.TO_EARLIEST:
            wanted = b.log_start
        elif s == ResetStrategy.TO_LATEST:
            wanted = b.log_end
        elif s == ResetStrategy.TO_OFFSET:
            wanted = spec.value
        elif s == ResetStrategy.SHIFT_BY:
            if committed is None:
                raise _bad(f"cannot shift {tp}: the group has no committed offset for it")
            wanted = committed + spec.value
        elif s.needs_time_lookup:
            found = (offsets_for_time or {}).get(tp)
            wanted = b.log_end if found is None or found < 0 else found
        else:  # FROM_FILE
            offsets = spec.offsets or {}
            if tp not in offsets:
                raise _bad(f"{tp} is not in the offsets file")
            wanted = offsets[tp]
        new, clamped = clamp(wanted, b)
        plan.append(PlannedReset(tp, committed, new, clamped))
    return plan


# ---------------------------------------------------------------- parsing


_ISO_DURATION = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)
_COMPACT_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)", re.IGNORECASE)
_UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}

DURATION_HELP = "ISO-8601 PnDTnHnMnS (P1DT2H, PT30M) or compact 1h30m, 2d, 45s, 500ms"


def parse_duration_ms(text: str) -> int:
    """``PT1H30M`` / ``P2D`` / ``P1DT12H`` (ISO-8601, Kafka's ``--by-duration``) or the
    compact ``1h30m``, ``2d``, ``90s``, ``500ms`` → milliseconds (>= 0)."""
    t = text.strip()
    if t.upper().startswith("P"):
        match = _ISO_DURATION.match(t)
        if match is None or t.upper() in ("P", "PT") or t.upper().endswith("T"):
            raise _bad(f"{text!r} is not a duration ({DURATION_HELP})")
        parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
        return round(parts.get("d", 0) * _UNIT_MS["d"] + parts.get("h", 0) * _UNIT_MS["h"]
                     + parts.get("m", 0) * _UNIT_MS["m"] + parts.get("s", 0) * _UNIT_MS["s"])
    total = 0.0
    pos = 0
    for match in _COMPACT_PART.finditer(t):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_MS[match.group(2).lower()]
        pos = match.end()
    if not t or pos != len(t):
        raise _bad(f"{text!r} is not a duration ({DURATION_HELP})")
    return round(total)


def parse_datetime_ms(text: str, *, tz: tzinfo | None = None) -> int:
    """ISO-8601 (``2026-11-25T10:00:00``, ``...Z``, ``...+01:00``, ``2026-11-25``) →
    epoch ms. Without a zone the time is in ``tz``, else the machine's local zone."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise _bad(f"{text!r} is not an ISO-8601 time (for example 2026-11-25T10:00:00 "
                   "or 2026-11-25T10:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz) if tz is not None else moment.astimezone()
    return int(moment.timestamp() * 1000)


def parse_topic_spec(text: str) -> tuple[str, tuple[int, ...] | None]:
    """``clicks`` → (clicks, None: every partition); ``clicks:0,2`` → (clicks, (0, 2))."""
    topic, sep, parts = text.rpartition(":") if ":" in text else (text, "", "")
    if not topic.strip():
        raise _bad(f"{text!r} names no topic (use TOPIC or TOPIC:P,P)")
    if not sep:
        return topic.strip(), None
    try:
        partitions = tuple(sorted({int(p) for p in parts.split(",") if p.strip()}))
    except ValueError:
        raise _bad(f"{text!r}: partitions must be numbers (TOPIC:0,1,2)") from None
    if not partitions or partitions[0] < 0:
        raise _bad(f"{text!r}: list partitions 0 or more after the colon (TOPIC:0,1,2)")
    return topic.strip(), partitions


def parse_offsets_csv(text: str, *, group_id: str | None = None) -> dict[TopicPartition, int]:
    """``topic,partition,offset`` lines (kafka-consumer-groups' export format; with
    several groups ``group,topic,partition,offset``, of which the lines of ``group_id``
    are taken). Blank lines, ``#`` comments and a header line are skipped."""
    out: dict[TopicPartition, int] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if number == 1 and cells[-1].lower() in ("offset", "new-offset"):
            continue
        if len(cells) == 4:
            if group_id is not None and cells[0] != group_id:
                continue
            cells = cells[1:]
        if len(cells) != 3:
            raise _bad(f"offsets file line {number}: expected topic,partition,offset, got {','.join(row)!r}")
        topic, partition, offset = cells
        try:
            tp, value = TopicPartition(topic, int(partition)), int(offset)
        except ValueError:
            raise _bad(f"offsets file line {number}: partition and offset must be numbers") from None
        if not topic or tp.partition < 0 or value < 0:
            raise _bad(f"offsets file line {number}: need a topic, a partition >= 0 and an offset >= 0")
        out[tp] = value
    if not out:
        raise _bad("the offsets file has no topic,partition,offset lines")
    return out


def plan_to_csv(plan: Iterable[PlannedReset]) -> str:
    """The plan as ``topic,partition,offset`` lines, readable by ``parse_offsets_csv``."""
    return "".join(f"{p.tp.topic},{p.tp.partition},{p.new}\n" for p in plan)
