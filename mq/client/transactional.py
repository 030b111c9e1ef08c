"""The transactional producer's requests (KIP-98): ``init_transactions``,
``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
``abort_transaction`` — mixed into ``Producer``.

Coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection)
find the coordinator again and resend; CONCURRENT_TRANSACTIONS (the previous
transaction is still being completed) waits and resends. EndTxn is safe to resend:
the coordinator answers a retry of the EndTxn that bumped the epoch with success
(KIP-890). PRODUCER_FENCED and its kin make the producer FATAL: close it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mq.client.internals.offset_commit import GroupMetadata, OffsetAndMetadata
from mq.client.internals.transactions import FATAL_CODES, TransactionalIdempotence, TransactionState
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.group_messages import FindCoordinatorRequest
from mq.protocol.messages import Request, Response
from mq.protocol.producer_messages import InitProducerIdRequest
from mq.protocol.txn_messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitTopic,
    TxnTopic,
)

if TYPE_CHECKING:
    from mq.client.cluster import ClusterClient

log = logging.getLogger("mq.client")

_REFIND = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
TXN_KEY_TYPE = 1
CONCURRENT_TXN_BACKOFF_MS = 5


def _first_error(codes: list[int]) -> ErrorCode:
    for code in codes:
        if code:
            try:
                return ErrorCode(code)
            except ValueError:
                return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.NONE


class TransactionalProducer:
    """Mixed into ``Producer`` (which sets these attributes)."""

    cluster: ClusterClient
    idempotence: Any
    transaction_timeout_ms: int
    max_block_ms: int
    sender: Any
    _add_task: asyncio.Task | None

    @property
    def _txn(self) -> TransactionalIdempotence:
        txn = self.idempotence
        if not isinstance(txn, TransactionalIdempotence):
            raise MqError(ErrorCode.INVALID_CONFIG, "this producer has no transactional_id")
        return txn

    def _ensure_started(self) -> None:  # provided by Producer
        raise NotImplementedError

    async def flush(self, timeout_ms: int | None = None) -> None:  # provided by Producer
        raise NotImplementedError

    # ------------------------------------------------------------------ coordinators

    async def _coordinator(self, key: str, key_type: int, deadline: int) -> int:
        while True:
            try:
                response = await self.cluster.request_any(FindCoordinatorRequest(key, key_type=key_type))
                code = _first_error([response.error_code])  # type: ignore[attr-defined]
                message = response.error_message  # type: ignore[attr-defined]
            except MqError as exc:
                if not exc.retriable:
                    raise
                code, message = exc.code, exc.message
            if code == ErrorCode.NONE:
                node = response.node_id  # type: ignore[attr-defined]
                if self.cluster.metadata.node(node) is None:
                    self.cluster.add_node(node, response.host, response.port)  # type: ignore[attr-defined]
                return node
            if not code.retriable:
                raise MqError(code, f"no coordinator for {key!r}: {message}")
            await self._backoff(deadline, code, message)

    async def _backoff(self, deadline: int, code: ErrorCode, message: str, *, short: bool = False) -> None:
        if self.cluster.now_ms() >= deadline:
            raise MqError(code if code.retriable else ErrorCode.REQUEST_TIMED_OUT,
                          f"gave up after max_block_ms={self.max_block_ms}: {message or code.description}")
        backoff_ms = self.cluster.metadata.retry_backoff_ms
        await asyncio.sleep((min(backoff_ms, CONCURRENT_TXN_BACKOFF_MS) if short else backoff_ms) / 1000)

    async def _call(self, key: str, key_type: int, request: Request,
                    errors_of: Callable[[Response], list[int]]) -> Response:
        """Send to the coordinator of ``key``, resending on coordinator and concurrency errors."""
        deadline = self.cluster.now_ms() + self.max_block_ms
        while True:
            node = await self._coordinator(key, key_type, deadline)
            try:
                response = await self.cluster.request(node, request)
            except MqError as exc:
                if not exc.retriable:
                    raise
                await self._backoff(deadline, exc.code, exc.message)
                continue
            code = _first_error(errors_of(response))
            if code in _REFIND or code == ErrorCode.CONCURRENT_TRANSACTIONS:
                # The previous transaction's markers take a round trip or two: retry soon
                # (Kafka's producer also shortens its backoff for this answer).
                await self._backoff(deadline, code, getattr(response, "error_message", ""),
                                    short=code == ErrorCode.CONCURRENT_TRANSACTIONS)
                continue
            if code in FATAL_CODES:
                error = MqError(code, getattr(response, "error_message", "") or code.description)
                self._txn.set_fatal(error)
                raise error
            return response

    # ------------------------------------------------------------------ the API

    async def init_transactions(self) -> None:
        """Get the producer id and epoch of this transactional id, fencing older
        instances and aborting their open transaction (Kafka's initTransactions)."""
        txn = self._txn
        self._ensure_started()
        request = InitProducerIdRequest(txn.transactional_id, self.transaction_timeout_ms)
        response = await self._call(txn.transactional_id, TXN_KEY_TYPE, request, lambda r: [r.error_code])  # type: ignore[attr-defined]
        code = _first_error([response.error_code])  # type: ignore[attr-defined]
        if code != ErrorCode.NONE:
            raise MqError(code, response.error_message)  # type: ignore[attr-defined]
        txn.set_producer_id(response.producer_id, response.producer_epoch)  # type: ignore[attr-defined]
        txn.transition(TransactionState.READY)
        log.info("event=transactions_initialised transactional_id=%s producer_id=%s epoch=%s",
                 txn.transactional_id, txn.producer_id, txn.producer_epoch)

    def begin_transaction(self) -> None:
        self._txn.transition(TransactionState.IN_TRANSACTION)

    def _wanted_partitions(self) -> None:
        """The Sender holds a batch of a partition not yet in the transaction."""
        if self._add_task is None or self._add_task.done():
            self._add_task = asyncio.get_running_loop().create_task(self._add_partitions())

    async def _add_partitions(self) -> None:
        txn = self._txn
        while txn.partitions_to_add and txn.state == TransactionState.IN_TRANSACTION:
            tps = set(txn.partitions_to_add)
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(tps):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            request = AddPartitionsToTxnRequest(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                                [TxnTopic(t, ps) for t, ps in by_topic.items()])
            try:
                response = await self._call(txn.transactional_id, TXN_KEY_TYPE, request, _partition_errors)
            except MqError as exc:
                txn.failed = exc
                return
            code = _first_error(_partition_errors(response))
            if code != ErrorCode.NONE:
                txn.failed = MqError(code, f"AddPartitionsToTxn: {response.error_message or code.description}")  # type: ignore[attr-defined]
                return
            txn.partitions_added(tps)
            self.sender.wakeup()

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
                                          group_metadata: GroupMetadata | str) -> None:
        """Commit the consumer's ``offsets`` as part of this transaction: visible to the
        group only if it commits. ``group_metadata`` (``consumer.group_metadata()``)
        lets the group coordinator fence a consumer that lost its partitions (KIP-447)."""
        txn = self._txn
        txn.check_can_send()
        meta = GroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        add = AddOffsetsToTxnRequest(txn.transactional_id, txn.producer_id, txn.producer_epoch, meta.group_id)
        response = await self._call(txn.transactional_id, TXN_KEY_TYPE, add, lambda r: [r.error_code])  # type: ignore[attr-defined]
        code = _first_error([response.error_code])  # type: ignore[attr-defined]
        if code != ErrorCode.NONE:
            raise MqError(code, response.error_message)  # type: ignore[attr-defined]
        txn.has_offsets = True
        by_topic: dict[str, list[TxnOffsetCommitPartition]] = {}
        for tp, value in sorted(offsets.items()):
            om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            by_topic.setdefault(tp.topic, []).append(
                TxnOffsetCommitPartition(tp.partition, om.offset, om.leader_epoch, om.metadata))
        commit = TxnOffsetCommitRequest(
            txn.transactional_id, meta.group_id, txn.producer_id, txn.producer_epoch,
            [TxnOffsetCommitTopic(t, ps) for t, ps in by_topic.items()],
            meta.generation_id, meta.member_id, meta.group_instance_id)
        answer = await self._call(meta.group_id, 0, commit, _partition_errors)
        code = _first_error(_partition_errors(answer))
        if code != ErrorCode.NONE:
            error = MqError(code, answer.error_message or code.description)  # type: ignore[attr-defined]
            txn.failed = error
            raise error

    async def commit_transaction(self) -> None:
        """Send everything, then commit. A failed batch raises: abort_transaction then."""
        txn = self._txn
        txn.check_can_send()
        await self.flush()
        if txn.failed is not None:
            raise txn.failed
        await self._end(True)

    async def abort_transaction(self) -> None:
        """Abort: what was sent in this transaction is never read under read_committed."""
        txn = self._txn
        if txn.state == TransactionState.FATAL:
            raise MqError(ErrorCode.INVALID_TXN_STATE, f"the producer is fenced ({txn.fatal}); close it")
        try:
            await self.flush()
        except TimeoutError:
            pass
        await self._end(False)

    async def _end(self, commit: bool) -> None:
        txn = self._txn
        txn.transition(TransactionState.COMMITTING if commit else TransactionState.ABORTING)
        if txn.added or txn.has_offsets:
            request = EndTxnRequest(txn.transactional_id, txn.producer_id, txn.producer_epoch, commit)
            response = await self._call(txn.transactional_id, TXN_KEY_TYPE, request, lambda r: [r.error_code])  # type: ignore[attr-defined]
            code = _first_error([response.error_code])  # type: ignore[attr-defined]
            if code != ErrorCode.NONE:
                raise MqError(code, response.error_message)  # type: ignore[attr-defined]
            txn.set_producer_id(response.producer_id, response.producer_epoch)  # type: ignore[attr-defined]
        txn.has_offsets = False
        txn.transition(TransactionState.READY)


def _partition_errors(response: Response) -> list[int]:
    return [p.error_code for t in response.results for p in t.partitions]  # type: ignore[attr-defined]
