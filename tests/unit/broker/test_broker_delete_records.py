"""DeleteRecords reaches the followers: each takes the leader's log start offset from
its next fetch answer (Kafka's ``maybeIncrementLogStartOffset(leaderLogStartOffset,
LeaderOffsetIncremented)``), deletes the whole segments below it and checkpoints it,
so a new leader after a failover, or a restarted follower, still starts there."""

from __future__ import annotations

from mq.core.errors import ErrorCode
from mq.core.types import EARLIEST_TIMESTAMP, TopicPartition
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
from tests.unit.broker.broker_cluster import Cluster, header

TP = TopicPartition("t", 0)


def delete_records(c: Cluster, node_id: int, offset: int) -> tuple[int, int]:
    request = DeleteRecordsRequest([DeleteRecordsTopic("t", [DeleteRecordsPartition(0, offset)])])
    response = c.nodes[node_id].handle(header(ApiKey.DELETE_RECORDS), request, now_ms=c.now)
    assert isinstance(response, DeleteRecordsResponse)
    result = response.topics[0].partitions[0]
    return result.error_code, result.low_watermark


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
    assert log_start(c, 1) == 20
    c.run(1000)  # the parked follower fetches are woken and answered; the next fetch names 20
    for node_id in (2, 3):
        assert log_start(c, node_id) == 20
        bases = segment_bases(c, node_id)
        assert bases[0] <= 20 and (len(bases) == 1 or bases[1] > 20), bases  # whole segments below 20 gone
        assert c.values(node_id, "t") == [b"v%02d" % i for i in range(20, 30)]
        assert c.nodes[node_id].partitions[TP].epoch_cache.entries[0].start_offset == 20


def test_a_new_leader_after_failover_keeps_the_deleted_records_deleted():
    c = filled_cluster()
    delete_records(c, 1, 20)
    c.run(1000)
    c.kill(1, crash=True)
    c.elect(TP, 2, isr=(2, 3))
    assert earliest(c, 2) == (ErrorCode.NONE, 20)
    response = c.fetch(2, "t", 5)
    assert response.topics[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_restarted_follower_keeps_its_moved_log_start():
    c = filled_cluster()
    delete_records(c, 1, 20)
    c.run(1000)
    c.kill(3, crash=True)  # the checkpoint was fsynced when the start moved
    c.restart(3)
    assert log_start(c, 3) == 20
    c.kill(1)
    c.elect(TP, 3, isr=(2, 3))
    assert earliest(c, 3) == (ErrorCode.NONE, 20)
