"""The asyncio shell around ``BrokerNode``: sockets, timers, group commit.

Everything that decides something lives in the node; this module only moves bytes
and time: it feeds decoded requests to the node, routes completed operations back to
their connection, runs one group-commit fsync per event-loop turn (all appends of
that turn share it), expires long-poll fetches, sweeps idle and slow connections, and
calls ``node.poll`` for periodic work at the deadline it returns.

Requests to other nodes go through ``PeerNetwork`` (``mq.aio.peers``): after every
event (requests read, a completion, a group commit, a poll, a peer's response) the
server delivers completions and sends what ``node.take_outbound()`` holds. It also
notices when the node becomes ready (``ready``) and, after ``begin_shutdown``, when
its controlled shutdown is over (``shutdown_done``).

Failpoint ``broker.before_produce_response`` fires just before a produce response
(immediate or released by a group commit) goes to its connection: the records are
in the log but the client has not been told. ``error``/``oserror`` replace the
response with that error (the "written, not acknowledged" step of KIP-101 style
scenarios); ``panic`` ends the process there.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

from mq.aio.connection import ONE_WAY_APIS, BrokerConnection, internal_error
from mq.aio.metrics import BrokerMetrics
from mq.aio.peers import DEFAULT_REQUEST_TIMEOUT_MS, PeerNetwork
from mq.broker.node import BrokerNode, Pending
from mq.core import failpoints
from mq.core.clock import Clock, SystemClock
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode, MqError
from mq.protocol.codec import RequestHeader
from mq.protocol.messages import ApiKey, ProduceResponse, Request, Response

log = logging.getLogger("mq.aio.server")

PRODUCE_RESPONSE_FAILPOINT = "broker.before_produce_response"
GROUP_APIS = frozenset({ApiKey.JOIN_GROUP, ApiKey.LEAVE_GROUP, ApiKey.HEARTBEAT, ApiKey.DELETE_GROUPS})
MAX_POLL_INTERVAL_MS = 1000
"""``node.poll`` runs at least this often, whatever deadline it asked for."""
POLL_AFTER_PEER_EVENT_MS = 10
"""A peer's answer or Raft message may move the node's next deadline earlier (a new
election or fetch timer); the node has no cheap "next deadline" query, so ``poll``
runs again at most this long after such an event (coalesced: at most one per period)."""
MAX_CLEANER_ERRORS_REMEMBERED = 1000
"""Distinct log cleaner failures remembered so their repeats are not logged again."""


def before_produce_response(response: Response) -> Response:
    """Fire ``broker.before_produce_response``; an injected error becomes the answer."""
    try:
        failpoints.hit(PRODUCE_RESPONSE_FAILPOINT)
    except MqError as err:
        return internal_error(err)
    except OSError as err:
        return internal_error(MqError(ErrorCode.KAFKA_STORAGE_ERROR, str(err)))
    return response


class BrokerServer:
    def __init__(self, node: BrokerNode, config: BrokerConfig, *, clock: Clock | None = None,
                 metrics: BrokerMetrics | None = None) -> None:
        self.node = node
        self.config = config
        self.clock = clock or SystemClock()
        self.metrics = metrics
        self.connections: set[BrokerConnection] = set()
        self._owners: dict[int, BrokerConnection] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._commit_scheduled = False
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poll_timer: asyncio.TimerHandle | None = None
        self._poll_when = 0.0
        self._shutting_down = False
        self._stopping = False
        self.peers: PeerNetwork | None = None
        self.ready = asyncio.Event()
        """Set once ``node.is_ready`` has been seen true."""
        self.shutdown_done = asyncio.Event()
        """Set once ``node.shutdown_complete`` after ``begin_shutdown``."""
        self.address: tuple[str, int] | None = None
        self._cleaner_errors_seen: set[tuple[str, str]] = set()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(
            lambda: BrokerConnection(self), host, port, reuse_address=True, backlog=1024)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])
        self.peers = PeerNetwork(self.node, client_id=f"broker-{self.config.node_id}", clock=self.clock,
                                 on_event=self._after_peer_event, request_timeout_ms=DEFAULT_REQUEST_TIMEOUT_MS)
        self._sweeper = asyncio.create_task(self._sweep())
        self._poll()
        return self.address

    # ------------------------------------------------------------ connections

    def register(self, conn: BrokerConnection) -> bool:
        if len(self.connections) >= self.config.max_connections:
            return False
        self.connections.add(conn)
        transport = conn.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        return True

    def unregister(self, conn: BrokerConnection) -> None:
        self.connections.discard(conn)

    def warn_bad_request(self, peer: str, code: ErrorCode, message: str) -> None:
        log.warning("bad_request peer=%s code=%s reason=%r", peer, code.name, message)

    def observe(self, api: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_request(api, seconds)

    # ------------------------------------------------------------ requests

    def handle(self, peer: str, header: RequestHeader, request: Request) -> Response | Pending | None:
        if header.api_key in ONE_WAY_APIS:
            self._handle_one_way(peer, header, request)
            return None
        try:
            outcome = self.node.handle(header, request, now_ms=self.clock.wall_ms(),
                                       client_host=peer.rsplit(":", 1)[0])
        except MqError as err:
            log.error("request_failed peer=%s api=%s code=%s reason=%r",
                      peer, header.api_key.name, err.code.name, err.message)
            return internal_error(err)
        except OSError as err:
            log.error("storage_error peer=%s api=%s error=%r", peer, header.api_key.name, err)
            return internal_error(MqError(ErrorCode.KAFKA_STORAGE_ERROR, str(err)))
        except Exception as err:  # a broker bug, not client input: keep the trace
            log.exception("internal_error peer=%s api=%s", peer, header.api_key.name)
            return internal_error(err)
        if isinstance(outcome, ProduceResponse):
            return before_produce_response(outcome)
        if header.api_key in GROUP_APIS:
            self._poll_soon()  # a join or leave may have set a coordinator timer the node polls for
        return outcome

    def _handle_one_way(self, peer: str, header: RequestHeader, request: Request) -> None:
        try:
            outcome = self.node.handle(header, request, now_ms=self.clock.wall_ms())
        except MqError as err:  # a peer's bad message: one line, no answer
            self.warn_bad_request(peer, err.code, err.message)
            return
        except Exception:  # a broker bug, not peer input: keep the trace
            log.exception("internal_error peer=%s api=%s", peer, header.api_key.name)
            return
        self._poll_soon()
        if outcome is not None:
            log.error("one_way_answered peer=%s api=%s: dropped %s", peer, header.api_key.name,
                      type(outcome).__name__)

    def await_op(self, pending: Pending, conn: BrokerConnection) -> None:
        self._owners[pending.op_id] = conn
        if pending.timeout_ms is not None and self._loop is not None:
            self._timers[pending.op_id] = self._loop.call_later(
                pending.timeout_ms / 1000, self._expire, pending.op_id)

    def _expire(self, op_id: int) -> None:
        self._timers.pop(op_id, None)
        self.node.expire(op_id, now_ms=self.clock.wall_ms())
        self._deliver()

    def cancel(self, op_id: int) -> None:
        self._owners.pop(op_id, None)
        timer = self._timers.pop(op_id, None)
        if timer is not None:
            timer.cancel()
        self.node.cancel(op_id)

    def after_requests(self) -> None:
        """After a connection's requests: deliver what completed, queue the fsync."""
        self._deliver()
        if self.node.needs_group_commit and not self._commit_scheduled and self._loop is not None:
            self._commit_scheduled = True
            self._loop.call_soon(self._group_commit)

    def _after_peer_event(self) -> None:
        self.after_requests()
        self._poll_soon()

    def _group_commit(self) -> None:
        self._commit_scheduled = False
        try:
            self.node.group_commit(now_ms=self.clock.wall_ms())
        except Exception:  # a broker bug: keep serving, keep the trace
            log.exception("group_commit_failed")
        self._deliver()

    def _deliver(self) -> None:
        """Completions to their connections, outbound requests to the peers."""
        for cut in self.node.take_unclean_truncations():
            if cut.mirror_topic:
                log.info("mirror_truncation partition=%s high_watermark=%d truncated_to=%d "
                         "(a MirrorTruncate or a lost mirror copy; the source region holds the records)",
                         cut.tp, cut.from_offset, cut.to_offset)
                continue
            log.warning("unclean_truncation partition=%s high_watermark=%d truncated_to=%d lost_offsets=%d "
                        "(the leader was elected from outside the ISR: acknowledged records are gone)",
                        cut.tp, cut.from_offset, cut.to_offset, cut.from_offset - cut.to_offset)
        for tp, err in self.node.take_corruption_reports():
            log.warning("corrupt_data_not_served partition=%s file=%s position=%d problem=%r",
                        tp, err.path, err.position, err.problem)
        for op_id, response in self.node.take_completions():
            timer = self._timers.pop(op_id, None)
            if timer is not None:
                timer.cancel()
            conn = self._owners.pop(op_id, None)
            if conn is not None:
                if isinstance(response, ProduceResponse):
                    response = before_produce_response(response)
                conn.complete(op_id, response)
        if self.peers is not None:
            try:
                self.peers.pump()
            except Exception:  # a broker bug: keep serving, keep the trace
                log.exception("outbound_failed")
        if not self.ready.is_set() and self.node.is_ready:
            self.ready.set()
        if self._shutting_down and not self.shutdown_done.is_set() and self.node.shutdown_complete:
            self.shutdown_done.set()

    # ------------------------------------------------------------ periodic work

    def _poll(self) -> None:
        """``node.poll`` now; then again at the deadline it returns (at most a second away)."""
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        wall = self.clock.wall_ms()
        try:
            deadline_ms = self.node.poll(now_ms=wall)
        except MqError as err:
            log.error("periodic_work_failed code=%s reason=%r", err.code.name, err.message)
            deadline_ms = wall + MAX_POLL_INTERVAL_MS
        except Exception:  # a broker bug: the timer must not die with it
            log.exception("periodic_work_failed")
            deadline_ms = wall + MAX_POLL_INTERVAL_MS
        for tp, err in self.node.take_storage_errors():
            log.error("log_offline partition=%s code=%s reason=%r", tp, err.code.name, err.message)
        self._log_cleaner_errors()
        self.after_requests()
        self._schedule_poll(deadline_ms)

    def _log_cleaner_errors(self) -> None:
        """A failed cleaning pass is one WARNING line. The cleaner skips that log for
        ``log.cleaner.backoff.ms`` and tries again (the log stays online and served), so
        the same failure comes back every backoff: logged once, its repeats at DEBUG."""
        cleaner = getattr(self.node, "log_cleaner", None)  # test doubles of the node have none
        if cleaner is None:
            return
        for tp, reason in cleaner.take_errors():
            key = (str(tp), reason)
            if key in self._cleaner_errors_seen:
                log.debug("log_cleaner_error tp=%s reason=%r (again)", tp, reason)
                continue
            if len(self._cleaner_errors_seen) >= MAX_CLEANER_ERRORS_REMEMBERED:
                self._cleaner_errors_seen.clear()
            self._cleaner_errors_seen.add(key)
            log.warning("log_cleaner_error tp=%s reason=%r", tp, reason)

    def _poll_soon(self) -> None:
        self._schedule_poll(self.clock.wall_ms() + POLL_AFTER_PEER_EVENT_MS)

    def _schedule_poll(self, deadline_ms: int) -> None:
        """Call ``_poll`` at wall time ``deadline_ms`` (unless one is due sooner)."""
        if self._loop is None or self._stopping:
            return
        delay_ms = min(max(deadline_ms - self.clock.wall_ms(), 1), MAX_POLL_INTERVAL_MS)
        when = self._loop.time() + delay_ms / 1000
        if self._poll_timer is not None:
            if self._poll_when <= when:  # (uvloop's handle for a sub-ms delay has no when())
                return
            self._poll_timer.cancel()
        self._poll_timer = self._loop.call_at(when, self._poll)
        self._poll_when = when

    def _sweep_interval(self) -> float:
        ms = min(1000, self.config.request_read_timeout_ms // 4, self.config.connections_max_idle_ms // 4)
        return max(ms, 10) / 1000

    async def _sweep(self) -> None:
        """Close slow and idle connections."""
        while True:
            await asyncio.sleep(self._sweep_interval())
            now = time.monotonic()
            for conn in list(self.connections):
                self._check_connection(conn, now)

    def _check_connection(self, conn: BrokerConnection, now: float) -> None:
        read_timeout = self.config.request_read_timeout_ms / 1000
        if conn.frame_started is not None and now - conn.frame_started >= read_timeout:
            conn.reject(ErrorCode.REQUEST_TIMED_OUT,
                        f"incomplete frame after request.read.timeout.ms={self.config.request_read_timeout_ms}")
        elif not conn.busy and now - conn.last_active >= self.config.connections_max_idle_ms / 1000:
            log.info("connection_idle_closed peer=%s idle_ms=%d", conn.peer, self.config.connections_max_idle_ms)
            conn.close()

    # ------------------------------------------------------------ shutdown

    async def controlled_shutdown(self, *, timeout_s: float, interrupt: asyncio.Event | None = None) -> bool:
        """``node.begin_shutdown``, keep serving until ``node.shutdown_complete`` (leadership
        moved away), ``timeout_s`` passes or ``interrupt`` is set; True if it completed."""
        self._shutting_down = True
        try:
            self.node.begin_shutdown(now_ms=self.clock.wall_ms())
        except Exception:  # a broker bug: fall back to an uncontrolled shutdown
            log.exception("controlled_shutdown_failed")
            return False
        self._poll()  # runs after_requests: sends the shutdown request, notices completion
        waits = [asyncio.ensure_future(self.shutdown_done.wait())]
        if interrupt is not None:
            waits.append(asyncio.ensure_future(interrupt.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        return self.shutdown_done.is_set()

    async def stop(self, *, drain_timeout_s: float = 5.0) -> None:
        """Stop accepting, answer what is in flight, flush and checkpoint, close."""
        self._stopping = True
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.stop_reading()  # answer what is in flight, take nothing new
        for op_id in list(self._timers):
            self._expire(op_id)
        self._group_commit()
        deadline = time.monotonic() + drain_timeout_s
        while any(c.busy for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self.peers is not None:
            self.peers.close()  # nothing more goes out; no answer reaches the node after this
        self.node.shutdown(now_ms=self.clock.wall_ms())
        self._deliver()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
