"""DeleteRecords reaches the followers: each takes the leader's log start offset from
its next fetch answer (Kafka's ``maybeIncrementLogStartOffset(leaderLogStartOffset,
LeaderOffsetIncremented)``), deletes the whole segments below it and checkpoints it,
so a new leader after a failover, or a restarted follower, still starts there. The
answer waits until every in-sync replica said so in a fetch (Kafka's
``DelayedDeleteRecords``): the low watermark is the ISR's smallest log start."""

from __future__ import annotations

from mq.broker.node import Pending
from mq.core.errors import ErrorCode
from mq.core.types import EARLIEST_TIMESTAMP, TopicPartition
from mq.metadata.records import PartitionRecord
from mq.protocol.messages import (
    ApiKey,
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from tests.unit.broker.broker_cluster import Cluster, _Parked, header

TP = TopicPartition("t", 0)


def ask_delete(c: Cluster, node_id: int, offset: int, *, timeout_ms: int = 30_000) -> DeleteRecordsResponse | Pending:
    request = DeleteRecordsRequest([DeleteRecordsTopic("t", [DeleteRecordsPartition(0, offset)])], timeout_ms=timeout_ms)
    result = c.nodes[node_id].handle(header(ApiKey.DELETE_RECORDS), request, now_ms=c.now)
    if isinstance(result, Pending):
        assert result.timeout_ms is not None
        c.parked[(node_id, result.op_id)] = _Parked(-1, -1, c.now + result.timeout_ms)
    assert isinstance(result, (DeleteRecordsResponse, Pending)), result
    return result


def answer(c: Cluster, node_id: int, pending: Pending, *, within_ms: int) -> tuple[int, int] | None:
    """Let time pass in steps of 100 ms until the answer (error, low watermark) comes."""
    for _ in range(within_ms // 100 + 1):
        response = c.result(node_id, pending)
        if response is not None:
            assert isinstance(response, DeleteRecordsResponse)
            result = response.topics[0].partitions[0]
            return result.error_code, result.low_watermark
        c.advance(100)
    return None


def delete_records(c: Cluster, node_id: int, offset: int) -> tuple[int, int]:
    result = ask_delete(c, node_id, offset)
    if isinstance(result, Pending):
        answered = answer(c, node_id, result, within_ms=2_000)
        assert answered is not None, "no answer within 2 s"
        return answered
    part = result.topics[0].partitions[0]
    return part.error_code, part.low_watermark


def earliest(c: Cluster, node_id: int) -> tuple[int, int]:
    request = ListOffsetsRequest([ListOffsetsTopic("t", [ListOffsetsPartition(0, EARLIEST_TIMESTAMP)])])
    response = c.nodes[node_id].handle(header(ApiKey.LIST_OFFSETS), request, now_ms=c.now)
    assert isinstance(response, ListOffsetsResponse)
    result = response.topics[0].partitions[0]
    return result.error_code, result.offset


def log_start(c: Cluster, node_id: int) -> int:
    return c.nodes[node_id].partitions[TP].log.log_start_offset


def segment_bases(c: Cluster, node_id: int) -> list[int]:
    return [s.base_offset for s in c.nodes[node_id].partitions[TP].log.segments]


def filled_cluster(records: int = 30) -> Cluster:
    c = Cluster(configs={"log.segment.bytes": "1024"})  # several segments for 30 records
    c.create_topic("t")
    for i in range(records):
        c.produce(1, "t", b"v%02d" % i)
        c.settle()
    c.run(1000)  # the followers learn the last high watermark from their next fetch
    for node_id in (1, 2, 3):
        assert c.nodes[node_id].partitions[TP].high_watermark == records
        assert log_start(c, node_id) == 0
    return c


def test_followers_take_the_leaders_log_start_and_delete_segments_below_it():
    c = filled_cluster()
    assert len(segment_bases(c, 2)) > 2
    assert delete_records(c, 1, 20) == (ErrorCode.NONE, 20)
    # answered once every in-sync replica's fetch named 20: nothing more to wait for
    for node_id in (2, 3):
        assert log_start(c, node_id) == 20
        bases = segment_bases(c, node_id)
        assert bases[0] <= 20 and (len(bases) == 1 or bases[1] > 20), bases  # whole segments below 20 gone
        assert c.values(node_id, "t") == [b"v%02d" % i for i in range(20, 30)]
        assert c.nodes[node_id].partitions[TP].epoch_cache.entries[0].start_offset == 20


def test_a_new_leader_after_failover_keeps_the_deleted_records_deleted():
    c = filled_cluster()
    assert delete_records(c, 1, 20) == (ErrorCode.NONE, 20)
    c.kill(1, crash=True)
    c.elect(TP, 2, isr=(2, 3))
    assert earliest(c, 2) == (ErrorCode.NONE, 20)
    response = c.fetch(2, "t", 5)
    assert response.topics[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_restarted_follower_keeps_its_moved_log_start():
    c = filled_cluster()
    assert delete_records(c, 1, 20) == (ErrorCode.NONE, 20)
    c.kill(3, crash=True)  # the checkpoint was fsynced when the start moved
    c.restart(3)
    assert log_start(c, 3) == 20
    c.kill(1)
    c.elect(TP, 3, isr=(2, 3))
    assert earliest(c, 3) == (ErrorCode.NONE, 20)


def test_the_answer_waits_for_every_in_sync_replica_and_times_out_without_one():
    c = filled_cluster()
    c.kill(3)  # still in the ISR: its log start is not known to move
    pending = ask_delete(c, 1, 20, timeout_ms=1000)
    assert isinstance(pending, Pending)
    c.run(900)
    assert log_start(c, 1) == 20 and log_start(c, 2) == 20  # deleted on the leader and on 2 already
    assert c.result(1, pending) is None
    # the low watermark: the ISR's smallest log start, 3's (0) as its last fetch said
    assert answer(c, 1, pending, within_ms=200) == (ErrorCode.REQUEST_TIMED_OUT, 0)
    c.restart(3)
    assert delete_records(c, 1, 20) == (ErrorCode.NONE, 20)  # a retry waits for 3 again, and 3 is back
    assert log_start(c, 3) == 20


def test_a_replica_leaving_the_isr_no_longer_holds_the_answer_and_a_new_leader_fails_it():
    c = filled_cluster()
    c.kill(3)
    pending = ask_delete(c, 1, 10)
    assert isinstance(pending, Pending)
    c.run(500)
    assert c.result(1, pending) is None
    image = c.image.partition(TP)
    assert image is not None
    c.publish([PartitionRecord("t", 0, image.replicas, 1, image.leader_epoch, (1, 2), image.partition_epoch + 1)])
    c.settle()
    assert answer(c, 1, pending, within_ms=0) == (ErrorCode.NONE, 10)
    # leadership moves before 2 took the new start: NOT_LEADER, and rightly so: the new
    # leader still starts at 10 (the old answer-at-once said 20 was deleted)
    pending = ask_delete(c, 1, 20)
    assert isinstance(pending, Pending) and log_start(c, 1) == 20
    c.elect(TP, 2, isr=(1, 2))
    c.settle()
    assert answer(c, 1, pending, within_ms=0) == (ErrorCode.NOT_LEADER, -1)
    assert earliest(c, 2) == (ErrorCode.NONE, 10)


def test_a_leader_alone_in_the_isr_answers_at_once_and_a_repeat_waits_for_nobody():
    c = filled_cluster()
    image = c.image.partition(TP)
    assert image is not None
    c.publish([PartitionRecord("t", 0, image.replicas, 1, image.leader_epoch, (1,), image.partition_epoch + 1)])
    result = ask_delete(c, 1, 20)
    assert isinstance(result, DeleteRecordsResponse), result
    assert (result.topics[0].partitions[0].error_code, result.topics[0].partitions[0].low_watermark) == (0, 20)
    assert delete_records(c, 1, 5) == (ErrorCode.NONE, 20)  # below the start: nothing moves
    assert delete_records(c, 1, 31)[0] == ErrorCode.OFFSET_OUT_OF_RANGE  # past the high watermark
