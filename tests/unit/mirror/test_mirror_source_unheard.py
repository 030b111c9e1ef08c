"""What the mirror says about a source it cannot hear: the lag as a lower bound as of the
last answer, the seconds since, the last known produce rate and an estimate, never a
stale lag presented as current."""

from __future__ import annotations

import pytest

from mirror.partition import PartitionMirror, PartitionState
from mirror.source_rate import SourceEndHistory, lag_estimate
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch

TP = TopicPartition("orders", 0)


def batch(base: int, count: int, ts: int) -> bytes:
    return build_batch([(None, b"v", (), ts)] * count, base_offset=base)


def follow(pm: PartitionMirror, *, until_ms: int, rate_per_s: int, step_ms: int = 250) -> int:
    """The source grows at ``rate_per_s``; the mirror fetches and appends every step."""
    end = pm.mirrored_end or 0
    for wall in range(step_ms, until_ms + 1, step_ms):
        n = rate_per_s * step_ms // 1000
        _, epoch = pm.fetch_sent(wall)
        pm.on_fetched(epoch, batch(end, n, wall), end + n, 0, wall, wall)
        pm.next_append(wall)
        pm.on_appended(high_watermark=end + n, duplicates=0, now_ms=wall, wall_ms=wall)
        end += n
    return end


def test_the_rate_is_the_growth_of_the_source_end_over_the_window() -> None:
    h = SourceEndHistory(window_ms=10_000, min_span_ms=500, spacing_ms=100)
    h.observe(0, 0)
    assert h.rate_per_s() is None  # one sample: nothing measured
    h.observe(400, 40)
    assert h.rate_per_s() is None  # closer than min_span_ms
    for t in range(500, 20_001, 50):  # 100 rec/s, samples every 50 ms
        h.observe(t, t // 10)
    assert h.rate_per_s() == 100.0
    assert len(h._samples) <= 10_000 // 100 + 3  # spaced, and only the window is kept
    for t in range(20_050, 30_001, 50):  # slows down to 20 rec/s: the window follows
        h.observe(t, 2_000 + (t - 20_000) // 50)
    assert h.rate_per_s() == 20.0


def test_a_source_end_that_goes_back_starts_the_window_over() -> None:
    h = SourceEndHistory()
    h.observe(0, 1_000)
    h.observe(1_000, 2_000)
    assert h.rate_per_s() == 1_000.0
    h.observe(2_000, 1_500)  # a new source leader's high watermark lags for a moment
    assert h.rate_per_s() is None
    h.seed(42.0)
    assert h.rate_per_s() == 42.0  # a seeded rate until measured again
    h.observe(3_000, 1_600)
    assert h.rate_per_s() == 100.0


def test_the_estimate_is_the_lower_bound_plus_rate_times_silence() -> None:
    assert lag_estimate(10, 100.0, 2_500) == 260
    assert lag_estimate(10, None, 2_500) is None
    assert lag_estimate(None, 100.0, 2_500) is None
    assert lag_estimate(0, 0.0, 60_000) == 0


def test_a_cut_link_makes_the_lag_a_lower_bound_with_silence_rate_and_estimate() -> None:
    pm = PartitionMirror(TP, stall_timeout_ms=5_000)
    pm.reset(0)
    end = follow(pm, until_ms=10_000, rate_per_s=400)
    healthy = pm.status(10_000)
    assert (healthy.state, healthy.source_unreachable, healthy.lag_records) == (PartitionState.RUNNING, False, 0)
    assert healthy.lag_records_estimate is None and healthy.lag_seconds == 0.0
    assert healthy.source_rate_per_s == 400.0 and healthy.source_silent_s == 0.0

    pm.fetch_sent(10_100)  # the link is cut: this fetch is never answered
    pm.tick(14_000)
    assert pm.status(14_000).source_unreachable is False  # not yet past the stall timeout
    pm.tick(16_000)
    s = pm.status(16_000)
    assert s.state == PartitionState.STALLED and s.source_unreachable and "no answer" in s.reason
    assert (s.source_end, s.mirrored_end, s.lag_records) == (end, end, 0)  # the last known: a lower bound
    assert s.source_seen_wall_ms == 10_000 and s.source_silent_s == 6.0
    assert s.source_rate_per_s == 400.0
    assert s.lag_records_estimate == 0 + 400 * 6  # labelled an estimate: rate x silence
    assert s.lag_seconds is None  # unknown, not 0

    pm.on_fetch_error(pm.epoch, ErrorCode.REQUEST_TIMED_OUT, "timed out", 20_600, 20_600, unanswered=True)
    s = pm.status(21_000)
    assert s.source_unreachable and s.lag_records_estimate == 400 * 11

    # The link heals: the next answer gives the exact figures again.
    _, epoch = pm.fetch_sent(21_000)
    pm.on_fetched(epoch, batch(end, 10, 21_000), end + 4_400, 0, 21_000, 21_000)
    s = pm.status(21_000)
    assert not s.source_unreachable and s.lag_records == 4_400 and s.lag_records_estimate is None
    assert s.state == PartitionState.RUNNING


def test_an_error_answer_from_the_source_is_not_unreachable() -> None:
    pm = PartitionMirror(TP)
    pm.reset(0)
    follow(pm, until_ms=2_000, rate_per_s=100)
    pm.fetch_sent(2_100)
    pm.on_fetch_error(pm.epoch, ErrorCode.NOT_LEADER, "moved", 2_200, 2_200)
    s = pm.status(2_300)
    assert s.state == PartitionState.STALLED and not s.source_unreachable and s.lag_records_estimate is None


def test_a_restarted_mirror_keeps_what_was_last_known_of_an_unreachable_source() -> None:
    pm = PartitionMirror(TP)
    pm.seed_source(source_end=900, seen_wall_ms=5_000, rate_per_s=50.0)
    pm.reset(800)
    pm.on_fetch_error(pm.epoch, ErrorCode.NETWORK_EXCEPTION, "refused", 0, 9_000, unanswered=True)
    s = pm.status(9_000)
    assert (s.lag_records, s.source_silent_s, s.source_rate_per_s) == (100, 4.0, 50.0)
    assert s.lag_records_estimate == 100 + 200
    doc = s.to_json()
    assert doc["source_unreachable"] is True and doc["lag_records_estimate"] == 300


def stalled_flow_doc() -> tuple[dict, int]:
    """A flow's status document 6 s into a cut, as the runner writes it."""
    from mirror.runner import _unheard_summary

    pms = []
    for tp in (TopicPartition("heartbeats", 0), *(TopicPartition("orders", p) for p in range(6))):
        pm = PartitionMirror(tp, stall_timeout_ms=5_000)
        pm.reset(0)
        follow(pm, until_ms=10_000, rate_per_s=400)
        pm.fetch_sent(10_100)
        pm.tick(16_000)
        pms.append(pm)
    wall = 16_000
    snapshot = [pm.status(wall) for pm in pms]
    doc = {"flow": "east-to-west", "source": "east", "target": "west", "pid": 4242, "state": "stalled",
           "reason": "source region east unreachable: orders-0: " + snapshot[1].reason, "updated_ms": wall,
           "lag_records": sum(p.lag_records or 0 for p in snapshot), **_unheard_summary(snapshot, wall, False),
           "partitions": [p.to_json() for p in snapshot]}
    return doc, wall


def test_the_flow_summary_of_a_silent_source() -> None:
    doc, _ = stalled_flow_doc()
    assert doc["source_unreachable"] and doc["lag_records_lower_bound"]
    assert (doc["source_heard_at_ms"], doc["lag_as_of_ms"], doc["source_silent_s"]) == (10_000, 10_000, 6.0)
    assert doc["source_rate_per_s"] == 7 * 400.0
    assert doc["lag_records_estimate"] == 7 * 400 * 6


@pytest.mark.parametrize("width", [80, 120])
def test_the_partition_table_fits_the_terminal_and_marks_bounds_and_estimates(width: int) -> None:
    from mirror.status import describe

    doc, wall = stalled_flow_doc()
    lines = describe(doc, now_ms=wall + 500, width=width).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("TOPIC"))
    table = lines[start:start + 9]
    assert all(len(line) <= width for line in table), "\n".join(table)
    assert {"TOPIC", "PARTITION", "STATE", "LAG", "LAG-ESTIMATE", "HEARD-S-AGO"} <= set(table[0].split())
    rows = [line.split() for line in table[2:]]
    assert [r[0] for r in rows] == ["heartbeats", *["orders"] * 6]
    for r in rows:
        assert "stalled" in r and ">=0" in r and "~2600" in r and "6.5" in r  # 400 rec/s x 6.5 s
    assert all(len(line) <= width for line in lines), "\n".join(lines)  # prose wraps at words too
    text = " ".join(line.strip() for line in lines)
    assert "source east not heard for 6.5 s" in text
    assert "lag >= 0 records as of" in text and "a lower bound" in text
    assert "estimate ~18200 records (last known produce rate 2800 rec/s x 6.5 s)" in text
    assert ("left out to fit 80 columns" in text) == (width == 80)
    assert ("heartbeats-0, orders-0, orders-1, orders-2, orders-3, orders-4, orders-5: no answer from the "
            "source for 5900 ms") in text  # one line per reason, not a column that wraps


def test_a_piped_partition_table_has_every_column() -> None:
    from mirror.status import PARTITION_COLUMNS, describe

    doc, wall = stalled_flow_doc()
    header = next(line for line in describe(doc, now_ms=wall).splitlines() if line.startswith("TOPIC"))
    assert header.split() == [h for h, _ in PARTITION_COLUMNS]


def test_a_failed_over_flow_shows_what_it_knew_when_it_stopped_not_an_extrapolation() -> None:
    from mirror.status import describe

    doc, wall = stalled_flow_doc()
    doc = {**doc, "state": "failed-over", "reason": "west promoted; at least 0 (estimate ~19600) records at risk"}
    text = " ".join(line.strip() for line in describe(doc, now_ms=wall + 60_000, width=120).splitlines())
    assert "when the flow stopped (" in text and "not heard for 6.0 s" in text  # not 66 s
    assert "estimate ~16800 records" in text
    rows = [line.split() for line in describe(doc, now_ms=wall + 60_000).splitlines() if line.startswith("orders ")]
    assert all("~2400" in r and r[-1] == "6.0" for r in rows)
