"""GroupClient: the asyncio shell around a consumer's ``ConsumerCoordinator``.

It finds the group coordinator, sends what the sans-IO core asks for, and applies the
answers to the consumer's ``SubscriptionState``:

- ``maintain`` runs at the start of every ``poll`` round: it applies a finished
  JoinGroup (revoke, assign, rebalance callbacks), hands lost partitions to
  ``on_lost``, starts a rejoin when one is needed (an eager member first commits and
  revokes everything), and triggers auto-commit. Callbacks therefore run inside
  ``poll`` (or ``close``), on the consumer's loop, as in Kafka.
- The JoinGroup itself runs in a task on its own connection lane: the coordinator
  parks it until the rebalance completes, and a cooperative member keeps fetching its
  partitions meanwhile. Responses on one connection come back in request order, so a
  parked JoinGroup must not sit in front of heartbeats and commits.
- A heartbeat task keeps the session alive while the application processes records,
  and leaves the group when ``max_poll_interval_ms`` passes without a poll.
- New partitions get their position from the group's committed offsets (OffsetFetch,
  in a task); without one, ``auto_offset_reset`` decides.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from mq.client.cluster import cancel_tasks
from mq.client.internals.group_membership import (
    COORDINATOR_GONE,
    GENERATION_GONE,
    ConsumerCoordinator,
    Coordinator,
    JoinOutcome,
    MemberState,
)
from mq.client.internals.offset_commit import (
    AutoCommitTimer,
    GroupMetadata,
    OffsetAndMetadata,
    commit_errors,
    commit_request,
    fetch_request,
    fetch_result,
    to_offset_and_metadata,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.group_messages import JoinGroupRequest, JoinGroupResponse
from mq.protocol.messages import Request, Response

if TYPE_CHECKING:
    from mq.client.consumer import Consumer

log = logging.getLogger("mq.client.group")

JOIN_LANE = "join"
JOIN_TIMEOUT_SLACK_MS = 5_000  # Kafka: JoinGroup's request timeout = rebalance timeout + 5 s
NETWORK_ERRORS = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})

Listener = Callable[[list[TopicPartition]], Any]
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


async def call_listener(listener: Listener | None, tps: Iterable[TopicPartition]) -> None:
    """A rebalance callback: a plain function or a coroutine function."""
    if listener is None:
        return
    result = listener(sorted(tps))
    if inspect.isawaitable(result):
        await result


async def run_listeners(calls: list[tuple[Listener | None, Iterable[TopicPartition]]]) -> BaseException | None:
    """Call each listener with a non-empty list; the first exception is returned."""
    first: BaseException | None = None
    for listener, tps in calls:
        tps = list(tps)
        if not tps:
            continue
        try:
            await call_listener(listener, tps)
        except Exception as exc:
            log.warning("event=rebalance_callback_failed error=%r", exc, exc_info=True)
            first = first or exc
    return first


class GroupClient:
    def __init__(self, consumer: Consumer, core: ConsumerCoordinator, *, enable_auto_commit: bool,
                 auto_commit_interval_ms: int, on_assign: Listener | None = None,
                 on_revoke: Listener | None = None, on_lost: Listener | None = None) -> None:
        self.consumer = consumer
        self.cluster = consumer.cluster
        self.subscriptions = consumer.subscriptions
        self.core = core
        self.auto_commit = AutoCommitTimer(auto_commit_interval_ms, now_ms=self.cluster.now_ms(),
                                           enabled=enable_auto_commit)
        self.on_assign, self.on_revoke, self.on_lost = on_assign, on_revoke, on_lost
        self.request_timeout_ms = consumer.request_timeout_ms
        self.cluster.lane_timeouts_ms[JOIN_LANE] = core.rebalance_timeout_ms + JOIN_TIMEOUT_SLACK_MS
        self._join_task: asyncio.Task | None = None
        self._find_task: asyncio.Task | None = None
        self._committed_task: asyncio.Task | None = None
        self._heartbeat_task: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self._timer_event = asyncio.Event()
        self.closed = False

    def now_ms(self) -> int:
        return self.cluster.now_ms()

    def metadata(self) -> GroupMetadata:
        core = self.core
        return GroupMetadata(core.group_id, core.generation_id, core.member_id, core.group_instance_id)

    # ------------------------------------------------------------------ the coordinator

    async def coordinator(self, deadline_ms: int) -> Coordinator:
        """The group's coordinator, looked up (with backoff) until ``deadline_ms``."""
        core = self.core
        while True:
            if core.coordinator is not None:
                return core.coordinator
            now = self.now_ms()
            if now >= deadline_ms:
                raise MqError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                              f"no coordinator found for group {core.group_id!r} in time")
            wait = core.time_to_find_ms(now)
            if wait:
                await asyncio.sleep(min(wait, deadline_ms - now) / 1000)
                continue
            if self._find_task is None or self._find_task.done():
                self._find_task = asyncio.get_running_loop().create_task(self._find_once())
            error = await asyncio.shield(self._find_task)
            if error is not None:
                raise error

    async def _find_once(self) -> MqError | None:
        core = self.core
        try:
            response = await self.cluster.request_any(core.find_coordinator_request())
        except MqError as exc:
            log.info("event=find_coordinator_failed group=%s error=%s", core.group_id, exc)
            core.on_find_coordinator_failed(self.now_ms())
            return None
        error = core.on_find_coordinator(response, self.now_ms())  # type: ignore[arg-type]
        if core.coordinator is not None:
            c = core.coordinator
            self.cluster.add_node(c.node_id, c.host, c.port)
            log.info("event=coordinator_found group=%s node=%s", core.group_id, c.node_id)
            self._timer_event.set()
        return error

    async def send(self, request: Request, *, deadline_ms: int, lane: str = "") -> Response:
        """To the coordinator; a lost connection makes the coordinator unknown."""
        coordinator = await self.coordinator(deadline_ms)
        try:
            return await self.cluster.request(coordinator.node_id, request, lane=lane)
        except MqError as exc:
            if exc.code in NETWORK_ERRORS or exc.code == ErrorCode.BROKER_NOT_AVAILABLE:
                self.core.coordinator_unknown(self.now_ms())
            raise

    # ------------------------------------------------------------------ poll

    async def maintain(self) -> None:
        """One round of group work from ``poll``: may run rebalance callbacks."""
        core = self.core
        now = self.now_ms()
        core.on_poll(now)
        self._ensure_heartbeat_task()
        if self._join_task is not None and self._join_task.done():
            task, self._join_task = self._join_task, None
            await self._apply_join(task.result())
        lost = core.take_lost()
        if lost:
            log.warning("event=partitions_lost group=%s partitions=%s", core.group_id, len(lost))
            self._drop(lost)
            await call_listener(self.on_lost, lost)
        error = core.take_fatal()
        if error is not None:
            raise error
        if self._join_task is None and core.need_rejoin(now):
            await self._start_join()
        self.start_committed_fetch()
        if self.auto_commit.due(self.now_ms()):
            self.auto_commit.reset(self.now_ms())
            # An eager member's JoinGroup in flight: what it owned was committed before the
            # join, and a commit now would only be fenced. A cooperative member keeps
            # consuming during its join, so it keeps committing (a commit the new
            # generation fences is answered harmlessly: see _commit_once).
            offsets = {} if self._eager_join_in_flight() else self.positions()
            if offsets:
                self.commit_async(offsets, callback=self._log_auto_commit)

    def _eager_join_in_flight(self) -> bool:
        return self.core.state == MemberState.REBALANCING and not self.core.is_cooperative

    def wake_at_ms(self, now_ms: int) -> int | None:
        """When ``poll`` should run ``maintain`` again without other news."""
        core = self.core
        times = [t for t in (self.auto_commit.time_to_next_ms(now_ms),) if t is not None]
        if core.subscribed and self._join_task is None and (core.rejoin_needed or core.generation_id < 0):
            # a rejoin waits for its backoff or for the coordinator lookup (which wakes
            # the poll when it answers); look again at least every retry_backoff_ms
            times.append(max(core.time_to_join_ms(now_ms), core.retry_backoff_ms))
        return now_ms + min(times) if times else None

    async def _start_join(self) -> None:
        core = self.core
        if core.coordinator is None:
            if core.coordinator_needed(self.now_ms()) and (self._find_task is None or self._find_task.done()):
                self._spawn(self._find_quietly())
            return  # the lookup's answer wakes the poll
        revoked = core.prepare_join()
        error: BaseException | None = None
        if revoked:  # eager: commit and revoke everything before rejoining
            if self.auto_commit.enabled:
                await self.commit_quietly(self.positions(revoked), "before revoking")
            self._drop(revoked)
            error = await run_listeners([(self.on_revoke, revoked)])
        request = core.join_request(self.now_ms())
        log.info("event=join_group group=%s member=%s generation=%s reason=%r", core.group_id,
                 core.member_id or "-", core.generation_id, request.reason)
        self._join_task = asyncio.get_running_loop().create_task(self._join(request))
        if error is not None:
            raise error

    async def _find_quietly(self) -> None:
        try:
            await self.coordinator(self.now_ms() + self.request_timeout_ms)
        except MqError as exc:
            log.info("event=coordinator_unavailable group=%s error=%s", self.core.group_id, exc)
        finally:
            self.consumer._wakeup()

    async def _join(self, request: JoinGroupRequest) -> JoinOutcome:
        core = self.core
        try:
            while True:
                deadline = self.now_ms() + self.request_timeout_ms
                response = await self.send(request, deadline_ms=deadline, lane=JOIN_LANE)
                assert isinstance(response, JoinGroupResponse)
                outcome = core.on_join_response(response, self.now_ms())
                if not (outcome.rejoin_now and not core.owned and core.need_rejoin(self.now_ms())):
                    return outcome
                # KIP-394: rejoin with the allocated member id right away (not at the next
                # poll); close() and unsubscribe() can name this member from now on.
                request = core.join_request(self.now_ms())
                log.info("event=join_group group=%s member=%s generation=%s reason=%r", core.group_id,
                         core.member_id, core.generation_id, request.reason)
        except MqError as exc:
            log.info("event=join_failed group=%s error=%s", core.group_id, exc)
            core.on_join_failed(self.now_ms(), exc)
            return JoinOutcome()
        finally:
            self.consumer._wakeup()
            self._timer_event.set()

    async def _apply_join(self, outcome: JoinOutcome) -> None:
        core = self.core
        if outcome.error is not None:
            log.warning("event=join_error group=%s error=%s", core.group_id, outcome.error)
            if outcome.error.code not in GENERATION_GONE:
                raise outcome.error
            return  # lost partitions and the fenced error follow in maintain
        if not outcome.joined:
            return
        log.info("event=joined group=%s member=%s generation=%s assignor=%s assigned=%s revoked=%s "
                 "owned=%s", core.group_id, core.member_id, core.generation_id, core.protocol,
                 len(outcome.assigned), len(outcome.revoked), len(core.owned))
        if outcome.revoked and self.auto_commit.enabled:
            # cooperative: only what moved (it reaches its new owner next generation)
            await self.commit_quietly(self.positions(outcome.revoked), "before revoking")
        owned = set(core.owned)
        keep = [tp for tp in self.subscriptions.assigned() if tp in owned]
        self.subscriptions.assign(keep + [tp for tp in core.owned if tp not in set(keep)],
                                  awaiting_committed=True)
        if self.cluster.metadata.add_topics(*self.subscriptions.topics()):
            self.cluster.update_metadata_soon()
        self.start_committed_fetch()
        # Kafka: the assignment is in place even if a callback raises; the first error
        # is raised after both ran.
        error = await run_listeners([(self.on_revoke, outcome.revoked), (self.on_assign, outcome.assigned)])
        if error is not None:
            raise error

    def _drop(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching ``tps``: their buffered records are never returned."""
        gone = set(tps)
        self.subscriptions.assign([tp for tp in self.subscriptions.assigned() if tp not in gone])

    # ------------------------------------------------------------------ positions from commits

    def start_committed_fetch(self) -> None:
        if not self.subscriptions.awaiting_committed():
            return
        if self._committed_task is None or self._committed_task.done():
            self._committed_task = asyncio.get_running_loop().create_task(self._fetch_committed())

    async def _fetch_committed(self) -> None:
        try:
            while not self.closed:
                waiting = self.subscriptions.awaiting_committed()
                if not waiting:
                    return
                try:
                    found, errors = await self.fetch_offsets([tp for tp, _ in waiting])
                except MqError as exc:
                    log.info("event=offset_fetch_failed group=%s error=%s", self.core.group_id, exc)
                    await asyncio.sleep(self.core.retry_backoff_ms / 1000)
                    continue
                for tp, epoch in waiting:
                    if tp in found:
                        om = found[tp]
                        self.subscriptions.committed_done(tp, om.offset if om else None, epoch)
                    elif tp in errors and not errors[tp].retriable:
                        st = self.subscriptions.states.get(tp)
                        if st is not None and st.seek_epoch == epoch:
                            st.awaiting_committed = False
                            st.error = MqError(errors[tp], f"fetching the committed offset of {tp} failed")
                self.consumer._wakeup()
                if errors:
                    await asyncio.sleep(self.core.retry_backoff_ms / 1000)
        finally:
            self.consumer._wakeup()

    async def fetch_offsets(self, tps: list[TopicPartition] | None, *, timeout_ms: int | None = None
                            ) -> tuple[dict[TopicPartition, OffsetAndMetadata | None],
                                       dict[TopicPartition, ErrorCode]]:
        """OffsetFetch, retrying coordinator moves and loading until the timeout."""
        deadline = self.now_ms() + (timeout_ms if timeout_ms is not None else self.request_timeout_ms)
        request = fetch_request(self.core.group_id, tps)
        while True:
            try:
                response = await self.send(request, deadline_ms=deadline)
                return fetch_result(response)  # type: ignore[arg-type]
            except MqError as exc:
                if exc.code in COORDINATOR_GONE:
                    self.core.coordinator_unknown(self.now_ms())
                if not exc.code.retriable or self.now_ms() >= deadline:
                    raise
            await asyncio.sleep(self.core.retry_backoff_ms / 1000)

    # ------------------------------------------------------------------ commits

    def positions(self, tps: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """What to commit: the position (next record to read) of each partition that has one."""
        states = self.subscriptions.states
        targets = list(tps) if tps is not None else list(states)
        out = {}
        for tp in targets:
            st = states.get(tp)
            if st is not None and st.position is not None and not st.awaiting_committed:
                out[tp] = OffsetAndMetadata(st.position)
        return out

    def _normalize(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
                   ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return self.positions()
        return {tp if isinstance(tp, TopicPartition) else TopicPartition(*tp): to_offset_and_metadata(v)
                for tp, v in offsets.items()}

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     *, timeout_ms: int | None = None) -> None:
        """Commit synchronously, retrying retriable errors until the timeout; a fatal one
        (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS,
        OFFSET_METADATA_TOO_LARGE, ...) raises at once."""
        to_commit = self._normalize(offsets)
        if not to_commit:
            return
        deadline = self.now_ms() + (timeout_ms if timeout_ms is not None else self.request_timeout_ms)
        while True:
            try:
                await self._commit_once(to_commit, deadline)
                return
            except MqError as exc:
                if not _retriable_commit(exc.code) or self.now_ms() >= deadline:
                    raise
                log.info("event=commit_retry group=%s error=%s", self.core.group_id, exc)
            await asyncio.sleep(self.core.retry_backoff_ms / 1000)

    async def _commit_once(self, offsets: dict[TopicPartition, OffsetAndMetadata], deadline_ms: int) -> None:
        core = self.core
        generation, member = core.commit_identity()
        request = commit_request(core.group_id, offsets, generation_id=generation, member_id=member,
                                 group_instance_id=core.group_instance_id if core.subscribed else None)
        response = await self.send(request, deadline_ms=deadline_ms)
        errors = commit_errors(response)  # type: ignore[arg-type]
        if not errors:
            return
        tp, code = min(errors.items())
        if code == ErrorCode.ILLEGAL_GENERATION and core.state == MemberState.REBALANCING:
            # The group completed a new generation while our JoinGroup is in flight (its
            # answer waits for the generation's record to commit): not fatal, as in Kafka.
            # The JoinGroup's answer decides what this member keeps.
            raise MqError(ErrorCode.REBALANCE_IN_PROGRESS,
                          f"commit of generation {generation} refused: the group is completing "
                          "a new generation while this member rejoins; poll, then commit again")
        if code in GENERATION_GONE and generation == core.generation_id:
            core.on_group_error(code, self.now_ms(), response.error_message)  # type: ignore[attr-defined]
        elif code in COORDINATOR_GONE:
            core.coordinator_unknown(self.now_ms())
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            core.on_rebalance_in_progress(generation, "a commit")
        message = response.error_message or f"commit of {tp} failed: {code.description}"  # type: ignore[attr-defined]
        if code in GENERATION_GONE:
            message = (f"commit failed ({code.name}): this consumer is no longer a member of "
                       f"generation {generation} of group {core.group_id!r}; its partitions may "
                       f"belong to another member now. {message}")
        raise MqError(code, message)

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     *, callback: CommitCallback | None = None) -> asyncio.Future:
        """Commit without waiting (no retries); ``callback(offsets, error)`` when done."""
        to_commit = self._normalize(offsets)
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        async def run() -> None:
            error: BaseException | None = None
            try:
                if to_commit:
                    await self._commit_once(to_commit, self.now_ms() + self.request_timeout_ms)
            except MqError as exc:
                error = exc
            if callback is not None:
                try:
                    result = callback(dict(to_commit), error)
                    if inspect.isawaitable(result):
                        await result
                except Exception:  # a callback's bug must not kill the consumer
                    log.exception("event=commit_callback_failed group=%s", self.core.group_id)
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
                future.add_done_callback(lambda f: f.exception())  # retrieved: no loop warning

        self._spawn(run())
        return future

    def _log_auto_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                         error: BaseException | None) -> None:
        if error is None:
            return
        # A cooperative member's commit fenced by the generation it is joining is expected
        # (the next auto-commit, in the new generation, carries the positions): not a warning.
        expected = isinstance(error, MqError) and error.code == ErrorCode.REBALANCE_IN_PROGRESS
        log.log(logging.INFO if expected else logging.WARNING,
                "event=auto_commit_failed group=%s partitions=%s error=%s",
                self.core.group_id, len(offsets), error)

    async def commit_quietly(self, offsets: dict[TopicPartition, OffsetAndMetadata], when: str) -> None:
        """Auto-commit on revoke/close: a failure is logged (the records will be read again)."""
        try:
            await self.commit(offsets)
        except MqError as exc:
            log.warning("event=auto_commit_failed group=%s when=%r error=%s", self.core.group_id, when, exc)

    async def committed(self, tps: Iterable[TopicPartition], *, timeout_ms: int | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        targets = sorted(set(tps))
        found, errors = await self.fetch_offsets(targets, timeout_ms=timeout_ms)
        if errors:
            tp, code = min(errors.items())
            raise MqError(code, f"committed offset of {tp}: {code.description}")
        return {tp: found.get(tp) for tp in targets}

    # ------------------------------------------------------------------ heartbeats

    def _ensure_heartbeat_task(self) -> None:
        if self._heartbeat_task is None and not self.closed:
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        core = self.core
        while not self.closed:
            self._timer_event.clear()  # before the work: a wake-up during it is kept
            now = self.now_ms()
            try:
                if core.poll_timeout_expired(now):
                    log.warning("event=poll_timeout group=%s member=%s max_poll_interval_ms=%s: "
                                "leaving the group (poll more often, or lower max_poll_records)",
                                core.group_id, core.member_id, core.max_poll_interval_ms)
                    await self._leave("consumer poll timeout has expired")
                    self.consumer._wakeup()
                elif core.session_expired(now):
                    log.warning("event=session_expired group=%s: no heartbeat answered for %s ms; "
                                "finding the coordinator again", core.group_id, core.session_timeout_ms)
                    core.coordinator_unknown(now)
                if core.subscribed and core.coordinator is None and core.coordinator_needed(now):
                    await self._find_quietly()
                elif core.heartbeat_due(now):
                    await self._heartbeat(now)
            except Exception:  # keep the session alive whatever happens
                log.exception("event=heartbeat_loop_error group=%s", core.group_id)
                await asyncio.sleep(core.retry_backoff_ms / 1000)
            wait = max(1, core.next_timer_ms(self.now_ms()) - self.now_ms())
            try:
                await asyncio.wait_for(self._timer_event.wait(), wait / 1000)
            except TimeoutError:
                pass

    async def _heartbeat(self, now_ms: int) -> None:
        core = self.core
        generation = core.generation_id
        request = core.heartbeat_request(now_ms)
        try:
            response = await self.send(request, deadline_ms=now_ms + self.request_timeout_ms)
        except MqError as exc:
            log.info("event=heartbeat_failed group=%s error=%s", core.group_id, exc)
            core.on_heartbeat_failed(self.now_ms())
            return
        before = core.rejoin_needed, core.generation_id
        core.on_heartbeat_response(response, self.now_ms(), generation_id=generation)  # type: ignore[arg-type]
        if (core.rejoin_needed, core.generation_id) != before:
            log.info("event=heartbeat_rebalance group=%s code=%s", core.group_id,
                     ErrorCode(response.error_code).name)  # type: ignore[attr-defined]
            self.consumer._wakeup()

    # ------------------------------------------------------------------ leave, close

    async def _leave(self, reason: str) -> None:
        self._cancel_join()
        request = self.core.leave_group(self.now_ms(), reason=reason)
        if request is not None:
            try:
                await self.send(request, deadline_ms=self.now_ms() + self.request_timeout_ms)
            except MqError as exc:
                log.info("event=leave_group_failed group=%s error=%s", self.core.group_id, exc)

    def unsubscribe(self) -> None:
        """Give up the assignment now; ``on_revoke`` and LeaveGroup follow in a task."""
        owned = self.core.take_revoke_all() if self.core.subscribed else ()
        self.core.unsubscribe()
        self.subscriptions.assign([])
        self._cancel_join()
        # the state changes now (a subscribe() right after starts afresh); the request later
        request = self.core.leave_group(self.now_ms(), reason="the consumer unsubscribed")
        coordinator = self.core.coordinator

        async def finish() -> None:
            error = await run_listeners([(self.on_revoke, owned)])
            if request is not None and coordinator is not None:
                try:
                    await self.cluster.request(coordinator.node_id, request)
                except MqError as exc:
                    log.info("event=leave_group_failed group=%s error=%s", self.core.group_id, exc)
            if error is not None:
                log.warning("event=on_revoke_failed group=%s error=%r", self.core.group_id, error)

        self._spawn(finish())

    async def close(self) -> None:
        """Auto-commit, on_revoke, LeaveGroup (dynamic members), then stop the tasks."""
        core = self.core
        try:
            self._cancel_join()
            lost = core.take_lost()
            if lost:
                self._drop(lost)
                await call_listener(self.on_lost, lost)
            if self.auto_commit.enabled and (core.generation_id >= 0 or not core.subscribed):
                await self.commit_quietly(self.positions(), "on close")
            if core.subscribed:
                owned = core.take_revoke_all()
                if owned:
                    self._drop(owned)
                    await call_listener(self.on_revoke, owned)
                await self._leave("the consumer is being closed")
            if self._background:
                await asyncio.wait(list(self._background), timeout=self.request_timeout_ms / 1000)
        finally:
            self.closed = True
            self._timer_event.set()
            # awaited, not just cancelled: a loop closed right after close() must not
            # destroy pending tasks ("Task was destroyed but it is pending!")
            self._cancel_join()
            await cancel_tasks([self._heartbeat_task, self._committed_task, self._find_task,
                                *self._background])

    def _cancel_join(self) -> None:
        """Abandon the JoinGroup in flight (close awaits the cancelled task)."""
        task, self._join_task = self._join_task, None
        if task is not None and not task.done():
            task.cancel()
            self._track(task)

    def _spawn(self, coro: Any) -> asyncio.Task:
        return self._track(asyncio.get_running_loop().create_task(coro))

    def _track(self, task: asyncio.Task) -> asyncio.Task:
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task




def _retriable_commit(code: ErrorCode) -> bool:
    """A sync commit retries these (UNKNOWN_TOPIC is marked retriable for produce, but a
    commit for a topic the coordinator does not know will not start working)."""
    return code.retriable and code != ErrorCode.UNKNOWN_TOPIC
