"""Raft messages on the wire: every message type round-trips; garbage, truncations and
mistyped fields raise ProtocolError and nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.core.errors import ErrorCode
from mq.core.types import OffsetAndEpoch
from mq.metadata.raft_wire import decode_raft_message, encode_raft_message
from mq.protocol.errors import ProtocolError
from mq.protocol.frame import pack_header
from mq.raft.log import LogEntry, Snapshot
from mq.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)

INT = st.integers(-(2**63), 2**63 - 1)
OPT_INT = st.none() | INT
ERROR = st.sampled_from(list(ErrorCode))
OAE = st.builds(OffsetAndEpoch, INT, INT)
ENTRY = st.builds(LogEntry, INT, INT, st.binary(max_size=20), st.booleans())
SNAPSHOT = st.builds(Snapshot, OAE, st.binary(max_size=20))
MESSAGES = st.one_of(
    st.builds(VoteRequest, INT, INT, INT, INT, INT, st.booleans()),
    st.builds(VoteResponse, INT, INT, INT, st.booleans(), st.booleans(), OPT_INT),
    st.builds(BeginQuorumEpochRequest, INT, INT, INT),
    st.builds(BeginQuorumEpochResponse, INT, INT, INT, OPT_INT),
    st.builds(FetchRequest, INT, INT, INT, INT, INT, INT),
    st.builds(FetchResponse, INT, INT, INT, OPT_INT, ERROR, INT, INT, INT,
              st.lists(ENTRY, max_size=4).map(tuple), st.none() | OAE, st.none() | OAE),
    st.builds(FetchSnapshotRequest, INT, INT, INT, OAE),
    st.builds(FetchSnapshotResponse, INT, INT, INT, OPT_INT, ERROR, st.none() | SNAPSHOT),
)


@settings(max_examples=300, deadline=None)
@given(MESSAGES)
def test_every_message_round_trips(msg: object) -> None:
    decoded = decode_raft_message(encode_raft_message(msg))  # type: ignore[arg-type]
    assert decoded == msg and type(decoded) is type(msg)
    if isinstance(decoded, FetchResponse | FetchSnapshotResponse):
        assert isinstance(decoded.error, ErrorCode)


def _only_protocol_errors(data: bytes) -> None:
    try:
        decode_raft_message(data)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_garbage_raises_protocol_error_only(data: bytes) -> None:
    _only_protocol_errors(data)


@settings(max_examples=300, deadline=None)
@given(MESSAGES, st.data())
def test_truncated_and_flipped_encodings_raise_protocol_error_only(msg: object, data: st.DataObject) -> None:
    raw = bytearray(encode_raft_message(msg))  # type: ignore[arg-type]
    cut = data.draw(st.integers(0, len(raw) - 1))
    _only_protocol_errors(bytes(raw[:cut]))
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    _only_protocol_errors(bytes(raw))


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.binary(max_size=4) | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=6), max_leaves=20))
def test_well_formed_msgpack_of_the_wrong_shape_is_refused(value: object) -> None:
    _only_protocol_errors(pack_header(value))


@pytest.mark.parametrize("value", [
    [], [0], [99, 1, 2, 3], [True, 1, 2, 3],
    [3, 1, 2],  # BeginQuorumEpochRequest missing a field
    [3, 1, 2, 3, 4],  # one too many
    [3, 1, 2, "3"], [3, 1, 2, 2**64 - 1], [3, 1, 2, True],
    [1, 1, 2, 3, 4, 5, 1],  # pre_vote is not a bool
    [6, 1, 2, 3, None, 12345, 0, 0, 0, [], None, None],  # unknown error code
    [6, 1, 2, 3, None, 0, 0, 0, 0, [[0, 0, "x", False]], None, None],  # entry data not bytes
    [6, 1, 2, 3, None, 0, 0, 0, 0, [[0, 0, b"x"]], None, None],  # entry of 3 fields
    [6, 1, 2, 3, None, 0, 0, 0, 0, {}, None, None],
    [7, 1, 2, 3, [1]], [8, 1, 2, 3, None, 0, [[1, 2], "x"]],
])
def test_mistyped_fields_are_refused(value: list) -> None:
    with pytest.raises(ProtocolError):
        decode_raft_message(pack_header(value))


def test_size_bound() -> None:
    raw = encode_raft_message(FetchRequest(1, 2, 3, 4, 5, 6))
    with pytest.raises(ProtocolError):
        decode_raft_message(raw, max_bytes=len(raw) - 1)
    assert decode_raft_message(raw, max_bytes=len(raw)) == FetchRequest(1, 2, 3, 4, 5, 6)


def test_encoding_a_non_message_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        encode_raft_message(OffsetAndEpoch(1, 2))  # type: ignore[arg-type]
