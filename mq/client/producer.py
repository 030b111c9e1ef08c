"""The asyncio Producer: partitioner + RecordAccumulator in front, a Sender task behind.

``send()`` is a plain method, not a coroutine: it picks the partition, appends the
record to the open batch of that partition and returns a ``RecordFuture`` at once
(Kafka's ``send`` returning a Future). Awaiting the future gives the record's
``RecordMetadata`` once the batch is acknowledged. No coroutine, task or asyncio
future is created per record: a RecordFuture is the batch's future plus an index.

When ``buffer_memory`` is used up, or the topic's metadata is not known yet, the
record waits in a FIFO (so order is kept) until memory frees or metadata arrives; after
``max_block_ms`` its future fails with BUFFER_EXHAUSTED (or the metadata error).
``send_nowait`` never waits: it raises BUFFER_EXHAUSTED at once instead.

The Sender task (``mq.client.sender_loop``) drains batches that are full, lingered
``linger_ms``, or flushed, to each partition's leader, with up to ``max_in_flight``
requests per connection, and applies retries, metadata refreshes and delivery timeouts.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from mq.client.cluster import ClusterClient
from mq.client.delivery import producer_settings
from mq.client.internals.accumulator import (
    NEW_BATCH_NEEDED,
    NO_MEMORY,
    PartitionQueue,
    ProducerBatch,
    RecordAccumulator,
)
from mq.client.internals.idempotence import MAX_IN_FLIGHT_PER_PARTITION, IdempotenceManager
from mq.client.internals.partitioner import KeyPartitioner, StickyPartitioner
from mq.client.internals.sender import RetryPolicy
from mq.client.internals.transactions import TransactionalIdempotence
from mq.client.results import PendingRecordFuture, RecordFuture, RecordMetadataList
from mq.client.sender_loop import Sender
from mq.client.transactional import TransactionalProducer
from mq.core.clock import Clock
from mq.core.conflict import ConflictPolicy, ConflictRules, not_home_message
from mq.core.errors import ErrorCode, MqError
from mq.core.hlc import HLC_HEADER, Hlc, HybridLogicalClock
from mq.core.types import Acks, CompressionType, RecordMetadata, TopicPartition
from mq.protocol.batch_builder import BatchBuilder

KIB = 1024
MIB = 1024 * 1024

HeadersArg = Mapping[str, bytes] | Sequence[tuple[str, bytes]] | None


def _headers(headers: HeadersArg) -> tuple[tuple[str, bytes], ...]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = tuple((str(k), v if isinstance(v, bytes) else bytes(v)) for k, v in items)
    return out


class _Route:
    """A topic's partitions as the hot path needs them (rebuilt on metadata change)."""

    __slots__ = ("available", "home", "stamp", "sticky", "tps")

    def __init__(self, tps: list[PartitionQueue], available: list[int]) -> None:
        self.tps = tps  # the accumulator's queue per partition, by partition number
        self.available = available
        self.sticky = -1  # cached StickyPartitioner choice; -1: ask it
        self.home: ConflictRules | None = None  # conflict.policy=home-region: check each key
        self.stamp = False  # stamp keyed records with mq.hlc


HLC_MODES = ("auto", "always", "never")


_time_ns = time.time_ns
_monotonic = time.monotonic
_new_future = tuple.__new__


def _acks(acks: int | str) -> int:
    if acks in ("all", -1, "-1"):
        return int(Acks.ALL)
    if str(acks) in ("0", "1"):
        return int(acks)
    raise MqError(ErrorCode.INVALID_CONFIG, f"acks must be 0, 1 or 'all', not {acks!r}")


def _idempotence(enable: bool | None, acks: int, retries: int, max_in_flight: int) -> bool:
    conflicts = [text for bad, text in (
        (acks != Acks.ALL, f"acks={acks} (needs 'all')"), (retries <= 0, f"retries={retries} (needs > 0)"),
        (max_in_flight > MAX_IN_FLIGHT_PER_PARTITION,
         f"max_in_flight={max_in_flight} (needs <= {MAX_IN_FLIGHT_PER_PARTITION})"),
    ) if bad]
    if enable is None:
        return not conflicts
    if enable and conflicts:
        raise MqError(ErrorCode.INVALID_CONFIG, "enable_idempotence=True conflicts with " + ", ".join(conflicts))
    return enable


def _delivery_preset(delivery: str, acks: int | str, retries: int, enable_idempotence: bool | None,
                     transactional_id: str | None) -> tuple[int | str, int, bool | None]:
    defaults = {name: p.default for name, p in inspect.signature(Producer.__init__).parameters.items()
                if name in ("acks", "retries", "enable_idempotence")}
    got = producer_settings(delivery, {"acks": acks, "retries": retries, "enable_idempotence": enable_idempotence},
                            defaults, transactional_id=transactional_id)
    return got["acks"], got["retries"], got["enable_idempotence"]


class Producer(TransactionalProducer):
    def __init__(self, bootstrap: str = "localhost:9092", *, acks: int | str = 1,
                 linger_ms: int = 5, batch_size: int = 64 * KIB, buffer_memory: int = 32 * MIB,
                 max_block_ms: int = 60_000, compression: str | CompressionType | None = None,
                 max_in_flight: int = 5, retries: int = 2**31 - 1, retry_backoff_ms: int = 100,
                 delivery_timeout_ms: int = 120_000, request_timeout_ms: int = 30_000,
                 max_request_size: int = 1 * MIB, metadata_max_age_ms: int = 300_000,
                 client_id: str = "mq-producer", clock: Clock | None = None,
                 seed: int | None = None, address_map: Mapping[str, str] | None = None,
                 hlc: str = "auto", hlc_clock: HybridLogicalClock | None = None,
                 home_bootstraps: Mapping[str, str] | None = None,
                 enable_idempotence: bool | None = None, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, delivery: str | None = None) -> None:
        """``delivery``: a preset (``at-most-once``, ``at-least-once``, ``exactly-once``;
        ``mq.client.delivery``) that sets ``acks``, ``retries`` and ``enable_idempotence``
        (exactly-once needs ``transactional_id``); an explicit setting it contradicts is
        INVALID_CONFIG. ``enable_idempotence``: None (the default) turns it on whenever the settings
        allow it, as Kafka 3.x does: ``acks="all"``, ``retries`` > 0 and
        ``max_in_flight`` <= 5; True insists (INVALID_CONFIG if they conflict); False
        keeps the plain producer (retries may then duplicate records).
        ``transactional_id`` makes it transactional (``mq.client.transactional``):
        idempotent, acks=all, and writes only inside begin/commit_transaction."""
        if delivery is not None:
            acks, retries, enable_idempotence = _delivery_preset(delivery, acks, retries, enable_idempotence,
                                                                 transactional_id)
        # Everything but the cluster to talk to: what a producer for another region
        # (home-region routing) is built with.
        self._settings = {k: v for k, v in locals().items()
                          if k not in ("self", "bootstrap", "home_bootstraps", "hlc_clock", "__class__")}
        if hlc not in HLC_MODES:
            raise MqError(ErrorCode.INVALID_CONFIG, f"hlc must be one of {', '.join(HLC_MODES)}, not {hlc!r}")
        self.hlc_mode = hlc
        self.hlc = hlc_clock or HybridLogicalClock()
        self.home_bootstraps = dict(home_bootstraps or {})
        self._home_producers: dict[str, Producer] = {}
        try:
            codec = CompressionType.parse(compression)
        except (KeyError, ValueError):
            raise MqError(ErrorCode.INVALID_CONFIG,
                          f"compression must be none, gzip, lz4 or zstd, not {compression!r}") from None
        self.acks = _acks(acks)
        if transactional_id is not None:
            if not transactional_id:
                raise MqError(ErrorCode.INVALID_CONFIG, "transactional_id must not be empty")
            if self.acks != -1 or enable_idempotence is False:
                raise MqError(ErrorCode.INVALID_CONFIG, "a transactional producer needs acks='all' and idempotence")
            enable_idempotence = True
        self.idempotent = _idempotence(enable_idempotence, self.acks, retries, max_in_flight)
        self.transaction_timeout_ms = transaction_timeout_ms
        self._add_task: asyncio.Task | None = None
        self.idempotence = (TransactionalIdempotence(transactional_id, on_partitions_wanted=self._wanted_partitions)
                            if transactional_id is not None
                            else IdempotenceManager() if self.idempotent else None)
        self.max_block_ms = max_block_ms
        self.batch_size = batch_size
        self.cluster = ClusterClient(bootstrap, client_id=client_id,
                                     request_timeout_ms=request_timeout_ms,
                                     retry_backoff_ms=retry_backoff_ms,
                                     metadata_max_age_ms=metadata_max_age_ms, clock=clock, seed=seed,
                                     address_map=address_map)
        self.accumulator = RecordAccumulator(
            batch_size=batch_size, linger_ms=linger_ms, buffer_memory=buffer_memory,
            compression=codec, delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_ms=retry_backoff_ms, future_factory=self._new_batch_future)
        self.accumulator.idempotence = self.idempotence
        self.accumulator.transactional = transactional_id is not None
        self.sender = Sender(self.cluster, self.accumulator,
                             RetryPolicy(retries=retries, delivery_timeout_ms=delivery_timeout_ms,
                                         idempotence=self.idempotence),
                             acks=self.acks, max_in_flight=max_in_flight,
                             max_request_size=max_request_size,
                             request_timeout_ms=request_timeout_ms,
                             on_memory_freed=self._on_memory_freed)
        self._keys = KeyPartitioner()
        self._sticky = StickyPartitioner(self.cluster.rng.fork("sticky"))
        self._routes: dict[str, _Route] = {}
        self._blocked: deque[tuple] = deque()
        self._blocked_task: asyncio.Task | None = None
        self._memory_freed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.cluster.listeners.append(self._on_metadata)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect and learn the cluster (also done lazily by the first send)."""
        self._ensure_started()
        await self.cluster.refresh_metadata()

    def _ensure_started(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._memory_freed = asyncio.Event()
            self.sender.start()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _new_batch_future(self) -> asyncio.Future:
        return self._loop.create_future()  # type: ignore[union-attr]

    def _on_metadata(self) -> None:
        md = self.cluster.metadata
        routes = {}
        for topic in md.topics:
            count = md.partition_count(topic)
            if count:
                route = _Route([self.accumulator.queue_for(TopicPartition(topic, p))
                                for p in range(count)], md.available_partitions(topic))
                old = self._routes.get(topic)
                if old is not None and old.sticky < count:
                    route.sticky = old.sticky
                rules = md.conflict_rules(topic)
                policy = rules.policy if rules is not None else ConflictPolicy.NONE
                route.home = rules if policy is ConflictPolicy.HOME_REGION else None
                route.stamp = self.hlc_mode == "always" or (
                    self.hlc_mode == "auto" and policy is ConflictPolicy.LAST_WRITER_WINS)
                routes[topic] = route
        self._routes = routes
        self.sender.wakeup()
        if self._blocked and self._memory_freed is not None:
            self._memory_freed.set()

    def _on_memory_freed(self) -> None:
        if self._blocked and self._memory_freed is not None:
            self._memory_freed.set()

    # ------------------------------------------------------------------ per-record path

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: HeadersArg = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> RecordFuture | PendingRecordFuture:
        """Append one record; returns an awaitable RecordFuture (see the module docstring)."""
        if self.accumulator.transactional:
            self._txn.check_can_send()
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        if key is None and partition is None and not headers and not self._blocked:
            # The common keyless case, inlined: one accumulator call, one tuple.
            route = self._routes.get(topic)
            if route is not None and route.sticky >= 0 and not self._closed:
                batch = self.accumulator.append(route.tps[route.sticky], timestamp_ms, None,
                                                value, ())
                if type(batch) is ProducerBatch:
                    return _new_future(RecordFuture, (batch, batch.record_count - 1, timestamp_ms))
        hdrs = _headers(headers) if headers else ()
        if not self._blocked:
            fut = self._try_append(topic, partition, key, value, hdrs, timestamp_ms)
            if fut is not None:
                return fut
        return self._block(topic, partition, key, value, hdrs, timestamp_ms)

    def send_nowait(self, topic: str, value: bytes | None, key: bytes | None = None,
                    headers: HeadersArg = None, partition: int | None = None,
                    timestamp_ms: int | None = None) -> RecordFuture | PendingRecordFuture:
        """Like ``send`` but never waits: BUFFER_EXHAUSTED (or UNKNOWN_TOPIC while the
        topic's metadata is unknown) is raised at once."""
        if self.accumulator.transactional:
            self._txn.check_can_send()
        hdrs = _headers(headers) if headers else ()
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        fut = None if self._blocked else self._try_append(topic, partition, key, value, hdrs,
                                                          timestamp_ms)
        if fut is None:
            if topic not in self._routes:
                self._ensure_started()
                self.cluster.metadata.add_topics(topic)
                self.cluster.refresh_in_background()
                raise MqError(ErrorCode.UNKNOWN_TOPIC,
                              f"metadata for {topic!r} is not known yet (use send() to wait)")
            raise MqError(ErrorCode.BUFFER_EXHAUSTED,
                          f"buffer_memory={self.accumulator.buffer_memory} is full")
        return fut

    def _try_append(self, topic: str, partition: int | None, key: bytes | None,
                    value: bytes | None, headers: tuple, timestamp_ms: int) -> RecordFuture | None:
        """Append now if metadata and memory allow; None otherwise. Runs once per record."""
        route = self._routes.get(topic)
        if route is None or self._closed:
            if self._closed:
                raise MqError(ErrorCode.INVALID_REQUEST, "producer is closed")
            return None
        tps = route.tps
        acc = self.accumulator
        if partition is None and key is None:
            p = route.sticky
            if p < 0:
                p = route.sticky = self._sticky.partition(topic, route.available, len(tps))
            queue = tps[p]
            batch = acc.append(queue, timestamp_ms, key, value, headers)
            if batch is NEW_BATCH_NEEDED:  # KIP-480: a new batch means a new sticky partition
                p = route.sticky = self._sticky.on_new_batch(topic, p, route.available, len(tps))
                queue = tps[p]
                batch = acc.append(queue, timestamp_ms, key, value, headers)
        else:
            if key is not None and (route.stamp or route.home is not None):
                if route.home is not None:
                    elsewhere = self._home_producer(topic, route.home, key)
                    if elsewhere is not None:
                        return elsewhere.send(topic, value, key=key, headers=headers,  # type: ignore[return-value]
                                              partition=partition, timestamp_ms=timestamp_ms)
                if route.stamp:
                    headers = self._stamped(headers)
            if partition is None:
                p = self._keys.partition_for_key(key, len(tps))  # type: ignore[arg-type]
            elif 0 <= partition < len(tps):
                p = partition
            else:
                raise MqError(ErrorCode.INVALID_PARTITIONS,
                              f"{topic!r} has {len(tps)} partitions; there is no partition {partition}")
            queue = tps[p]
            batch = acc.append(queue, timestamp_ms, key, value, headers)
        if batch is NEW_BATCH_NEEDED:
            acc.open_batch(queue, int(_monotonic() * 1000))
            self._ensure_started()
            self.sender.wakeup()  # a new batch: its linger timer starts now
            batch = acc.append(queue, timestamp_ms, key, value, headers)
        if batch is NO_MEMORY:
            return None
        return _new_future(RecordFuture, (batch, batch.record_count - 1, timestamp_ms))  # type: ignore[union-attr]

    # ------------------------------------------------------------------ conflict policies

    def observe_hlc(self, stamp: Hlc) -> Hlc:
        """Move this producer's clock past ``stamp`` (one read from a table view, say), so
        the records it stamps next are ordered after it; returns the clock's new stamp."""
        return self.hlc.observe(stamp, self.cluster.clock.wall_ms())

    def _stamped(self, headers: tuple) -> tuple:
        """``headers`` with an ``mq.hlc`` stamp from this producer's clock (a stamp the
        caller set, a mirror's or a replay's, is kept)."""
        for name, _ in headers:
            if name == HLC_HEADER:
                return headers
        stamp = self.hlc.now(self.cluster.clock.wall_ms())
        return (*headers, (HLC_HEADER, stamp.encode()))

    def _home_producer(self, topic: str, rules: ConflictRules, key: bytes) -> Producer | None:
        """None when ``key`` may be sent here; the producer of its home region when one is
        configured (``home_bootstraps``); else NOT_HOME_REGION, before anything is sent
        (a batch holding one foreign key would be refused whole by the broker)."""
        here = self.cluster.metadata.region
        if not here:  # a broker without region.name: it decides
            return None
        home = rules.home_of(key)
        if home == here:
            return None
        bootstrap = self.home_bootstraps.get(home)
        if bootstrap is None:
            raise MqError(ErrorCode.NOT_HOME_REGION, not_home_message(key, topic, home, here))
        producer = self._home_producers.get(home)
        if producer is None:
            producer = self._home_producers[home] = Producer(
                bootstrap, hlc_clock=self.hlc, **self._settings)  # type: ignore[arg-type]
        return producer

    # ------------------------------------------------------------------ waiting for room

    def _block(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
               headers: tuple, timestamp_ms: int) -> PendingRecordFuture:
        if self._closed:
            raise MqError(ErrorCode.INVALID_REQUEST, "producer is closed")
        self._ensure_started()
        fut = PendingRecordFuture(self._loop.create_future())  # type: ignore[union-attr]
        deadline = self.cluster.now_ms() + self.max_block_ms
        self._blocked.append((topic, partition, key, value, headers, timestamp_ms, fut, deadline))
        if self._blocked_task is None or self._blocked_task.done():
            self._blocked_task = self._loop.create_task(self._drain_blocked())  # type: ignore[union-attr]
        return fut

    async def _drain_blocked(self) -> None:
        """Append waiting records in order as memory frees / metadata arrives."""
        assert self._memory_freed is not None
        while self._blocked:
            topic, partition, key, value, headers, ts, fut, deadline = self._blocked[0]
            try:
                if topic not in self._routes:
                    self.sender.wakeup()
                    await self.cluster.wait_for_topic(topic, deadline)
                    self._on_metadata()
                    continue
                appended = self._try_append(topic, partition, key, value, headers, ts)
            except MqError as exc:
                self._blocked.popleft()
                fut.fail(exc)
                continue
            if appended is not None:
                self._blocked.popleft()
                fut.attach(appended)
                continue
            remaining = deadline - self.cluster.now_ms()
            if remaining <= 0:
                self._blocked.popleft()
                fut.fail(MqError(ErrorCode.BUFFER_EXHAUSTED,
                                 f"buffer_memory={self.accumulator.buffer_memory} stayed full for "
                                 f"max_block_ms={self.max_block_ms}"))
                continue
            self._memory_freed.clear()
            self.sender.wakeup()
            try:
                await asyncio.wait_for(self._memory_freed.wait(), remaining / 1000)
            except TimeoutError:
                pass

    async def wait_for_buffer(self) -> None:
        """Return once no record is waiting for buffer space (back-pressure for loops
        that call ``send`` without awaiting each record)."""
        while self._blocked and self._blocked_task is not None:
            await asyncio.shield(self._blocked_task)

    # ------------------------------------------------------------------ bulk path

    async def send_many(self, topic: str, records: Iterable[tuple],
                        partition: int | None = None) -> Sequence[RecordMetadata]:
        """Send ``[(key, value), ...]`` or ``[(key, value, headers), ...]`` as whole batches
        built directly per partition; returns their metadata once all are acknowledged
        (a lazy sequence of RecordMetadata, in input order). On a topic with a conflict
        policy keyed records are stamped (last-writer-wins); keys of other regions
        (home-region) go one by one to their home with ``home_bootstraps``, else the call
        raises NOT_HOME_REGION before sending anything."""
        if self.accumulator.transactional:
            self._txn.check_can_send()
        self._ensure_started()
        if topic not in self._routes:
            await self.cluster.wait_for_topic(topic, self.cluster.now_ms() + self.max_block_ms)
            self._on_metadata()
        if partition is not None:
            await self._learn_partition(topic, partition)
        if self._blocked:
            await self.wait_for_buffer()
        records = records if isinstance(records, list) else list(records)
        if records and len(records[0]) == 3:
            records = [(k, v, _headers(h)) for k, v, h in records]
        route = self._routes[topic]
        if route.home is not None or route.stamp:
            records, elsewhere = self._conflict_many(topic, records, route)
            if elsewhere:
                futures = [self.send(topic, r[1], key=r[0], headers=r[2], partition=partition)
                           for r in records]
                return [await f for f in futures]
        timestamp_ms = _time_ns() // 1_000_000
        groups = self._group_for_send_many(topic, records, partition, route)
        pieces = []
        for tp, indices, recs in groups:
            for batch in await self.sender.append_bulk(tp, recs, timestamp_ms, self.max_block_ms,
                                                         self.batch_size):
                pieces.append((batch, indices))
        self.sender.wakeup()
        return await RecordMetadataList.gather(pieces, len(records), timestamp_ms)

    def _conflict_many(self, topic: str, records: list, route: _Route) -> tuple[list, bool]:
        """``(records with stamps where due, whether some key lives in another region)``."""
        records = [r if len(r) == 3 else (r[0], r[1], ()) for r in records]
        here = self.cluster.metadata.region
        if route.home is not None and here:
            for key, _, _ in records:
                home = here if key is None else route.home.home_of(key)
                if home != here:
                    if home in self.home_bootstraps:
                        return records, True
                    raise MqError(ErrorCode.NOT_HOME_REGION, not_home_message(key, topic, home, here))
        if route.stamp:
            stamped = self._stamped
            records = [(k, v, h if k is None else stamped(h)) for k, v, h in records]
        return records, False

    def _group_for_send_many(self, topic: str, records: list, partition: int | None,
                             route: _Route) -> list:
        tps, available = route.tps, route.available
        if partition is not None:
            if not 0 <= partition < len(tps):
                raise MqError(ErrorCode.INVALID_PARTITIONS,
                              f"{topic!r} has {len(tps)} partitions; there is no partition {partition}")
            return [(tps[partition].topic_partition, None, records)]
        keys = list(map(itemgetter(0), records))
        if keys.count(None) == len(keys):
            # keyless: sticky — the whole call fills batches on one partition, then moves on
            p = self._sticky.partition(topic, available, len(tps))
            group = [(tps[p].topic_partition, None, records)]
            route.sticky = self._sticky.on_new_batch(topic, p, available, len(tps))
            return group
        by_partition: dict[int, tuple[list[int], list]] = {}
        part_for = self._keys.partition_for_key
        n = len(tps)
        sticky = None
        for i, rec in enumerate(records):
            if rec[0] is None:
                if sticky is None:
                    sticky = self._sticky.partition(topic, available, n)
                p = sticky
            else:
                p = part_for(rec[0], n)
            entry = by_partition.get(p)
            if entry is None:
                entry = by_partition[p] = ([], [])
            entry[0].append(i)
            entry[1].append(rec)
        return [(tps[p].topic_partition, idx, recs) for p, (idx, recs) in sorted(by_partition.items())]

    async def _learn_partition(self, topic: str, partition: int) -> None:
        """A partition past the known count may have just been added (CreatePartitions):
        refresh metadata once before calling it invalid, rather than wait for
        ``metadata_max_age_ms``."""
        route = self._routes.get(topic)
        if route is not None and partition >= len(route.tps):
            await self.cluster.refresh_metadata()
            self._on_metadata()

    async def send_batch(self, topic: str, partition: int,
                         records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes]], int]]) -> int:
        """Send ``records`` (``(key, value, headers, timestamp_ms)`` tuples, each with its own
        timestamp) to one partition as **one** record batch, which the leader appends whole or
        not at all (a copier that must know exactly what landed, such as the active-active
        mirror, relies on it). Returns the offset of the first record once acknowledged; the
        others follow it. Batches of this and other sends to the partition keep their order."""
        if self.accumulator.transactional:
            self._txn.check_can_send()
        if not records:
            raise MqError(ErrorCode.INVALID_REQUEST, "send_batch needs at least one record")
        builder = BatchBuilder(compression=self.accumulator.compression,
                               is_transactional=self.accumulator.transactional)
        size = 0
        for key, value, headers, timestamp_ms in records:
            size = builder.append(timestamp_ms, key, value, headers)
        return await self.send_built_batch(topic, partition, builder.build(), len(records), size)

    async def send_built_batch(self, topic: str, partition: int, batch: bytes, record_count: int,
                               size: int) -> int:
        """``send_batch`` for a batch the caller built (``mq.protocol.batch_builder``, base
        offset 0, the codec of ``compression``), ``size`` bytes charged against
        ``buffer_memory``: appended whole or not at all; the first record's offset."""
        self._ensure_started()
        if topic not in self._routes:
            await self.cluster.wait_for_topic(topic, self.cluster.now_ms() + self.max_block_ms)
            self._on_metadata()
        await self._learn_partition(topic, partition)
        tps = self._routes[topic].tps
        if not 0 <= partition < len(tps):
            raise MqError(ErrorCode.INVALID_PARTITIONS,
                          f"{topic!r} has {len(tps)} partitions; there is no partition {partition}")
        await self.sender.reserve(size, self.max_block_ms)
        sent = self.accumulator.add_built_batch(tps[partition].topic_partition, batch, record_count, size,
                                                self.cluster.now_ms())
        self.sender.wakeup()
        base_offset, _ = await sent.future
        return int(base_offset)

    @property
    def compression(self) -> CompressionType:
        """The codec of the batches this producer builds (``send_built_batch`` callers use it)."""
        return self.accumulator.compression

    # ------------------------------------------------------------------ flush / close

    async def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything buffered now and wait until it is acknowledged or failed
        (failures are reported through each record's future, not raised here)."""
        for producer in list(self._home_producers.values()):
            await producer.flush(timeout_ms)
        if self._loop is None:
            return
        await self.wait_for_buffer()
        await self.sender.flush(None if timeout_ms is None else timeout_ms / 1000)

    async def close(self, timeout_ms: int | None = None) -> None:
        """Flush (unless ``timeout_ms=0``), stop the Sender, close connections."""
        if self._closed:
            return
        for producer in list(self._home_producers.values()):
            await producer.close(timeout_ms)
        if self._loop is not None and timeout_ms != 0:
            try:
                await self.flush(timeout_ms)
            except TimeoutError:
                pass
        self._closed = True
        for entry in self._blocked:
            entry[6].fail(MqError(ErrorCode.NETWORK_EXCEPTION, "producer closed"))
        self._blocked.clear()
        if self._blocked_task is not None:
            self._blocked_task.cancel()
        await self.sender.stop()
        await self.cluster.close()

    async def partitions_for(self, topic: str) -> list[int]:
        self._ensure_started()
        count = await self.cluster.wait_for_topic(topic, self.cluster.now_ms() + self.max_block_ms)
        return list(range(count))

    @property
    def metrics(self) -> dict[str, Any]:
        idempotence = self.idempotence
        return {"available_memory": self.accumulator.available_memory,
                "buffer_memory": self.accumulator.buffer_memory,
                "waiting_for_buffer": len(self._blocked), **self.sender.stats,
                "idempotent": self.idempotent,
                "producer_id": -1 if idempotence is None else idempotence.producer_id,
                "producer_epoch": -1 if idempotence is None else idempotence.producer_epoch,
                "epoch_bumps": 0 if idempotence is None else idempotence.epoch_bumps}


__all__ = ["Producer", "RecordFuture", "RecordMetadata"]
