"""Frames: how messages are cut out of a byte stream.

Layout (big-endian)::

    u32 length | u32 header_length | msgpack header | raw tail

``length`` counts every byte after the length field (so a frame occupies
``4 + length`` bytes); ``header_length`` is the size of the msgpack header; the tail
is everything after the header. Record batches travel in the tail as raw bytes, so a
broker moves them from socket to log without re-encoding them.

``FrameDecoder`` is a sans-IO state machine in the style of h11: ``feed(bytes)`` what
the socket delivered, then call ``next_frame()`` until it returns ``None``. It keeps
one ``bytearray`` and a read offset (consumed bytes are dropped in one move once they
are at least half the buffer), so a frame of n bytes costs O(n) however it was split.
A declared length above ``max_frame_bytes`` is refused as soon as the 4 length bytes
arrive, before any of the body is buffered.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import msgpack

from mq.core.errors import ErrorCode
from mq.protocol.errors import ProtocolError

PREFIX = struct.Struct(">II")
"""``length`` and ``header_length``."""
PREFIX_SIZE = PREFIX.size
_LENGTH = struct.Struct(">I")
_COMPACT_MIN_BYTES = 64 * 1024


@dataclass(slots=True)
class Frame:
    """One decoded frame: the msgpack header as Python objects, the tail as a view."""

    header: object
    tail: memoryview


def pack_header(header: object) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def unpack_header(data: bytes | memoryview) -> object:
    """Decode a msgpack header; any malformation becomes ProtocolError(INVALID_REQUEST).

    Every declared string, binary, array and map length is bounded by the header's own
    size, so a lying count cannot make the decoder allocate more than the frame holds.
    """
    limit = len(data)
    try:
        return msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=True, timestamp=0,
            max_str_len=limit, max_bin_len=limit,
            max_array_len=limit, max_map_len=limit, max_ext_len=limit,
        )
    except Exception as exc:  # noqa: BLE001 - msgpack raises many types; all mean "malformed"
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, f"undecodable frame header: {type(exc).__name__}"
        ) from None


def encode_frame_parts(
    header: bytes, tail_parts: list[bytes | memoryview], tail_size: int
) -> bytes:
    """Join an already packed header and tail pieces into one frame (one copy)."""
    prefix = PREFIX.pack(PREFIX_SIZE - 4 + len(header) + tail_size, len(header))
    return b"".join((prefix, header, *tail_parts))


def encode_frame(header: object, tail: bytes | memoryview = b"") -> bytes:
    """A whole frame: length prefix, msgpack ``header``, raw ``tail``."""
    packed = pack_header(header)
    tail_size = memoryview(tail).nbytes
    return encode_frame_parts(packed, [tail], tail_size)


def decode_frame(data: bytes | bytearray | memoryview) -> Frame:
    """Decode a buffer that holds exactly one frame (length prefix included)."""
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if len(view) < PREFIX_SIZE:
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "frame shorter than its prefix")
    (length,) = _LENGTH.unpack_from(view, 0)
    if length != len(view) - 4:
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST, f"frame length {length} != {len(view) - 4} bytes given"
        )
    return _frame_from_body(view[4:])


def _frame_from_body(body: memoryview) -> Frame:
    """``body`` is everything after the length field: header_length, header, tail."""
    if len(body) < 4:
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "frame has no header length")
    (header_length,) = _LENGTH.unpack_from(body, 0)
    if header_length > len(body) - 4:
        raise ProtocolError(
            ErrorCode.INVALID_REQUEST,
            f"header_length {header_length} exceeds the frame ({len(body) - 4} bytes)",
        )
    end = 4 + header_length
    return Frame(unpack_header(body[4:end]), body[end:])


class FrameDecoder:
    """Cuts frames out of a byte stream; see the module docstring."""

    __slots__ = ("_buf", "_max_frame_bytes", "_pos")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._max_frame_bytes = max_frame_bytes

    @property
    def max_frame_bytes(self) -> int:
        """Largest accepted ``length``; raised after authentication (Kafka: 512 KiB
        before, ``socket.request.max.bytes`` after)."""
        return self._max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        self._max_frame_bytes = value

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes from the stream. Raises FRAME_TOO_LARGE as soon as a pending
        frame declares a length above the limit, so an attacker cannot make us buffer it."""
        self._buf += data
        self._check_pending_length()

    def _check_pending_length(self) -> int | None:
        if len(self._buf) - self._pos < 4:
            return None
        (length,) = _LENGTH.unpack_from(self._buf, self._pos)
        if length > self._max_frame_bytes:
            raise ProtocolError(
                ErrorCode.FRAME_TOO_LARGE,
                f"frame of {length} bytes exceeds the limit of {self._max_frame_bytes}",
            )
        if length < 4:
            raise ProtocolError(ErrorCode.INVALID_REQUEST, f"frame length {length} < 4")
        return length

    def next_frame(self) -> Frame | None:
        """The next complete frame, or ``None`` if more bytes are needed.

        A frame whose header does not decode raises INVALID_REQUEST after it has been
        consumed, so the stream stays in step and the next frame can be read. A bad
        length (FRAME_TOO_LARGE, or under 4) leaves the stream unreadable: close it.
        """
        length = self._check_pending_length()
        if length is None or len(self._buf) - self._pos < 4 + length:
            return None
        start = self._pos + 4
        end = start + length
        # One copy: the frame must outlive the buffer (its tail is handed out as a view).
        body = _copy(self._buf, start, end)
        self._pos = end
        self._compact()
        return _frame_from_body(memoryview(body))

    def _compact(self) -> None:
        pos = self._pos
        if pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif pos >= _COMPACT_MIN_BYTES and pos * 2 >= len(self._buf):
            del self._buf[:pos]
            self._pos = 0


def _copy(buf: bytearray, start: int, end: int) -> bytes:
    with memoryview(buf) as view:
        return view[start:end].tobytes()
