"""Lies about sizes cost nothing: declared counts and lengths far beyond the input,
and decompression bombs, are refused quickly without allocating what they declare."""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Callable

import crc32c
import lz4.frame
import pytest
import zstandard

from mq.core.errors import ErrorCode
from mq.core.types import CompressionType
from mq.protocol.codec import decode_request
from mq.protocol.compression import decompress
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import FrameDecoder, decode_frame, encode_frame
from mq.protocol.record_batch import decode_records, iter_batches, valid_prefix

GIB = 1 << 30
MIB = 1 << 20


def _peak_bytes(call: Callable[[], object]) -> tuple[int, ProtocolError | None]:
    """Peak Python heap growth while running ``call``, and the ProtocolError it raised."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        error = None
        try:
            call()
        except ProtocolError as exc:
            error = exc
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, error


def _frame(header_bytes: bytes, tail: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(header_bytes) + len(tail), len(header_bytes)) + header_bytes + tail


U32_MAX = b"\xff\xff\xff\xff"
LYING_MSGPACK = {
    "array32": b"\xdd" + U32_MAX,
    "map32": b"\xdf" + U32_MAX,
    "bin32": b"\xc6" + U32_MAX,
    "str32": b"\xdb" + U32_MAX,
    "ext32": b"\xc9" + U32_MAX + b"\x01",
    "array16": b"\xdc\xff\xff",
    "nested": b"\x95\x00\x00\x01\xa0\x81\xa6topics\xdd" + U32_MAX,
}


@pytest.mark.parametrize("name", sorted(LYING_MSGPACK))
def test_lying_msgpack_counts_in_a_frame_header(name: str) -> None:
    data = _frame(LYING_MSGPACK[name] + b"\x00" * 16)
    peak, error = _peak_bytes(lambda: decode_request(decode_frame(data)))
    assert error is not None and error.code == ErrorCode.INVALID_REQUEST
    assert peak < MIB, f"{name}: {peak} bytes allocated for a {len(data)}-byte frame"
    decoder = FrameDecoder(1024)
    decoder.feed(data)
    with pytest.raises(ProtocolError):
        decoder.next_frame()


def test_lying_frame_lengths() -> None:
    decoder = FrameDecoder(512 * 1024)
    peak, error = _peak_bytes(lambda: decoder.feed(U32_MAX + b"\x00" * 100))
    assert error is not None and error.code == ErrorCode.FRAME_TOO_LARGE and peak < MIB
    decoder = FrameDecoder(512 * 1024)  # a length within the limit, but the bytes never come
    decoder.feed(struct.pack(">I", 500 * 1024) + b"\x00" * 10)
    assert decoder.next_frame() is None and decoder.buffered_bytes == 14


def test_lying_records_range() -> None:
    body = {"acks": 1, "timeout_ms": 1, "topics": [
        {"name": "t", "partitions": [{"partition": 0, "records": [0, 2**40]}]}]}
    with pytest.raises(ProtocolError) as info:
        decode_request(decode_frame(encode_frame([0, 0, 9, "", body], b"abc")))
    assert info.value.code == ErrorCode.INVALID_REQUEST and info.value.correlation_id == 9


def _batch(payload: bytes, *, record_count: int, codec: int = 0, batch_length: int | None = None) -> bytes:
    body = struct.pack(">hiqqqhii", codec, max(0, record_count - 1), 0, 0, -1, -1, -1,
                       record_count) + payload
    length = len(body) + 9 if batch_length is None else batch_length
    return struct.pack(">qiibI", 0, length, 0, 2, crc32c.crc32c(body)) + body


@pytest.mark.parametrize("payload,count", [
    (b"\xdd" + U32_MAX, 1), (b"\xdd" + U32_MAX, 2**31 - 1), (b"\x91\xdd" + U32_MAX, 1),
    (b"\x91\x95\x00\x00\xc6" + U32_MAX, 1), (b"\x90", 2**31 - 1),
])
def test_lying_counts_in_a_record_payload(payload: bytes, count: int) -> None:
    data = _batch(payload, record_count=count)
    peak, error = _peak_bytes(lambda: decode_records(data))
    assert error is not None and error.code == ErrorCode.CORRUPT_MESSAGE
    assert peak < MIB


def test_lying_batch_length() -> None:
    data = _batch(b"\x90", record_count=0, batch_length=2**31 - 1)
    with pytest.raises(ProtocolError):
        list(iter_batches(data))
    with pytest.raises(ProtocolError):
        decode_records(data)
    assert valid_prefix(data) == 0


# ---------------------------------------------------------------- decompression bombs


def _zeros(n_mib: int):
    chunk = bytes(MIB)
    return (chunk for _ in range(n_mib))


def _gzip_bomb(n_mib: int = 1024) -> bytes:
    """``n_mib`` MiB of zeros (1 GiB by default), gzip, built in about a second: after a
    full flush the compressor emits the same bytes for each further MiB of zeros, so
    one flushed segment is repeated and the trailer (CRC-32, size) written by hand."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = compressor.compress(bytes(MIB)) + compressor.flush(zlib.Z_FULL_FLUSH)
    segment = compressor.compress(bytes(MIB)) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert compressor.compress(bytes(MIB)) + compressor.flush(zlib.Z_FULL_FLUSH) == segment
    crc = 0
    chunk = bytes(MIB)
    for _ in range(n_mib):
        crc = zlib.crc32(chunk, crc)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # an empty final block
    size = (n_mib * MIB) & 0xFFFFFFFF
    return first + segment * (n_mib - 1) + final + struct.pack("<II", crc, size)


def _lz4_bomb() -> bytes:
    compressor = lz4.frame.LZ4FrameCompressor()
    parts = [compressor.begin(source_size=GIB)]  # the frame declares its 1 GiB
    parts += [compressor.compress(chunk) for chunk in _zeros(1024)]
    return b"".join(parts + [compressor.flush()])


def _zstd_bomb(declare_size: bool) -> bytes:
    compressor = zstandard.ZstdCompressor(write_content_size=declare_size)
    obj = compressor.compressobj(size=GIB if declare_size else -1)
    parts = [obj.compress(chunk) for chunk in _zeros(1024)]
    return b"".join(parts + [obj.flush()])


BOMBS = {
    "gzip": (CompressionType.GZIP, _gzip_bomb),
    "lz4": (CompressionType.LZ4, _lz4_bomb),
    "zstd-declared": (CompressionType.ZSTD, lambda: _zstd_bomb(True)),
    "zstd-streamed": (CompressionType.ZSTD, lambda: _zstd_bomb(False)),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_decompression_bomb_is_refused_with_bounded_memory(name: str) -> None:
    codec, make = BOMBS[name]
    bomb = make()
    assert len(bomb) < 8 * MIB  # a small input...
    cap = 8 * MIB
    peak, error = _peak_bytes(lambda: decompress(codec, bomb, max_bytes=cap))
    assert error is not None and error.code == ErrorCode.RECORD_TOO_LARGE
    assert peak < 3 * cap, f"{name}: peak {peak / MIB:.1f} MiB for a {cap / MIB:.0f} MiB cap"
    batch = _batch(bomb, record_count=1, codec=int(codec))
    peak, error = _peak_bytes(lambda: decode_records(batch, max_decompressed_bytes=cap))
    assert error is not None and error.code == ErrorCode.RECORD_TOO_LARGE
    assert peak < 3 * cap + len(batch)


@pytest.mark.parametrize("n_mib", [1, 2, 17])
def test_the_gzip_bomb_construction_is_a_valid_stream_of_zeros(n_mib: int) -> None:
    """The hand-built bomb is a valid gzip stream of exactly ``n_mib`` MiB of zeros
    (checked on small sizes; the 1 GiB one is built the same way)."""
    data = _gzip_bomb(n_mib)
    assert decompress(CompressionType.GZIP, data, max_bytes=n_mib * MIB) == bytes(n_mib * MIB)
    assert zlib.decompress(data, 31) == bytes(n_mib * MIB)  # CRC and size checked by zlib
