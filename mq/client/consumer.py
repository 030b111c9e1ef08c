"""The asyncio Consumer: manual assignment, seeks, and a prefetching poll.

``poll`` hands out records already fetched and, before returning, sends the next
fetch for every partition whose buffer has room, so the broker is working on the next
chunk while the application processes this one. Records are decoded one batch at a
time (``mq.client.internals.fetcher``). Offset lookups (``seek_to_beginning/end/
timestamp``, the ``auto_offset_reset`` policy) are lazy, as in Kafka: they are
resolved by ListOffsets before the partition is next fetched, or by ``position``.

Latency rules: fetches travel on their own connection per broker (``FETCH_LANE``), so a
ListOffsets or Metadata request never queues behind a long-poll fetch held at the
broker for ``fetch_max_wait_ms``. A seek of a partition whose fetch is in flight
abandons that fetch connection (its answer would be discarded anyway, and the next
fetch would queue behind it), and every seek wakes a pending ``poll``. An assigned
partition with no known leader makes ``poll`` ask for metadata, and the answer wakes it.

Consumer groups: with a ``group_id``, ``subscribe`` hands partition assignment to the
group coordinator; ``mq.client.group_consumer.GroupClient`` runs the membership (joins,
heartbeats, rebalance callbacks, commits) and sets the assignment and initial positions
through the same ``SubscriptionState``. ``assign`` and ``subscribe`` exclude each other.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mq.client.cluster import FETCH_LANE, ClusterClient, cancel_tasks
from mq.client.group_consumer import CommitCallback, GroupClient, Listener
from mq.client.internals.fetcher import ConsumerRecord, Fetcher, OffsetGap, SentFetch
from mq.client.internals.group_membership import ConsumerCoordinator
from mq.client.internals.offset_commit import GroupMetadata, OffsetAndMetadata
from mq.client.internals.subscription import OffsetResetStrategy, SubscriptionState
from mq.core.clock import Clock
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition
from mq.protocol.messages import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)

log = logging.getLogger("mq.client")

MIB = 1024 * 1024


class Consumer:
    def __init__(self, bootstrap: str = "localhost:9092", *, fetch_max_wait_ms: int = 500,
                 fetch_min_bytes: int = 1, fetch_max_bytes: int = 50 * MIB,
                 max_partition_fetch_bytes: int = 1 * MIB, max_poll_records: int = 500,
                 auto_offset_reset: str = "latest", check_crcs: bool = True,
                 request_timeout_ms: int = 30_000, retry_backoff_ms: int = 100,
                 metadata_max_age_ms: int = 300_000, client_id: str = "mq-consumer",
                 group_id: str | None = None, group_instance_id: str | None = None,
                 assignor: str | Sequence[str] = "range", enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5_000, session_timeout_ms: int = 45_000,
                 heartbeat_interval_ms: int = 3_000, max_poll_interval_ms: int = 300_000,
                 rebalance_timeout_ms: int | None = None, on_assign: Listener | None = None,
                 on_revoke: Listener | None = None, on_lost: Listener | None = None,
                 clock: Clock | None = None, seed: int | None = None,
                 address_map: Mapping[str, str] | None = None,
                 isolation_level: str = "read_uncommitted") -> None:
        try:
            reset = OffsetResetStrategy(auto_offset_reset)
        except ValueError:
            raise MqError(ErrorCode.INVALID_CONFIG,
                          f"auto_offset_reset must be earliest, latest or none, "
                          f"not {auto_offset_reset!r}") from None
        # A fetch may legitimately wait fetch_max_wait_ms at the broker.
        self.cluster = ClusterClient(bootstrap, client_id=client_id,
                                     request_timeout_ms=request_timeout_ms + fetch_max_wait_ms,
                                     retry_backoff_ms=retry_backoff_ms,
                                     metadata_max_age_ms=metadata_max_age_ms, clock=clock, seed=seed,
                                     address_map=address_map)
        self.subscriptions = SubscriptionState(reset)
        self.fetcher = Fetcher(self.subscriptions, fetch_min_bytes=fetch_min_bytes,
                               fetch_max_wait_ms=fetch_max_wait_ms, fetch_max_bytes=fetch_max_bytes,
                               max_partition_fetch_bytes=max_partition_fetch_bytes,
                               check_crcs=check_crcs, isolation_level=isolation_level)
        self.max_poll_records = max_poll_records
        self.request_timeout_ms = request_timeout_ms
        self._event: asyncio.Event | None = None
        self._lookup_task: asyncio.Task | None = None
        # node -> its fetch in flight (a seek may abandon it before it answers)
        self._fetches: dict[int, tuple[asyncio.Future, SentFetch]] = {}
        self._closed = False
        self._manual = False  # assign() in use (excludes subscribe)
        self.cluster.listeners.append(self._wakeup)
        self._group: GroupClient | None = None
        if group_id is not None:
            core = ConsumerCoordinator(
                group_id, now_ms=self.cluster.now_ms(), group_instance_id=group_instance_id,
                assignors=assignor, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms or max_poll_interval_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                max_poll_interval_ms=max_poll_interval_ms, retry_backoff_ms=retry_backoff_ms)
            self._group = GroupClient(self, core, enable_auto_commit=enable_auto_commit,
                                      auto_commit_interval_ms=auto_commit_interval_ms,
                                      on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._event = asyncio.Event()
        await self.cluster.refresh_metadata()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._group is not None:
                await self._group.close()
        finally:
            try:
                await cancel_tasks([self._lookup_task])
            finally:
                await self.cluster.close()

    def _wakeup(self) -> None:
        if self._event is not None:
            self._event.set()

    def _ensure_event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    # ------------------------------------------------------------------ assignment and seeks

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any previous assignment)."""
        tps = [tp if isinstance(tp, TopicPartition) else TopicPartition(*tp) for tp in partitions]
        if self._group is not None and self._group.core.subscribed:
            raise MqError(ErrorCode.INVALID_CONFIG,
                          "assign() cannot be used while subscribed to topics (subscribe() and "
                          "assign() are mutually exclusive); call unsubscribe() first")
        self._manual = bool(tps)
        self.subscriptions.assign(tps)
        if self.cluster.metadata.add_topics(*self.subscriptions.topics()):
            self._wakeup()

    def assignment(self) -> list[TopicPartition]:
        return self.subscriptions.assigned()

    # ------------------------------------------------------------------ consumer groups

    def _require_group(self, what: str) -> GroupClient:
        if self._group is None:
            raise MqError(ErrorCode.INVALID_CONFIG, f"{what} needs a group_id (Consumer(group_id=...))")
        return self._group

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None) -> None:
        """Let the group coordinator assign partitions of ``topics`` (or of every topic whose
        name fully matches the regular expression ``pattern``); the next ``poll`` joins."""
        group = self._require_group("subscribe()")
        if self._manual:
            raise MqError(ErrorCode.INVALID_CONFIG,
                          "subscribe() cannot be used after assign() (subscribe() and assign() "
                          "are mutually exclusive); call unsubscribe() first")
        if isinstance(topics, str):
            topics = [topics]
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise MqError(ErrorCode.INVALID_CONFIG, f"pattern {pattern!r} is not a regular "
                                                        f"expression: {exc}") from None
        if group.core.subscribe(None if topics is None else list(topics), pattern=pattern):
            self._wakeup()

    def subscription(self) -> list[str] | str | None:
        """The subscribed topics, the pattern, or None."""
        if self._group is None or not self._group.core.subscribed:
            return None
        core = self._group.core
        return core.pattern if core.pattern is not None else list(core.topics)

    def unsubscribe(self) -> None:
        """Leave the group (after ``on_revoke``) and drop any assignment, manual or not."""
        self._manual = False
        if self._group is not None and self._group.core.subscribed:
            self._group.unsubscribe()
        else:
            self.subscriptions.assign([])
        self._wakeup()

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     *, timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (default: every position — the next record to read) and wait.
        Raises ``MqError`` (e.g. ILLEGAL_GENERATION: this member was removed from the group)."""
        await self._require_group("commit()").commit(offsets, timeout_ms=timeout_ms)

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     *, callback: CommitCallback | None = None) -> asyncio.Future:
        """Commit without waiting: returns a future; ``callback(offsets, error)`` when done."""
        return self._require_group("commit_async()").commit_async(offsets, callback=callback)

    async def committed(self, tps: Iterable[TopicPartition], *, timeout_ms: int | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``tps`` (None: nothing committed)."""
        return await self._require_group("committed()").committed(tps, timeout_ms=timeout_ms)

    def group_metadata(self) -> GroupMetadata:
        return self._require_group("group_metadata()").metadata()

    def metrics(self) -> dict[str, Any]:
        """Per-partition ``records_lag`` (high watermark − position, as Kafka's consumer
        reports it) and ``records_lag_max``; group membership when in a group."""
        lags: dict[TopicPartition, int] = {}
        for tp, st in self.subscriptions.states.items():
            if st.high_watermark >= 0 and st.position is not None:
                lags[tp] = max(0, st.high_watermark - st.position)
        out: dict[str, Any] = {"assigned_partitions": len(self.subscriptions.states),
                               "records_lag": lags,
                               "records_lag_max": max(lags.values(), default=0)}
        if self._group is not None:
            core = self._group.core
            out.update(group_id=core.group_id, member_id=core.member_id,
                       generation_id=core.generation_id, member_state=core.state.value,
                       assignor=core.protocol)
        return out

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next poll returns ``tp``'s records from ``offset`` on."""
        self.subscriptions.seek(tp, offset)
        self._after_seek([tp])

    def _after_seek(self, tps: list[TopicPartition]) -> None:
        """Drop fetches in flight for ``tps`` (their answers are stale, and the broker may
        hold them for fetch_max_wait_ms) and wake a pending poll or position."""
        for node in dict.fromkeys(self.fetcher.in_flight_node(tp) for tp in tps):
            if node is None:
                continue
            entry = self._fetches.pop(node, None)
            if entry is None:
                continue
            self.fetcher.on_failure(node, entry[1])
            self.cluster.abandon(node, lane=FETCH_LANE)
        self._wakeup()

    def _targets(self, tps: tuple[TopicPartition, ...]) -> list[TopicPartition]:
        return list(tps) if tps else self.subscriptions.assigned()

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        """To the log start offset (all assigned partitions when none are named)."""
        targets = self._targets(tps)
        for tp in targets:
            self.subscriptions.request_lookup(tp, EARLIEST_TIMESTAMP)
        self._after_seek(targets)

    def seek_to_end(self, *tps: TopicPartition) -> None:
        """To the high watermark: only records produced from now on."""
        targets = self._targets(tps)
        for tp in targets:
            self.subscriptions.request_lookup(tp, LATEST_TIMESTAMP)
        self._after_seek(targets)

    def seek_to_timestamp(self, timestamp_ms: int, *tps: TopicPartition) -> None:
        """To the first record with timestamp >= ``timestamp_ms`` (the end if none)."""
        if timestamp_ms < 0:
            raise MqError(ErrorCode.INVALID_REQUEST, f"timestamp {timestamp_ms} is negative")
        targets = self._targets(tps)
        for tp in targets:
            self.subscriptions.request_lookup(tp, timestamp_ms)
        self._after_seek(targets)

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record to be returned (resolving a pending lookup)."""
        deadline = self.cluster.now_ms() + self.request_timeout_ms
        while True:
            st = self.subscriptions.state(tp)
            if st.error is not None:
                err, st.error = st.error, None
                raise err
            if st.position is not None and st.pending_lookup is None:
                return st.position
            if self.cluster.now_ms() >= deadline:
                raise MqError(ErrorCode.REQUEST_TIMED_OUT, f"position of {tp} not resolved in time")
            if self._group is not None:
                self._group.start_committed_fetch()
            self._start_lookups()
            await self._wait(min(deadline, self.cluster.now_ms() + 100))

    def pause(self, *tps: TopicPartition) -> None:
        self.subscriptions.pause(*tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.subscriptions.resume(*tps)
        self._wakeup()

    def paused(self) -> list[TopicPartition]:
        return self.subscriptions.paused()

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark seen in the last fetch of ``tp`` (None before one)."""
        hw = self.subscriptions.state(tp).high_watermark
        return hw if hw >= 0 else None

    @property
    def gaps(self) -> list[OffsetGap]:
        """Offset ranges that disappeared before they were read (most recent 1,000)."""
        return list(self.fetcher.gaps)

    # ------------------------------------------------------------------ poll

    async def poll(self, timeout_ms: int = 1000, *, max_records: int | None = None
                   ) -> list[ConsumerRecord]:
        """Records from the assigned partitions, at most ``max_records``
        (``max_poll_records``); waits up to ``timeout_ms`` when none are buffered."""
        if self._closed:
            raise MqError(ErrorCode.INVALID_REQUEST, "consumer is closed")
        limit = max_records or self.max_poll_records
        deadline = self.cluster.now_ms() + timeout_ms
        event = self._ensure_event()
        group = self._group
        while True:
            if group is not None:
                await group.maintain()
            error = self.subscriptions.take_error()
            if error is not None:
                raise error
            self._start_lookups()
            # Fetch first (a buffered answer frees room), so the broker reads the next
            # chunk while this poll decodes; then again for the room decoding freed.
            self._send_fetches()
            records = self.fetcher.fetch_records(limit)
            deferred = self._send_fetches()
            if records:
                return records
            now = self.cluster.now_ms()
            if now >= deadline:
                return []
            # A fetch held back by a reconnect backoff is retried after the backoff.
            wake_at = min(deadline, now + self.cluster.metadata.retry_backoff_ms) if deferred \
                else deadline
            if group is not None:
                wake_at = min(wake_at, group.wake_at_ms(now) or wake_at)
            await self._wait(wake_at, event)

    async def _wait(self, deadline_ms: int, event: asyncio.Event | None = None) -> None:
        """Until a fetch or lookup answers, metadata changes, or the deadline passes."""
        event = event or self._ensure_event()
        remaining = max(0, deadline_ms - self.cluster.now_ms())
        if event.is_set():
            event.clear()
            return
        handle = asyncio.get_running_loop().call_later(remaining / 1000, event.set)
        try:
            await event.wait()
        finally:
            handle.cancel()
            event.clear()

    def _send_fetches(self) -> bool:
        """Send the fetches the Fetcher plans; True if one waits for a connection."""
        md = self.cluster.metadata
        deferred = False
        requests = []
        if not (md.brokers and len(self.fetcher.in_flight_nodes) >= len(md.brokers)):
            requests = self.fetcher.prepare_fetches(md.leader_for, md.leader_epoch)
        # A fetchable partition without a leader (its topic just assigned, or its leader
        # gone) needs metadata; the answer notifies the listeners, which wakes the poll.
        if md.need_update or self.fetcher.missing_leaders:
            self.cluster.update_metadata_soon()
        elif md.time_to_next_update_ms(self.cluster.now_ms()) == 0:
            self.cluster.refresh_in_background()  # metadata_max_age_ms passed
        for node, request, sent in requests:
            conn = self.cluster.ready_connection(node, lane=FETCH_LANE)
            if conn is None:
                self.fetcher.on_failure(node, sent)
                deferred = True
                continue
            try:
                fut = conn.send(request)
            except MqError:
                self.fetcher.on_failure(node, sent)
                deferred = True
                continue
            assert fut is not None
            self._fetches[node] = (fut, sent)
            fut.add_done_callback(lambda f, n=node, s=sent: self._on_fetch(f, n, s))
        return deferred

    def _on_fetch(self, fut: asyncio.Future, node: int, sent: SentFetch) -> None:
        entry = self._fetches.get(node)
        if entry is None or entry[0] is not fut:
            if not fut.cancelled():
                fut.exception()  # abandoned by a seek, already accounted for: mark it seen
            return
        del self._fetches[node]
        if fut.cancelled() or fut.exception() is not None:
            self.fetcher.on_failure(node, sent)
            if not fut.cancelled():
                log.info("event=fetch_failed node=%s error=%s", node, fut.exception())
            self.cluster.metadata.request_update()
        else:
            outcome = self.fetcher.on_response(node, sent, fut.result())
            if outcome.refresh_metadata:
                self.cluster.update_metadata_soon()
        self._wakeup()

    # ------------------------------------------------------------------ offset lookups

    def _start_lookups(self) -> asyncio.Task | None:
        if not self.subscriptions.pending_lookups():
            return None
        if self._lookup_task is None or self._lookup_task.done():
            self._lookup_task = asyncio.get_running_loop().create_task(self._run_lookups())
        return self._lookup_task

    async def _run_lookups(self) -> None:
        try:
            await self._lookup_once()
        except MqError as exc:
            log.info("event=offset_lookup_failed error=%s", exc)
            await asyncio.sleep(self.cluster.metadata.retry_backoff_ms / 1000)
        finally:
            self._wakeup()

    async def _lookup_once(self) -> None:
        md = self.cluster.metadata
        if any(md.leader_for(tp) is None for tp, _, _ in self.subscriptions.pending_lookups()):
            await self.cluster.update_metadata()  # then look up what it made routable
        by_node: dict[int, list[tuple[TopicPartition, int, int]]] = {}
        for tp, ts, epoch in self.subscriptions.pending_lookups():
            leader = md.leader_for(tp)
            if leader is not None:  # else: still unknown; the next round refreshes again
                by_node.setdefault(leader, []).append((tp, ts, epoch))
        for node, items in by_node.items():
            topics: dict[str, list[ListOffsetsPartition]] = {}
            for tp, ts, _ in items:
                topics.setdefault(tp.topic, []).append(ListOffsetsPartition(tp.partition, ts))
            request = ListOffsetsRequest(topics=[ListOffsetsTopic(n, p) for n, p in topics.items()],
                                         isolation_level=self.fetcher.isolation_level)
            response = await self.cluster.request(node, request)
            self._apply_lookups(items, response)  # type: ignore[arg-type]

    def _apply_lookups(self, items: list[tuple[TopicPartition, int, int]],
                       response: ListOffsetsResponse) -> None:
        answers = {TopicPartition(t.name, p.partition): p
                   for t in response.topics for p in t.partitions}
        for tp, ts, epoch in items:
            answer = answers.get(tp)
            if answer is None:
                continue
            if answer.error_code:
                code = ErrorCode(answer.error_code) if answer.error_code in ErrorCode._value2member_map_ \
                    else ErrorCode.UNKNOWN_SERVER_ERROR
                if code.retriable:
                    self.cluster.metadata.request_update()
                else:
                    st = self.subscriptions.states.get(tp)
                    if st is not None and st.seek_epoch == epoch:
                        st.error = MqError(code, f"offset lookup for {tp} failed")
                continue
            if answer.offset < 0 and ts >= 0:
                # no record at or after the timestamp: continue from the end, as Kafka does
                self.subscriptions.request_lookup(tp, LATEST_TIMESTAMP)
                continue
            self.fetcher.on_lookup_done(tp, answer.offset, epoch)

    # ------------------------------------------------------------------ cluster questions

    async def partitions_for(self, topic: str) -> list[int]:
        count = await self.cluster.wait_for_topic(topic,
                                                  self.cluster.now_ms() + self.request_timeout_ms)
        return list(range(count))

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._offsets(tps, EARLIEST_TIMESTAMP)

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._offsets(tps, LATEST_TIMESTAMP)

    async def _offsets(self, tps: Iterable[TopicPartition], ts: int) -> dict[TopicPartition, int]:
        from mq.client.admin import list_offsets  # shared with Admin

        result = await list_offsets(self.cluster, {tp: ts for tp in tps},
                                    timeout_ms=self.request_timeout_ms)
        return {tp: info.offset for tp, info in result.items()}
