"""Hot-path figures for the protocol layer (nightly; prints one JSON line per figure).

Run: ``pytest tests/unit/protocol/test_protocol_perf.py -m nightly -s``. The asserted
floors are far below the measured figures: they catch an accidental O(n^2) or a
per-record allocation storm, not a noisy machine.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import pytest

from mq.core.types import CompressionType
from mq.protocol.codec import decode_request, encode_request
from mq.protocol.frame import FrameDecoder
from mq.protocol.messages import ProducePartitionData, ProduceRequest, ProduceTopicData
from mq.protocol.record_batch import BatchBuilder, decode_record_tuples, decode_records

pytestmark = pytest.mark.nightly
VALUE = os.urandom(100)


def _best_seconds(call: Callable[[], object], repeat: int = 7, number: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            call()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def _report(name: str, **figures: float) -> None:
    print(json.dumps({"workload": name, **{k: round(v, 2) for k, v in figures.items()}}))


def _build(n: int, codec: CompressionType = CompressionType.NONE) -> bytes:
    builder = BatchBuilder(compression=codec)
    append = builder.append
    for _ in range(n):
        append(1_700_000_000_000, None, VALUE)
    return builder.build()


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_batch_builder_throughput(codec: CompressionType) -> None:
    seconds = _best_seconds(lambda: _build(1000, codec))
    _report(f"BatchBuilder append+build 100 B {codec.name}", records_per_s=1000 / seconds)
    assert 1000 / seconds > 50_000


def test_decode_records_throughput() -> None:
    batch = _build(1000)
    tuples = _best_seconds(lambda: decode_record_tuples(batch))
    records = _best_seconds(lambda: decode_records(batch))
    _report("decode 100 B records", tuples_per_s=1000 / tuples, records_per_s=1000 / records)
    assert 1000 / tuples > 100_000


def test_produce_request_with_a_1_mib_batch() -> None:
    batch = _build(9700)  # 100-byte values: just over 1 MiB
    assert 1 << 20 < len(batch) < (1 << 20) + 16384
    request = ProduceRequest(acks=1, timeout_ms=1000, topics=[
        ProduceTopicData("t", [ProducePartitionData(0, batch)])])
    frame_bytes = encode_request(request, correlation_id=1)
    decoder = FrameDecoder(4 << 20)

    def decode() -> object:
        decoder.feed(frame_bytes)
        return decode_request(decoder.next_frame())

    encode_s = _best_seconds(lambda: encode_request(request, correlation_id=1), number=50)
    decode_s = _best_seconds(decode, number=50)
    _report("Produce 1 MiB batch", encode_us=encode_s * 1e6, feed_and_decode_us=decode_s * 1e6,
            encode_gib_per_s=len(frame_bytes) / encode_s / 2**30,
            decode_gib_per_s=len(frame_bytes) / decode_s / 2**30)
    assert decode_s < 0.05


def test_small_produce_request_round_trip() -> None:
    request = ProduceRequest(acks=1, timeout_ms=1000, topics=[
        ProduceTopicData("t", [ProducePartitionData(p, VALUE) for p in range(4)])])
    frame_bytes = encode_request(request, correlation_id=1)
    decoder = FrameDecoder(1 << 20)

    def decode() -> object:
        decoder.feed(frame_bytes)
        return decode_request(decoder.next_frame())

    encode_s = _best_seconds(lambda: encode_request(request, correlation_id=1), number=2000)
    decode_s = _best_seconds(decode, number=2000)
    _report("Produce 4 partitions", encode_us=encode_s * 1e6, feed_and_decode_us=decode_s * 1e6)
    assert decode_s < 0.001
