"""Fuzz every parser in mq.protocol: only ProtocolError may leave a decoder.

Each target runs ``MQ_FUZZ_EXAMPLES`` inputs (100,000 by default, TESTING.md's bar):
random bytes and mutations of valid frames, batches and compressed streams (bit flips,
interesting bytes, lying 32-bit lengths, truncations, insertions, splices). Where a
checksum or a length prefix would stop a mutation at the door, the target repairs it
for half of the inputs so the deeper parser is reached. See ``fuzz_support``.
"""

from __future__ import annotations

import dataclasses
import random
import struct

import crc32c
import msgpack
import pytest
from fuzz_support import FUZZ_INPUTS, fuzz, load_corpus, tree_mutate

from mq.core.types import CompressionType
from mq.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    peek_correlation_id,
)
from mq.protocol.compression import compress, decompress
from mq.protocol.frame import FrameDecoder, decode_frame, encode_frame
from mq.protocol.apis import ALL_REQUESTS
from mq.protocol.messages import ErrorResponse, MetadataRequest
from mq.protocol.record_batch import (
    build_batch,
    crc_ok,
    decode_record_tuples,
    decode_records,
    iter_batches,
    iter_records,
    read_header,
    valid_prefix,
)
from mq.protocol.reference import example_instance

REQUEST_CLASSES = sorted(ALL_REQUESTS.values(), key=lambda c: c.__name__)
RESPONSE_TYPES = [(cls.RESPONSE, cls) for cls in REQUEST_CLASSES] + [(ErrorResponse, MetadataRequest)]


def _fix_frame_length(data: bytes, rng: random.Random) -> bytes:
    """Half the time, make the length prefix true so the header parser is reached."""
    if rng.random() < 0.5 and len(data) >= 4:
        return struct.pack(">I", len(data) - 4) + data[4:]
    return data


def _check(outcomes, *, min_ok: float = 0.001, min_codes: int = 2) -> None:
    """The bar was met, and the fuzzer got past the door: some inputs decoded and
    several different errors were named (a decoder that refused everything would fail)."""
    total = outcomes["total"]
    assert total >= FUZZ_INPUTS, outcomes
    assert outcomes["ok"] >= min_ok * total, outcomes
    assert len(set(outcomes) - {"total", "ok"}) >= min_codes, outcomes
    print(dict(outcomes))


def _mutate_frame_structure(seed: bytes, rng: random.Random) -> bytes:
    frame = decode_frame(seed)
    return encode_frame(tree_mutate(frame.header, rng), bytes(frame.tail))


def _check_round_trip_response(response, request_type) -> None:
    again = decode_response(decode_frame(encode_response(response, correlation_id=1)), request_type)
    assert again[1] == response


# ---------------------------------------------------------------- frames and messages


def _request_seeds() -> list[bytes]:
    seeds = [encode_request(example_instance(cls), correlation_id=7, client_id="c")
             for cls in REQUEST_CLASSES]
    seeds += [encode_request(cls() if not _required(cls) else example_instance(cls),
                             correlation_id=2**40) for cls in REQUEST_CLASSES]
    seeds.append(encode_frame([0, 0, 1, "", {"acks": 1, "timeout_ms": 1, "topics": [
        {"name": "t", "partitions": [{"partition": 0, "records": [0, 3]}]}]}], b"abc"))
    return seeds


def _required(cls) -> bool:
    return any(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               for f in dataclasses.fields(cls))


def test_fuzz_frame_decoder() -> None:
    seeds = _request_seeds() + [b"".join(_request_seeds()[:3])] + load_corpus("frame_decoder")

    def target(data: bytes, rng: random.Random) -> None:
        decoder = FrameDecoder(rng.choice([64, 4096, 1 << 20]))
        pos = 0
        while pos < len(data):
            step = rng.randrange(1, 64)
            decoder.feed(data[pos : pos + step])
            pos += step
            while (frame := decoder.next_frame()) is not None:
                peek_correlation_id(frame)
        assert decoder.buffered_bytes <= len(data)

    _check(fuzz(seeds, target))


def test_fuzz_decode_request() -> None:
    seeds = _request_seeds() + load_corpus("decode_request")

    def target(data: bytes, rng: random.Random) -> None:
        frame = decode_frame(_fix_frame_length(data, rng))
        peek_correlation_id(frame)
        header, request = decode_request(frame, apis=ALL_REQUESTS)
        again = encode_request(request, correlation_id=header.correlation_id,
                               client_id=header.client_id, api_version=header.api_version)
        assert decode_request(decode_frame(again), apis=ALL_REQUESTS) == (header, request)

    _check(fuzz(seeds, target, structured=_mutate_frame_structure), min_ok=0.01, min_codes=3)


def test_fuzz_decode_response() -> None:
    """Seeds of every response type; each input is decoded as the type its seed came
    from (or, one time in ten, as another type)."""
    seeds, types = [], []
    for response_type, request_type in RESPONSE_TYPES:
        seeds.append(encode_response(example_instance(response_type), correlation_id=5))
        types.append(request_type)
    by_seed = dict(zip(seeds, types))
    seeds += load_corpus("decode_response")

    def target(data: bytes, rng: random.Random) -> None:
        request_type = by_seed.get(data) or rng.choice(types)
        if rng.random() < 0.1:
            request_type = rng.choice(types)
        frame = decode_frame(_fix_frame_length(data, rng))
        _, response = decode_response(frame, request_type)
        _check_round_trip_response(response, request_type)

    # A response can only be INVALID_REQUEST.
    _check(fuzz(seeds, target, structured=_mutate_frame_structure), min_ok=0.01, min_codes=1)


# ---------------------------------------------------------------- record batches


def _batch_seeds() -> list[bytes]:
    seeds = []
    for codec in CompressionType:
        records = [(b"k%d" % i if i % 3 else None, b"value-%d" % i if i % 4 else None,
                    (("h", b"x"),) if i % 2 else (), 1_700_000_000_000 + i) for i in range(6)]
        seeds.append(build_batch(records, compression=codec, base_offset=100))
        seeds.append(build_batch(records[:1], compression=codec))
    return seeds


def _fix_batch(data: bytes, rng: random.Random) -> bytes:
    """Half the time, repair batch_length and the CRC so the payload parser is reached."""
    if rng.random() < 0.5 and len(data) >= 61:
        buf = bytearray(data)
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
        return bytes(buf)
    return data


def _mutate_batch_structure(seed: bytes, rng: random.Random) -> bytes:
    """Re-pack a mutated record list under a valid header and CRC (uncompressed)."""
    header = read_header(seed)
    records = decode_records(seed)
    rows = [[r.offset - header.base_offset, r.timestamp - header.first_timestamp, r.key,
             r.value, [list(h) for h in r.headers]] for r in records]
    payload = msgpack.packb(tree_mutate(rows, rng))
    count = header.record_count + rng.choice([0, 0, 0, -1, 1])
    body = struct.pack(">hiqqqhii", 0, header.last_offset_delta, header.first_timestamp,
                       header.max_timestamp, -1, -1, -1, count) + payload
    crc = crc32c.crc32c(body)
    return struct.pack(">qiibI", header.base_offset, len(body) + 9, 0, 2, crc) + body


def test_fuzz_batch_headers_and_recovery_scan() -> None:
    batch_seeds = _batch_seeds()
    seeds = batch_seeds + [b"".join(batch_seeds[:4]), b"".join(batch_seeds[4:])]
    seeds += load_corpus("batch_headers")

    def target(data: bytes, rng: random.Random) -> None:
        prefix = valid_prefix(data)  # must never raise
        assert 0 <= prefix <= len(data)
        assert valid_prefix(data[:prefix]) == prefix
        for pos, header in iter_batches(data[:prefix]):
            assert crc_ok(data, pos, header)
        if prefix < len(data):  # something past the valid prefix is wrong: iterating says so
            list(iter_batches(data))
            header = read_header(data, rng.randrange(len(data)))
            assert header.size >= 61
        read_header(data)

    _check(fuzz(seeds, target))


def test_fuzz_decode_records() -> None:
    seeds = _batch_seeds() + load_corpus("decode_records")

    def target(data: bytes, rng: random.Random) -> None:
        data = _fix_batch(data, rng)
        records = decode_records(data, max_decompressed_bytes=1 << 16)
        header = read_header(data)
        assert len(records) == header.record_count
        assert all(header.base_offset <= r.offset <= header.last_offset for r in records)
        assert decode_record_tuples(data, max_decompressed_bytes=1 << 16) == [
            (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
        list(iter_records(data[: header.size], max_decompressed_bytes=1 << 16))

    _check(fuzz(seeds, target, structured=_mutate_batch_structure), min_ok=0.01)


@pytest.mark.parametrize("codec", [c for c in CompressionType if c], ids=lambda c: c.name)
def test_fuzz_decompress(codec: CompressionType) -> None:
    seeds = [compress(codec, b"abc" * 300), compress(codec, bytes(range(256))),
             compress(codec, b""), compress(codec, bytes(5000))]
    seeds += load_corpus(f"decompress_{codec.name.lower()}")

    def target(data: bytes, rng: random.Random) -> None:
        cap = rng.choice([0, 100, 4096, 1 << 16])
        assert len(decompress(codec, data, max_bytes=cap)) <= cap

    _check(fuzz(seeds, target))
