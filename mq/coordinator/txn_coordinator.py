"""The transaction coordinator of one ``__transaction_state`` partition, sans-IO
(Kafka's ``TransactionCoordinator`` + ``TransactionStateManager``, KIP-98/KIP-890).

Each call checks a request against the transactional id's metadata and returns a
``TxnResult``: the record to append (at most one) and the answer's error, producer
id and epoch. State changes only in ``replay``, after the shell appended the record
(and it is committed); the shell then answers. Until then the id is *pending*: other
requests for it get ``CONCURRENT_TRANSACTIONS`` (retriable), so two writes of one id
never race. ``fail`` forgets a write that did not happen.

Epochs (KIP-890): every EndTxn bumps the epoch: PrepareCommit/PrepareAbort carry
epoch N+1 and remember N as ``last_producer_epoch``; markers are written with N+1,
and the answer gives the producer N+1 for its next transaction. A late EndTxn of
transaction N (epoch N) arriving after N+1 began is therefore refused instead of
committing N+1; a retry of EndTxn N while N's outcome is being written is answered
with success. InitProducerId bumps the epoch too: an older instance is fenced (its
writes carry a smaller epoch), and its open transaction is aborted first.

After a PrepareCommit or PrepareAbort is replayed the coordinator owes markers:
``pending_markers`` lists them (the shell sends WriteTxnMarkers to the leaders and
retries until every partition answered), ``markers_written`` then gives the
CompleteCommit/CompleteAbort record. A new coordinator that loads the partition
finds every Prepare* in the log and finishes it: a transaction is never half done.
``expire`` aborts transactions open longer than their ``transaction.timeout.ms``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from mq.coordinator.records import CoordinatorRecord, group_partition
from mq.coordinator.txn_state import (
    MAX_PRODUCER_EPOCH,
    TransactionMetadata,
    TxnState,
    decode_txn_record,
    txn_record,
)
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition

__all__ = ["MarkerJob", "TransactionCoordinator", "TxnConfig", "TxnResult"]

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 15 * 60 * 1000
    """Kafka's ``transaction.max.timeout.ms``: the largest timeout a producer may ask."""
    offsets_partitions: int = 50
    """Partitions of ``__consumer_offsets`` (AddOffsetsToTxn adds the group's)."""


@dataclass(frozen=True, slots=True)
class TxnResult:
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    records: list[CoordinatorRecord] = field(default_factory=list)
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers owed: ``commit`` or abort of ``producer_id`` at ``producer_epoch`` on
    every partition of ``partitions``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    coordinator_epoch: int


def _error(code: ErrorCode, message: str) -> TxnResult:
    return TxnResult(code, message)


class TransactionCoordinator:
    """See the module docstring. ``coordinator_epoch`` is the leader epoch of the
    ``__transaction_state`` partition: markers carry it."""

    def __init__(self, partition: int, config: TxnConfig | None = None, *, coordinator_epoch: int = 0) -> None:
        self.partition = partition
        self.config = config or TxnConfig()
        self.coordinator_epoch = coordinator_epoch
        self.transactions: dict[str, TransactionMetadata] = {}
        self.pending: dict[str, None] = {}

    # ------------------------------------------------------------------ state

    def replay(self, record: CoordinatorRecord) -> None:
        tid, meta = decode_txn_record(record)
        self.pending.pop(tid, None)
        if meta is None:
            self.transactions.pop(tid, None)
        else:
            self.transactions[tid] = meta

    def replay_all(self, records: Iterable[CoordinatorRecord]) -> None:
        for record in records:
            self.replay(record)

    def fail(self, transactional_id: str) -> None:
        """The record of the last result for this id was not written."""
        self.pending.pop(transactional_id, None)

    def _write(self, meta: TransactionMetadata, *, error: ErrorCode = ErrorCode.NONE, message: str = "") -> TxnResult:
        self.pending[meta.transactional_id] = None
        return TxnResult(error, message, [txn_record(meta)], meta.producer_id, meta.producer_epoch)

    def _current(self, tid: str, producer_id: int, producer_epoch: int) -> TransactionMetadata | TxnResult:
        """The metadata of a request naming ``producer_id``/``producer_epoch``, or the error."""
        meta = self.transactions.get(tid)
        if meta is None:
            return _error(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                          f"transactional id {tid!r} is unknown to this coordinator: call init_transactions first")
        if tid in self.pending:
            return _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"a write for {tid!r} is in progress; retry")
        if producer_id != meta.producer_id:
            return _error(ErrorCode.INVALID_PRODUCER_ID_MAPPING, (
                f"transactional id {tid!r} has producer id {meta.producer_id}, the request names {producer_id}: "
                "this producer was replaced; call init_transactions"))
        return meta

    @staticmethod
    def _epoch_error(meta: TransactionMetadata, producer_epoch: int) -> TxnResult:
        if producer_epoch < meta.producer_epoch:
            return _error(ErrorCode.PRODUCER_FENCED, (
                f"transactional id {meta.transactional_id!r}: epoch {producer_epoch} is older than the current "
                f"{meta.producer_epoch}: a newer instance (or a timeout abort) fenced this producer"))
        return _error(ErrorCode.INVALID_PRODUCER_EPOCH, (
            f"transactional id {meta.transactional_id!r}: epoch {producer_epoch} is newer than the current "
            f"{meta.producer_epoch}"))

    # ------------------------------------------------------------------ requests

    def init_producer_id(self, transactional_id: str, timeout_ms: int, *, now_ms: int,
                         new_producer_id: Callable[[], int], producer_id: int = -1,
                         producer_epoch: int = -1) -> TxnResult:
        """InitProducerId with a transactional id: a new id (epoch 0) or the id's epoch
        bumped, fencing older instances. An open transaction is aborted first (the
        answer is CONCURRENT_TRANSACTIONS until the abort completes: the producer retries)."""
        tid = transactional_id
        if not tid:
            return _error(ErrorCode.INVALID_REQUEST, "transactional id is empty")
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return _error(ErrorCode.INVALID_TRANSACTION_TIMEOUT, (
                f"transaction.timeout.ms {timeout_ms} must be in 1..{self.config.max_timeout_ms} "
                "(transaction.max.timeout.ms)"))
        if tid in self.pending:
            return _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"a write for {tid!r} is in progress; retry")
        meta = self.transactions.get(tid)
        if meta is None:
            return self._write(TransactionMetadata(tid, new_producer_id(), 0, timeout_ms, last_update_ms=now_ms))
        if producer_id >= 0 and (producer_id != meta.producer_id
                                 or producer_epoch not in (meta.producer_epoch, meta.last_producer_epoch)):
            return _error(ErrorCode.PRODUCER_FENCED, (
                f"transactional id {tid!r}: producer id/epoch {producer_id}/{producer_epoch} are not current "
                f"({meta.producer_id}/{meta.producer_epoch}); a newer instance exists"))
        if meta.state.is_prepare:
            return _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"{tid!r} is completing a transaction; retry")
        if meta.state == TxnState.ONGOING:
            aborting = self._bumped(meta).transition(TxnState.PREPARE_ABORT, last_update_ms=now_ms)
            return self._write(aborting, error=ErrorCode.CONCURRENT_TRANSACTIONS,
                               message=f"aborting the open transaction of {tid!r} (older instance fenced); retry")
        bumped = self._bumped(meta, new_producer_id)
        return self._write(bumped.transition(TxnState.EMPTY, timeout_ms=timeout_ms, partitions=(), txn_start_ms=-1,
                                             last_update_ms=now_ms))

    @staticmethod
    def _bumped(meta: TransactionMetadata, new_producer_id: Callable[[], int] | None = None) -> TransactionMetadata:
        if meta.producer_epoch + 1 > MAX_PRODUCER_EPOCH:
            if new_producer_id is None:  # markers need the old id; the next init moves on
                return replace(meta, last_producer_epoch=meta.producer_epoch)
            return replace(meta, producer_id=new_producer_id(), producer_epoch=0, last_producer_epoch=-1)
        return replace(meta, producer_epoch=meta.producer_epoch + 1, last_producer_epoch=meta.producer_epoch)

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], *, now_ms: int) -> TxnResult:
        """AddPartitionsToTxn: the partitions join the open transaction (opening one)."""
        meta = self._current(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, TxnResult):
            return meta
        if producer_epoch != meta.producer_epoch:
            return self._epoch_error(meta, producer_epoch)
        if meta.state.is_prepare:
            return _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is completing a transaction")
        wanted = tuple(sorted(set(meta.partitions) | set(partitions)))
        if meta.state == TxnState.ONGOING and wanted == meta.partitions:
            return TxnResult(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
        start = meta.txn_start_ms if meta.state == TxnState.ONGOING else now_ms
        return self._write(meta.transition(TxnState.ONGOING, partitions=wanted, txn_start_ms=start,
                                           last_update_ms=now_ms))

    def offsets_partition(self, group_id: str) -> TopicPartition:
        return TopicPartition(OFFSETS_TOPIC, group_partition(group_id, self.config.offsets_partitions))

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, *,
                    now_ms: int) -> TxnResult:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        if not group_id:
            return _error(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        return self.add_partitions(transactional_id, producer_id, producer_epoch,
                                   [self.offsets_partition(group_id)], now_ms=now_ms)

    def check_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            group_id: str) -> TxnResult:
        """TxnOffsetCommit may go to the group coordinator: the producer is current and
        the group's offsets partition is in its open transaction."""
        meta = self._current(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, TxnResult):
            return meta
        if producer_epoch != meta.producer_epoch:
            return self._epoch_error(meta, producer_epoch)
        if meta.state != TxnState.ONGOING or self.offsets_partition(group_id) not in meta.partitions:
            return _error(ErrorCode.INVALID_TXN_STATE, (
                f"transactional id {transactional_id!r} has not added group {group_id!r} to an open transaction: "
                "call send_offsets_to_transaction inside begin/commit"))
        return TxnResult(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *,
                now_ms: int) -> TxnResult:
        """EndTxn: PrepareCommit/PrepareAbort with the epoch bumped (KIP-890)."""
        meta = self._current(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, TxnResult):
            return meta
        word = "commit" if commit else "abort"
        if producer_epoch == meta.producer_epoch:
            if meta.state != TxnState.ONGOING:
                return _error(ErrorCode.INVALID_TXN_STATE, (
                    f"{word} of {transactional_id!r}: no transaction is open (state {meta.state.value})"))
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return self._write(self._bumped(meta).transition(target, last_update_ms=now_ms))
        if producer_epoch == meta.last_producer_epoch and meta.state != TxnState.ONGOING:
            done = {TxnState.PREPARE_COMMIT: True, TxnState.COMPLETE_COMMIT: True,
                    TxnState.PREPARE_ABORT: False, TxnState.COMPLETE_ABORT: False}.get(meta.state)
            if done is commit:  # a retry of the EndTxn that bumped the epoch
                return TxnResult(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
            return _error(ErrorCode.INVALID_TXN_STATE, (
                f"{word} of {transactional_id!r} at epoch {producer_epoch}: that transaction ended otherwise "
                f"({meta.state.value}); abort and retry the work"))
        return self._epoch_error(meta, producer_epoch)

    # ------------------------------------------------------------------ markers and timeouts

    def pending_markers(self) -> list[MarkerJob]:
        return [MarkerJob(m.transactional_id, m.producer_id, m.producer_epoch, m.state == TxnState.PREPARE_COMMIT,
                          m.partitions, self.coordinator_epoch)
                for tid, m in sorted(self.transactions.items()) if m.state.is_prepare and tid not in self.pending]

    def markers_written(self, transactional_id: str, producer_epoch: int, *, now_ms: int) -> TxnResult:
        """Every partition holds the marker: CompleteCommit/CompleteAbort."""
        meta = self.transactions.get(transactional_id)
        if meta is None or not meta.state.is_prepare or meta.producer_epoch != producer_epoch \
                or transactional_id in self.pending:
            return _error(ErrorCode.INVALID_TXN_STATE, f"no markers owed for {transactional_id!r} at {producer_epoch}")
        target = TxnState.COMPLETE_COMMIT if meta.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return self._write(meta.transition(target, partitions=(), last_update_ms=now_ms))

    def expire(self, *, now_ms: int) -> list[TxnResult]:
        """Abort (epoch bumped: the producer is fenced) every transaction open longer
        than its timeout."""
        out = []
        for tid, meta in sorted(self.transactions.items()):
            if meta.state == TxnState.ONGOING and tid not in self.pending \
                    and now_ms - meta.txn_start_ms > meta.timeout_ms:
                out.append(self._write(self._bumped(meta).transition(TxnState.PREPARE_ABORT, last_update_ms=now_ms)))
        return out

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.txn_start_ms + m.timeout_ms + 1 for m in self.transactions.values()
                     if m.state == TxnState.ONGOING]
        return min(deadlines, default=None)

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)
