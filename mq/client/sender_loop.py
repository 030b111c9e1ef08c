"""The producer's Sender task: the I/O half of Kafka's ``Sender``.

Each round it expires batches past ``delivery_timeout_ms``, refreshes metadata when
asked, finds the leaders with sendable batches (``RecordAccumulator.ready``), and for
each leader whose connection is up sends ``drain``ed batches while fewer than
``max_in_flight`` requests are outstanding on it. Answers are turned into outcomes by
``RetryPolicy`` (sans-IO) and applied here: resolve or fail the batch futures, give
memory back, re-enqueue retries, ask for metadata. It sleeps until woken (new batch,
answer, connect, metadata) or until the next linger / backoff deadline.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from collections.abc import Callable
from itertools import accumulate

from mq.client.cluster import ClusterClient
from mq.client.internals.accumulator import ProducerBatch, RecordAccumulator
from mq.client.internals.sender import ProduceOutcome, RetryPolicy, build_produce_request
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.batch_builder import EMPTY_BATCH_SIZE, columns_of, record_sizes
from mq.protocol.producer_messages import InitProducerIdRequest
from mq.protocol.record_batch import BatchBuilder

log = logging.getLogger("mq.client")

IDLE_CHECK_MS = 250  # upper bound on a sleep: delivery timeouts are checked at least this often


class Sender:
    def __init__(self, cluster: ClusterClient, accumulator: RecordAccumulator, policy: RetryPolicy,
                 *, acks: int, max_in_flight: int, max_request_size: int, request_timeout_ms: int,
                 on_memory_freed: Callable[[], None]) -> None:
        self.cluster = cluster
        self.accumulator = accumulator
        self.policy = policy
        self.acks = acks
        self.max_in_flight = max_in_flight
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.on_memory_freed = on_memory_freed
        self.in_flight: dict[ProducerBatch, None] = {}
        self.idempotence = policy.idempotence
        self._init_task: asyncio.Task | None = None
        self.stats = {"requests": 0, "batches": 0, "retries": 0, "failed_batches": 0}
        self._task: asyncio.Task | None = None
        self._event: asyncio.Event | None = None
        self._memory_event: asyncio.Event | None = None
        self._stopping = False
        self._flushes = 0

    def start(self) -> None:
        self._event = asyncio.Event()
        self._memory_event = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.cluster.listeners.append(self.wakeup)

    def wakeup(self) -> None:
        event = self._event
        if event is not None and not event.is_set():
            event.set()

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        try:
            while True:
                sleep_ms = self._run_once()
                if sleep_ms is None:
                    return
                await self._sleep(sleep_ms)
        except Exception:  # a bug here must not silently stop delivery
            log.exception("event=sender_crashed")
            self._fail_everything(MqError(ErrorCode.UNKNOWN_SERVER_ERROR, "producer sender crashed"))
            raise

    async def _sleep(self, ms: int) -> None:
        event = self._event
        assert event is not None
        if event.is_set():
            event.clear()
            await asyncio.sleep(0)
            return
        handle = asyncio.get_running_loop().call_later(ms / 1000, event.set)
        await event.wait()
        handle.cancel()
        event.clear()

    def _run_once(self) -> int | None:
        cluster = self.cluster
        md = cluster.metadata
        acc = self.accumulator
        now = cluster.now_ms()
        expired = acc.expired(now)
        if expired:
            self._apply(ProduceOutcome(failed=[(b, MqError(
                ErrorCode.DELIVERY_TIMEOUT,
                f"{b.topic_partition}: batch waited {now - b.created_ms} ms, longer than "
                f"delivery_timeout_ms={acc.delivery_timeout_ms}")) for b in expired]), now)
        if md.topics and md.time_to_next_update_ms(now) == 0:
            cluster.refresh_in_background()
        idempotence = self.idempotence
        if idempotence is not None:
            idempotence.maybe_bump_epoch()
            if not idempotence.has_producer_id and acc.has_undrained():
                self._ensure_producer_id()
        nodes, next_ms, unknown = acc.ready(now, md.leader_for)
        sleep_ms = IDLE_CHECK_MS if next_ms is None else min(next_ms, IDLE_CHECK_MS)
        if unknown:
            md.request_update()
            cluster.refresh_in_background()
            sleep_ms = min(sleep_ms, md.retry_backoff_ms)
        for node in nodes:
            conn = cluster.ready_connection(node)
            if conn is None:
                address = cluster.address_of(node)
                backoff = cluster.backoff_remaining_ms(address) if address else 0
                if backoff:
                    # The leader is unreachable: its partitions may have moved (fail-over).
                    # Ask every retry_backoff_ms, not once per reconnect backoff (up to
                    # reconnect_backoff_max_ms), so a new leader is used as soon as it is known.
                    md.request_update()
                    backoff = min(backoff, md.time_to_next_update_ms(now))
                sleep_ms = min(sleep_ms, max(backoff, 1))
                continue
            while conn.in_flight < self.max_in_flight or self.acks == 0:
                batches = acc.drain(node, md.leader_for, self.max_request_size, now)
                if not batches:
                    break
                self._send(conn, batches, now)
                if not conn.connected:
                    break
        if self._stopping and not acc.has_undrained() and not self.in_flight:
            return None
        return max(sleep_ms, 0)

    def _send(self, conn, batches: list[ProducerBatch], now: int) -> None:
        request = build_produce_request(batches, acks=self.acks, timeout_ms=self.request_timeout_ms)
        self.stats["requests"] += 1
        self.stats["batches"] += len(batches)
        try:
            fut = conn.send(request, expect_response=self.acks != 0)
        except MqError as exc:
            self._done(batches)
            self._apply(self.policy.on_failure(batches, exc, now), now)
            return
        if fut is None:
            self._apply(self.policy.on_sent_without_ack(batches), now)
            return
        for batch in batches:
            self.in_flight[batch] = None
        fut.add_done_callback(lambda f: self._on_answer(f, batches))

    def _done(self, batches: list[ProducerBatch]) -> None:
        if self.idempotence is not None:
            for batch in batches:
                self.idempotence.on_done(batch)

    def _on_answer(self, fut: asyncio.Future, batches: list[ProducerBatch]) -> None:
        for batch in batches:
            self.in_flight.pop(batch, None)
        self._done(batches)
        now = self.cluster.now_ms()
        if fut.cancelled():
            outcome = self.policy.on_failure(
                batches, MqError(ErrorCode.NETWORK_EXCEPTION, "request cancelled"), now)
        elif fut.exception() is not None:
            exc = fut.exception()
            error = exc if isinstance(exc, MqError) else MqError(ErrorCode.NETWORK_EXCEPTION, str(exc))
            outcome = self.policy.on_failure(batches, error, now)
        else:
            outcome = self.policy.on_response(batches, fut.result(), now)
        self._apply(outcome, now)
        self.wakeup()

    def _apply(self, outcome: ProduceOutcome, now: int) -> None:
        acc = self.accumulator
        freed = False
        idempotence = self.idempotence
        for batch, base, log_append_time in outcome.completed:
            if idempotence is not None:
                idempotence.on_acked(batch)
            acc.deallocate(batch)
            freed = True
            if not batch.future.done():  # type: ignore[attr-defined]
                batch.future.set_result((base, log_append_time))  # type: ignore[attr-defined]
        for batch, error in outcome.failed:
            if idempotence is not None:
                idempotence.on_failed(batch)
            acc.deallocate(batch)
            freed = True
            self.stats["failed_batches"] += 1
            log.info("event=batch_failed partition=%s records=%s error=%s", batch.topic_partition,
                     batch.record_count, error)
            if not batch.future.done():  # type: ignore[attr-defined]
                batch.future.set_exception(error)  # type: ignore[attr-defined]
        for batch in outcome.retry:
            self.stats["retries"] += 1
            acc.reenqueue(batch, now)
        if outcome.refresh_metadata:
            self.cluster.metadata.request_update()
            self.cluster.refresh_in_background()
        if freed:
            self.on_memory_freed()
            if self._memory_event is not None:
                self._memory_event.set()

    # ------------------------------------------------------------------ producer id

    def _ensure_producer_id(self) -> None:
        if self._init_task is None or self._init_task.done():
            self._init_task = asyncio.get_running_loop().create_task(self._init_producer_id())

    async def _init_producer_id(self) -> None:
        """InitProducerId from any broker, retried with backoff; batches wait meanwhile."""
        idempotence = self.idempotence
        assert idempotence is not None
        backoff_s = self.cluster.metadata.retry_backoff_ms / 1000
        while not self._stopping and not idempotence.has_producer_id:
            try:
                response = await self.cluster.request_any(InitProducerIdRequest())
                code = ErrorCode(response.error_code)  # type: ignore[attr-defined]
                if code == ErrorCode.NONE:
                    idempotence.set_producer_id(response.producer_id, response.producer_epoch)  # type: ignore[attr-defined]
                    log.info("event=producer_id producer_id=%s epoch=%s", idempotence.producer_id,
                             idempotence.producer_epoch)
                    break
                error = MqError(code, response.error_message)  # type: ignore[attr-defined]
            except MqError as exc:
                error = exc
            except OSError as exc:
                error = MqError(ErrorCode.NETWORK_EXCEPTION, str(exc))
            if not error.code.retriable and error.code != ErrorCode.NETWORK_EXCEPTION:
                log.warning("event=init_producer_id_failed error=%s", error)
                self._fail_queued(MqError(error.code, f"InitProducerId failed ({error.message}); an "
                                          "older broker? Use enable_idempotence=False"))
            await asyncio.sleep(backoff_s)
        self.wakeup()

    def _fail_queued(self, error: MqError) -> None:
        self._apply(ProduceOutcome(failed=[(b, error) for b in self.accumulator.abort_all()]),
                    self.cluster.now_ms())

    def _fail_everything(self, error: MqError) -> None:
        batches = self.accumulator.abort_all() + list(self.in_flight)
        self.in_flight.clear()
        self._apply(ProduceOutcome(failed=[(b, error) for b in batches]), self.cluster.now_ms())

    # ------------------------------------------------------------------ bulk appends

    async def append_bulk(self, tp: TopicPartition, records: list, timestamp_ms: int,
                          max_block_ms: int, batch_size: int) -> list[ProducerBatch]:
        """Build whole batches of ``records`` (``(key, value)`` or ``(key, value, headers)``
        tuples) for ``tp`` with no per-record accumulator work, waiting for buffer memory
        batch by batch. A batch closes as soon as it reaches ``batch_size``."""
        acc = self.accumulator
        out = []
        keys, values, headers = columns_of(records)
        ends = list(accumulate(record_sizes(keys, values, headers)))
        start, n = 0, len(values)
        while start < n:
            # The batch closes as soon as it reaches batch_size (at least one record).
            limit = batch_size - EMPTY_BATCH_SIZE + (ends[start - 1] if start else 0)
            end = min(bisect_left(ends, limit, start) + 1, n)
            builder = BatchBuilder(compression=acc.compression, is_transactional=acc.transactional)
            size = builder.extend_columns(timestamp_ms, keys[start:end], values[start:end],
                                          None if headers is None else headers[start:end])
            await self.reserve(size, max_block_ms)
            out.append(acc.add_built_batch(tp, builder.build(), end - start, size,
                                           self.cluster.now_ms()))
            start = end
            self.wakeup()
            await asyncio.sleep(0)  # the sender ships this batch while the next is built
        return out

    async def reserve(self, size: int, max_block_ms: int) -> None:
        """Wait until ``size`` bytes of buffer memory are free (BUFFER_EXHAUSTED after
        ``max_block_ms``) for a batch the caller built whole."""
        acc = self.accumulator
        if size > acc.buffer_memory:
            raise MqError(ErrorCode.RECORD_TOO_LARGE,
                          f"a {size}-byte batch is larger than buffer_memory={acc.buffer_memory}")
        deadline = self.cluster.now_ms() + max_block_ms
        assert self._memory_event is not None
        while acc.available_memory < size:
            remaining = deadline - self.cluster.now_ms()
            if remaining <= 0:
                raise MqError(ErrorCode.BUFFER_EXHAUSTED,
                              f"buffer_memory={acc.buffer_memory} stayed full for "
                              f"max_block_ms={max_block_ms}")
            self._memory_event.clear()
            self.wakeup()
            try:
                await asyncio.wait_for(self._memory_event.wait(), remaining / 1000)
            except TimeoutError:
                pass

    # ------------------------------------------------------------------ flush / stop

    async def flush(self, timeout_s: float | None) -> None:
        futures = [b.future for b in self.accumulator.queued_batches()]
        futures += [b.future for b in self.in_flight]
        if not futures:
            return
        self._flushes += 1
        self.accumulator.flushing = True
        self.wakeup()
        try:
            done, pending = await asyncio.wait(futures, timeout=timeout_s)  # type: ignore[arg-type]
            if pending:
                raise TimeoutError(f"{len(pending)} batches still unacknowledged")
        finally:
            self._flushes -= 1
            if not self._flushes:
                self.accumulator.flushing = False

    async def stop(self) -> None:
        self._stopping = True
        self.accumulator.closing = True
        if self._init_task is not None:
            self._init_task.cancel()
        if self._task is None:
            return
        leftovers = self.accumulator.abort_all() + list(self.in_flight)
        self.in_flight.clear()
        if leftovers:
            self._apply(ProduceOutcome(failed=[(b, MqError(
                ErrorCode.NETWORK_EXCEPTION, "producer closed before the batch was acknowledged"))
                for b in leftovers]), self.cluster.now_ms())
        self.wakeup()
        try:
            await asyncio.wait_for(self._task, 1.0)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()
