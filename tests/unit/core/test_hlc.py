"""Hybrid logical clocks: the header codec, and the three properties of Kulkarni et al.
checked on random histories (hypothesis): stamps grow strictly on every node even when its
physical clock steps back; an event that happened before another has a smaller stamp; a
stamp is never behind its node's physical clock and never ahead of the fastest clock."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.core.errors import ErrorCode, MqError
from mq.core.hlc import (
    MAX_ENCODED_BYTES,
    MAX_LOGICAL,
    MAX_WALL_MS,
    ZERO,
    Hlc,
    HybridLogicalClock,
    decode_hlc,
    receive,
    tick,
)

stamps = st.builds(Hlc, st.integers(0, MAX_WALL_MS), st.integers(0, MAX_LOGICAL))


@given(stamps)
def test_encoding_round_trips(stamp: Hlc) -> None:
    raw = stamp.encode()
    assert decode_hlc(raw) == stamp
    assert len(raw) <= MAX_ENCODED_BYTES and raw == str(stamp).encode()


@given(st.binary(max_size=32))
def test_decoding_any_bytes_is_a_stamp_or_invalid_hlc(raw: bytes) -> None:
    try:
        stamp = decode_hlc(raw)
    except MqError as exc:
        assert exc.code is ErrorCode.INVALID_HLC
    else:
        assert stamp.encode() == raw  # only the canonical form decodes


@pytest.mark.parametrize("raw", [
    None, b"", b"1", b"1.", b".1", b"01.0", b"1.01", b"-1.0", b"+1.0", b"1.0 ", b" 1.0", b"1,0",
    b"1.0.0", b"1e3.0", b"\xff.0", b"281474976710656.0", b"1.65536", b"9" * 40 + b".0",
])
def test_malformed_headers_are_named_errors(raw: bytes | None) -> None:
    with pytest.raises(MqError) as info:
        decode_hlc(raw)
    assert info.value.code is ErrorCode.INVALID_HLC
    assert "mq.hlc" in info.value.message


def test_stamps_order_as_wall_then_logical() -> None:
    assert Hlc(5, 9) < Hlc(6, 0) < Hlc(6, 1)
    with pytest.raises(ValueError):
        Hlc(-1, 0)
    with pytest.raises(ValueError):
        Hlc(0, MAX_LOGICAL + 1)


def test_the_send_and_receive_rules() -> None:
    assert tick(ZERO, 100) == Hlc(100, 0)
    assert tick(Hlc(100, 0), 100) == Hlc(100, 1)
    assert tick(Hlc(100, 4), 90) == Hlc(100, 5)  # the physical clock stepped back
    assert receive(Hlc(100, 2), Hlc(100, 7), 50) == Hlc(100, 8)
    assert receive(Hlc(100, 2), Hlc(90, 7), 50) == Hlc(100, 3)
    assert receive(Hlc(90, 2), Hlc(100, 7), 50) == Hlc(100, 8)
    assert receive(Hlc(90, 2), Hlc(95, 7), 120) == Hlc(120, 0)


def test_logical_overflow_borrows_the_next_millisecond() -> None:
    clock = HybridLogicalClock()
    seen = [clock.now(1_000) for _ in range(MAX_LOGICAL + 3)]
    assert all(a < b for a, b in pairwise(seen))
    assert seen[MAX_LOGICAL] == Hlc(1_000, MAX_LOGICAL) and seen[MAX_LOGICAL + 1] == Hlc(1_001, 0)


def test_physical_time_out_of_range_is_a_caller_bug() -> None:
    with pytest.raises(ValueError):
        tick(ZERO, -1)
    with pytest.raises(ValueError):
        tick(ZERO, MAX_WALL_MS + 1)


@given(st.lists(st.tuples(st.integers(0, 10**6), st.one_of(st.none(), stamps.filter(
    lambda s: s.wall_ms < 10**6 + 10))), min_size=1, max_size=200))
def test_monotonic_per_node_even_when_its_clock_goes_back(events) -> None:
    clock = HybridLogicalClock()
    last = ZERO
    for now_ms, remote in events:
        stamp = clock.now(now_ms) if remote is None else clock.observe(remote, now_ms)
        assert stamp > last and stamp.wall_ms >= now_ms
        if remote is not None:
            assert stamp > remote
        last = stamp


# ------------------------------------------------------------ a history of several nodes

SKEW_MS = 300


@st.composite
def histories(draw):
    """Nodes with skewed clocks taking local, send and receive steps as true time moves."""
    nodes = draw(st.integers(2, 4))
    skews = draw(st.lists(st.integers(-SKEW_MS, SKEW_MS), min_size=nodes, max_size=nodes))
    steps = draw(st.lists(st.tuples(st.integers(0, nodes - 1), st.sampled_from(["local", "send", "recv"]),
                                    st.integers(0, 50), st.integers(0, 1_000)), min_size=1, max_size=120))
    return skews, steps


def _run(skews: list[int], steps) -> list[tuple[int, int, Hlc, tuple[int, ...]]]:
    """Play the history; every event as ``(node, true_time, stamp, vector clock)``."""
    n = len(skews)
    clocks = [HybridLogicalClock() for _ in range(n)]
    vectors = [[0] * n for _ in range(n)]
    in_flight: list[tuple[int, Hlc, tuple[int, ...]]] = []  # (to node, stamp, vector)
    events = []
    true_ms = 1_000_000
    for node, action, advance_ms, pick in steps:
        true_ms += advance_ms
        pt = true_ms + skews[node]
        vectors[node][node] += 1
        arriving = [m for m in in_flight if m[0] == node]
        if action == "recv" and arriving:
            message = arriving[pick % len(arriving)]
            in_flight.remove(message)
            stamp = clocks[node].observe(message[1], pt)
            vectors[node] = [max(a, b) for a, b in zip(vectors[node], message[2])]
        else:
            stamp = clocks[node].now(pt)
            if action == "send":
                in_flight.append(((node + 1 + pick) % n if n > 1 else node, stamp, tuple(vectors[node])))
        events.append((node, true_ms, stamp, tuple(vectors[node])))
    return events


@settings(max_examples=200)
@given(histories())
def test_happened_before_means_a_smaller_stamp(history) -> None:
    events = _run(*history)
    for _, _, stamp_e, vc_e in events:
        for _, _, stamp_f, vc_f in events:
            if vc_e != vc_f and all(a <= b for a, b in zip(vc_e, vc_f)):
                assert stamp_e < stamp_f


@settings(max_examples=200)
@given(histories())
def test_drift_from_physical_time_is_bounded_by_the_skew(history) -> None:
    skews, steps = history
    for node, true_ms, stamp, _ in _run(skews, steps):
        own = true_ms + skews[node]
        fastest = true_ms + max(skews)
        assert own <= stamp.wall_ms <= fastest
        assert stamp.wall_ms - own <= 2 * SKEW_MS
        assert stamp.logical <= len(steps)
