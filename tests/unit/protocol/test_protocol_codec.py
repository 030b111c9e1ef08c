"""Messages to frames and back: round-trips for every message, and every way a body
can be wrong refused with a named error that carries the correlation id."""

from __future__ import annotations

import copy
import dataclasses
import typing

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from message_strategies import (
    INT64,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    dataclass_strategy,
    field_paths,
    sample_instance,
)

from mq.core.errors import ErrorCode
from mq.protocol.codec import (
    SUPPORTED_VERSIONS,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    peek_correlation_id,
)
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import FrameDecoder, decode_frame, encode_frame
from mq.protocol.apis import ALL_REQUESTS, INTER_BROKER_REQUESTS, REQUESTS
from mq.protocol.inter_broker import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
    OffsetsForLeaderEpochRequest,
)
from mq.protocol.messages import (
    ApiKey,
    ApiVersionsRequest,
    ErrorResponse,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
    MetadataRequest,
    ProducePartitionData,
    ProduceRequest,
    ProduceTopicData,
    Request,
)
from mq.protocol.schema import INT64_MAX, Encoder, encoder_for, field_hints, optional_arg, source_of

RESPONDERS = {cls.RESPONSE: cls for cls in REQUEST_CLASSES}


def _through_decoder(data: bytes):
    decoder = FrameDecoder(len(data))
    decoder.feed(data)
    frame = decoder.next_frame()
    assert frame is not None and decoder.buffered_bytes == 0
    return frame


@pytest.mark.parametrize("cls", REQUEST_CLASSES, ids=lambda c: c.__name__)
def test_every_request_round_trips(cls: type[Request]) -> None:
    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(dataclass_strategy(cls), INT64, st.text(max_size=8))
    def check(request, correlation_id, client_id) -> None:
        data = encode_request(request, correlation_id=correlation_id, client_id=client_id)
        header, decoded = decode_request(_through_decoder(data), apis=ALL_REQUESTS)
        assert decoded == request
        assert type(decoded) is cls
        assert header == RequestHeader(cls.API_KEY, cls.MAX_VERSION, correlation_id, client_id)

    check()


@pytest.mark.parametrize("cls", RESPONSE_CLASSES, ids=lambda c: c.__name__)
def test_every_response_round_trips(cls: type) -> None:
    request_type = RESPONDERS.get(cls, MetadataRequest)  # ErrorResponse answers any request

    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(dataclass_strategy(cls), INT64)
    def check(response, correlation_id) -> None:
        data = encode_response(response, correlation_id=correlation_id)
        got_id, decoded = decode_response(_through_decoder(data), request_type)
        assert (got_id, decoded) == (correlation_id, response)
        assert type(decoded) is cls

    check()


def test_every_api_has_a_request_and_response_class() -> None:
    assert set(INTER_BROKER_REQUESTS) <= set(REQUESTS)
    assert sorted(ALL_REQUESTS) == sorted(ApiKey)
    assert {c.API_KEY for c in REQUEST_CLASSES} == set(ApiKey)
    assert set(RESPONDERS) | {ErrorResponse} == set(RESPONSE_CLASSES)
    assert SUPPORTED_VERSIONS == {k: (c.MIN_VERSION, c.MAX_VERSION) for k, c in REQUESTS.items()}


def test_inter_broker_apis_use_kafkas_keys_and_are_served() -> None:
    assert {int(k): c.__name__ for k, c in INTER_BROKER_REQUESTS.items()} == {
        23: "OffsetsForLeaderEpochRequest", 56: "AlterPartitionRequest",
        62: "BrokerRegistrationRequest", 63: "BrokerHeartbeatRequest", 1000: "RaftRequest", 27: "WriteTxnMarkersRequest",
    }
    assert set(INTER_BROKER_REQUESTS) <= set(SUPPORTED_VERSIONS)  # ApiVersions lists them


@pytest.mark.parametrize("cls", list(INTER_BROKER_REQUESTS.values()), ids=lambda c: c.__name__)
def test_a_broker_decodes_inter_broker_apis(cls) -> None:
    """The default registry is what a broker serves (mq.aio.connection calls it so)."""
    data = encode_request(sample_instance(cls), correlation_id=7, client_id="b")
    header, decoded = decode_request(decode_frame(data))
    assert (header.api_key, decoded) == (cls.API_KEY, sample_instance(cls))


def test_inter_broker_messages_keep_their_fields_on_the_wire() -> None:
    request = OffsetsForLeaderEpochRequest(
        [OffsetForLeaderTopic("t", [OffsetForLeaderPartition(3, 5, current_leader_epoch=7)])],
        replica_id=2)
    _, decoded = decode_request(encode_request(request, correlation_id=1), apis=ALL_REQUESTS)
    assert decoded == request
    body = decode_frame(encode_request(BrokerHeartbeatRequest(1, 9, want_shutdown=True),
                                       correlation_id=1)).header[4]
    assert body == {"broker_id": 1, "broker_epoch": 9, "current_metadata_offset": -1,
                    "want_fence": False, "want_shutdown": True}
    # an older peer that leaves out the optional fields still decodes
    minimal = {"broker_id": 1, "broker_epoch": 2, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "leader_epoch": 4, "new_isr": [1, 2], "partition_epoch": 6}]}]}
    frame = decode_frame(encode_frame([int(ApiKey.ALTER_PARTITION), 0, 3, "", minimal]))
    decoded = decode_request(frame, apis=ALL_REQUESTS)[1]
    assert isinstance(decoded, AlterPartitionRequest)
    assert decoded.topics[0].partitions[0].new_isr_with_epochs == []


def test_fetch_carries_the_replica_epoch_and_the_diverging_epoch() -> None:
    request = FetchRequest([], replica_id=2, replica_epoch=11)
    assert decode_request(encode_request(request, correlation_id=1))[1] == request
    response = FetchResponse(topics=[FetchTopicResponse("t", [
        FetchPartitionResponse(0, 0, high_watermark=8, diverging_epoch=3,
                               diverging_end_offset=5)])])
    _, decoded = decode_response(encode_response(response, correlation_id=2), FetchRequest)
    part = decoded.topics[0].partitions[0]
    assert (part.diverging_epoch, part.diverging_end_offset, bytes(part.records)) == (3, 5, b"")
    assert FetchPartitionResponse(0, 0).diverging_epoch == -1  # absent: no divergence


def test_records_travel_in_the_tail_and_decode_as_views_without_copy() -> None:
    batches = [b"a" * 100, b"", b"b" * 7]
    request = ProduceRequest(acks=-1, timeout_ms=5, topics=[ProduceTopicData("t", [
        ProducePartitionData(i, memoryview(batch)) for i, batch in enumerate(batches)
    ])])
    data = encode_request(request, correlation_id=9)
    assert data.endswith(b"a" * 100 + b"b" * 7)  # raw tail, concatenated in field order
    frame = decode_frame(data)
    header, decoded = decode_request(frame)
    parts = decoded.topics[0].partitions
    assert [bytes(p.records) for p in parts] == batches
    assert all(isinstance(p.records, memoryview) for p in parts)
    assert parts[0].records.obj is frame.tail.obj  # a slice of the frame, not a copy


def test_fetch_response_records_round_trip() -> None:
    response = FetchResponse(topics=[FetchTopicResponse("t", [
        FetchPartitionResponse(0, 0, high_watermark=3, records=b"xyz"),
        FetchPartitionResponse(1, ErrorCode.NOT_LEADER, error_message="moved"),
    ])])
    cid, decoded = decode_response(encode_response(response, correlation_id=4), FetchRequest)
    assert cid == 4 and decoded == response


def _request_frame(header: object, tail: bytes = b"") -> bytes:
    return encode_frame(header, tail)


def _raises(
    data: bytes, code: ErrorCode, correlation_id: int | None = 7, *, apis=ALL_REQUESTS
) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        decode_request(decode_frame(data), apis=apis)
    assert info.value.code == code, info.value
    assert info.value.correlation_id == correlation_id
    return info.value


def test_unknown_api_key_is_named_and_keeps_the_correlation_id() -> None:
    _raises(_request_frame([999, 0, 7, "", {}]), ErrorCode.UNSUPPORTED_API)
    _raises(_request_frame(["0", 0, 7, "", {}]), ErrorCode.UNSUPPORTED_API)
    _raises(_request_frame([True, 0, 7, "", {}]), ErrorCode.UNSUPPORTED_API)


def test_version_out_of_range_is_named_and_keeps_the_correlation_id() -> None:
    key = int(ApiKey.API_VERSIONS)
    _raises(_request_frame([key, 1, 7, "", {}]), ErrorCode.UNSUPPORTED_VERSION)
    _raises(_request_frame([key, -1, 7, "", {}]), ErrorCode.UNSUPPORTED_VERSION)
    _raises(_request_frame([key, None, 7, "", {}]), ErrorCode.UNSUPPORTED_VERSION)
    with pytest.raises(ProtocolError):  # the encoder does not check: the peer must
        decode_request(decode_frame(
            encode_request(ApiVersionsRequest(), correlation_id=7, api_version=3)))


@pytest.mark.parametrize("header", [
    None, 5, "x", {}, [], [0, 0, 7, ""], [0, 0, 7, "", {}, 1], [0, 0, "7", "", {}],
    [0, 0, 7, b"client", {}], [0, 0, 7, None, {}],
])
def test_malformed_request_headers_are_invalid(header: object) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_request(decode_frame(_request_frame(header)))
    assert info.value.code == ErrorCode.INVALID_REQUEST


def _wrong_values(hint: typing.Any) -> list[object]:
    """Values of other wire types, which must not decode as ``hint``."""
    inner = optional_arg(hint)
    target = inner if inner is not None else hint
    origin = typing.get_origin(target)
    item = typing.get_args(target)[0] if origin is list else None
    candidates: list[object] = [
        True, 1, 2**63, 2**64 - 1, "s", b"b", 1.5, {"k": 1}, [[1]], [None], [0, -1],
    ]
    if inner is None:
        candidates.append(None)
    accepted = {
        int: lambda v: type(v) is int and -(2**63) <= v < 2**63,
        bool: lambda v: type(v) is bool,
        str: lambda v: type(v) is str,
        bytes: lambda v: type(v) is bytes,
    }
    if target in accepted:
        return [v for v in candidates if not accepted[target](v)]
    if item is int:
        return [v for v in candidates if v != [0, -1]]
    return candidates  # Records, lists of dataclasses or str, maps, nested dataclasses


def _set_path(body: dict, path: tuple, value: object) -> dict:
    body = copy.deepcopy(body)
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


def _drop_path(body: dict, path: tuple) -> dict:
    body = copy.deepcopy(body)
    node = body
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return body


def _sample_body(cls: type) -> dict:
    return encoder_for(cls)(sample_instance(cls), Encoder())


ALL_FIELDS = [
    (cls, path, hint)
    for cls in REQUEST_CLASSES + RESPONSE_CLASSES
    for path, hint in field_paths(cls)
]


def _decode_body(cls: type, body: object, tail: bytes) -> object:
    if issubclass(cls, Request):
        frame = decode_frame(encode_frame([int(cls.API_KEY), 0, 7, "c", body], tail))
        return decode_request(frame, apis=ALL_REQUESTS)
    request_type = RESPONDERS.get(cls, MetadataRequest)
    marker = [1] if cls is ErrorResponse else []
    return decode_response(decode_frame(encode_frame([7, body, *marker], tail)), request_type)


@pytest.mark.parametrize(
    "cls,path,hint", ALL_FIELDS,
    ids=[f"{c.__name__}.{'.'.join(map(str, p))}" for c, p, _ in ALL_FIELDS],
)
def test_every_field_of_every_message_checks_its_type(cls, path, hint) -> None:
    body = _sample_body(cls)
    tail = b"records" * 4
    _decode_body(cls, body, tail)  # the sample itself is valid
    for value in _wrong_values(hint):
        with pytest.raises(ProtocolError) as info:
            _decode_body(cls, _set_path(body, path, value), tail)
        assert info.value.code == ErrorCode.INVALID_REQUEST, (path, value)
        assert info.value.correlation_id == 7
    unknown = _set_path(body, path[:-1] + ("no_such_field",), 1)
    with pytest.raises(ProtocolError, match="unknown fields"):
        _decode_body(cls, unknown, tail)


@pytest.mark.parametrize(
    "cls,path,hint", ALL_FIELDS,
    ids=[f"{c.__name__}.{'.'.join(map(str, p))}" for c, p, _ in ALL_FIELDS],
)
def test_missing_fields_are_refused_unless_they_have_a_default(cls, path, hint) -> None:
    body = _drop_path(_sample_body(cls), path)
    declaring = _declaring_class(cls, path)
    f = {f.name: f for f in dataclasses.fields(declaring)}[path[-1]]
    required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    if required:
        with pytest.raises(ProtocolError, match="is missing"):
            _decode_body(cls, body, b"records")
    else:
        _decode_body(cls, body, b"records")


def _declaring_class(cls: type, path: tuple) -> type:
    for key in path[:-1]:
        if isinstance(key, int):
            continue
        hint = dict((f.name, h) for f, h in field_hints(cls))[key]
        hint = optional_arg(hint) or hint
        cls = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
    return cls


@pytest.mark.parametrize("cls", REQUEST_CLASSES, ids=lambda c: c.__name__)
def test_missing_required_and_unknown_fields_are_refused(cls) -> None:
    body = _sample_body(cls)
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            short = {k: v for k, v in body.items() if k != f.name}
            _raises(_request_frame([int(cls.API_KEY), 0, 7, "", short]), ErrorCode.INVALID_REQUEST)
    _raises(_request_frame([int(cls.API_KEY), 0, 7, "", dict(body, extra=1)]),
            ErrorCode.INVALID_REQUEST)
    _raises(_request_frame([int(cls.API_KEY), 0, 7, "", [body]]), ErrorCode.INVALID_REQUEST)


def test_optional_fields_may_be_omitted() -> None:
    frame = decode_frame(_request_frame([int(ApiKey.METADATA), 0, 1, "", {}]))
    assert decode_request(frame)[1] == MetadataRequest()


def _produce_body(records: object) -> dict:
    return {"acks": 1, "timeout_ms": 1, "topics": [
        {"name": "t", "partitions": [{"partition": 0, "records": records}]}]}


@pytest.mark.parametrize("records", [
    [0, 5], [1, 4], [4, 1], [0, -1], [-1, 1], [5, 0], [0], [0, 1, 2], "x", [0, True], [True, 1],
    [INT64_MAX, 1],
])
def test_records_ranges_must_lie_inside_the_tail(records) -> None:
    frame = decode_frame(_request_frame([0, 0, 7, "", _produce_body(records)], b"abcd"))
    with pytest.raises(ProtocolError) as info:
        decode_request(frame)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert info.value.correlation_id == 7


@pytest.mark.parametrize("records,expected", [([0, 4], b"abcd"), ([4, 0], b""), ([1, 2], b"bc")])
def test_records_ranges_at_the_edges_of_the_tail(records, expected) -> None:
    frame = decode_frame(_request_frame([0, 0, 7, "", _produce_body(records)], b"abcd"))
    assert bytes(decode_request(frame)[1].topics[0].partitions[0].records) == expected


def test_nested_fields_are_checked_too() -> None:
    body = {"topics": [{"name": "t", "partitions": [{"partition": 0, "fetch_offset": True}]}]}
    _raises(_request_frame([int(ApiKey.FETCH), 0, 7, "", body]), ErrorCode.INVALID_REQUEST)
    body = {"topics": [{"name": "t", "partitions": [{"partition": 0}]}]}
    _raises(_request_frame([int(ApiKey.FETCH), 0, 7, "", body]), ErrorCode.INVALID_REQUEST)
    configs = {"topics": [{"name": "t", "configs": {"a": 1}}]}
    _raises(_request_frame([int(ApiKey.CREATE_TOPICS), 0, 7, "", configs]),
            ErrorCode.INVALID_REQUEST)
    configs = {"topics": [{"name": "t", "configs": {"a": "1"}}]}
    decode_request(decode_frame(_request_frame([int(ApiKey.CREATE_TOPICS), 0, 7, "", configs])))


def test_error_response_is_marked_and_cannot_be_confused() -> None:
    data = encode_response(ErrorResponse(ErrorCode.UNSUPPORTED_API, "no"), correlation_id=3)
    assert decode_frame(data).header == [3, {"error_code": 1001, "error_message": "no"}, 1]
    for request_type in REQUEST_CLASSES:
        assert decode_response(decode_frame(data), request_type) == (
            3, ErrorResponse(ErrorCode.UNSUPPORTED_API, "no"))
    with pytest.raises(ProtocolError):
        decode_response(decode_frame(encode_frame([3, {}, 2])), MetadataRequest)
    with pytest.raises(ProtocolError):
        decode_response(decode_frame(encode_frame([3, {}, True])), MetadataRequest)
    with pytest.raises(ProtocolError) as info:
        decode_response(decode_frame(encode_frame([3, {"brokers": 1}])), MetadataRequest)
    assert info.value.correlation_id == 3


@pytest.mark.parametrize("header,expected", [
    ([0, 0, 12, "", {}], 12), ([12, {}], 12), ([12, {}, 1], 12), ([0, 0, "x", "", {}], None),
    ([True, {}], None), ({}, None), (None, None), ([1, 2, 3, 4], None),
])
def test_peek_correlation_id(header, expected) -> None:
    assert peek_correlation_id(decode_frame(encode_frame(header))) == expected


def test_decoders_accept_a_whole_frame_as_bytes() -> None:
    data = encode_request(MetadataRequest(topics=["a"]), correlation_id=1)
    assert decode_request(data)[1] == MetadataRequest(topics=["a"])


def test_generated_code_is_readable() -> None:
    source = source_of("decode", ProducePartitionData)
    assert "def decode_ProducePartitionData(body, tail):" in source
    assert "'partition'" in source and "is missing" in source


def test_encoding_is_plain_msgpack_that_another_implementation_could_read() -> None:
    data = encode_request(MetadataRequest(topics=["a"]), correlation_id=5, client_id="c")
    length, header_length = int.from_bytes(data[:4], "big"), int.from_bytes(data[4:8], "big")
    assert length == len(data) - 4 and header_length == len(data) - 8
    assert msgpack.unpackb(data[8:]) == [
        3, 0, 5, "c", {"topics": ["a"], "allow_auto_topic_creation": False}]
