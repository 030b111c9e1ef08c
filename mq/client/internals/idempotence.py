"""The idempotent producer's bookkeeping, without I/O (the idempotence half of Kafka's
``TransactionManager``, kept out of the Sender as the style guide asks).

The producer gets a producer id and epoch (InitProducerId) before its first batch.
Each batch is stamped, when first drained, with the id, the epoch and the partition's
next sequence (``stamp``); a retry keeps its sequence, so the partition leader
recognises a batch it already appended and answers with the original offsets.

Order is kept with up to 5 batches in flight per partition (the leader remembers the
last 5 per producer): a batch that fails goes back into its queue in sequence order,
and a retried batch is only sent alone, when nothing else of its partition is in
flight — so the leader sees the partition's sequences in order again.

Errors (KIP-360, "where safe"):

- ``OUT_OF_ORDER_SEQUENCE_NUMBER`` for a batch that is not the next after the last
  acknowledged one: an earlier batch failed and is retried first; retry.
- ``OUT_OF_ORDER_SEQUENCE_NUMBER`` for the next batch, or ``UNKNOWN_PRODUCER_ID``: the
  leader lost this producer's state (expiry, or an unclean election lost acknowledged
  batches), or a batch that failed for good (delivery timeout) was never appended.
  Bump the epoch once nothing is in flight, restart every partition's sequence at 0,
  retry. A batch written before the bump may then be written twice: this is the only
  case idempotence cannot cover, and it needs lost state or a delivery timeout first.
- ``INVALID_PRODUCER_EPOCH``: a newer instance with this id exists; the batch fails.
"""

from __future__ import annotations

from mq.client.internals.accumulator import ProducerBatch
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol.batch_format import with_producer_state

MAX_IN_FLIGHT_PER_PARTITION = 5
"""What the leader remembers per producer (``mq.storage.producer_state``)."""
MAX_PRODUCER_EPOCH = 32767
SEQUENCE_LIMIT = 2**31


class _PartitionSequences:
    __slots__ = ("in_flight", "last_acked", "last_failed", "next_sequence")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.last_acked = -1
        self.last_failed = -1  # last sequence of a batch that failed for good (-1: none)
        self.in_flight = 0


class IdempotenceManager:
    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitions: dict[TopicPartition, _PartitionSequences] = {}
        self.bump_requested = False
        self.epoch_bumps = 0

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._reset_sequences()

    def _seq(self, tp: TopicPartition) -> _PartitionSequences:
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = _PartitionSequences()
        return state

    # ---- draining

    def can_send(self, tp: TopicPartition, batch: ProducerBatch) -> bool:
        """Whether ``batch`` (the head of its partition's queue) may go now."""
        if not self.has_producer_id or self.bump_requested:
            return False
        state = self._seq(tp)
        if batch.attempts and batch.base_sequence >= 0:
            return state.in_flight == 0  # a retry goes alone, in order
        return state.in_flight < MAX_IN_FLIGHT_PER_PARTITION

    def stamp(self, batch: ProducerBatch) -> None:
        """Give a batch its sequence (first send, or first send after an epoch bump)
        and write id, epoch and sequence into its bytes."""
        state = self._seq(batch.topic_partition)
        if batch.base_sequence < 0 or batch.producer_epoch != self.producer_epoch:
            batch.base_sequence = state.next_sequence
            batch.producer_epoch = self.producer_epoch
            state.next_sequence = (state.next_sequence + batch.record_count) % SEQUENCE_LIMIT
            assert batch.payload is not None
            batch.payload = with_producer_state(batch.payload, self.producer_id, self.producer_epoch,
                                                batch.base_sequence)
        state.in_flight += 1

    # ---- answers

    def on_done(self, batch: ProducerBatch) -> None:
        """The batch's request finished (any outcome): it is no longer in flight."""
        state = self._seq(batch.topic_partition)
        state.in_flight = max(0, state.in_flight - 1)

    def on_acked(self, batch: ProducerBatch) -> None:
        if batch.producer_epoch != self.producer_epoch:
            return
        state = self._seq(batch.topic_partition)
        last = (batch.base_sequence + batch.record_count - 1) % SEQUENCE_LIMIT
        if state.last_acked < 0 or 0 < (last - state.last_acked) % SEQUENCE_LIMIT < SEQUENCE_LIMIT // 2:
            state.last_acked = last

    def should_retry(self, batch: ProducerBatch, code: ErrorCode) -> bool | None:
        """For idempotence errors: True (retry, perhaps after an epoch bump), False
        (fail), None (not an idempotence error: the usual rules apply)."""
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            self._request_bump(batch)
            return True
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            state = self._seq(batch.topic_partition)
            after_acked = (state.last_acked + 1) % SEQUENCE_LIMIT
            after_failed = (state.last_failed + 1) % SEQUENCE_LIMIT
            if batch.base_sequence == after_acked or (state.last_failed >= 0 and batch.base_sequence == after_failed):
                # Nothing before it is unanswered: the leader lost what it acknowledged, or
                # a batch that failed for good was never appended. A real gap: bump.
                self._request_bump(batch)
            return True
        if code == ErrorCode.INVALID_PRODUCER_EPOCH:
            return False
        return None

    def on_failed(self, batch: ProducerBatch) -> None:
        """A stamped batch failed for good (delivery timeout, a non-retriable error). It
        may have been appended or not: the next batch tells (accepted: it was; refused
        as out of order: it was not, and the epoch is bumped then, Kafka's "unresolved
        sequence"). Bumping at once would resend in-flight batches under the new epoch,
        duplicating those already appended."""
        if batch.base_sequence < 0 or batch.producer_epoch != self.producer_epoch:
            return
        state = self._seq(batch.topic_partition)
        last = (batch.base_sequence + batch.record_count - 1) % SEQUENCE_LIMIT
        if state.last_failed < 0 or 0 < (last - state.last_failed) % SEQUENCE_LIMIT < SEQUENCE_LIMIT // 2:
            state.last_failed = last

    def _request_bump(self, batch: ProducerBatch) -> None:
        if batch.producer_epoch == self.producer_epoch:
            self.bump_requested = True

    def maybe_bump_epoch(self) -> bool:
        """Bump once nothing is in flight; returns True if the producer needs a new id
        (its epoch would overflow) instead."""
        if not self.bump_requested or any(s.in_flight for s in self._partitions.values()):
            return False
        self.bump_requested = False
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            self.producer_id = self.producer_epoch = -1
            return True
        self.producer_epoch += 1
        self.epoch_bumps += 1
        self._reset_sequences()
        return False

    def _reset_sequences(self) -> None:
        for state in self._partitions.values():
            state.next_sequence = 0
            state.last_acked = state.last_failed = -1
