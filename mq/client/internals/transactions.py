"""The transactional producer's state, without I/O (the transaction half of Kafka's
``TransactionManager``).

States: UNINITIALIZED -> (init_transactions) READY -> (begin) IN_TRANSACTION ->
(commit/abort) COMMITTING/ABORTING -> READY; FATAL after the producer was fenced (a
newer instance with the same transactional id, or its transaction timed out): the
producer must be closed.

A batch of a partition not yet in the transaction is held (``can_send`` False) until
AddPartitionsToTxn added it: ``partitions_to_add`` is what the producer's transaction
loop sends next. EndTxn returns the epoch for the next transaction (KIP-890): the
sequences restart at 0 with it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from mq.client.internals.accumulator import ProducerBatch
from mq.client.internals.idempotence import IdempotenceManager
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

__all__ = ["TransactionState", "TransactionalIdempotence"]


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    FATAL = "fatal"


_NEXT: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.READY: frozenset({TransactionState.UNINITIALIZED, TransactionState.COMMITTING,
                                       TransactionState.ABORTING}),
    TransactionState.IN_TRANSACTION: frozenset({TransactionState.READY}),
    TransactionState.COMMITTING: frozenset({TransactionState.IN_TRANSACTION, TransactionState.COMMITTING}),
    TransactionState.ABORTING: frozenset({TransactionState.IN_TRANSACTION, TransactionState.ABORTING,
                                          TransactionState.COMMITTING}),
}

FATAL_CODES = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                         ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND})


class TransactionalIdempotence(IdempotenceManager):
    """The idempotence bookkeeping plus the transaction: which partitions the
    coordinator knows, and whether a batch of this transaction failed."""

    def __init__(self, transactional_id: str, *, on_partitions_wanted: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.transactional_id = transactional_id
        self.state = TransactionState.UNINITIALIZED
        self.added: set[TopicPartition] = set()
        self.partitions_to_add: set[TopicPartition] = set()
        self.failed: MqError | None = None
        self.has_offsets = False  # AddOffsetsToTxn done in this transaction
        self.fatal: MqError | None = None
        self.on_partitions_wanted = on_partitions_wanted

    def transition(self, state: TransactionState) -> None:
        if self.state == TransactionState.FATAL:
            raise MqError(ErrorCode.INVALID_TXN_STATE, (
                f"transactional producer {self.transactional_id!r} is fenced ({self.fatal}): close it and "
                "start a new one"))
        allowed = _NEXT.get(state, frozenset())
        if self.state not in allowed:
            raise MqError(ErrorCode.INVALID_TXN_STATE, (
                f"transactional producer {self.transactional_id!r}: cannot go from {self.state.value} to "
                f"{state.value}" + (" (call init_transactions first)" if self.state == TransactionState.UNINITIALIZED
                                    else "")))
        self.state = state
        if state == TransactionState.IN_TRANSACTION:
            self.added.clear()
            self.partitions_to_add.clear()
            self.failed = None
            self.has_offsets = False

    def check_can_send(self) -> None:
        if self.state != TransactionState.IN_TRANSACTION:
            raise MqError(ErrorCode.INVALID_TXN_STATE, (
                f"transactional producer {self.transactional_id!r} is {self.state.value}: send only between "
                "begin_transaction and commit/abort_transaction"))

    def set_fatal(self, error: MqError) -> None:
        self.fatal = error
        self.state = TransactionState.FATAL

    # ---- gating the Sender

    def can_send(self, tp: TopicPartition, batch: ProducerBatch) -> bool:
        if tp not in self.added:
            if tp not in self.partitions_to_add:
                self.partitions_to_add.add(tp)
                if self.on_partitions_wanted is not None:
                    self.on_partitions_wanted()
            return False
        return super().can_send(tp, batch)

    def partitions_added(self, tps: set[TopicPartition]) -> None:
        self.added |= tps
        self.partitions_to_add -= tps

    def on_failed(self, batch: ProducerBatch) -> None:
        super().on_failed(batch)
        if self.failed is None:
            self.failed = MqError(ErrorCode.INVALID_TXN_STATE, (
                f"a batch to {batch.topic_partition} failed in this transaction: abort_transaction and retry"))

    def should_retry(self, batch: ProducerBatch, code: ErrorCode) -> bool | None:
        if code in FATAL_CODES:
            return False
        retry = super().should_retry(batch, code)
        if self.bump_requested:
            # A transactional producer never bumps its epoch itself (the coordinator owns
            # it): the batch fails and the transaction must be aborted.
            self.bump_requested = False
            return False
        return retry
