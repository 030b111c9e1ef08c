"""Bad input (TESTING.md "Bad input"): each gets a named error or a closed connection,
the broker keeps serving another client meanwhile, and logs no stack trace."""

from __future__ import annotations

import struct
import time

import msgpack
import pytest

from mq.core.errors import ErrorCode
from mq.core.types import CompressionType
from mq.protocol.codec import decode_response
from mq.protocol.frame import encode_frame
from mq.protocol.messages import (
    ApiVersionsRequest,
    ErrorResponse,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)

from ..conftest import BrokerProcess, free_port
from .raw import RawClient, batch, values_of


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory):
    """One broker for the module, with a short read timeout and a 2 MiB frame limit;
    every test also checks that its stderr (shared, cumulative) has no stack trace."""
    proc = BrokerProcess(tmp_path_factory.mktemp("strict") / "data", free_port(),
                         configs={"request.read.timeout.ms": "500", "socket.request.max.bytes": "2097152"})
    proc.start()
    yield proc
    proc.stop()


def assert_still_serving(broker) -> None:
    with RawClient.to(broker) as other:
        assert other.request(MetadataRequest([])).controller_id == 1


def assert_no_traceback(broker) -> None:
    text = broker.stderr_text()
    assert "Traceback" not in text and " ERROR " not in text, text


def test_first_frame_over_preauth_limit_is_closed(strict_broker):
    with RawClient.to(strict_broker) as c:
        c.send_bytes(struct.pack(">I", 600 * 1024) + b"\x00" * 1024)
        assert c.is_closed_by_peer()
    assert_still_serving(strict_broker)
    assert "FRAME_TOO_LARGE" in strict_broker.stderr_text()
    assert_no_traceback(strict_broker)


def test_frame_over_limit_after_first_request_is_closed(strict_broker):
    with RawClient.to(strict_broker) as c:
        c.create_topic("big", 1)
        # 1 MiB batches are fine once the connection has made a valid request ...
        assert c.produce("big", 0, batch([b"x" * (1000 * 1000)])).error_code == 0
        # ... but not a frame above socket.request.max.bytes (2 MiB here).
        c.send_bytes(struct.pack(">I", 3 * 1024 * 1024))
        assert c.is_closed_by_peer()
    assert_still_serving(strict_broker)
    assert_no_traceback(strict_broker)


def test_lying_lengths_and_counts(strict_broker):
    # header_length larger than the frame
    with RawClient.to(strict_broker) as c:
        c.send_bytes(struct.pack(">II", 8, 1000) + b"abcd")
        assert c.is_closed_by_peer()
    # msgpack header declaring a 2**32-1 element array in 5 bytes
    with RawClient.to(strict_broker) as c:
        header = b"\xdd\xff\xff\xff\xff"
        c.send_bytes(struct.pack(">II", 4 + len(header), len(header)) + header)
        assert c.is_closed_by_peer()
    # a well-formed frame whose Records field points outside the tail
    with RawClient.to(strict_broker) as c:
        body = {"acks": 1, "timeout_ms": 100, "topics": [{"name": "t", "partitions": [
            {"partition": 0, "records": [0, 1 << 30]}]}], "transactional_id": None}
        c.send_bytes(encode_frame([0, 0, 77, "liar", body], b"tiny"))
        cid, response = decode_response(c.recv_frame(), ProduceRequest)
        assert cid == 77 and isinstance(response, ErrorResponse)
        assert response.error_code == ErrorCode.INVALID_REQUEST
        assert c.request(MetadataRequest([])).controller_id == 1  # same connection keeps working
    assert_still_serving(strict_broker)
    assert_no_traceback(strict_broker)


def test_unknown_api_and_version_get_error_frames(strict_broker):
    with RawClient.to(strict_broker) as c:
        c.send_bytes(encode_frame([999, 0, 5, "x", {}]))
        cid, response = decode_response(c.recv_frame(), MetadataRequest)
        assert (cid, response.error_code) == (5, ErrorCode.UNSUPPORTED_API)
        c.send_bytes(encode_frame([18, 99, 6, "x", {}]))
        cid, response = decode_response(c.recv_frame(), ApiVersionsRequest)
        assert (cid, response.error_code) == (6, ErrorCode.UNSUPPORTED_VERSION)
        assert c.request(ApiVersionsRequest()).error_code == 0
    assert_no_traceback(strict_broker)


def test_crc_mismatch_is_corrupt_and_appends_nothing(strict_broker):
    with RawClient.to(strict_broker) as c:
        c.create_topic("crc", 1)
        good = batch([b"ok"])
        bad = bytearray(batch([b"payload"]))
        bad[-1] ^= 0xFF
        assert c.produce("crc", 0, bytes(bad)).error_code == ErrorCode.CORRUPT_MESSAGE
        # a good batch followed by a bad one: the whole request is refused
        assert c.produce("crc", 0, good + bytes(bad)).error_code == ErrorCode.CORRUPT_MESSAGE
        assert c.produce("crc", 0, b"\x00" * 10).error_code == ErrorCode.CORRUPT_MESSAGE
        assert c.fetch("crc", 0, 0).high_watermark == 0
        assert c.produce("crc", 0, good).base_offset == 0
    assert_no_traceback(strict_broker)


def test_decompression_bomb(strict_broker):
    """The broker keeps producer bytes opaque, so it only decompresses when a topic asks
    for recompression; then the expansion is capped and the batch refused."""
    bomb = batch([b"\x00" * (60 * 1024 * 1024)], compression=CompressionType.ZSTD)
    assert len(bomb) < 100_000
    with RawClient.to(strict_broker) as c:
        c.create_topic("bomb", 1, {"compression.type": "lz4"})
        assert c.produce("bomb", 0, bomb).error_code == ErrorCode.RECORD_TOO_LARGE
        assert c.fetch("bomb", 0, 0).high_watermark == 0
        # recompression works for honest batches
        assert c.produce("bomb", 0, batch([b"fine"] * 10, compression=CompressionType.GZIP)).error_code == 0
        assert [v for _, v in values_of(c.fetch("bomb", 0, 0).records)] == [b"fine"] * 10
    assert_no_traceback(strict_broker)


def test_negative_partition_and_extreme_timestamps(strict_broker):
    with RawClient.to(strict_broker) as c:
        c.create_topic("ts", 1)
        assert c.produce("ts", -1, batch([b"x"])).error_code == ErrorCode.UNKNOWN_TOPIC
        assert c.fetch("ts", -5, 0).error_code == ErrorCode.UNKNOWN_TOPIC
        for ts in (2**63 - 1, -(2**63), 0, -1):
            code = c.produce("ts", 0, batch([b"t"], timestamp_ms=ts)).error_code
            assert code in (ErrorCode.NONE, ErrorCode.INVALID_TIMESTAMP, ErrorCode.INVALID_RECORD), (ts, code)
        assert c.fetch("ts", 0, 0).error_code == 0
        assert c.fetch("ts", 0, -(2**63)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert c.fetch("ts", 0, 2**63 - 1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    with RawClient.to(strict_broker) as c:
        body = {"topics": [{"name": "ts", "partitions": [{"partition": 0, "timestamp": 2**63 - 1,
                                                          "current_leader_epoch": -1}]}],
                "isolation_level": 0, "replica_id": -1}
        c.send_bytes(encode_frame([2, 0, 9, "x", body]))
        cid, response = c.recv(ListOffsetsRequest)
        assert cid == 9 and response.topics[0].partitions[0].error_code == 0
    assert_still_serving(strict_broker)
    assert_no_traceback(strict_broker)


def test_absurd_fetch_limits(strict_broker):
    with RawClient.to(strict_broker) as c, RawClient.to(strict_broker) as producer:
        c.create_topic("huge", 1)
        request = FetchRequest([FetchTopic("huge", [FetchPartition(0, 0, 2**62)])],
                               max_wait_ms=2**62, min_bytes=1, max_bytes=-5)
        cid = c.send(request)
        producer.produce("huge", 0, batch([b"wake"]))
        got, response = c.recv(FetchRequest)
        assert got == cid and values_of(response.topics[0].partitions[0].records) == [(0, b"wake")]
        negative = c.fetch("huge", 0, 0, partition_max_bytes=-1)
        assert negative.error_code == ErrorCode.INVALID_FETCH_SIZE
    assert_no_traceback(strict_broker)


def test_slow_loris_is_closed_while_others_are_served(strict_broker):
    frame = encode_frame([3, 0, 1, "slow", {"topics": [], "allow_auto_topic_creation": False}])
    with RawClient.to(strict_broker) as slow:
        started = time.monotonic()
        closed = False
        for byte in frame:
            try:
                slow.send_bytes(bytes([byte]))
            except OSError:
                closed = True
                break
            assert_still_serving(strict_broker)  # another client is served meanwhile
            if slow.is_closed_by_peer(timeout_s=0.2):
                closed = True
                break
        assert closed and time.monotonic() - started < 5
    assert "REQUEST_TIMED_OUT" in strict_broker.stderr_text()
    assert_no_traceback(strict_broker)


def test_garbage_msgpack_header_closes(strict_broker):
    with RawClient.to(strict_broker) as c:
        junk = msgpack.packb({"not": "a request"})
        c.send_bytes(struct.pack(">II", 4 + len(junk), len(junk)) + junk)
        assert c.is_closed_by_peer()
    assert_still_serving(strict_broker)
    assert_no_traceback(strict_broker)
