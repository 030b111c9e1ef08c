"""Record batches: round-trips with every codec, in-place edits that keep the CRC
valid, and every structural lie refused with CORRUPT_MESSAGE."""

from __future__ import annotations

import struct

import crc32c
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.core.errors import ErrorCode
from mq.core.types import CompressionType, TimestampType
from mq.protocol.compression import compress
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchBuilder,
    Record,
    build_batch,
    compute_crc,
    crc_ok,
    decode_record_tuples,
    decode_records,
    iter_batches,
    iter_records,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    valid_prefix,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
CODECS = list(CompressionType)
MAYBE_BYTES = st.none() | st.binary(max_size=30)
HEADERS = st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=6)), max_size=3).map(tuple)
RECORDS = st.lists(st.tuples(MAYBE_BYTES, MAYBE_BYTES, HEADERS), min_size=1, max_size=12)


def _timestamps(n: int) -> st.SearchStrategy[list[int]]:
    """Either ordinary times or times at the int64 limits (all in one half, so the
    deltas to the first timestamp fit in msgpack's integer range)."""
    return st.one_of(
        st.lists(st.integers(-1, 2**45), min_size=n, max_size=n),
        st.lists(st.integers(0, INT64_MAX), min_size=n, max_size=n),
        st.lists(st.integers(INT64_MIN, -1), min_size=n, max_size=n),
    )


@st.composite
def batches(draw):
    records = draw(RECORDS)
    timestamps = draw(_timestamps(len(records)))
    kwargs = dict(
        compression=draw(st.sampled_from(CODECS)),
        base_offset=draw(st.integers(0, 2**62)),
        producer_id=draw(st.integers(-1, INT64_MAX)),
        producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        base_sequence=draw(st.integers(-1, 2**31 - 1)),
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)),
        is_transactional=draw(st.booleans()),
    )
    return records, timestamps, kwargs


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(batches())
def test_batches_round_trip_with_every_codec(batch) -> None:
    records, timestamps, kwargs = batch
    builder = BatchBuilder(**kwargs)
    for (key, value, headers), ts in zip(records, timestamps):
        builder.append(ts, key, value, headers)
    data = builder.build()
    header = read_header(data)
    base = kwargs["base_offset"]
    assert header.size == len(data) and header.batch_length == len(data) - LOG_OVERHEAD
    assert header.magic == MAGIC and crc_ok(data, 0, header)
    assert header.compression == kwargs["compression"]
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert header.is_transactional == kwargs["is_transactional"] and not header.is_control
    assert (header.base_offset, header.record_count) == (base, len(records))
    assert (header.last_offset, header.next_offset) == (base + len(records) - 1, base + len(records))
    assert header.first_timestamp == timestamps[0]
    assert header.max_timestamp == max(timestamps)
    assert header.producer_id == kwargs["producer_id"]
    assert header.producer_epoch == kwargs["producer_epoch"]
    assert header.base_sequence == kwargs["base_sequence"]
    assert header.partition_leader_epoch == kwargs["partition_leader_epoch"]
    expected = [
        Record(base + i, ts, key, value, headers)
        for i, ((key, value, headers), ts) in enumerate(zip(records, timestamps))
    ]
    assert decode_records(data) == expected
    assert decode_records(memoryview(data)) == expected
    assert decode_record_tuples(bytearray(data)) == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected
    ]
    as_tuples = [(k, v, h, ts) for (k, v, h), ts in zip(records, timestamps)]
    assert build_batch(as_tuples, **kwargs) == data


def test_estimated_size_tracks_the_real_size() -> None:
    builder = BatchBuilder()
    for i in range(1000):
        estimate = builder.append(1_700_000_000_000 + i, b"key-%d" % i, b"v" * 100, (("h", b"1"),))
    assert estimate == builder.estimated_size and builder.record_count == 1000
    real = len(builder.build())
    assert 0.9 * real <= estimate <= 1.1 * real


def test_builder_refuses_misuse() -> None:
    with pytest.raises(ValueError):
        BatchBuilder().build()
    builder = BatchBuilder()
    with pytest.raises(TypeError):
        builder.append(0, "text", b"v")
    with pytest.raises(TypeError):
        builder.append(0, None, 5)
    with pytest.raises(TypeError):
        builder.append(0, None, b"v", (("h", "not bytes"),))
    builder.append(0, None, b"v")
    data = builder.build()
    assert builder.build() is data
    with pytest.raises(RuntimeError):
        builder.append(1, None, b"w")
    for bad in (1.5, INT64_MAX + 1, INT64_MIN - 1, None, "1"):
        for timestamps in ([bad], [0, bad], [5, 7, bad, 6]):
            with pytest.raises((TypeError, ValueError)):
                builder = BatchBuilder()
                for ts in timestamps:
                    builder.append(ts, None, b"v")
                builder.build()
    builder = BatchBuilder()  # each in range, but too far apart for a delta
    builder.append(INT64_MAX, None, b"v")
    builder.append(INT64_MIN, None, b"v")
    with pytest.raises(ValueError):
        builder.build()
    with pytest.raises(ProtocolError):
        BatchBuilder(compression=2)


def test_keys_and_values_may_be_bytearray_or_memoryview() -> None:
    data = build_batch([(bytearray(b"k"), memoryview(b"value"), (("h", bytearray(b"x")),), 5)])
    assert decode_records(data) == [Record(0, 5, b"k", b"value", (("h", b"x"),))]


def _one(codec=CompressionType.NONE, n=3, base_offset=0) -> bytes:
    return build_batch(
        [(b"k%d" % i, b"v%d" % i, (), 1000 + i) for i in range(n)],
        compression=codec, base_offset=base_offset,
    )


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_leader_edits_keep_the_crc_valid(codec) -> None:
    buf = bytearray(_one(codec))
    crc_before = read_header(buf).crc
    set_base_offset(buf, 0, 1_000_000)
    set_partition_leader_epoch(buf, 0, 42)
    header = read_header(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000, 42)
    assert header.crc == crc_before and crc_ok(buf, 0, header)
    assert [r.offset for r in decode_records(buf)] == [1_000_000, 1_000_001, 1_000_002]
    view = memoryview(buf)
    set_base_offset(view, 0, 7)
    assert read_header(buf).base_offset == 7


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_log_append_time_rewrites_timestamps_and_the_crc(codec) -> None:
    stream = bytearray(_one(n=1) + _one(codec))
    pos = len(_one(n=1))
    crc_before = read_header(stream, pos).crc
    set_log_append_time(stream, pos, 5_000)
    header = read_header(stream, pos)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 5_000 and header.first_timestamp == 1000
    assert header.crc != crc_before and crc_ok(stream, pos, header)
    assert header.compression == codec
    assert [r.timestamp for r in decode_records(stream[pos:])] == [5_000] * 3
    assert valid_prefix(stream) == len(stream)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_any_flipped_bit_under_the_crc_is_detected(codec) -> None:
    data = _one(codec)
    header = read_header(data)
    for pos in range(17, len(data)):  # the CRC itself and everything it covers
        for bit in (0x01, 0x80):
            bad = bytearray(data)
            bad[pos] ^= bit
            try:
                bad_header = read_header(bad)
            except ProtocolError:
                continue  # a flipped codec bit can already fail the header check
            assert not crc_ok(bad, 0, bad_header), (pos, bit)
            with pytest.raises(ProtocolError) as info:
                decode_records(bad)
            assert info.value.code in (ErrorCode.CORRUPT_MESSAGE,
                                       ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
            assert valid_prefix(bad) == 0
    assert compute_crc(data, 0, header.size) == header.crc
    assert header.crc == crc32c.crc32c(data[21:])


def test_valid_prefix_stops_at_a_torn_or_garbage_tail() -> None:
    a, b, c = _one(n=2), _one(n=5, base_offset=2), _one(CompressionType.LZ4, base_offset=7)
    log = a + b + c
    assert valid_prefix(log) == len(log)
    assert valid_prefix(b"") == 0
    for cut in range(len(log)):
        expected = max(end for end in (0, len(a), len(a) + len(b)) if end <= cut)
        assert valid_prefix(log[:cut]) == expected
    assert valid_prefix(log + b"\x00" * 100) == len(log)
    assert valid_prefix(log + b"\xff" * 100) == len(log)
    assert valid_prefix(a + b"garbage" * 20 + b) == len(a)
    corrupt = bytearray(log)
    corrupt[len(a) + 70] ^= 1
    assert valid_prefix(corrupt) == len(a)


def test_iter_batches_and_iter_records_walk_a_fetched_buffer() -> None:
    a, b = _one(n=2), _one(CompressionType.ZSTD, n=3, base_offset=2)
    assert [(pos, h.base_offset) for pos, h in iter_batches(a + b)] == [(0, 0), (len(a), 2)]
    assert [r.offset for r in iter_records(a + b)] == [0, 1, 2, 3, 4]
    assert list(iter_batches(b"")) == []
    for bad in ((a + b)[:-1], a + b"\x00" * 10, a + b"\x00" * 70):
        with pytest.raises(ProtocolError) as info:
            list(iter_records(bad))
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def _header_bytes(**fields) -> bytearray:
    values = dict(base_offset=0, batch_length=49, partition_leader_epoch=0, magic=2, crc=0,
                  attributes=0, last_offset_delta=0, first_timestamp=0, max_timestamp=0,
                  producer_id=-1, producer_epoch=-1, base_sequence=-1, record_count=0)
    values.update(fields)
    return bytearray(struct.pack(">qiibIhiqqqhii", *values.values()))


@pytest.mark.parametrize("fields,code", [
    (dict(magic=1), ErrorCode.CORRUPT_MESSAGE),
    (dict(magic=0), ErrorCode.CORRUPT_MESSAGE),
    (dict(batch_length=48), ErrorCode.CORRUPT_MESSAGE),
    (dict(batch_length=-1), ErrorCode.CORRUPT_MESSAGE),
    (dict(record_count=-1), ErrorCode.CORRUPT_MESSAGE),
    (dict(last_offset_delta=-1), ErrorCode.CORRUPT_MESSAGE),
    (dict(attributes=2), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (dict(attributes=7), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
])
def test_read_header_refuses_impossible_headers(fields, code) -> None:
    with pytest.raises(ProtocolError) as info:
        read_header(_header_bytes(**fields))
    assert info.value.code == code


def test_read_header_refuses_short_input() -> None:
    data = _header_bytes()
    assert read_header(data).batch_length == 49
    for n in range(HEADER_SIZE):
        with pytest.raises(ProtocolError):
            read_header(data[:n])
    with pytest.raises(ProtocolError):
        read_header(data, 1)
    with pytest.raises(ProtocolError):
        read_header(data, -1)


def _craft(records: object, *, record_count: int, last_offset_delta: int,
           codec: int = 0, raw_payload: bytes | None = None, first_timestamp: int = 0) -> bytes:
    """A batch with a valid CRC around an arbitrary payload: lies the CRC cannot catch."""
    payload = raw_payload if raw_payload is not None else msgpack.packb(records)
    payload = compress(codec, payload)
    body = struct.pack(">hiqqqhii", codec, last_offset_delta, first_timestamp, first_timestamp,
                       -1, -1, -1, record_count) + payload
    prefix = struct.pack(">qiib", 0, len(body) + 9, 0, 2)
    return prefix + struct.pack(">I", crc32c.crc32c(body)) + body


def test_crafting_helper_matches_the_builder() -> None:
    rec = [[0, 0, b"k", b"v", []]]
    assert decode_records(_craft(rec, record_count=1, last_offset_delta=0)) == [
        Record(0, 0, b"k", b"v")]


@pytest.mark.parametrize("records,count,last_delta", [
    ([[0, 0, None, b"v", []]], 2, 1),  # fewer records than record_count
    ([[0, 0, None, b"v", []], [1, 0, None, b"v", []]], 1, 1),  # more
    ([[1, 0, None, b"v", []]], 1, 0),  # delta past last_offset_delta
    ([[-1, 0, None, b"v", []]], 1, 0),  # negative delta
    ([[0, 0, None, b"v", []], [0, 0, None, b"v", []]], 2, 1),  # repeated delta
    ([[1, 0, None, b"v", []], [0, 0, None, b"v", []]], 2, 1),  # decreasing
    ([[0, 0, None, b"v"]], 1, 0),  # four fields
    ([[0, 0, None, b"v", [], 1]], 1, 0),  # six fields
    ([[0, 0, None, b"v", []], [1, 0, None, b"v", [], 1]], 2, 1),  # five, then six fields
    ([[0, 0, None, b"v", []], [1, 0, None, b"v", b""]], 2, 1),  # bin headers
    ([[0, 0, None, b"v", []], [1, 0, None, b"v"]], 2, 1),  # five, then four fields
    ([[0.0, 0, None, b"v", []]], 1, 0),  # float delta
    ([[True, 0, None, b"v", []]], 1, 0),
    ([[0, 0.5, None, b"v", []]], 1, 0),  # float timestamp
    ([[0, 0, "key", b"v", []]], 1, 0),  # str key
    ([[0, 0, None, 5, []]], 1, 0),  # int value
    ([[0, 0, None, b"v", None]], 1, 0),  # nil headers
    ([[0, 0, None, b"v", [["h"]]]], 1, 0),  # header without value
    ([[0, 0, None, b"v", [[b"h", b"v"]]]], 1, 0),  # bytes header name
    ([[0, 0, None, b"v", [["h", "v"]]]], 1, 0),  # str header value
    ([[0, 0, None, b"v", {"h": b"v"}]], 1, 0),  # map headers
    ([[0, 2**63, None, b"v", []]], 1, 0),  # timestamp past int64
    ("abcde", 5, 4),  # a string, not an array
    ({"a": 1}, 1, 0),
    ([b"abcde"], 1, 0),
    ([5], 1, 0),
    (None, 0, 0),
])
def test_payload_lies_are_corrupt_message(records, count, last_delta) -> None:
    batch = _craft(records, record_count=count, last_offset_delta=last_delta,
                   first_timestamp=2**62 if records == [[0, 2**63, None, b"v", []]] else 0)
    assert crc_ok(batch, 0, read_header(batch))
    for decode in (decode_records, decode_record_tuples):
        with pytest.raises(ProtocolError) as info:
            decode(batch)
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("payload", [b"", b"\xc1", b"\x91", b"\x91\x95\x00\x00\xc0\xc0\x90\x00",
                                     b"\xdd\xff\xff\xff\xff", b"\x90\x90"])
def test_undecodable_payloads_are_corrupt_message(payload) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_records(_craft(None, record_count=1, last_offset_delta=0, raw_payload=payload))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_compacted_batches_keep_their_offsets() -> None:
    """The cleaner removes records but keeps last_offset_delta: offsets have gaps."""
    records = [[0, 0, b"a", b"1", []], [3, 5, b"b", b"2", []], [9, 7, b"c", None, []]]
    batch = _craft(records, record_count=3, last_offset_delta=9)
    assert decode_records(batch) == [
        Record(0, 0, b"a", b"1"), Record(3, 5, b"b", b"2"), Record(9, 7, b"c", None)]
    assert read_header(batch).next_offset == 10
    empty = _craft([], record_count=0, last_offset_delta=4)
    assert decode_records(empty) == [] and decode_record_tuples(empty) == []


def test_crc_check_can_be_skipped_and_short_batches_are_refused() -> None:
    bad = bytearray(_one())
    bad[-2] ^= 0x01  # the last byte of the last value: b"v2" becomes b"v3"
    with pytest.raises(ProtocolError):
        decode_records(bad)
    assert decode_records(bad, verify_crc=False)[-1].value == b"v3"
    with pytest.raises(ProtocolError):
        decode_records(_one()[:-1], verify_crc=False)


def test_decompression_cap_applies_to_batches() -> None:
    data = build_batch([(None, bytes(100_000), (), 0)], compression=CompressionType.ZSTD)
    assert len(decode_records(data, max_decompressed_bytes=200_000)) == 1
    with pytest.raises(ProtocolError) as info:
        decode_records(data, max_decompressed_bytes=50_000)
    assert info.value.code == ErrorCode.RECORD_TOO_LARGE


def test_records_are_frozen_dataclasses() -> None:
    record = decode_records(_one())[0]
    assert record == Record(0, 1000, b"k0", b"v0", ())
    with pytest.raises(AttributeError):
        record.offset = 5  # type: ignore[misc]
    assert hash(record) == hash(Record(0, 1000, b"k0", b"v0", ()))


def test_record_columns_match_decoded_records() -> None:
    """decode_record_columns is the column form of decode_records, gaps and all."""
    from mq.protocol.record_batch import decode_record_columns

    gappy = _craft([[0, 0, b"a", b"1", []], [3, 5, b"b", b"2", []], [9, 7, None, None, [["h", b"x"]]]],
                   record_count=3, last_offset_delta=9, first_timestamp=100)
    for data in (_one(n=5, base_offset=40), gappy, _one(CompressionType.LZ4, n=4)):
        cols = decode_record_columns(data)
        assert list(zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers)) == [
            (r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(data)]
        assert len(cols) == len(decode_records(data))
    assert isinstance(decode_record_columns(_one(n=5)).offsets, range)
    since = decode_record_columns(gappy).since(3)
    assert (list(since.offsets), list(since.values)) == ([3, 9], [b"2", None])
    assert decode_record_columns(gappy).since(0) == decode_record_columns(gappy)
    assert len(decode_record_columns(gappy).since(10)) == 0
    same_time = build_batch([(None, b"v%d" % i, (), 7) for i in range(3)])
    assert decode_record_columns(same_time).timestamps == (7, 7, 7)


def test_extend_columns_builds_the_same_batch_as_append() -> None:
    from mq.protocol.batch_builder import columns_of, record_sizes

    records = [(b"k%d" % i if i % 3 else None, b"v" * i if i % 4 else None,
                (("h", b"x"),) if i % 5 == 0 else ()) for i in range(50)]
    one = BatchBuilder()
    for key, value, headers in records:
        size = one.append(1_000, key, value, headers)
    bulk = BatchBuilder()
    keys, values, headers = columns_of(records)
    assert bulk.extend_columns(1_000, keys[:20], values[:20], headers[:20]) < size
    assert bulk.extend_columns(1_000, keys[20:], values[20:], headers[20:]) == size
    assert bulk.record_count == 50 and bulk.build() == one.build()
    assert sum(record_sizes(keys, values, headers)) == size - BatchBuilder().estimated_size
    keys2, values2, headers2 = columns_of([(None, b"a"), (b"k", b"bc")])
    assert (keys2, values2, headers2) == ((None, b"k"), (b"a", b"bc"), None)
    assert record_sizes(keys2, values2) == [13, 15]
    plain = BatchBuilder()
    plain.extend_columns(5, keys2, values2)
    assert decode_records(plain.build()) == [Record(0, 5, None, b"a"), Record(1, 5, b"k", b"bc")]


def test_extend_columns_refuses_what_append_refuses() -> None:
    from mq.protocol.batch_builder import columns_of

    for bad in ([(None, b"v"), (None, b"v", ())], [(None,)], [5], [(None, b"v", (), 1)]):
        with pytest.raises(ValueError):
            columns_of(bad)
    for keys, values, headers in ((("k",), (b"v",), None), ((None,), (5,), None),
                                  ((None,), (b"v",), ((("h", "s"),),))):
        with pytest.raises(TypeError):
            BatchBuilder().extend_columns(0, keys, values, headers)
    with pytest.raises(TypeError):
        BatchBuilder().extend_columns(1.5, (None,), (b"v",))
    with pytest.raises(ValueError):
        BatchBuilder().extend_columns(0, (None, None), (b"v",))
    builder = BatchBuilder()
    builder.extend_columns(0, (bytearray(b"k"),), (memoryview(b"v"),))
    assert decode_records(builder.build()) == [Record(0, 0, b"k", b"v")]
    with pytest.raises(RuntimeError):
        builder.extend_columns(0, (None,), (b"v",))
