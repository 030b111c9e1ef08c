"""Codecs round-trip, and decompression never produces more than its cap."""

from __future__ import annotations

import gzip

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.core.errors import ErrorCode
from mq.core.types import CompressionType
from mq.protocol.compression import compress, decompress
from mq.protocol.errors import ProtocolError

CODECS = list(CompressionType)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip(codec: CompressionType) -> None:
    @settings(max_examples=50, deadline=None, derandomize=True, database=None)
    @given(st.binary(max_size=2000) | st.binary(max_size=5).map(lambda b: b * 500))
    def check(data: bytes) -> None:
        packed = compress(codec, data)
        assert decompress(codec, packed, max_bytes=len(data)) == data
        assert decompress(int(codec), memoryview(packed), max_bytes=len(data) + 10) == data

    check()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_output_one_byte_over_the_cap_is_record_too_large(codec: CompressionType) -> None:
    data = b"abc" * 1000
    with pytest.raises(ProtocolError) as info:
        decompress(codec, compress(codec, data), max_bytes=len(data) - 1)
    assert info.value.code == ErrorCode.RECORD_TOO_LARGE


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=lambda c: c.name)
def test_truncated_or_padded_streams_are_corrupt(codec: CompressionType) -> None:
    packed = compress(codec, bytes(range(256)) * 20)
    for bad in (packed[:-1], packed[: len(packed) // 2], packed[:3], b"", packed + b"\x00",
                b"\x00" * 32, bytes(reversed(packed))):
        with pytest.raises(ProtocolError) as info:
            decompress(codec, bad, max_bytes=1 << 20)
        assert info.value.code in (ErrorCode.CORRUPT_MESSAGE,), (codec, bad[:8])


def test_codecs_interoperate_with_the_standard_tools() -> None:
    data = b"interop " * 100
    assert gzip.decompress(compress(CompressionType.GZIP, data)) == data
    assert lz4.frame.decompress(compress(CompressionType.LZ4, data)) == data
    assert zstandard.ZstdDecompressor().decompress(compress(CompressionType.ZSTD, data)) == data
    assert decompress(CompressionType.GZIP, gzip.compress(data), max_bytes=len(data)) == data
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(CompressionType.ZSTD, streamed, max_bytes=len(data)) == data
    with pytest.raises(ProtocolError):
        decompress(CompressionType.ZSTD, streamed, max_bytes=len(data) - 1)


@pytest.mark.parametrize("codec_id", [2, 5, 6, 7, -1, 99])
def test_unknown_codec_ids_are_refused_by_name(codec_id: int) -> None:
    for call in (lambda: compress(codec_id, b"x"), lambda: decompress(codec_id, b"x", max_bytes=9)):
        with pytest.raises(ProtocolError) as info:
            call()
        assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_gzip_output_is_deterministic() -> None:
    """The same records give the same batch bytes (and CRC) on every producer."""
    assert compress(CompressionType.GZIP, b"same") == compress(CompressionType.GZIP, b"same")
