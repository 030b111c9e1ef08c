"""One client connection: frames in, responses out in request order.

Requests are pipelined: every complete frame is decoded and handed to the broker at
once, and its response takes a slot in a FIFO. A slot is filled either immediately
or later (a long-poll fetch, a produce waiting for its group-commit fsync); bytes
leave only from the head of the FIFO, so responses keep request order while several
requests are in flight. Reading pauses when ``queued.max.requests`` slots are open or
the socket's write buffer is full (the client is not reading its responses).

Frame size limit: no authentication exists yet, so "pre-auth" means "before the
connection's first well-formed request" (a real client's first request is a small
ApiVersions or Metadata). Until then ``socket.request.max.bytes.preauth`` (512 KiB)
applies, afterwards ``socket.request.max.bytes``. A connection that never completes a
request can therefore make the broker buffer at most 512 KiB. When SASL arrives,
"authenticated" replaces "sent one valid request".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from mq.broker.node import Pending
from mq.core.errors import ErrorCode, MqError
from mq.protocol.codec import decode_request, encode_response
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import Frame, FrameDecoder
from mq.protocol.messages import ApiKey, ErrorResponse, Response

if TYPE_CHECKING:
    from mq.aio.server import BrokerServer

ONE_WAY_APIS = frozenset({int(ApiKey.RAFT)})
"""API keys never answered, not even with an error: the sender keeps no response slot."""

log = logging.getLogger("mq.aio.connection")


class Slot:
    """A response position in the connection's FIFO."""

    __slots__ = ("api", "correlation_id", "data", "started")

    def __init__(self, correlation_id: int, api: str, started: float) -> None:
        self.correlation_id = correlation_id
        self.api = api
        self.started = started
        self.data: bytes | None = None


class BrokerConnection(asyncio.Protocol):
    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self.config = server.config
        self.decoder = FrameDecoder(self.config.socket_request_max_bytes_preauth)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.slots: deque[Slot] = deque()
        self.pending: dict[int, Slot] = {}
        self.authenticated = False
        self.last_active = time.monotonic()
        self.frame_started: float | None = None
        self._reading_paused = False
        self._writing_paused = False
        self.closed = False

    # ------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if not self.server.register(self):
            log.warning("connection_refused peer=%s reason=max.connections=%d",
                        self.peer, self.config.max_connections)
            self.closed = True
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for op_id in list(self.pending):
            self.server.cancel(op_id)
        self.pending.clear()
        self.slots.clear()
        self.server.unregister(self)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        now = time.monotonic()
        self.last_active = now
        try:
            self.decoder.feed(data)
            while not self.closed:
                frame = self.decoder.next_frame()
                if frame is None:
                    break
                self._on_frame(frame)
        except ProtocolError as err:
            self.reject(err.code, err.message)
        else:
            self.frame_started = (self.frame_started or now) if self.decoder.buffered_bytes else None
        # Requests handled before a bad frame may have completed others' operations.
        self.server.after_requests()
        self._flush()

    # ------------------------------------------------------------ requests

    def _on_frame(self, frame: Frame) -> None:
        started = time.perf_counter()
        # A new frame starts now; the read timeout applies to each frame separately.
        self.frame_started = time.monotonic() if self.decoder.buffered_bytes else None
        try:
            header, request = decode_request(frame)
        except ProtocolError as err:
            if err.correlation_id is None:
                raise
            self.server.warn_bad_request(self.peer, err.code, err.message)
            if _api_key_of(frame) in ONE_WAY_APIS:
                return  # the sender expects no answer, not even an error
            slot = Slot(err.correlation_id, "invalid", started)
            slot.data = encode_response(ErrorResponse(err.code, err.message), correlation_id=err.correlation_id)
            self.slots.append(slot)
            return
        if not self.authenticated:
            self.authenticated = True
            self.decoder.max_frame_bytes = self.config.socket_request_max_bytes
        api = header.api_key.name.lower()
        outcome = self.server.handle(self.peer, header, request)
        if outcome is None:  # acks=0: Kafka sends nothing back
            self.server.observe(api, time.perf_counter() - started)
            return
        slot = Slot(header.correlation_id, api, started)
        self.slots.append(slot)
        if isinstance(outcome, Pending):
            self.pending[outcome.op_id] = slot
            self.server.await_op(outcome, self)
        else:
            self._fill(slot, outcome)
        self._update_reading()

    def _fill(self, slot: Slot, response: Response) -> None:
        slot.data = encode_response(response, correlation_id=slot.correlation_id)
        self.server.observe(slot.api, time.perf_counter() - slot.started)

    def complete(self, op_id: int, response: Response) -> None:
        slot = self.pending.pop(op_id, None)
        if slot is not None and not self.closed:
            self._fill(slot, response)
            self._flush()

    def _flush(self) -> None:
        if self.closed or self.transport is None:
            return
        slots = self.slots
        if slots and slots[0].data is not None:
            self.last_active = time.monotonic()  # answering counts as activity
        while slots and slots[0].data is not None:
            self.transport.write(slots.popleft().data)  # type: ignore[arg-type]
        self._update_reading()

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        should_pause = self._writing_paused or len(self.slots) >= self.config.queued_max_requests
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    # ------------------------------------------------------------ closing

    @property
    def busy(self) -> bool:
        """Requests in flight: the connection is not idle while the broker owes answers."""
        return bool(self.slots)

    def stop_reading(self) -> None:
        if not self.closed and self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self._writing_paused = True  # keeps _update_reading from resuming
            self.transport.pause_reading()

    def reject(self, code: ErrorCode, message: str) -> None:
        """Client input we cannot answer in-band: one WARNING line, then close."""
        self.server.warn_bad_request(self.peer, code, message)
        self.close()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()


def _api_key_of(frame: Frame) -> int | None:
    header = frame.header
    return header[0] if type(header) is list and len(header) == 5 and type(header[0]) is int else None


def internal_error(exc: BaseException) -> Response:
    code = exc.code if isinstance(exc, MqError) else ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorResponse(code, str(exc) or type(exc).__name__)


__all__ = ["BrokerConnection", "internal_error"]
