"""One TCP connection to one broker: pipelined requests matched by correlation id.

Requests are written as soon as they are made; several may be in flight and responses
come back in order, each resolving the future of its correlation id. A request that
gets no answer within ``request_timeout_ms`` fails with REQUEST_TIMED_OUT and closes the
connection (as Kafka does: the stream can no longer be trusted); a lost connection
fails every pending request with NETWORK_EXCEPTION. Both are retriable.

``acks=0`` produce requests expect no answer: ``send(..., expect_response=False)``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque

from mq.core.errors import ErrorCode, MqError
from mq.protocol.codec import decode_response, encode_request, peek_correlation_id
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import FrameDecoder
from mq.protocol.messages import ApiVersionsRequest, ErrorResponse, Request, Response

log = logging.getLogger("mq.client")

MAX_RESPONSE_BYTES = 512 * 1024 * 1024
HANDSHAKE_SOFTWARE = "mq-python"


def _discard(fut: asyncio.Future) -> None:
    """The handshake's answer is not needed; a failure shows on the next request."""
    if not fut.cancelled():
        fut.exception()


class BrokerConnection(asyncio.Protocol):
    def __init__(self, node_id: int, host: str, port: int, *, client_id: str,
                 request_timeout_ms: int) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        self._correlation = itertools.count(1)
        # correlation id -> (future, request type, deadline); responses arrive in order
        self._in_flight: dict[int, tuple[asyncio.Future, type[Request], float]] = {}
        self._order: deque[int] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._closed_error: MqError | None = None
        self._write_ready = asyncio.Event()
        self._write_ready.set()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(cls, node_id: int, host: str, port: int, *, client_id: str,
                   request_timeout_ms: int, connect_timeout_ms: int) -> BrokerConnection:
        loop = asyncio.get_running_loop()
        conn = cls(node_id, host, port, client_id=client_id, request_timeout_ms=request_timeout_ms)
        try:
            await asyncio.wait_for(loop.create_connection(lambda: conn, host, port),
                                   connect_timeout_ms / 1000)
        except (TimeoutError, OSError) as exc:
            raise MqError(ErrorCode.NETWORK_EXCEPTION,
                          f"cannot connect to {host}:{port}: {exc or type(exc).__name__}") from None
        # Kafka's handshake: a small ApiVersions goes first on every connection, so the broker
        # lifts its pre-authentication frame limit (512 KiB) before a large produce request
        # arrives on it. Pipelined, not awaited: it costs no round trip.
        conn.send(ApiVersionsRequest(client_software=HANDSHAKE_SOFTWARE)).add_done_callback(_discard)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed_error is None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def close(self, error: MqError | None = None) -> None:
        if self._closed_error is None:
            self._closed_error = error or MqError(ErrorCode.NETWORK_EXCEPTION,
                                                  f"connection to {self.host}:{self.port} closed")
        if self._transport is not None:
            self._transport.close()
        self._fail_all(self._closed_error)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._closed_error is None:
            self._closed_error = MqError(
                ErrorCode.NETWORK_EXCEPTION,
                f"connection to {self.host}:{self.port} lost" + (f": {exc}" if exc else ""))
        self._write_ready.set()
        self._fail_all(self._closed_error)

    def _fail_all(self, error: MqError) -> None:
        pending, self._in_flight = self._in_flight, {}
        self._order.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for fut, _, _ in pending.values():
            if not fut.done():
                fut.set_exception(MqError(error.code, error.message))

    # ------------------------------------------------------------------ requests

    def send(self, request: Request, *, expect_response: bool = True) -> asyncio.Future | None:
        """Write ``request``; returns a future of its response (None if none is expected)."""
        if self._closed_error is not None or self._transport is None:
            raise MqError(ErrorCode.NETWORK_EXCEPTION,
                          f"not connected to {self.host}:{self.port}")
        correlation_id = next(self._correlation)
        frame = encode_request(request, correlation_id=correlation_id, client_id=self.client_id)
        self._transport.write(frame)
        if not expect_response:
            return None
        fut = self._loop.create_future()
        deadline = self._loop.time() + self.request_timeout_ms / 1000
        self._in_flight[correlation_id] = (fut, type(request), deadline)
        self._order.append(correlation_id)
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._check_timeouts)
        return fut

    async def request(self, request: Request) -> Response:
        fut = self.send(request)
        assert fut is not None
        return await fut

    async def wait_writable(self) -> None:
        """Back-pressure from the socket: wait while the kernel buffer is full."""
        await self._write_ready.wait()

    def pause_writing(self) -> None:
        self._write_ready.clear()

    def resume_writing(self) -> None:
        self._write_ready.set()

    def _check_timeouts(self) -> None:
        self._timer = None
        if not self._order:
            return
        oldest = self._in_flight.get(self._order[0])
        now = self._loop.time()
        if oldest is not None and oldest[2] <= now:
            log.warning("event=request_timeout node=%s host=%s:%s timeout_ms=%s", self.node_id,
                        self.host, self.port, self.request_timeout_ms)
            self.close(MqError(ErrorCode.REQUEST_TIMED_OUT,
                               f"no response from {self.host}:{self.port} within "
                               f"request_timeout_ms={self.request_timeout_ms}"))
            return
        deadline = oldest[2] if oldest is not None else now
        self._timer = self._loop.call_at(deadline, self._check_timeouts)

    # ------------------------------------------------------------------ responses

    def data_received(self, data: bytes) -> None:
        try:
            self._decoder.feed(data)
            while True:
                frame = self._decoder.next_frame()
                if frame is None:
                    return
                self._on_frame(frame)
        except ProtocolError as exc:
            log.warning("event=bad_response node=%s error=%s", self.node_id, exc)
            self.close(MqError(ErrorCode.NETWORK_EXCEPTION, f"bad response from broker: {exc}"))

    def _on_frame(self, frame) -> None:
        correlation_id = peek_correlation_id(frame)
        entry = self._in_flight.pop(correlation_id, None) if correlation_id is not None else None
        if entry is None:
            raise ProtocolError(ErrorCode.INVALID_REQUEST,
                                f"response with unknown correlation id {correlation_id}")
        if self._order and self._order[0] == correlation_id:
            self._order.popleft()
        else:
            self._order.remove(correlation_id)
        fut, request_type, _ = entry
        _, response = decode_response(frame, request_type)
        if fut.done():
            return
        if isinstance(response, ErrorResponse):
            fut.set_exception(MqError(_code(response.error_code), response.error_message))
        else:
            fut.set_result(response)


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
