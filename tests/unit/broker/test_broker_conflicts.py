"""The broker's produce-time conflict checks (``mq.broker.conflicts``) on real batches:
keys outside their home region, origin headers of mirrored records, missing or malformed
HLC stamps; keyless records pass; a malformed batch is what the log would have said."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mq.broker.conflicts import check_conflicts
from mq.core.conflict import ConflictPolicy, ConflictRules, home_region
from mq.core.errors import ErrorCode
from mq.protocol.record_batch import build_batch

REGIONS = ("east", "west")
HOME = ConflictRules(ConflictPolicy.HOME_REGION, REGIONS, ((b"eu-", "west"),))
LWW = ConflictRules(ConflictPolicy.LAST_WRITER_WINS, REGIONS)


def keys_homed_in(region: str, n: int = 3) -> list[bytes]:
    keys = [f"k{i}".encode() for i in range(100)]
    return [k for k in keys if home_region(k, REGIONS) == region][:n]


def batch(*records) -> bytes:
    """``records``: ``(key, headers)`` pairs."""
    return build_batch([(key, b"v", headers, 1_000) for key, headers in records])


def test_home_keys_pass_and_a_foreign_key_is_refused_naming_its_home() -> None:
    east, west = keys_homed_in("east"), keys_homed_in("west")
    assert check_conflicts(batch(*[(k, ()) for k in east], (None, ())), HOME, topic="orders",
                           region="east") is None
    code, message = check_conflicts(batch((east[0], ()), (west[0], ())), HOME, topic="orders", region="east")
    assert code is ErrorCode.NOT_HOME_REGION
    assert message.startswith(f"key {west[0].decode()!r} of topic orders lives in region west")
    assert "produce there, or let the client route keys to their home" in message
    assert check_conflicts(batch((b"eu-42", ())), HOME, topic="orders", region="west") is None
    assert check_conflicts(batch((b"eu-42", ())), HOME, topic="orders", region="east")[0] \
        is ErrorCode.NOT_HOME_REGION


def test_a_mirrored_record_is_judged_by_its_origin_region() -> None:
    west = keys_homed_in("west")[0]
    copied = batch((west, (("mq.origin.region", b"west"),)))
    assert check_conflicts(copied, HOME, topic="west.orders", region="east") is None
    forged = batch((west, (("mq.origin.region", b"east"),)))
    assert check_conflicts(forged, HOME, topic="orders", region="west")[0] is ErrorCode.NOT_HOME_REGION


def test_every_batch_of_a_request_is_checked() -> None:
    east, west = keys_homed_in("east"), keys_homed_in("west")
    two = batch((east[0], ())) + batch((west[0], ()))
    assert check_conflicts(two, HOME, topic="orders", region="east")[0] is ErrorCode.NOT_HOME_REGION


def test_a_broker_without_a_region_refuses_home_region_topics() -> None:
    code, message = check_conflicts(batch((b"k", ())), HOME, topic="orders", region="")
    assert code is ErrorCode.NOT_HOME_REGION and "region.name is empty" in message


def test_last_writer_wins_needs_one_valid_stamp_per_keyed_record() -> None:
    ok = batch((b"a", (("mq.hlc", b"1732528800000.0"),)), (None, ()))
    assert check_conflicts(ok, LWW, topic="orders", region="east") is None
    code, message = check_conflicts(batch((b"a", ())), LWW, topic="orders", region="east")
    assert code is ErrorCode.INVALID_HLC and "key 'a' of topic orders has no mq.hlc header" in message
    twice = batch((b"a", (("mq.hlc", b"1.0"), ("mq.hlc", b"2.0"))))
    assert "has 2 mq.hlc header" in check_conflicts(twice, LWW, topic="orders", region="east")[1]
    code, message = check_conflicts(batch((b"a", (("mq.hlc", b"soon"),))), LWW, topic="orders", region="")
    assert code is ErrorCode.INVALID_HLC and "mq.hlc='soon' is not <wall_ms>.<logical>" in message


def test_policy_none_never_decodes_and_a_corrupt_batch_is_corrupt() -> None:
    assert check_conflicts(b"garbage", ConflictRules(), topic="t", region="east") is None
    damaged = bytearray(batch((b"a", (("mq.hlc", b"1.0"),))))
    damaged[-1] ^= 0xFF
    assert check_conflicts(bytes(damaged), LWW, topic="t", region="east")[0] is ErrorCode.CORRUPT_MESSAGE


@given(st.binary(max_size=300), st.sampled_from([HOME, LWW]))
def test_any_bytes_get_an_answer_never_an_exception(data: bytes, rules: ConflictRules) -> None:
    refusal = check_conflicts(data, rules, topic="t", region="east")
    assert refusal is None or isinstance(refusal[0], ErrorCode)


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=8)),
                          st.lists(st.tuples(st.sampled_from(["mq.hlc", "mq.origin.region", "x"]),
                                             st.binary(max_size=24)), max_size=3)), min_size=1, max_size=8),
       st.sampled_from([HOME, LWW]))
def test_well_formed_batches_with_any_headers_get_a_named_answer(records, rules: ConflictRules) -> None:
    refusal = check_conflicts(batch(*[(k, tuple(h)) for k, h in records]), rules, topic="t", region="east")
    assert refusal is None or refusal[0] in (ErrorCode.NOT_HOME_REGION, ErrorCode.INVALID_HLC)
