"""Transaction metadata and the records of ``__transaction_state`` (Kafka's
``TransactionMetadata``, ``TransactionState`` and ``TransactionLog``).

One record per change of a transactional id, the latest per key wins (a compacted
topic), both sides msgpack (packed by ``mq.protocol``)::

    key    [0, transactional_id]
    value  {producer_id, producer_epoch, last_producer_epoch, timeout_ms, state,
            partitions: [[topic, [partition, ...]], ...], txn_start_ms, last_update_ms}

A value of ``None`` is a tombstone (an expired transactional id).

The legal transitions are one table, ``VALID_PREVIOUS``, as in Kafka: a state may
only be entered from the states listed for it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from mq.coordinator.records import CoordinatorRecord, group_partition
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import pack_header, unpack_header

__all__ = [
    "MAX_PRODUCER_EPOCH", "TRANSACTION_STATE_TOPIC", "VALID_PREVIOUS", "TransactionMetadata", "TxnState",
    "decode_txn_record", "transaction_partition", "txn_record",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
TXN_KEY = 0
MAX_PRODUCER_EPOCH = 32767
"""Epochs are i16; at the limit a transactional id gets a new producer id."""


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
}


def transaction_partition(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of an id: Kafka's ``abs(hashCode) % n``."""
    return group_partition(transactional_id, num_partitions)


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """One transactional id. ``producer_epoch`` is the epoch the producer writes with
    now; ``last_producer_epoch`` the one before the last bump (KIP-890: a retried
    EndTxn of the transaction that bumped it is recognised by it)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: tuple[TopicPartition, ...] = ()
    txn_start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = -1

    def transition(self, state: TxnState, **changes: object) -> TransactionMetadata:
        if self.state not in VALID_PREVIOUS[state]:
            raise MqError(ErrorCode.INVALID_TXN_STATE, (
                f"transactional id {self.transactional_id!r}: {self.state.value} -> {state.value} is not a legal "
                "transition"))
        return replace(self, state=state, **changes)  # type: ignore[arg-type]


def txn_record(meta: TransactionMetadata) -> CoordinatorRecord:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(meta.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return CoordinatorRecord(pack_header([TXN_KEY, meta.transactional_id]), pack_header({
        "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
        "last_producer_epoch": meta.last_producer_epoch, "timeout_ms": meta.timeout_ms, "state": meta.state.value,
        "partitions": [[t, ps] for t, ps in by_topic.items()], "txn_start_ms": meta.txn_start_ms,
        "last_update_ms": meta.last_update_ms,
    }))


def _corrupt(what: str) -> MqError:
    return MqError(ErrorCode.CORRUPT_MESSAGE, f"__transaction_state record: {what}")


def decode_txn_record(record: CoordinatorRecord) -> tuple[str, TransactionMetadata | None]:
    """``(transactional_id, metadata or None for a tombstone)``; CORRUPT_MESSAGE if malformed."""
    try:
        key = unpack_header(record.key)
        value = None if record.value is None else unpack_header(record.value)
    except ProtocolError as exc:
        raise _corrupt(exc.message) from None
    if not (isinstance(key, list) and len(key) == 2 and key[0] == TXN_KEY and isinstance(key[1], str)):
        raise _corrupt(f"unknown key {key!r}")
    tid = key[1]
    if value is None:
        return tid, None
    try:
        assert isinstance(value, dict)
        partitions = tuple(sorted(TopicPartition(t, p) for t, ps in value["partitions"] for p in ps))
        return tid, TransactionMetadata(
            tid, int(value["producer_id"]), int(value["producer_epoch"]), int(value["timeout_ms"]),
            TxnState(value["state"]), partitions, int(value["txn_start_ms"]), int(value["last_update_ms"]),
            int(value["last_producer_epoch"]))
    except (AssertionError, KeyError, TypeError, ValueError) as exc:
        raise _corrupt(f"bad value for {tid!r}: {exc}") from None
