"""Frames cut out of a byte stream however it is split, and limits enforced early."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.core.errors import ErrorCode
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import Frame, FrameDecoder, decode_frame, encode_frame

HEADERS = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def _frames(data: bytes, decoder: FrameDecoder) -> list[Frame]:
    decoder.feed(data)
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
    return out


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(HEADERS, st.binary(max_size=40)), min_size=1, max_size=5),
       st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_frames_survive_any_split_of_the_stream(messages, cuts) -> None:
    stream = b"".join(encode_frame(header, tail) for header, tail in messages)
    decoder = FrameDecoder(1 << 20)
    got: list[Frame] = []
    pos = 0
    for cut in cuts * (len(stream) // max(1, sum(cuts)) + 1):
        got += _frames(stream[pos : pos + cut], decoder)
        pos += cut
        if pos >= len(stream):
            break
    got += _frames(stream[pos:], decoder)
    assert [(f.header, bytes(f.tail)) for f in got] == [(h, t) for h, t in messages]
    assert decoder.buffered_bytes == 0


def test_one_byte_at_a_time() -> None:
    data = encode_frame([1, "x"], b"tail") * 3
    decoder = FrameDecoder(100)
    frames = []
    for i in range(len(data)):
        frames += _frames(data[i : i + 1], decoder)
        assert decoder.buffered_bytes == (i + 1) - sum(len(data) // 3 for _ in frames)
    assert [(f.header, bytes(f.tail)) for f in frames] == [([1, "x"], b"tail")] * 3


def test_layout_is_length_header_length_header_tail() -> None:
    data = encode_frame({"a": 1}, b"xyz")
    length, header_length = struct.unpack(">II", data[:8])
    assert length == len(data) - 4
    assert data[8 : 8 + header_length] == b"\x81\xa1a\x01"
    assert data[8 + header_length :] == b"xyz"
    frame = decode_frame(data)
    assert frame.header == {"a": 1} and bytes(frame.tail) == b"xyz"


def test_tail_accepts_memoryview_and_stays_valid_after_more_data() -> None:
    decoder = FrameDecoder(1 << 20)
    decoder.feed(encode_frame([1], memoryview(b"first")))
    frame = decoder.next_frame()
    decoder.feed(encode_frame([2], b"second" * 20000))  # forces buffer growth and compaction
    assert bytes(frame.tail) == b"first"
    assert bytes(decoder.next_frame().tail) == b"second" * 20000


def test_too_large_frame_is_refused_from_its_length_alone() -> None:
    decoder = FrameDecoder(1000)
    decoder.feed(struct.pack(">I", 999))
    assert decoder.next_frame() is None
    decoder = FrameDecoder(1000)
    with pytest.raises(ProtocolError) as info:
        decoder.feed(struct.pack(">I", 1001))  # no body was sent: refused before buffering
    assert info.value.code == ErrorCode.FRAME_TOO_LARGE
    decoder = FrameDecoder(1000)
    decoder.feed(b"\xff\xff")
    with pytest.raises(ProtocolError):
        decoder.feed(b"\xff\xff")


def test_max_frame_bytes_can_be_raised_after_authentication() -> None:
    big = encode_frame([1], b"x" * 2000)
    decoder = FrameDecoder(512)
    with pytest.raises(ProtocolError):
        decoder.feed(big)
    decoder = FrameDecoder(512)
    decoder.max_frame_bytes = 1 << 20
    assert decoder.max_frame_bytes == 1 << 20
    decoder.feed(big)
    assert bytes(decoder.next_frame().tail) == b"x" * 2000
    decoder.feed(big[:4])
    decoder.max_frame_bytes = 100  # lowered while a frame's length is already buffered
    with pytest.raises(ProtocolError) as info:
        decoder.next_frame()
    assert info.value.code == ErrorCode.FRAME_TOO_LARGE


@pytest.mark.parametrize("data", [
    struct.pack(">I", 3) + b"abc",  # no room for header_length
    struct.pack(">II", 4, 1),  # header_length past the end
    struct.pack(">II", 10, 7) + b"\x01\x02\x03\x04\x05\x06",
    struct.pack(">II", 5, 1) + b"\xc1",  # msgpack's never-used byte
    struct.pack(">II", 6, 2) + b"\x01\x02",  # two objects where one is expected
    struct.pack(">II", 5, 1) + b"\xdd",  # array32 with no count
    struct.pack(">II", 9, 5) + b"\xdd\xff\xff\xff\xff",  # lying array count
    struct.pack(">II", 7, 3) + b"\xa2\xff\xfe",  # invalid UTF-8 string
    struct.pack(">II", 7, 3) + b"\x81\x01\x02",  # map with an int key
    struct.pack(">II", 4, 0),  # empty header
])
def test_malformed_frames_are_invalid_requests(data: bytes) -> None:
    decoder = FrameDecoder(1 << 20)
    with pytest.raises(ProtocolError) as info:
        decoder.feed(data)
        decoder.next_frame()
    assert info.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(ProtocolError):
        decode_frame(data)


def test_decode_frame_requires_exactly_one_frame() -> None:
    data = encode_frame([1])
    with pytest.raises(ProtocolError):
        decode_frame(data + b"x")
    with pytest.raises(ProtocolError):
        decode_frame(data[:-1])
    with pytest.raises(ProtocolError):
        decode_frame(b"\x00")
    assert decode_frame(bytearray(data)).header == [1]


def test_buffer_is_compacted_so_a_long_stream_uses_bounded_memory() -> None:
    frame = encode_frame([1, "x" * 100], b"y" * 1000)
    decoder = FrameDecoder(1 << 20)
    chunk = frame * 50 + frame[:500]
    rest = frame[500:]
    for _ in range(200):
        decoder.feed(chunk)
        while decoder.next_frame() is not None:
            pass
        decoder.feed(rest)
        assert decoder.next_frame() is not None
        assert decoder.buffered_bytes == 0
    assert len(decoder._buf) < 4 * len(chunk)


def test_a_large_frame_fed_in_small_chunks_is_linear() -> None:
    """A 4 MiB frame in 4 KiB pieces: each feed appends in place, nothing is re-sliced.
    Counted in operations (buffer growth), not time, so the test is not flaky."""
    payload = bytes(4 << 20)
    data = encode_frame([1], payload)
    decoder = FrameDecoder(8 << 20)
    for i in range(0, len(data), 4096):
        decoder.feed(data[i : i + 4096])
        assert decoder._pos == 0
    frame = decoder.next_frame()
    assert frame is not None and len(frame.tail) == len(payload)


def test_a_frame_with_a_bad_header_is_consumed_and_the_stream_stays_in_step() -> None:
    decoder = FrameDecoder(1 << 10)
    decoder.feed(struct.pack(">II", 5, 1) + b"\xc1" + encode_frame([2], b"ok"))
    with pytest.raises(ProtocolError) as info:
        decoder.next_frame()
    assert info.value.code == ErrorCode.INVALID_REQUEST
    frame = decoder.next_frame()
    assert frame is not None and frame.header == [2] and bytes(frame.tail) == b"ok"


def test_a_frame_of_exactly_max_frame_bytes_is_accepted() -> None:
    data = encode_frame([1], b"z" * 100)
    limit = len(data) - 4  # the limit applies to ``length``, which excludes its own 4 bytes
    decoder = FrameDecoder(limit)
    decoder.feed(data)
    assert bytes(decoder.next_frame().tail) == b"z" * 100
    decoder = FrameDecoder(limit - 1)
    with pytest.raises(ProtocolError) as info:
        decoder.feed(data)
    assert info.value.code == ErrorCode.FRAME_TOO_LARGE
