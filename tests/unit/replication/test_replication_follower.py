from __future__ import annotations

from dataclasses import replace

from replication_harness import TP, MemLog, record

from mq.core.config import TopicConfig
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch
from mq.replication import (
    EpochEndOffset,
    FetchStatus,
    FollowerPartition,
    LeaderEpochCache,
    ReplicaFetcher,
    ReplicaFetchResponse,
)
from mq.storage import Log, MemoryFileIO


def leader_log(*epochs: int) -> MemLog:
    """A leader's log with one record per entry of ``epochs`` (the epoch that wrote it)."""
    log = MemLog()
    for i, epoch in enumerate(epochs):
        log.append_as_leader(record(f"e{epoch}-{i}"), leader_epoch=epoch)
    return log


def follower(*epochs: int, leader_epoch: int = 5, hw: int = 0) -> FollowerPartition:
    source = leader_log(*epochs)
    log, cache = MemLog(), LeaderEpochCache()
    if source.batches:
        data = source.read(0)
        log.append_as_follower(data)
        cache.assign_from_batches(data)
    return FollowerPartition(
        TP, log=log, epoch_cache=cache, leader_id=1, leader_epoch=leader_epoch, high_watermark=hw,
        fetch_backoff_ms=500,
    )


def answer(f: FollowerPartition, response: ReplicaFetchResponse, now_ms: int = 0):  # type: ignore[no-untyped-def]
    return f.handle_response(response, request=f.fetch_partition(), now_ms=now_ms)


def test_fetch_names_offset_last_epoch_and_leader_epoch() -> None:
    f = follower(0, 0, 2)
    req = f.fetch_partition(partition_max_bytes=4096)
    assert (req.partition, req.fetch_offset, req.last_fetched_epoch, req.current_leader_epoch) == (0, 3, 2, 5)
    assert req.partition_max_bytes == 4096 and req.log_start_offset == 0
    assert follower().fetch_partition().last_fetched_epoch == -1


def test_append_records_epochs_and_bounds_the_high_watermark() -> None:
    f = follower()
    source = leader_log(0, 0, 3, 3, 4)
    out = answer(f, ReplicaFetchResponse(high_watermark=9, records=source.read(0)))
    assert out.error == ErrorCode.NONE and out.appended_bytes > 0
    assert f.log.log_end_offset == 5
    assert [(e.epoch, e.start_offset) for e in f.epoch_cache.entries] == [(0, 0), (3, 2), (4, 4)]
    assert f.high_watermark == 5  # min(leader HW 9, our end 5)
    answer(f, ReplicaFetchResponse(high_watermark=2))
    assert f.high_watermark == 5  # a lower HW in a later answer does not move ours back


def test_divergence_in_a_shared_epoch_truncates_in_one_step() -> None:
    f = follower(0, 0, 1, 1, 1)
    out = answer(f, ReplicaFetchResponse(high_watermark=2, diverging_epoch=EpochEndOffset(1, 3)))
    assert (out.truncated_to, out.truncation_complete) == (3, True)
    assert f.log.log_end_offset == 3 and f.epoch_cache.latest_epoch == 1


def test_divergence_in_an_unknown_epoch_walks_back() -> None:
    f = follower(0, 0, 1, 1, 3, 3)  # epochs (0,0) (1,2) (3,4)
    out = answer(f, ReplicaFetchResponse(diverging_epoch=EpochEndOffset(2, 5)))
    # Epoch 2 is not ours: cut to where our largest epoch below it (1) ends, ask again.
    assert (out.truncated_to, out.truncation_complete) == (4, False)
    assert f.fetch_partition().last_fetched_epoch == 1


def test_never_truncates_to_the_high_watermark_when_epochs_agree() -> None:
    f = follower(0, 0, 0, 0, hw=1)
    out = answer(f, ReplicaFetchResponse(diverging_epoch=EpochEndOffset(0, 3)))
    assert out.truncated_to == 3 and f.high_watermark == 1


def test_fallbacks_without_epoch_information() -> None:
    f = follower(0, 0, 0, 0, hw=2)
    out = answer(f, ReplicaFetchResponse(diverging_epoch=EpochEndOffset(-1, -1)))
    assert out.truncated_to == 2  # the leader knows no epochs: only the HW is safe
    f = follower(0, 0, 0, 0)
    out = answer(f, ReplicaFetchResponse(diverging_epoch=EpochEndOffset(-1, 3)))
    assert out.truncated_to == 3  # no epoch at or below ours on the leader: its answer
    f = follower(3, 3, 3)
    out = answer(f, ReplicaFetchResponse(diverging_epoch=EpochEndOffset(1, 1)))
    assert out.truncated_to == 0  # our epoch 1 (and older) is empty: it ends where 3 starts
    log = MemLog()
    log.append_as_follower(build_batch([(None, b"x", (), 0)] * 4))  # batches without epochs
    f = FollowerPartition(TP, log=log, epoch_cache=LeaderEpochCache(), leader_id=1, leader_epoch=1)
    out = answer(f, ReplicaFetchResponse(diverging_epoch=EpochEndOffset(0, 2)))
    assert out.truncated_to == 0  # no epochs here: the leader's end for its epoch, batch-aligned


def test_truncation_below_the_high_watermark_is_reported() -> None:
    f = follower(0, 0, 1, 1, hw=4)  # an unclean election elected a shorter replica
    out = answer(f, ReplicaFetchResponse(diverging_epoch=EpochEndOffset(0, 2)))
    assert out.truncated_to == 2 and out.truncated_below_high_watermark
    assert f.high_watermark == 2


def test_truncation_lands_on_a_batch_boundary() -> None:
    log, cache = MemLog(), LeaderEpochCache()
    data = build_batch([(None, b"a", (), 0)] * 3, partition_leader_epoch=0)
    data += build_batch([(None, b"b", (), 0)] * 3, base_offset=3, partition_leader_epoch=2)
    log.append_as_follower(data)
    cache.assign_from_batches(data)
    f = FollowerPartition(TP, log=log, epoch_cache=cache, leader_id=1, leader_epoch=3)
    out = answer(f, ReplicaFetchResponse(diverging_epoch=EpochEndOffset(2, 4)))
    assert out.truncated_to == 3 and f.epoch_cache.latest_epoch == 0


def test_answers_to_stale_requests_are_dropped() -> None:
    f = follower(0, 0)
    old = f.fetch_partition()
    f.on_leader_change(2, 6)
    out = f.handle_response(ReplicaFetchResponse(records=leader_log(0, 0, 0).read(2)), request=old, now_ms=0)
    assert out.discarded and f.log.log_end_offset == 2
    moved = replace(f.fetch_partition(), fetch_offset=1)
    assert f.handle_response(ReplicaFetchResponse(high_watermark=2), request=moved, now_ms=0).discarded
    f.on_leader_change(1, 4)  # an older epoch arriving late changes nothing
    assert f.leader_id == 2 and f.leader_epoch == 6


def test_fencing_errors_wait_for_metadata_and_others_back_off() -> None:
    f = follower(0)
    assert answer(f, ReplicaFetchResponse(error=ErrorCode.FENCED_LEADER_EPOCH)).error == ErrorCode.FENCED_LEADER_EPOCH
    assert f.status == FetchStatus.AWAITING_METADATA and not f.is_fetchable(10_000)
    f.on_leader_change(2, 6)
    assert f.is_fetchable(0)
    answer(f, ReplicaFetchResponse(error=ErrorCode.UNKNOWN_LEADER_EPOCH), now_ms=100)
    assert f.status == FetchStatus.DELAYED
    assert not f.is_fetchable(599) and f.is_fetchable(600)
    answer(f, ReplicaFetchResponse(error=ErrorCode.NOT_LEADER))
    assert f.status == FetchStatus.AWAITING_METADATA


def test_a_follower_below_the_leader_log_start_restarts_there() -> None:
    f = follower(0, 0)
    out = answer(f, ReplicaFetchResponse(error=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=50))
    assert out.truncated_to == 50
    assert f.log.log_start_offset == f.log.log_end_offset == 50 and f.epoch_cache.entries == ()
    assert f.is_fetchable(0)


def test_a_leader_log_start_inside_a_batch_restarts_the_follower_at_that_batch() -> None:
    """KAFKA-6975: DeleteRecords put the leader's log start at 22, inside batch [20, 25);
    the follower restarts empty at 22, the leader sends the whole batch: the follower
    restarts at 20 and appends it (it used to refuse it and never catch up), then takes
    the leader's log start 22 from the same answer, keeping the batch that holds it."""
    source = MemLog()
    source.append_as_leader(build_batch([(None, b"a%d" % i, (), 0) for i in range(20)]), leader_epoch=3)
    source.append_as_leader(build_batch([(None, b"b%d" % i, (), 0) for i in range(5)]), leader_epoch=3)
    f = follower(leader_epoch=3)
    answer(f, ReplicaFetchResponse(error=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=22))
    assert f.log.log_start_offset == f.log.log_end_offset == 22
    out = answer(f, ReplicaFetchResponse(high_watermark=25, log_start_offset=22, records=source.read(22)))
    assert out.error == ErrorCode.NONE and f.status == FetchStatus.FETCHING
    assert (f.log.log_start_offset, f.log.log_end_offset) == (22, 25)
    assert [r[0] for r in f.log.entries()] == [20, 21, 22, 23, 24]  # the batch is whole
    assert f.epoch_cache.latest_epoch == 3 and f.high_watermark == 25


def test_a_bad_append_backs_off_and_a_storage_error_stops_fetching() -> None:
    f = follower(0, 0)
    out = answer(f, ReplicaFetchResponse(records=leader_log(0).read(0)))  # offset 0 again
    assert out.error == ErrorCode.OFFSET_OUT_OF_RANGE and f.status == FetchStatus.DELAYED
    f = follower(0)
    answer(f, ReplicaFetchResponse(error=ErrorCode.KAFKA_STORAGE_ERROR))
    assert f.status == FetchStatus.FAILED
    f.on_leader_change(2, 9)
    assert not f.is_fetchable(0)


def test_replica_fetcher_builds_one_request_and_dispatches_answers() -> None:
    fetcher = ReplicaFetcher(replica_id=3, leader_id=1, max_wait_ms=250, partition_max_bytes=1000)
    parts = {}
    for tp in (TopicPartition("b", 1), TopicPartition("a", 0), TopicPartition("b", 0)):
        parts[tp] = FollowerPartition(
            tp, log=MemLog(), epoch_cache=LeaderEpochCache(), leader_id=1, leader_epoch=2,
            fetch_backoff_ms=100,
        )
        fetcher.add_partition(parts[tp])
    request = fetcher.build_fetch_request(0)
    assert request is not None and request.replica_id == 3 and request.max_wait_ms == 250
    assert [(t.name, [p.partition for p in t.partitions]) for t in request.topics] == [("a", [0]), ("b", [0, 1])]
    assert request.topics[0].partitions[0].partition_max_bytes == 1000
    outcomes = fetcher.handle_fetch_response(
        request,
        {
            TopicPartition("a", 0): ReplicaFetchResponse(high_watermark=1, records=leader_log(2).read(0)),
            TopicPartition("b", 0): ReplicaFetchResponse(error=ErrorCode.REQUEST_TIMED_OUT),
        },
        now_ms=40,
    )
    assert sorted(outcomes) == [TopicPartition("a", 0), TopicPartition("b", 0)]
    assert parts[TopicPartition("a", 0)].log.log_end_offset == 1
    assert fetcher.next_deadline_ms() == 140
    again = fetcher.build_fetch_request(100)
    assert again is not None and [t.name for t in again.topics] == ["a", "b"]
    assert [p.partition for p in again.topics[1].partitions] == [1]
    assert fetcher.remove_partition(TopicPartition("a", 0)) is not None
    fetcher.remove_partition(TopicPartition("b", 1))
    assert fetcher.build_fetch_request(100) is None
    assert fetcher.build_fetch_request(140) is not None


def test_follows_into_a_real_storage_log() -> None:
    """mq.storage.Log as the follower's log: epochs from the batch headers, truncation
    by epoch through ``Log.truncate_to``."""
    log = Log.open(MemoryFileIO(), "/data/p-0", TopicConfig(), now_ms=0)
    f = FollowerPartition(TP, log=log, epoch_cache=LeaderEpochCache(), leader_id=1, leader_epoch=4)
    source = leader_log(0, 0, 2, 2, 2)
    out = answer(f, ReplicaFetchResponse(high_watermark=3, records=source.read(0)))
    assert out.error == ErrorCode.NONE and log.log_end_offset == 5 and f.high_watermark == 3
    out = answer(f, ReplicaFetchResponse(high_watermark=3, diverging_epoch=EpochEndOffset(2, 4)))
    assert out.truncated_to == 4 and log.log_end_offset == 4
    assert f.fetch_partition().last_fetched_epoch == 2


def test_the_leaders_log_start_moves_ours_up_to_our_high_watermark_at_most() -> None:
    """Kafka's follower ``maybeIncrementLogStartOffset(leaderLogStartOffset)``: the
    leader's DeleteRecords reaches us in its fetch answers; we never start above what we
    know committed."""
    f = follower(0, 0, 0, 0, 0, hw=2)
    out = answer(f, ReplicaFetchResponse(high_watermark=2, log_start_offset=4))
    assert out.log_start_moved and f.log.log_start_offset == 2
    assert f.epoch_cache.entries[0].start_offset == 2
    out = answer(f, ReplicaFetchResponse(high_watermark=5, log_start_offset=4))
    assert out.log_start_moved and f.log.log_start_offset == 4
    assert [r[0] for r in f.log.entries()] == [4]
    # an older or missing (-1) log start never moves ours back
    out = answer(f, ReplicaFetchResponse(high_watermark=5, log_start_offset=1))
    assert not out.log_start_moved and f.log.log_start_offset == 4
    out = answer(f, ReplicaFetchResponse(high_watermark=5))
    assert not out.log_start_moved and f.log.log_start_offset == 4


def test_the_leaders_log_start_is_checkpointed_on_a_real_log() -> None:
    fileio = MemoryFileIO()
    log = Log.open(fileio, "/data/t-0", TopicConfig(), now_ms=0)
    source = leader_log(0, 0, 0, 0, 0)
    f = FollowerPartition(TP, log=log, epoch_cache=LeaderEpochCache(), leader_id=1, leader_epoch=5,
                          fetch_backoff_ms=500)
    answer(f, ReplicaFetchResponse(high_watermark=5, log_start_offset=3, records=source.read(0)))
    assert log.log_start_offset == 3
    log.flush()  # the records; the log start checkpoint was written as it moved
    fileio.crash()
    assert Log.open(fileio, "/data/t-0", TopicConfig(), now_ms=0).log_start_offset == 3
