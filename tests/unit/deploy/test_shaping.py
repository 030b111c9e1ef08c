"""The link shaping core: delivery times from latency, jitter, bandwidth, loss and stalls."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.core.rng import Rng
from mq.deploy.shaping import LinkSettings, Shaper, Stream


def shaper(**settings) -> Shaper:
    return Shaper(LinkSettings(**settings), Rng(7))


def test_transparent_link_delivers_at_once():
    s = shaper()
    assert s.is_transparent()
    assert [s.schedule(Stream(), 1000, t) for t in (0.0, 5.0, 5.0)] == [0.0, 5.0, 5.0]


def test_latency_is_added_to_every_chunk_and_chunks_pipeline():
    s = shaper(latency_ms=40)
    stream = Stream()
    # Three chunks read 1 ms apart are all in flight at once: 40 ms each, not 120 ms in all.
    assert [s.schedule(stream, 100, t) for t in (0.0, 1.0, 2.0)] == [40.0, 41.0, 42.0]


def test_bandwidth_serializes_chunks_on_a_shared_wire():
    s = shaper(bandwidth_mbit=8)  # 8 Mbit/s = 1 byte per microsecond = 1000 bytes per ms
    a, b = Stream(), Stream()
    assert s.schedule(a, 10_000, 0.0) == pytest.approx(10.0)
    assert s.schedule(b, 10_000, 0.0) == pytest.approx(20.0)  # another connection waits for the wire
    assert s.schedule(a, 1_000, 50.0) == pytest.approx(51.0)  # an idle wire starts at once


def test_bandwidth_then_latency():
    s = shaper(bandwidth_mbit=80, latency_ms=40)  # 10,000 bytes per ms
    assert s.schedule(Stream(), 100_000, 0.0) == pytest.approx(50.0)


def test_jitter_never_reorders_a_connection_but_varies_delay():
    s = shaper(latency_ms=40, jitter_ms=30)
    stream = Stream()
    times = [s.schedule(stream, 10, float(t)) for t in range(2000)]
    assert times == sorted(times)
    assert all(t >= i + 10 - 1e-9 for i, t in enumerate(times))  # 40 - 30 at the least
    other = Shaper(LinkSettings(latency_ms=40, jitter_ms=30), Rng(7))
    delays = [other.schedule(Stream(), 10, 0.0) for _ in range(2000)]  # fresh streams: raw draws
    assert min(delays) < 15 and max(delays) > 65 and 37 < sum(delays) / len(delays) < 43


def test_jitter_larger_than_latency_is_clamped_at_zero():
    s = shaper(latency_ms=5, jitter_ms=50)
    assert min(s.schedule(Stream(), 1, 100.0) for _ in range(500)) == 100.0


def test_loss_shows_as_stalls_of_one_retransmission_timeout():
    s = shaper(latency_ms=10, loss=0.1)
    delays = [s.schedule(Stream(), 10, 0.0) for _ in range(5000)]
    assert set(delays) == {10.0, 210.0}
    assert 400 < s.loss_stalls < 600 and delays.count(210.0) == s.loss_stalls
    long = shaper(loss=0.5, loss_stall_ms=1000)
    assert max(long.schedule(Stream(), 1, 0.0) for _ in range(50)) == 1000.0


def test_a_stall_holds_every_connection_until_it_ends():
    s = shaper(latency_ms=10)
    s.stall(100.0, 500.0)
    assert s.stall_left_ms(300.0) == 300.0
    assert s.schedule(Stream(), 1, 200.0) == 600.0
    assert s.schedule(Stream(), 1, 595.0) == 605.0  # the latency outlasts the stall
    assert s.schedule(Stream(), 1, 700.0) == 710.0
    s.stall(700.0, 10.0)
    s.stall(700.0, 5.0)  # a shorter stall never shortens one in force
    assert s.stalled_until_ms == 710.0 and s.stall_left_ms(800.0) == 0.0


def test_update_applies_to_later_chunks_only():
    s = shaper(latency_ms=100)
    stream = Stream()
    first = s.schedule(stream, 1, 0.0)
    s.update(LinkSettings(latency_ms=0))
    assert first == 100.0 and s.schedule(stream, 1, 1.0) == 100.0  # not before the earlier chunk
    assert s.schedule(Stream(), 1, 1.0) == 1.0


def test_counters():
    s = shaper()
    for n in (10, 20, 30):
        s.schedule(Stream(), n, 0.0)
    assert (s.chunks, s.bytes) == (3, 60)


@pytest.mark.parametrize("settings, word", [
    ({"latency_ms": -1}, "latency_ms must be a number >= 0"),
    ({"jitter_ms": math.nan}, "jitter_ms must be a number >= 0"),
    ({"bandwidth_mbit": 0}, "bandwidth_mbit must be a number > 0"),
    ({"loss": 1.0}, "loss must be a fraction from 0 to below 1"),
    ({"loss": -0.1}, "loss must be a fraction"),
    ({"loss_stall_ms": -5}, "loss_stall_ms must be a number >= 0"),
])
def test_bad_settings_are_named(settings, word):
    assert any(word in p for p in LinkSettings(**settings).problems())
    with pytest.raises(ValueError, match=word.split()[0]):
        Shaper(LinkSettings(**settings), Rng(1))
    with pytest.raises(ValueError):
        shaper().update(LinkSettings(**settings))


def test_with_changes_and_json():
    base = LinkSettings(latency_ms=40)
    changed = base.with_changes(jitter_ms=5, bandwidth_mbit=50)
    assert changed == LinkSettings(latency_ms=40, jitter_ms=5, bandwidth_mbit=50)
    assert changed.with_changes(bandwidth_mbit=0).bandwidth_mbit is None  # 0: unlimited
    assert LinkSettings.from_json(changed.to_json()) == changed
    assert LinkSettings.from_json({}) == LinkSettings()
    with pytest.raises(ValueError, match="unknown link setting 'latency'"):
        base.with_changes(latency=3)
    with pytest.raises(ValueError):
        shaper().stall(0.0, -1.0)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 100_000), st.floats(0, 50)), max_size=60),
       st.floats(0, 100), st.floats(0, 100), st.one_of(st.none(), st.floats(0.1, 1000)), st.floats(0, 0.5))
def test_properties(chunks, latency, jitter, bandwidth, loss):
    """Whatever the settings: no chunk arrives before it was read plus the latency floor,
    and no connection's chunks are reordered."""
    s = Shaper(LinkSettings(latency_ms=latency, jitter_ms=jitter, bandwidth_mbit=bandwidth, loss=loss), Rng(3))
    streams = [Stream() for _ in range(4)]
    last = [-math.inf] * 4
    now = 0.0
    for index, nbytes, gap in chunks:
        now += gap
        at = s.schedule(streams[index], nbytes, now)
        assert at >= now + max(0.0, latency - jitter) - 1e-6
        assert at >= last[index]
        last[index] = at
