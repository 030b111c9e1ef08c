"""mq.lab's region helpers without a region: metrics parsing, freshest views, the
timeline's change detection, the background produce load and loss counting."""

from __future__ import annotations

import threading

import pytest

from mq.core.types import RecordMetadata
from mq.lab import ProduceLoad, Timeline, lost_records, wait_until
from mq.lab.observe import PartitionView, freshest, gauge, parse_metrics

METRICS = """\
# HELP mq_log_end_offset Log end offset, per partition
# TYPE mq_log_end_offset gauge
mq_log_end_offset{partition="0",topic="orders"} 1200.0
mq_log_end_offset{partition="1",topic="orders"} 7.0
mq_high_watermark{partition="0",topic="orders"} 1100.0
mq_replica_lag_offsets{partition="0",replica="3",topic="orders"} 100.0
mq_replica_lag_offsets{partition="0",replica="2",topic="we\\"ird"} -1.0
mq_connections 4.0
mq_request_latency_seconds_bucket{api="produce",le="+Inf"} 9.0
"""


def test_parse_metrics_reads_labels_and_values() -> None:
    samples = parse_metrics(METRICS)
    assert gauge(samples, "mq_log_end_offset", topic="orders", partition=0) == 1200
    assert gauge(samples, "mq_log_end_offset", topic="orders", partition=1) == 7
    assert gauge(samples, "mq_high_watermark", topic="orders", partition=0) == 1100
    assert gauge(samples, "mq_replica_lag_offsets", topic="orders", partition=0, replica=3) == 100
    assert gauge(samples, "mq_replica_lag_offsets", topic='we"ird', partition=0, replica=2) == -1
    assert gauge(samples, "mq_connections") == 4
    assert gauge(samples, "mq_request_latency_seconds_bucket", api="produce", le="+Inf") == 9
    assert gauge(samples, "mq_log_end_offset", topic="other", partition=0) is None
    assert parse_metrics("garbage line\n# comment\n") == {}


def _view(source: int, leader: int, epoch: int) -> PartitionView:
    return PartitionView("t", 0, leader, epoch, (1, 2), (1, 2, 3), source)


def test_freshest_view_has_the_highest_leader_epoch_and_does_not_depend_on_order() -> None:
    stale, fresh, leaderless = _view(1, 1, 3), _view(2, 2, 4), _view(3, -1, 4)
    assert freshest([stale, fresh, leaderless]) == fresh
    assert freshest([leaderless, fresh, stale]) == fresh
    assert freshest([_view(3, 2, 4), _view(2, 2, 4)]).source == 2  # ties: lowest source
    assert freshest([_view(3, 2, 4), _view(2, 2, 4)], prefer=3).source == 3  # ...after the controller
    assert freshest([]) is None


def _rows(leader: int, epoch: int, isr: tuple[int, ...], fenced: tuple[int, ...] = ()) -> list[dict]:
    return [{"broker": b, "state": "up", "log_end_offset": 10, "high_watermark": 10,
             "in_isr": b in isr, "is_leader": b == leader, "leader_epoch": epoch, "fenced": b in fenced}
            for b in (1, 2, 3)]


def test_timeline_notes_elections_isr_changes_and_fencing() -> None:
    states = iter([_rows(1, 0, (1, 2, 3)), _rows(1, 0, (1, 2, 3)), _rows(1, 0, (1, 3), fenced=(2,)),
                   _rows(3, 1, (3,), fenced=(1, 2)), _rows(3, 1, (3, 1), fenced=(2,))])
    timeline = Timeline(lambda: next(states), topic="t")
    for _ in range(5):
        timeline.sample_once()
    timeline.mark("kill 1", kind="kill")
    kinds = [(e["kind"], e["label"]) for e in timeline.events]
    assert kinds == [
        ("isr", "ISR [1, 3]"), ("fenced", "2 fenced"),
        ("election", "leader 1→3 (epoch 1)"), ("isr", "ISR [3]"), ("fenced", "1 fenced"),
        ("isr", "ISR [1, 3]"), ("unfenced", "1 unfenced"),
        ("kill", "kill 1"),
    ]
    assert len(timeline.rows) == 15 and timeline.brokers() == [1, 2, 3]
    times, values = timeline.series(2, "log_end_offset")
    assert len(times) == 5 and values == [10] * 5
    assert timeline.first("election")["label"].startswith("leader 1→3")
    assert timeline.first("election", after_s=10_000) is None


def test_timeline_samples_in_the_background_until_stopped() -> None:
    with Timeline(lambda: _rows(1, 0, (1, 2, 3)), topic="t", interval_s=0.01) as timeline:
        wait_until(lambda: len(timeline.rows) >= 9, timeout_s=10, what="three samples")
    count = len(timeline.rows)
    assert not timeline._thread.is_alive()
    assert len(timeline.rows) == count


class FakeProducer:
    """Acknowledges chunks, fails the ones whose first value is in ``fail``, and can hold
    one chunk until released (a fail-over in progress)."""

    def __init__(self, *, fail: tuple[bytes, ...] = (), hold: bytes | None = None) -> None:
        self.fail = fail
        self.hold = hold
        self.released = threading.Event()
        self.offset = 0

    def send_many(self, topic, records, partition=None):
        first = records[0][1]
        if first == self.hold:
            self.released.wait(10)
        if first in self.fail:
            raise TimeoutError("delivery timed out")
        out = []
        for _key, _value in records:
            out.append(RecordMetadata(topic, partition or 0, self.offset, 0))
            self.offset += 1
        return out


def test_produce_load_records_acks_failures_and_the_retry_gap() -> None:
    values = [b"v%03d" % i for i in range(50)]
    producer = FakeProducer(fail=(b"v020",), hold=b"v030")
    load = ProduceLoad(producer, "t", values, chunk_records=10).start()
    wait_until(lambda: len(load.chunks) == 3, timeout_s=10, what="three chunks")
    stalled_at = load.now_s()
    producer.released.set()
    load.join(10)
    assert not load.running
    assert [len(c.values) for c in load.chunks] == [10] * 5
    assert load.failed_values() == values[20:30]
    assert load.acked_values() == values[:20] + values[30:]
    assert load.acked_count() == 40
    assert load.chunks[0].offsets == tuple(range(10))
    assert load.first_ack_after(stalled_at) == load.chunks[3].done_s
    assert load.first_ack_after(load.now_s()) is None
    assert [n for _, n in load.ack_times()] == [10, 20, 30, 40]


def test_produce_load_stops_early_and_holds_its_rate() -> None:
    load = ProduceLoad(FakeProducer(), "t", [b"x%d" % i for i in range(10_000)], chunk_records=10,
                       rate_per_s=1_000).start()
    wait_until(lambda: load.acked_count() >= 50, timeout_s=10, what="some chunks")
    load.stop()
    load.join(10)
    seconds = load.chunks[-1].sent_s - load.chunks[0].sent_s
    sent = load.acked_count() - 10  # the first chunk goes at once
    assert sent / max(seconds, 1e-3) <= 1_000 * 1.5, "an open-loop rate never bursts to catch up"
    assert load.acked_count() < 10_000


@pytest.mark.parametrize(("acked", "present", "lost"), [
    ([b"a", b"b", b"c"], [b"a", b"b", b"c"], []),
    ([b"a", b"b", b"c"], [b"a", b"a", b"c"], [b"b"]),  # a duplicate is not loss, b is gone
    ([b"a", b"b"], [], [b"a", b"b"]),
])
def test_lost_records(acked: list[bytes], present: list[bytes], lost: list[bytes]) -> None:
    assert lost_records(acked, present) == lost
