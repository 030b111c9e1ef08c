"""SubscriptionState + Fetcher: fetch planning, prefetch, skipping, resets, gaps."""

import pytest

from mq.client.internals.fetcher import Fetcher, OffsetGap
from mq.client.internals.subscription import OffsetResetStrategy, SubscriptionState
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TimestampType, TopicPartition
from mq.protocol.messages import FetchPartitionResponse, FetchResponse, FetchTopicResponse
from mq.protocol.record_batch import build_batch, set_base_offset

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
LEADERS = {TP0: 1, TP1: 2}


def batch(base: int, count: int, *, ts: int = 1_000) -> bytes:
    raw = bytearray(build_batch([(None, b"v%d" % (base + i), (), ts + i) for i in range(count)]))
    set_base_offset(raw, 0, base)
    return bytes(raw)


def fetch_response(tp: TopicPartition, records: bytes = b"", code: int = 0, hw: int = 100):
    return FetchResponse(topics=[FetchTopicResponse(tp.topic, [
        FetchPartitionResponse(tp.partition, code, high_watermark=hw, log_start_offset=0,
                               records=records)])])


def setup(reset: str = "earliest", positions: dict | None = None):
    subs = SubscriptionState(reset)
    subs.assign([TP0, TP1])
    for tp, offset in (positions or {}).items():
        subs.seek(tp, offset)
    return subs, Fetcher(subs, max_buffered_per_partition=2)


def plan(fetcher: Fetcher):
    return fetcher.prepare_fetches(LEADERS.get, lambda tp: 3)


def test_assignment_starts_with_the_reset_lookup() -> None:
    for reset, ts in (("earliest", EARLIEST_TIMESTAMP), ("latest", LATEST_TIMESTAMP)):
        subs = SubscriptionState(reset)
        subs.assign([TP1, TP0, TP1])
        assert subs.assigned() == [TP1, TP0]
        assert [(tp, t) for tp, t, _ in subs.pending_lookups()] == [(TP1, ts), (TP0, ts)]
    subs = SubscriptionState(OffsetResetStrategy.NONE)
    subs.assign([TP0])
    assert subs.pending_lookups() == [] and subs.position(TP0) is None


def test_no_fetch_without_a_position_or_when_paused() -> None:
    subs, fetcher = setup(positions={TP1: 0})
    subs.pause(TP1)
    assert plan(fetcher) == []
    subs.resume(TP1)
    [(node, request, sent)] = plan(fetcher)
    assert node == 2 and list(sent) == [TP1]
    part = request.topics[0].partitions[0]
    assert (part.partition, part.fetch_offset, part.current_leader_epoch) == (1, 0, 3)


def test_one_request_per_leader_and_one_in_flight_per_node() -> None:
    subs, fetcher = setup(positions={TP0: 5, TP1: 7})
    requests = plan(fetcher)
    assert [(n, list(s.values())) for n, _, s in requests] == [(1, [(5, 1)]), (2, [(7, 1)])]
    assert plan(fetcher) == []  # both nodes busy
    fetcher.on_failure(1, requests[0][2])
    assert [n for n, _, _ in plan(fetcher)] == [1]


def test_records_below_the_position_inside_the_first_batch_are_skipped() -> None:
    subs, fetcher = setup(positions={TP0: 13})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    fetcher.on_response(node, sent, fetch_response(TP0, batch(10, 5) + batch(15, 3)))
    records = fetcher.fetch_records(100)
    assert [r.offset for r in records] == [13, 14, 15, 16, 17]
    assert records[0].value == b"v13" and records[0].timestamp == 1_003
    assert records[0].timestamp_type == TimestampType.CREATE_TIME
    assert records[0].topic == "t" and records[0].partition == 0
    assert subs.position(TP0) == 18
    assert fetcher.gaps == type(fetcher.gaps)()  # nothing missing


def test_max_records_stops_mid_batch_and_resumes() -> None:
    subs, fetcher = setup(positions={TP0: 0})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    fetcher.on_response(node, sent, fetch_response(TP0, batch(0, 10)))
    assert [r.offset for r in fetcher.fetch_records(4)] == [0, 1, 2, 3]
    assert subs.position(TP0) == 4
    assert [r.offset for r in fetcher.fetch_records(100)] == list(range(4, 10))
    assert subs.position(TP0) == 10 and not fetcher.has_buffered()


def test_prefetch_starts_after_the_buffered_data() -> None:
    subs, fetcher = setup(positions={TP0: 0})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    fetcher.on_response(node, sent, fetch_response(TP0, batch(0, 10)))
    assert subs.position(TP0) == 0  # nothing consumed yet
    [(_, request, _)] = [r for r in plan(fetcher) if r[0] == 1]
    assert request.topics[0].partitions[0].fetch_offset == 10


def test_a_seek_discards_buffered_and_in_flight_data() -> None:
    subs, fetcher = setup(positions={TP0: 0})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    fetcher.on_response(node, sent, fetch_response(TP0, batch(0, 10)))
    [(node, _, sent2)] = [r for r in plan(fetcher) if r[0] == 1]
    subs.seek(TP0, 3)
    fetcher.on_response(node, sent2, fetch_response(TP0, batch(10, 10)))  # stale: ignored
    assert fetcher.fetch_records(100) == []
    [(node, request, sent3)] = [r for r in plan(fetcher) if r[0] == 1]
    assert request.topics[0].partitions[0].fetch_offset == 3
    fetcher.on_response(node, sent3, fetch_response(TP0, batch(0, 10)))
    assert [r.offset for r in fetcher.fetch_records(100)] == list(range(3, 10))


def test_out_of_range_resets_by_policy_and_records_the_gap() -> None:
    subs, fetcher = setup("earliest", positions={TP0: 5})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    fetcher.on_response(node, sent, fetch_response(TP0, code=ErrorCode.OFFSET_OUT_OF_RANGE))
    [(tp, ts, epoch)] = [p for p in subs.pending_lookups() if p[0] == TP0]
    assert ts == EARLIEST_TIMESTAMP and not subs.is_fetchable(TP0)
    fetcher.on_lookup_done(TP0, 40, epoch)
    assert subs.position(TP0) == 40
    assert list(fetcher.gaps) == [OffsetGap(TP0, 5, 40)]


def test_out_of_range_without_a_reset_policy_raises_on_poll() -> None:
    subs, fetcher = setup("none", positions={TP0: 5})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    fetcher.on_response(node, sent, fetch_response(TP0, code=ErrorCode.OFFSET_OUT_OF_RANGE))
    error = subs.take_error()
    assert isinstance(error, MqError) and error.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert subs.take_error() is None


def test_a_batch_beyond_the_position_is_a_gap() -> None:
    subs, fetcher = setup(positions={TP0: 5})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    fetcher.on_response(node, sent, fetch_response(TP0, batch(8, 2)))
    assert [r.offset for r in fetcher.fetch_records(10)] == [8, 9]
    assert list(fetcher.gaps) == [OffsetGap(TP0, 5, 8)]


@pytest.mark.parametrize("code,refresh", [(ErrorCode.NOT_LEADER, True),
                                          (ErrorCode.UNKNOWN_TOPIC, True),
                                          (ErrorCode.REQUEST_TIMED_OUT, True)])
def test_stale_leader_errors_ask_for_metadata(code: ErrorCode, refresh: bool) -> None:
    subs, fetcher = setup(positions={TP0: 0})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    outcome = fetcher.on_response(node, sent, fetch_response(TP0, code=code))
    assert outcome.refresh_metadata is refresh
    assert subs.take_error() is None and subs.is_fetchable(TP0)


def test_a_non_retriable_error_surfaces() -> None:
    subs, fetcher = setup(positions={TP0: 0})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    fetcher.on_response(node, sent, fetch_response(TP0, code=ErrorCode.UNAUTHORIZED))
    assert subs.take_error().code == ErrorCode.UNAUTHORIZED


def test_corrupt_batch_raises_on_decode() -> None:
    subs, fetcher = setup(positions={TP0: 0})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    raw = bytearray(batch(0, 3))
    raw[-1] ^= 0xFF
    fetcher.on_response(node, sent, fetch_response(TP0, bytes(raw)))
    with pytest.raises(MqError) as err:
        fetcher.fetch_records(10)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


def test_partial_trailing_batch_is_ignored_and_refetched() -> None:
    subs, fetcher = setup(positions={TP0: 0})
    [(node, _, sent)] = [r for r in plan(fetcher) if r[0] == 1]
    data = batch(0, 2) + batch(2, 2)[:30]
    fetcher.on_response(node, sent, fetch_response(TP0, data))
    [(_, request, _)] = [r for r in plan(fetcher) if r[0] == 1]
    assert request.topics[0].partitions[0].fetch_offset == 2
    assert [r.offset for r in fetcher.fetch_records(10)] == [0, 1]


def test_paused_partition_keeps_its_buffer() -> None:
    subs, fetcher = setup(positions={TP0: 0, TP1: 0})
    for node, _, sent in plan(fetcher):
        tp = next(iter(sent))
        fetcher.on_response(node, sent, fetch_response(tp, batch(0, 2)))
    subs.pause(TP0)
    assert {(r.partition, r.offset) for r in fetcher.fetch_records(10)} == {(1, 0), (1, 1)}
    subs.resume(TP0)
    assert [(r.partition, r.offset) for r in fetcher.fetch_records(10)] == [(0, 0), (0, 1)]


def test_lookup_answer_after_a_seek_is_ignored() -> None:
    subs, fetcher = setup("latest")
    [(tp, ts, epoch)] = [p for p in subs.pending_lookups() if p[0] == TP0]
    subs.seek(TP0, 9)
    fetcher.on_lookup_done(TP0, 50, epoch)
    assert subs.position(TP0) == 9 and not fetcher.gaps


def test_a_partition_without_leader_is_reported_not_fetched() -> None:
    subs, fetcher = setup(positions={TP0: 0, TP1: 0})
    requests = fetcher.prepare_fetches({TP0: 1}.get, lambda tp: -1)
    assert [n for n, _, _ in requests] == [1] and fetcher.missing_leaders
    fetcher.on_failure(1, requests[0][2])
    fetcher.prepare_fetches(LEADERS.get, lambda tp: -1)
    assert not fetcher.missing_leaders
