"""One share-partition: the in-flight records of a (share group, topic-partition), sans-IO.

Kafka's ``SharePartition`` (KIP-932). Many members of a share group consume one
partition at once; each record they are handed is *acquired* by one member under a
time-limited lock, and comes back as acknowledged, released for redelivery or
archived. The window of records being worked on is bounded below by the
**share-partition start offset** (SPSO: every record before it is done) and above by
``end_offset`` (the next offset never handed out; Kafka's SPEO + 1)::

    offset      ... 41  42  43  44  45  46 | 47 ...
    state           ACK ACQ AVL ACK ARC ACQ| never fetched
                        ^ SPSO              ^ end_offset

Record states and their transitions (one table, ``_on_ack`` and ``_release``)::

    AVAILABLE --acquire--> ACQUIRED (delivery_count + 1, owner, lock deadline)
    ACQUIRED  --accept-->  ACKNOWLEDGED
    ACQUIRED  --release, lock expiry, owner gone--> AVAILABLE, or dead letter when
                           delivery_count >= share.delivery.attempt.limit
    ACQUIRED  --reject-->  dead letter
    ACQUIRED  --gap-->     ARCHIVED   (the offset holds no record: compacted, control)

A *dead letter* (KIP-1191) is a record that must still be copied to the group's
dead-letter topic: it is AVAILABLE with a ``dead_letter_reason``; it is acquired like
any other record (without counting a delivery) and the member that gets it writes it
to the dead-letter topic and accepts it (then ARCHIVED). Released or expired, it is
offered again: a dead letter is written at least once. ACKNOWLEDGED and ARCHIVED are
terminal; the SPSO moves past them and they leave memory.

Time arrives as ``now_ms``; nothing here reads a clock. ``snapshot()`` is the
persisted form: ACQUIRED is stored as AVAILABLE (the delivery already counted), so a
coordinator that loads the state after a fail-over redelivers every held record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from mq.core.errors import ErrorCode


class RecordState(IntEnum):
    """Kafka's ``RecordState`` values."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """Kafka's ``AcknowledgeType`` values (GAP: the offset holds no record)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


REASON_REJECTED = "rejected"
REASON_EXHAUSTED = "delivery attempts exhausted"
TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    record_lock_duration_ms: int = 30_000  # share.record.lock.duration.ms
    delivery_attempt_limit: int = 5  # share.delivery.attempt.limit
    max_record_locks: int = 2000  # share.partition.max.record.locks: in-flight records at most


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState
    delivery_count: int
    owner: str = ""  # the member holding the lock (ACQUIRED only)
    lock_deadline_ms: int = 0
    dead_letter_reason: str = ""  # set: the record is to be written to the dead-letter topic


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of offsets handed to a member: ``delivery_count`` is the delivery number
    of each (1 on the first); a non-empty ``dead_letter_reason`` asks the member to
    write the records to the dead-letter topic, not to process them."""

    first_offset: int
    last_offset: int
    delivery_count: int
    dead_letter_reason: str = ""


@dataclass(frozen=True, slots=True)
class StateRun:
    """Persisted form: offsets ``first..last`` all in ``state`` with one delivery count."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    dead_letter_reason: str = ""


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    start_offset: int
    end_offset: int
    runs: tuple[StateRun, ...] = ()


@dataclass(frozen=True, slots=True)
class Transition:
    """What happened to one record, for the simulation's checker and the metrics."""

    offset: int
    state: RecordState
    delivery_count: int
    dead_letter_reason: str = ""


class SharePartition:
    def __init__(self, start_offset: int, config: SharePartitionConfig) -> None:
        self.config = config
        self.start_offset = start_offset
        self.end_offset = start_offset
        # In offset order: new offsets are always above the ones present (acquire and
        # restore insert in increasing order; only the lowest leave), so the dict's
        # insertion order is the offset order and nothing here needs to sort.
        self.records: dict[int, InFlightRecord] = {}
        self.keep_transitions = False  # record terminal transitions (the simulation's and tests' checks)
        self.transitions: list[Transition] = []  # terminal transitions since the last take

    # ------------------------------------------------------------ persistence

    @classmethod
    def restore(cls, state: SharePartitionState, config: SharePartitionConfig) -> SharePartition:
        sp = cls(state.start_offset, config)
        sp.end_offset = state.end_offset
        for run in state.runs:
            for offset in range(run.first_offset, run.last_offset + 1):
                held = RecordState.AVAILABLE if run.state == RecordState.ACQUIRED else run.state
                sp.records[offset] = InFlightRecord(held, run.delivery_count,
                                                    dead_letter_reason=run.dead_letter_reason)
        sp._advance()
        return sp

    def snapshot(self) -> SharePartitionState:
        runs: list[StateRun] = []
        limit = self.config.delivery_attempt_limit
        run: list = []  # the run being built: [first, last, state, delivery_count, reason]
        for offset, r in self.records.items():
            state, count, reason = r.state, r.delivery_count, r.dead_letter_reason
            if state is RecordState.ACQUIRED:  # stored as released: what a lock expiry would do
                state = RecordState.AVAILABLE
                if not reason and count >= limit:
                    reason = REASON_EXHAUSTED
            if run and run[1] + 1 == offset and run[2] is state and run[3] == count and run[4] == reason:
                run[1] = offset
            else:
                if run:
                    runs.append(StateRun(*run))
                run = [offset, offset, state, count, reason]
        if run:
            runs.append(StateRun(*run))
        return SharePartitionState(self.start_offset, self.end_offset, tuple(runs))

    # ------------------------------------------------------------ queries

    def counts(self) -> dict[str, int]:
        out = {s.name: 0 for s in RecordState}
        out["DEAD_LETTER"] = 0
        for r in self.records.values():
            out[r.state.name] += 1
            if r.dead_letter_reason and r.state not in TERMINAL:
                out["DEAD_LETTER"] += 1
        return out

    def held_by(self, member_id: str) -> list[int]:
        return [o for o, r in self.records.items() if r.state == RecordState.ACQUIRED and r.owner == member_id]

    def next_deadline_ms(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.records.values() if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def take_transitions(self) -> list[Transition]:
        out, self.transitions = self.transitions, []
        return out

    # ------------------------------------------------------------ acquire

    def acquire(self, member_id: str, *, max_records: int, new_batches: Sequence[tuple[int, int]],
                scanned_to: int, now_ms: int) -> list[Acquired]:
        """Lock up to ``max_records`` records for ``member_id``: first the AVAILABLE
        in-flight ones (redeliveries and dead letters, oldest first), then new
        offsets. ``new_batches`` are the ``(first, last)`` offsets of the data batches
        the shell found from ``end_offset``; ``scanned_to`` the offset after the last
        batch it read (control batches included: those offsets are never handed out)."""
        deadline = now_ms + self.config.record_lock_duration_ms
        taken: list[tuple[int, InFlightRecord]] = []
        for offset in self.records:
            if len(taken) >= max_records:
                break
            r = self.records[offset]
            if r.state != RecordState.AVAILABLE:
                continue
            self._lock(r, member_id, deadline)
            taken.append((offset, r))
        room = min(max_records - len(taken), self.config.max_record_locks - self._locks_in_use())
        stopped = False
        for first, last in new_batches:
            for offset in range(max(first, self.end_offset), last + 1):
                if room <= 0:
                    stopped = True
                    break
                r = InFlightRecord(RecordState.AVAILABLE, 0)
                self.records[offset] = r
                self._lock(r, member_id, deadline)
                taken.append((offset, r))
                self.end_offset = offset + 1
                room -= 1
            if stopped:
                break
        if not stopped:
            self.end_offset = max(self.end_offset, scanned_to)
        self._advance()
        return _runs(taken)

    def _lock(self, r: InFlightRecord, member_id: str, deadline_ms: int) -> None:
        r.state = RecordState.ACQUIRED
        r.owner = member_id
        r.lock_deadline_ms = deadline_ms
        if not r.dead_letter_reason:
            r.delivery_count += 1

    def _locks_in_use(self) -> int:
        return sum(1 for r in self.records.values() if r.state not in TERMINAL)

    # ------------------------------------------------------------ acknowledge

    def acknowledge(self, member_id: str, first_offset: int, last_offset: int, ack_type: AckType) -> ErrorCode:
        """Apply one acknowledgement range, all or nothing: every offset must be
        ACQUIRED by ``member_id`` (else INVALID_RECORD_STATE and nothing changes)."""
        if last_offset < first_offset or last_offset - first_offset > self.config.max_record_locks:
            return ErrorCode.INVALID_REQUEST
        for offset in range(first_offset, last_offset + 1):
            r = self.records.get(offset)
            if r is None or r.state != RecordState.ACQUIRED or r.owner != member_id:
                return ErrorCode.INVALID_RECORD_STATE
        for offset in range(first_offset, last_offset + 1):
            self._on_ack(offset, self.records[offset], ack_type)
        self._advance()
        return ErrorCode.NONE

    def _on_ack(self, offset: int, r: InFlightRecord, ack_type: AckType) -> None:
        r.owner = ""
        if ack_type == AckType.GAP or (ack_type == AckType.REJECT and r.dead_letter_reason):
            self._finish(offset, r, RecordState.ARCHIVED)
        elif ack_type == AckType.ACCEPT:
            self._finish(offset, r, RecordState.ARCHIVED if r.dead_letter_reason else RecordState.ACKNOWLEDGED)
        elif ack_type == AckType.REJECT:
            r.state = RecordState.AVAILABLE
            r.dead_letter_reason = REASON_REJECTED
        else:
            self._release(r)

    def _release(self, r: InFlightRecord) -> None:
        r.state = RecordState.AVAILABLE
        r.owner = ""
        if not r.dead_letter_reason and r.delivery_count >= self.config.delivery_attempt_limit:
            r.dead_letter_reason = REASON_EXHAUSTED

    def _finish(self, offset: int, r: InFlightRecord, state: RecordState) -> None:
        r.state = state
        if self.keep_transitions:
            self.transitions.append(Transition(offset, state, r.delivery_count, r.dead_letter_reason))

    # ------------------------------------------------------------ time and members

    def expire_locks(self, now_ms: int) -> list[int]:
        """Release every record whose lock deadline has passed; the offsets released."""
        out = []
        for offset in self.records:
            r = self.records[offset]
            if r.state == RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms:
                self._release(r)
                out.append(offset)
        return out

    def release_member(self, member_id: str) -> list[int]:
        """A member left or was fenced: its locks go back (Kafka releases them at once)."""
        out = self.held_by(member_id)
        for offset in out:
            self._release(self.records[offset])
        return out

    def move_start_to(self, log_start_offset: int) -> None:
        """Records deleted by retention (below the log start) can never be delivered:
        the SPSO follows the log start; in-flight ones are archived."""
        if log_start_offset <= self.start_offset:
            return
        for offset in [o for o in self.records if o < log_start_offset]:
            r = self.records.pop(offset)
            if r.state not in TERMINAL and self.keep_transitions:
                self.transitions.append(Transition(offset, RecordState.ARCHIVED, r.delivery_count, "deleted"))
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        self._advance()

    def _advance(self) -> None:
        while self.start_offset < self.end_offset:
            r = self.records.get(self.start_offset)
            if r is not None and r.state not in TERMINAL:
                break
            self.records.pop(self.start_offset, None)
            self.start_offset += 1


def _runs(taken: Iterable[tuple[int, InFlightRecord]]) -> list[Acquired]:
    out: list[Acquired] = []
    run: list = []  # [first, last, delivery_count, reason]
    for offset, r in taken:
        if run and run[1] + 1 == offset and run[2] == r.delivery_count and run[3] == r.dead_letter_reason:
            run[1] = offset
        else:
            if run:
                out.append(Acquired(*run))
            run = [offset, offset, r.delivery_count, r.dead_letter_reason]
    if run:
        out.append(Acquired(*run))
    return out
