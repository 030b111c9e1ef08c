"""Producer state of one partition: what idempotence needs (Kafka's ProducerStateManager).

An idempotent producer stamps every batch with its producer id, epoch and the
sequence number of its first record (``base_sequence``; sequences count records per
partition, from 0, and wrap to 0 after 2**31 - 1 as Kafka's do). The partition keeps,
per producer id, its epoch and the metadata of its last ``MAX_BATCHES_PER_PRODUCER``
(5) batches: first and last sequence, first and last offset. 5 is the most batches an
idempotent producer has in flight per partition, so a retry of any unanswered batch
still finds its original here.

The leader checks each incoming batch (``check_leader_append``, which changes nothing):

- a batch equal (epoch, first and last sequence) to one of the last 5 is a duplicate:
  it is answered with the original offsets, nothing appended;
- a stale epoch is refused with ``INVALID_PRODUCER_EPOCH``;
- a new (higher) epoch must start at sequence 0, else ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
- the same epoch must continue at last sequence + 1, else ``OUT_OF_ORDER_SEQUENCE_NUMBER``
  (a gap: an earlier batch was lost or is still being retried);
- a producer id with no state here and a sequence other than 0 is refused with
  ``UNKNOWN_PRODUCER_ID`` (its state expired or was never here: the producer resets).

Every replica then applies each appended batch with ``update`` — the leader after
its append, followers for the batches they replicate, and start-up recovery for the
batches after the last snapshot — so a new leader after fail-over holds the same
state and dedupes the producer's retries exactly as the old one would have.

State only ever changes through ``update`` (and ``remove_expired``, ``truncate_head``,
``load``): like the coordinators' ``replay``, which makes the state a function of
the log. ``mq.storage.producer_snapshot`` persists it beside each rolled segment.

Transactions hook: a transactional batch sets its producer's
``current_txn_first_offset`` (the first offset of the open transaction) until a
control batch (a transaction marker) of that producer ends it; ``update`` then
returns the ``CompletedTxn``. ``first_unstable_offset`` is the smallest open
transaction's first offset: the last stable offset is bounded by it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from mq.core.errors import ErrorCode, MqError
from mq.protocol.batch_format import BatchHeader

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "MAX_BATCHES_PER_PRODUCER",
    "BatchMetadata",
    "CompletedTxn",
    "DuplicateBatch",
    "ProducerStateEntry",
    "ProducerStateManager",
    "increment_sequence",
]

MAX_BATCHES_PER_PRODUCER = 5
"""Batches remembered per producer: the most an idempotent producer has in flight."""
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SEQUENCE_LIMIT = 2**31
"""Sequences are i32 and wrap from 2**31 - 1 to 0 (Kafka's incrementSequence)."""
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 24 * 60 * 60 * 1000
"""Kafka's ``producer.id.expiration.ms``: state of a producer silent this long is dropped."""


def increment_sequence(sequence: int, increment: int) -> int:
    return (sequence + increment) % SEQUENCE_LIMIT


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: its sequences, offsets and max timestamp."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """A producer's state on one partition. ``batches`` are oldest first, at most 5."""

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...] = ()
    last_timestamp_ms: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    """First offset of this producer's open transaction (-1: none)."""

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """The request's batches were all appended before: answer with these offsets."""

    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A control batch ended ``producer_id``'s transaction spanning these offsets
    (the marker is at ``last_offset``). For the aborted-transaction index."""

    producer_id: int
    first_offset: int
    last_offset: int


def _last_seq(header: BatchHeader) -> int:
    """Kafka's ``lastSequence``: from the last offset delta, not the record count, which
    log compaction lowers (it keeps a batch's offsets, removing records inside it)."""
    return increment_sequence(header.base_sequence, header.last_offset_delta)


class ProducerStateManager:
    """See the module docstring. ``map_end_offset``: the state reflects every batch
    below this offset (the log end offset once caught up)."""

    def __init__(self, *, max_batches: int = MAX_BATCHES_PER_PRODUCER) -> None:
        self.max_batches = max_batches
        self._producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0

    # ---- reading

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def entries(self) -> list[ProducerStateEntry]:
        """Every producer's state, by producer id."""
        return [self._producers[pid] for pid in sorted(self._producers)]

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none open)."""
        firsts = [e.current_txn_first_offset for e in self._producers.values() if e.current_txn_first_offset >= 0]
        return min(firsts) if firsts else None

    # ---- the leader's check

    def check_leader_append(self, headers: Sequence[BatchHeader]) -> DuplicateBatch | None:
        """Check the batches of one produce request for one partition, in order, against
        the state (nothing changes). Returns None when they are all to be appended, a
        ``DuplicateBatch`` when they were all appended before (the answer is their
        original offsets), or raises ``MqError`` naming what is wrong."""
        pending: dict[int, ProducerStateEntry] = {}
        duplicates: list[BatchMetadata] = []
        for i, header in enumerate(headers):
            pid = header.producer_id
            if pid < 0:
                if duplicates:
                    raise _mixed(i)
                continue
            entry = pending.get(pid) or self._producers.get(pid)
            if header.is_control:  # a transaction marker: no sequence, only a current epoch
                if duplicates:
                    raise _mixed(i)
                if entry is not None and header.producer_epoch < entry.producer_epoch:
                    raise MqError(ErrorCode.INVALID_PRODUCER_EPOCH, (
                        f"transaction marker of producer id {pid} has epoch {header.producer_epoch}, older than "
                        f"its current epoch {entry.producer_epoch}"))
                continue
            last_seq = _check_batch_fields(header)
            duplicate = None if entry is None else entry.find_duplicate(header.producer_epoch, header.base_sequence,
                                                                        last_seq)
            if duplicate is not None:
                if i != len(duplicates):
                    raise _mixed(i)
                duplicates.append(duplicate)
                continue
            if duplicates:
                raise _mixed(i)
            _check_sequence(entry, header, last_seq)
            pending[pid] = _with_batch(entry, header, last_seq, header.base_offset, header.last_offset,
                                       self.max_batches)
        if not duplicates:
            return None
        for before, after in pairwise(duplicates):
            if after.first_offset != before.last_offset + 1:
                raise MqError(ErrorCode.INVALID_REQUEST, (
                    "the request repeats batches that were appended apart (at offsets "
                    f"{before.first_offset} and {after.first_offset}): resend each alone"))
        return DuplicateBatch(duplicates[0].first_offset, duplicates[-1].last_offset,
                              max(d.timestamp_ms for d in duplicates))

    # ---- changing the state (every replica, from the log)

    def update(self, header: BatchHeader) -> CompletedTxn | None:
        """Apply one appended batch (offsets assigned). Batches without a producer id
        only move ``map_end_offset``."""
        self.map_end_offset = max(self.map_end_offset, header.next_offset)
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self._producers.get(pid)
        if header.is_control:
            return self._end_transaction(entry, header)
        last_seq = _last_seq(header)
        updated = _with_batch(entry, header, last_seq, header.base_offset, header.last_offset, self.max_batches)
        if header.is_transactional and updated.current_txn_first_offset < 0:
            updated = replace(updated, current_txn_first_offset=header.base_offset)
        self._producers[pid] = updated
        return None

    def update_all(self, headers: Iterable[BatchHeader]) -> list[CompletedTxn]:
        completed = []
        for header in headers:
            done = self.update(header)
            if done is not None:
                completed.append(done)
        return completed

    def _end_transaction(self, entry: ProducerStateEntry | None, header: BatchHeader) -> CompletedTxn | None:
        pid = header.producer_id
        first = -1 if entry is None else entry.current_txn_first_offset
        batches = () if entry is None or entry.producer_epoch != header.producer_epoch else entry.batches
        self._producers[pid] = ProducerStateEntry(
            pid, header.producer_epoch, batches, max(header.max_timestamp, -1 if entry is None else entry.last_timestamp_ms),
            -1 if entry is None else entry.coordinator_epoch, -1)
        return None if first < 0 else CompletedTxn(pid, first, header.base_offset)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop producers whose last batch is older than ``expiration_ms`` (none with an
        open transaction); returns their ids. A later batch of one with a sequence other
        than 0 gets UNKNOWN_PRODUCER_ID."""
        gone = [pid for pid, e in sorted(self._producers.items())
                if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp_ms > expiration_ms]
        for pid in gone:
            del self._producers[pid]
        return gone

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start moved up (retention, DeleteRecords). Producers are kept until
        they expire, as Kafka 2.4+ does (KAFKA-8710): dropping them with their data made
        live producers fail with UNKNOWN_PRODUCER_ID. Only the cached offsets below the
        log start are forgotten, so a retry of a deleted batch is not answered with
        offsets no longer readable."""
        for pid, entry in list(self._producers.items()):
            kept = tuple(b for b in entry.batches if b.last_offset >= log_start_offset)
            if len(kept) != len(entry.batches) and kept:
                self._producers[pid] = replace(entry, batches=kept)
        self.map_end_offset = max(self.map_end_offset, log_start_offset)

    def clear(self, map_end_offset: int = 0) -> None:
        self._producers.clear()
        self.map_end_offset = map_end_offset

    def load(self, entries: Iterable[ProducerStateEntry], map_end_offset: int) -> None:
        """Replace the state with a snapshot's."""
        self._producers = {e.producer_id: e for e in entries}
        self.map_end_offset = map_end_offset


def _mixed(index: int) -> MqError:
    return MqError(ErrorCode.INVALID_REQUEST, (
        f"batch {index} of the request: a produce request may repeat already appended batches of a "
        "producer only when it holds nothing else for that partition; resend retried batches alone"))


def _check_batch_fields(header: BatchHeader) -> int:
    if header.producer_epoch < 0 or header.base_sequence < 0:
        raise MqError(ErrorCode.INVALID_RECORD, (
            f"batch of producer id {header.producer_id} has epoch {header.producer_epoch} and base sequence "
            f"{header.base_sequence}: an idempotent batch needs both (>= 0)"))
    return _last_seq(header)


def _check_sequence(entry: ProducerStateEntry | None, header: BatchHeader, last_seq: int) -> None:
    pid, epoch, first_seq = header.producer_id, header.producer_epoch, header.base_sequence
    if entry is None:
        if first_seq != 0:
            raise MqError(ErrorCode.UNKNOWN_PRODUCER_ID, (
                f"no state for producer id {pid} on this partition (never written here, expired after "
                f"producer.id.expiration.ms, or lost) and its batch starts at sequence {first_seq}, not 0: "
                "the producer must reset its sequence (bump its epoch) and resend"))
        return
    if epoch < entry.producer_epoch:
        raise MqError(ErrorCode.INVALID_PRODUCER_EPOCH, (
            f"producer id {pid} wrote with epoch {epoch}, older than its current epoch {entry.producer_epoch}: "
            "a newer instance of this producer exists; this one must stop"))
    if epoch > entry.producer_epoch:
        if first_seq != 0:
            raise MqError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (
                f"producer id {pid} starts its new epoch {epoch} at sequence {first_seq}; a new epoch "
                "starts at sequence 0"))
        return
    expected = increment_sequence(entry.last_seq, 1) if entry.batches else 0
    if first_seq != expected:
        raise MqError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (
            f"producer id {pid} epoch {epoch}: batch has sequences {first_seq}..{last_seq}, expected "
            f"{expected} next (last appended {entry.last_seq} at offset {entry.last_offset}); an earlier "
            "batch is missing or still being retried"))


def _with_batch(
    entry: ProducerStateEntry | None, header: BatchHeader, last_seq: int, first_offset: int,
    last_offset: int, max_batches: int,
) -> ProducerStateEntry:
    batch = BatchMetadata(header.base_sequence, last_seq, first_offset, last_offset, header.max_timestamp)
    if entry is None:
        return ProducerStateEntry(header.producer_id, header.producer_epoch, (batch,), header.max_timestamp)
    kept = entry.batches if entry.producer_epoch == header.producer_epoch else ()
    return replace(entry, producer_epoch=header.producer_epoch, batches=(*kept, batch)[-max_batches:],
                   last_timestamp_ms=max(entry.last_timestamp_ms, header.max_timestamp))
