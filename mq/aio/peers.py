"""Outbound connections from this broker to the other nodes of its region.

The sans-IO node hands the shell ``Outbound(destination, request, tag, one_way)``
values from ``take_outbound()``; ``PeerNetwork`` sends each one on a single TCP
connection per destination node and reports the outcome with
``node.on_response(tag, response | None, now_ms=...)``:

- exactly once per tag for a request that expects an answer: the decoded response,
  or ``None`` for any failure (no address, connection refused or lost, connect or
  request timeout, an ``ErrorResponse``, a frame that does not decode, the peer's
  write buffer or in-flight limit full, the network closing);
- never for a ``one_way`` request (``RaftRequest``): it is written and forgotten, and
  dropped when the destination is unreachable — Raft retries by itself.

Connections open on demand. The address comes from ``node.address_of(node_id)`` at
every attempt, so a broker that comes back on another port is found again. A failed
attempt starts a back-off (``reconnect_backoff_ms`` doubling up to
``reconnect_backoff_max_ms``, reset by a successful connect) during which requests to
that destination fail at once: a node that is down never accumulates requests.
Requests made while a connection is being opened wait for it (at most
``connect_timeout_ms``, at most ``max_queued`` of them).

Requests are pipelined with correlation ids; the broker answers in order, so an
``Outbound`` names a *lane*: each (destination, lane) has its own connection, and a
replica fetch sent while another to the same leader long-polls goes on a lane of its
own instead of queueing behind the parked one. A request
gets ``request_timeout_ms`` to be answered, plus its ``max_wait_ms`` for a (replica)
fetch, which long-polls on the leader. A timeout closes the connection, failing
everything in flight on it, as Kafka's network client does: the stream can no
longer be trusted.

Failures are reported from a fresh event-loop callback, never from inside
``send``/``pump``, so the node is not re-entered while it hands out requests. After
every batch of responses or failures ``on_event`` runs (the server delivers
completions, schedules its group commit and calls ``pump`` again).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Protocol

from mq.broker.outbound import Outbound
from mq.core.clock import Clock, SystemClock
from mq.core.errors import ErrorCode, MqError
from mq.protocol.codec import decode_response, encode_request, peek_correlation_id
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import FrameDecoder
from mq.protocol.messages import ErrorResponse, FetchRequest, Request, Response

log = logging.getLogger("mq.aio.peers")

MAX_RESPONSE_BYTES = 512 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_CONNECT_TIMEOUT_MS = 5_000
DEFAULT_RECONNECT_BACKOFF_MS = 50
DEFAULT_RECONNECT_BACKOFF_MAX_MS = 1_000
DEFAULT_MAX_IN_FLIGHT = 1_000
DEFAULT_MAX_QUEUED = 1_000
DEFAULT_MAX_BUFFERED_BYTES = 64 * 1024 * 1024


class PeerNode(Protocol):
    """What ``PeerNetwork`` needs from the node (``BrokerNode`` provides it)."""

    def address_of(self, node_id: int) -> tuple[str, int] | None: ...

    def take_outbound(self) -> list[Outbound]: ...

    def on_response(self, tag: int, response: Response | None, *, now_ms: int) -> None: ...


class _InFlight:
    __slots__ = ("deadline", "request_type", "tag")

    def __init__(self, tag: int, request_type: type[Request], deadline: float) -> None:
        self.tag = tag
        self.request_type = request_type
        self.deadline = deadline


class _Connection(asyncio.Protocol):
    """One TCP connection to a peer; its callbacks go to the network."""

    def __init__(self, network: PeerNetwork, peer: _Peer) -> None:
        self.network = network
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        self.in_flight: dict[int, _InFlight] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        self.network._on_data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.network._on_lost(self, exc)


class _Peer:
    """Everything about one destination node, across its connections."""

    def __init__(self, node_id: int, backoff_ms: int) -> None:
        self.node_id = node_id
        self.address: tuple[str, int] | None = None
        self.conn: _Connection | None = None
        self.connecting: asyncio.Task | None = None
        self.queue: list[Outbound] = []
        self.retry_at = 0.0  # loop time before which requests fail at once
        self.backoff_ms = backoff_ms
        self.correlation = itertools.count(1)
        self.connects = 0  # successful connects, for tests and metrics


class PeerNetwork:
    def __init__(
        self, node: PeerNode, *, client_id: str, clock: Clock | None = None,
        on_event: Callable[[], None] | None = None,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        reconnect_backoff_ms: int = DEFAULT_RECONNECT_BACKOFF_MS,
        reconnect_backoff_max_ms: int = DEFAULT_RECONNECT_BACKOFF_MAX_MS,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_queued: int = DEFAULT_MAX_QUEUED,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
    ) -> None:
        self.node = node
        self.client_id = client_id
        self.clock = clock or SystemClock()
        self.on_event = on_event
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self.max_buffered_bytes = max_buffered_bytes
        self._loop = asyncio.get_running_loop()
        self._peers: dict[tuple[int, int], _Peer] = {}  # (node id, lane)
        self._failed: list[int] = []
        self._failures_scheduled = False
        self.closed = False

    # ------------------------------------------------------------ sending

    def pump(self) -> int:
        """Send everything the node wants sent; returns how many requests that was."""
        if self.closed:
            return 0
        outbound = self.node.take_outbound()
        self.send(outbound)
        return len(outbound)

    def send(self, outbound: Iterable[Outbound]) -> None:
        for item in outbound:
            self._send_one(item)

    def _send_one(self, item: Outbound) -> None:
        if self.closed:
            return
        key = (item.destination, item.lane)
        peer = self._peers.get(key)
        if peer is None:
            peer = self._peers[key] = _Peer(item.destination, self.reconnect_backoff_ms)
        if peer.conn is not None:
            self._write(peer, peer.conn, item)
        elif peer.connecting is not None:
            if len(peer.queue) < self.max_queued:
                peer.queue.append(item)
            else:
                self._fail(item)
        elif self._loop.time() < peer.retry_at:
            self._fail(item)  # backing off: the destination is down, do not pile up
        else:
            address = self.node.address_of(item.destination)
            if address is None:
                log.debug("peer_address_unknown node=%d", item.destination)
                self._fail(item)
                return
            peer.address = address
            peer.queue.append(item)
            peer.connecting = self._loop.create_task(self._connect(peer, address))

    def _write(self, peer: _Peer, conn: _Connection, item: Outbound) -> None:
        transport = conn.transport
        assert transport is not None
        if conn.closed or transport.is_closing():  # reset right after connecting
            self._fail(item)
            return
        if not item.one_way and len(conn.in_flight) >= self.max_in_flight:
            log.warning("peer_too_many_in_flight node=%d limit=%d", peer.node_id, self.max_in_flight)
            self._fail(item)
            return
        if transport.get_write_buffer_size() >= self.max_buffered_bytes:
            log.warning("peer_not_reading node=%d buffered_bytes=%d", peer.node_id,
                        transport.get_write_buffer_size())
            self._fail(item)
            return
        correlation_id = next(peer.correlation)
        try:
            frame = encode_request(item.request, correlation_id=correlation_id, client_id=self.client_id)
        except Exception:  # the node built a request the codec refuses: a broker bug
            log.exception("peer_request_not_encodable node=%d api=%s", peer.node_id,
                          type(item.request).__name__)
            self._fail(item)
            return
        try:
            transport.write(frame)
        except (RuntimeError, OSError):  # uvloop: "the handler is closed" on a reset socket
            self._fail(item)
            return
        if item.one_way:
            return
        timeout_ms = self.request_timeout_ms
        if isinstance(item.request, FetchRequest):
            timeout_ms += max(item.request.max_wait_ms, 0)  # long-polls on the leader
        deadline = self._loop.time() + timeout_ms / 1000
        conn.in_flight[correlation_id] = _InFlight(item.tag, type(item.request), deadline)
        if conn.timer is None or deadline < conn.timer.when():
            if conn.timer is not None:
                conn.timer.cancel()
            conn.timer = self._loop.call_at(deadline, self._check_timeouts, conn)

    # ------------------------------------------------------------ connecting

    async def _connect(self, peer: _Peer, address: tuple[str, int]) -> None:
        host, port = address
        try:
            _, conn = await asyncio.wait_for(
                self._loop.create_connection(lambda: _Connection(self, peer), host, port),
                self.connect_timeout_ms / 1000)
        except (OSError, TimeoutError, ValueError, OverflowError) as exc:  # refused, unreachable, bad address
            self._connect_failed(peer, address, exc)
            return
        if self.closed:
            peer.connecting = None
            conn.closed = True
            conn.transport.close()  # type: ignore[union-attr]
            return
        if conn.closed:  # reset before we got to use it (a restarting peer, a proxy refusing)
            self._connect_failed(peer, address, "connection lost while connecting")
            return
        peer.connecting = None
        peer.conn = conn  # type: ignore[assignment]
        peer.connects += 1
        peer.backoff_ms = self.reconnect_backoff_ms
        log.info("peer_connected node=%d address=%s:%d", peer.node_id, host, port)
        queued, peer.queue = peer.queue, []
        for item in queued:
            if peer.conn is conn:
                self._write(peer, conn, item)  # type: ignore[arg-type]
            else:  # lost again while writing the queue
                self._send_one(item)

    def _connect_failed(self, peer: _Peer, address: tuple[str, int], exc: object) -> None:
        """A failed attempt: back off, fail what waited for it. A connection lost before
        ``_connect`` resumed counts too — adopting it would leave ``peer.conn`` closed
        for good, every later message to the peer dropped (one-way Raft ones silently)."""
        peer.connecting = None
        if self.closed:
            return
        log.info("peer_connect_failed node=%d address=%s:%d retry_in_ms=%d error=%r",
                 peer.node_id, address[0], address[1], peer.backoff_ms, exc)
        peer.retry_at = self._loop.time() + peer.backoff_ms / 1000
        peer.backoff_ms = min(peer.backoff_ms * 2, self.reconnect_backoff_max_ms)
        queued, peer.queue = peer.queue, []
        for item in queued:
            self._fail(item)

    # ------------------------------------------------------------ responses

    def _on_data(self, conn: _Connection, data: bytes) -> None:
        if conn.closed:
            return
        delivered = False
        try:
            conn.decoder.feed(data)
            while not conn.closed:
                frame = conn.decoder.next_frame()
                if frame is None:
                    break
                correlation_id = peek_correlation_id(frame)
                entry = conn.in_flight.pop(correlation_id, None) if correlation_id is not None else None
                if entry is None:
                    raise ProtocolError(ErrorCode.INVALID_REQUEST,
                                        f"response with unknown correlation id {correlation_id!r}")
                try:
                    _, response = decode_response(frame, entry.request_type)
                except ProtocolError:
                    self._failed.append(entry.tag)
                    raise
                if isinstance(response, ErrorResponse):
                    log.warning("peer_error_response node=%d api=%s code=%d message=%r", conn.peer.node_id,
                                entry.request_type.__name__, response.error_code, response.error_message)
                    self._respond(entry.tag, None)
                else:
                    self._respond(entry.tag, response)
                delivered = True
        except ProtocolError as err:
            log.warning("peer_bad_response node=%d code=%s reason=%r", conn.peer.node_id, err.code.name,
                        err.message)
            self._close(conn, "bad response")
        if delivered:
            self._event()

    def _respond(self, tag: int, response: Response | None) -> None:
        try:
            self.node.on_response(tag, response, now_ms=self.clock.wall_ms())
        except MqError as err:  # the node refused what a peer sent: not a crash
            log.warning("peer_response_refused tag=%d code=%s reason=%r", tag, err.code.name, err.message)
        except Exception:  # a broker bug: keep serving, keep the trace
            log.exception("peer_response_failed tag=%d", tag)

    def _event(self) -> None:
        if self.on_event is not None:
            try:
                self.on_event()
            except Exception:
                log.exception("peer_event_failed")
        else:
            self.pump()

    # ------------------------------------------------------------ failures

    def _fail(self, item: Outbound) -> None:
        if not item.one_way:
            self._failed.append(item.tag)
            self._schedule_failures()

    def _schedule_failures(self) -> None:
        if not self._failures_scheduled and self._failed:
            self._failures_scheduled = True
            self._loop.call_soon(self._report_failures)

    def _report_failures(self) -> None:
        self._failures_scheduled = False
        if self.closed:
            self._failed.clear()
            return
        failed, self._failed = self._failed, []
        for tag in failed:
            self._respond(tag, None)
        if failed:
            self._event()

    def _check_timeouts(self, conn: _Connection) -> None:
        conn.timer = None
        if conn.closed or not conn.in_flight:
            return
        now = self._loop.time()
        earliest = min(entry.deadline for entry in conn.in_flight.values())
        if earliest <= now:
            log.warning("peer_request_timeout node=%d in_flight=%d request_timeout_ms=%d",
                        conn.peer.node_id, len(conn.in_flight), self.request_timeout_ms)
            self._close(conn, "request timed out")
        else:
            conn.timer = self._loop.call_at(earliest, self._check_timeouts, conn)

    def _close(self, conn: _Connection, reason: str) -> None:
        """Close ``conn`` and fail everything in flight on it (reported soon)."""
        if conn.closed:
            return
        conn.closed = True
        peer = conn.peer
        if peer.conn is conn:
            peer.conn = None
            peer.retry_at = self._loop.time() + peer.backoff_ms / 1000
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None
        in_flight, conn.in_flight = conn.in_flight, {}
        self._failed.extend(entry.tag for entry in in_flight.values())
        self._schedule_failures()
        if conn.transport is not None:
            conn.transport.close()
        log.info("peer_disconnected node=%d reason=%s failed_requests=%d", peer.node_id, reason, len(in_flight))

    def _on_lost(self, conn: _Connection, exc: Exception | None) -> None:
        if not conn.closed:
            self._close(conn, f"connection lost: {exc}" if exc else "closed by peer")

    # ------------------------------------------------------------ state and shutdown

    def _lanes(self, node_id: int | None) -> list[_Peer]:
        return [p for (node, _), p in sorted(self._peers.items()) if node_id is None or node == node_id]

    def is_connected(self, node_id: int) -> bool:
        """The first lane to ``node_id`` (every request but a second replica fetch) is open."""
        peer = self._peers.get((node_id, 0))
        return peer is not None and peer.conn is not None

    def connects(self, node_id: int) -> int:
        """Successful connects to ``node_id`` so far, over all lanes."""
        return sum(p.connects for p in self._lanes(node_id))

    def in_flight(self, node_id: int | None = None) -> int:
        """Requests awaiting an answer (to ``node_id``, or to anyone)."""
        return sum(len(p.conn.in_flight) for p in self._lanes(node_id) if p.conn is not None)

    def close(self) -> None:
        """Close every connection; nothing in flight is reported any more (the node is
        shutting down)."""
        self.closed = True
        self._failed.clear()
        for peer in self._lanes(None):
            peer.queue.clear()
            if peer.connecting is not None:
                peer.connecting.cancel()
                peer.connecting = None
            conn, peer.conn = peer.conn, None
            if conn is not None:
                conn.closed = True
                conn.in_flight.clear()
                if conn.timer is not None:
                    conn.timer.cancel()
                if conn.transport is not None:
                    conn.transport.close()


__all__ = ["PeerNetwork", "PeerNode"]
