"""Batch codecs: none, gzip, lz4 (frame format), zstd — Kafka's codec ids.

A codec compresses a batch's whole record payload. Decompression is always capped:
the output is produced as a stream and abandoned as soon as it would exceed
``max_bytes``, so a decompression bomb (a few KiB that expand to GiBs) costs at most
``max_bytes`` of memory and is refused with ``RECORD_TOO_LARGE``. Input that is not
a complete, valid stream of the codec is ``CORRUPT_MESSAGE``.
"""

from __future__ import annotations

import zlib

import lz4.frame
import zstandard

from mq.core.errors import ErrorCode
from mq.core.types import CompressionType
from mq.protocol.errors import ProtocolError

_GZIP_WBITS = 31  # zlib's gzip container, single member, mtime 0: deterministic output
_GZIP_LEVEL = 6  # zlib's and Kafka's default
_ZSTD_LEVEL = 3  # zstd's default
_ZSTD_READ_CHUNK = 1 << 20

_zstd_compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, write_content_size=True)
_zstd_decompressor = zstandard.ZstdDecompressor()


def codec_of(value: int) -> CompressionType:
    """The codec for an attributes value; unknown ids (2 = snappy, 5-7) are refused."""
    try:
        return CompressionType(value)
    except ValueError:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec id {value}"
        ) from None


def compress(codec: CompressionType | int, data: bytes | bytearray | memoryview) -> bytes:
    """``data`` compressed by ``codec`` (a copy of it for ``NONE``)."""
    codec = codec_of(int(codec))
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.LZ4:
        return lz4.frame.compress(data, store_size=True)
    if codec is CompressionType.ZSTD:
        return _zstd_compressor.compress(data)
    compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(data) + compressor.flush()


def decompress(
    codec: CompressionType | int, data: bytes | bytearray | memoryview, *, max_bytes: int
) -> bytes:
    """``data`` decompressed, refusing output above ``max_bytes`` (see module docstring)."""
    codec = codec_of(int(codec))
    if codec is CompressionType.NONE:
        if len(data) > max_bytes:
            _too_large(max_bytes)
        return bytes(data)
    try:
        if codec is CompressionType.LZ4:
            return _lz4_decompress(data, max_bytes)
        if codec is CompressionType.ZSTD:
            return _zstd_decompress(data, max_bytes)
        return _gzip_decompress(data, max_bytes)
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - each codec library has its own error types
        raise ProtocolError(
            ErrorCode.CORRUPT_MESSAGE, f"invalid {codec.name.lower()} data: {type(exc).__name__}"
        ) from None


def _too_large(max_bytes: int) -> None:
    raise ProtocolError(
        ErrorCode.RECORD_TOO_LARGE, f"decompressed batch exceeds {max_bytes} bytes"
    )


def _corrupt(codec: str, why: str) -> None:
    raise ProtocolError(ErrorCode.CORRUPT_MESSAGE, f"invalid {codec} data: {why}")


def _gzip_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    decompressor = zlib.decompressobj(_GZIP_WBITS)
    return _whole_stream("gzip", decompressor, decompressor.decompress(data, max_bytes + 1), max_bytes)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    # max_length makes the library size its output buffer by the cap, not by the
    # (attacker-controlled) content size in the frame header.
    out = decompressor.decompress(data, max_length=max_bytes + 1)
    return _whole_stream("lz4", decompressor, out, max_bytes)


def _whole_stream(codec: str, decompressor, out: bytes, max_bytes: int) -> bytes:  # type: ignore[no-untyped-def]
    """Refuse output over the cap, a truncated stream and bytes after its end."""
    if len(out) > max_bytes:
        _too_large(max_bytes)
    if not decompressor.eof:
        _corrupt(codec, "truncated stream")
    if decompressor.unused_data:
        _corrupt(codec, "bytes after the end of the stream")
    return out


def _zstd_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    declared = zstandard.frame_content_size(data)
    if declared > max_bytes:
        _too_large(max_bytes)
    # The one-shot API would allocate the declared content size; a stream reader
    # allocates only what it has produced.
    chunks = []
    produced = 0
    with _zstd_decompressor.stream_reader(data, read_across_frames=False) as reader:
        while produced <= max_bytes:
            chunk = reader.read(min(_ZSTD_READ_CHUNK, max_bytes + 1 - produced))
            if not chunk:
                break
            chunks.append(chunk)
            produced += len(chunk)
    if produced > max_bytes:
        _too_large(max_bytes)
    out = b"".join(chunks)
    if declared >= 0 and declared != produced:
        _corrupt("zstd", f"{produced} bytes decoded, header declares {declared}")
    return out
