"""The decisions of Kafka's ``Sender``, without the I/O: what a ProduceRequest holds and
what each batch's fate is once the answer (or a failure) arrives.

A batch is retried when its error is retriable, it has attempts left (``retries``) and
its ``delivery_timeout_ms`` has not passed since it was created; otherwise it fails
with the broker's error (or DELIVERY_TIMEOUT). Errors that mean stale routing
(NOT_LEADER, UNKNOWN_TOPIC, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, a disconnect)
also ask for a metadata refresh, so the retry goes to the new leader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.client.internals.accumulator import ProducerBatch
from mq.client.internals.idempotence import IdempotenceManager
from mq.client.internals.metadata import needs_metadata_refresh
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.messages import (
    ProducePartitionData,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
)


@dataclass(slots=True)
class ProduceOutcome:
    completed: list[tuple[ProducerBatch, int, int]] = field(default_factory=list)
    """(batch, base_offset, log_append_time_ms) — offsets are -1 under acks=0."""
    failed: list[tuple[ProducerBatch, MqError]] = field(default_factory=list)
    retry: list[ProducerBatch] = field(default_factory=list)
    refresh_metadata: bool = False


def build_produce_request(batches: list[ProducerBatch], *, acks: int, timeout_ms: int) -> ProduceRequest:
    """One entry per partition; several batches of a partition are concatenated in order."""
    by_tp: dict[TopicPartition, list[bytes]] = {}
    for batch in batches:
        assert batch.payload is not None
        by_tp.setdefault(batch.topic_partition, []).append(batch.payload)
    topics: dict[str, list[ProducePartitionData]] = {}
    for tp, payloads in by_tp.items():
        records = payloads[0] if len(payloads) == 1 else b"".join(payloads)
        topics.setdefault(tp.topic, []).append(ProducePartitionData(tp.partition, records))
    return ProduceRequest(acks=acks, timeout_ms=timeout_ms,
                          topics=[ProduceTopicData(name, parts) for name, parts in topics.items()])


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class RetryPolicy:
    def __init__(self, *, retries: int, delivery_timeout_ms: int,
                 idempotence: IdempotenceManager | None = None) -> None:
        self.retries = retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self.idempotence = idempotence

    def can_retry(self, batch: ProducerBatch, code: ErrorCode, now_ms: int) -> bool:
        return (code.retriable and batch.attempts <= self.retries
                and now_ms - batch.created_ms < self.delivery_timeout_ms)

    def _fail_or_retry(self, outcome: ProduceOutcome, batch: ProducerBatch, error: MqError,
                       now_ms: int) -> None:
        if needs_metadata_refresh(error.code):
            outcome.refresh_metadata = True
        verdict = None if self.idempotence is None else self.idempotence.should_retry(batch, error.code)
        if verdict is not None:  # an idempotence error: retried whatever ``retries`` says
            if verdict and now_ms - batch.created_ms < self.delivery_timeout_ms:
                outcome.retry.append(batch)
            else:
                outcome.failed.append((batch, error))
            return
        if self.can_retry(batch, error.code, now_ms):
            outcome.retry.append(batch)
        elif error.code.retriable and now_ms - batch.created_ms >= self.delivery_timeout_ms:
            outcome.failed.append((batch, MqError(
                ErrorCode.DELIVERY_TIMEOUT,
                f"{batch.topic_partition}: not acknowledged within delivery_timeout_ms="
                f"{self.delivery_timeout_ms} after {batch.attempts} attempt(s); last error "
                f"{error.code.name}: {error.message}")))
        else:
            outcome.failed.append((batch, error))

    def on_response(self, batches: list[ProducerBatch], response: ProduceResponse,
                    now_ms: int) -> ProduceOutcome:
        outcome = ProduceOutcome()
        answers = {TopicPartition(t.name, p.partition): p
                   for t in response.topics for p in t.partitions}
        next_offset: dict[TopicPartition, int] = {}
        for batch in batches:
            tp = batch.topic_partition
            answer = answers.get(tp)
            if answer is None:
                error = MqError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {tp} in the response")
                self._fail_or_retry(outcome, batch, error, now_ms)
                continue
            if answer.error_code != ErrorCode.NONE:
                code = _code(answer.error_code)
                self._fail_or_retry(outcome, batch, MqError(code, answer.error_message), now_ms)
                continue
            base = next_offset.get(tp, answer.base_offset)
            next_offset[tp] = base + batch.record_count
            outcome.completed.append((batch, base, answer.log_append_time_ms))
        return outcome

    def on_failure(self, batches: list[ProducerBatch], error: MqError, now_ms: int) -> ProduceOutcome:
        """The request never got an answer (disconnect, timeout, send failure)."""
        outcome = ProduceOutcome()
        for batch in batches:
            self._fail_or_retry(outcome, batch, error, now_ms)
        return outcome

    def on_sent_without_ack(self, batches: list[ProducerBatch]) -> ProduceOutcome:
        """acks=0: written to the socket is all the producer will ever learn."""
        return ProduceOutcome(completed=[(b, -1, -1) for b in batches])
