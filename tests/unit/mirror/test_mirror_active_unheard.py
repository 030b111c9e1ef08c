"""An active-active flow's partition (``mirror.active.RemotePartition``) says what the
one-way mirror says of a source it cannot hear: the lag as a lower bound as of the last
answer, the seconds since, the last known produce rate and an estimate; a fetch with no
answer (refused, timed out, or hanging past the stall timeout) marks it; an answer clears it."""

from __future__ import annotations

from mirror.active import RemotePartition
from mirror.partition import PartitionState
from mirror.remote import Route
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

TP = TopicPartition("orders", 1)


def remote() -> RemotePartition:
    rp = RemotePartition(TP, "east.orders", Route("east", "west"), offset_lag_max=100, offset_sync_interval_ms=1000)
    rp.fetch_offset = 0
    rp.state = PartitionState.RUNNING
    return rp


def follow(rp: RemotePartition, *, until_ms: int, rate_per_s: int, step_ms: int = 250) -> int:
    """The source grows at ``rate_per_s``; each answer is copied up to 10 records behind."""
    end = 0
    for wall in range(step_ms, until_ms + 1, step_ms):
        end += rate_per_s * step_ms // 1000
        rp.fetch_asked(wall)
        rp.source_answered(wall, end, 0)
        rp.fetch_offset = end - 10
    return end


def test_a_refused_fetch_makes_the_lag_a_lower_bound_with_an_estimate() -> None:
    rp = remote()
    end = follow(rp, until_ms=5_000, rate_per_s=200)
    heard = rp.status(5_000)
    assert not heard.source_unreachable and heard.lag_records == 10 and heard.lag_records_estimate is None
    assert heard.source_rate_per_s == 200.0 and heard.source_silent_s == 0.0
    rp.fetch_asked(5_100)
    rp.source_failed(MqError(ErrorCode.NETWORK_EXCEPTION, "connection refused"))
    silent = rp.status(8_000)
    assert silent.source_unreachable and silent.source_end == end and silent.lag_records == 10
    assert silent.source_seen_wall_ms == 5_000 and silent.source_silent_s == 3.0
    assert silent.lag_records_estimate == 10 + 200 * 3
    doc = rp.status_json(8_000)
    assert doc["source_unreachable"] is True and doc["lag_records_estimate"] == 610
    assert doc["remote_topic"] == "east.orders"


def test_an_error_answer_is_not_silence() -> None:
    rp = remote()
    follow(rp, until_ms=2_000, rate_per_s=100)
    rp.fetch_asked(2_100)
    rp.source_failed(MqError(ErrorCode.NOT_LEADER, "moved"))
    assert not rp.status(3_000).source_unreachable and rp.status(3_000).lag_records_estimate is None


def test_a_hanging_fetch_is_silence_after_the_stall_timeout_and_an_answer_ends_it() -> None:
    rp = remote()
    follow(rp, until_ms=3_000, rate_per_s=100)
    rp.fetch_asked(3_100)
    rp.tick(3_100 + rp.stall_timeout_ms)
    assert not rp.status(8_100).source_unreachable and rp.state == PartitionState.RUNNING
    rp.tick(3_101 + rp.stall_timeout_ms)
    status = rp.status(8_101)
    assert status.source_unreachable and status.state == PartitionState.STALLED
    assert "no answer from the source" in status.reason
    assert status.lag_records_estimate == 10 + round(100 * 5.101)
    rp.source_answered(9_000, 900, 0)  # healed: heard again, running, no estimate
    healed = rp.status(9_000)
    assert not healed.source_unreachable and healed.state == PartitionState.RUNNING and healed.reason == ""
    assert healed.lag_records == 900 - rp.fetch_offset and healed.lag_records_estimate is None


def test_a_new_process_keeps_what_the_last_knew_until_it_hears_the_source() -> None:
    rp = remote()
    rp.seed_source(source_end=500, seen_wall_ms=1_000, rate_per_s=50.0)
    rp.source_failed(MqError(ErrorCode.REQUEST_TIMED_OUT, "no answer"))
    status = rp.status(3_000)
    assert status.source_end == 500 and status.lag_records == 500 and status.lag_records_estimate == 600
    rp.seed_source(source_end=1, seen_wall_ms=2_000, rate_per_s=1.0)  # only while nothing is known
    assert rp.status(3_000).source_end == 500
