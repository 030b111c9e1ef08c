"""The sans-IO node and metadata log in-process: replay, crash of the metadata log,
group commit, and opening 1,000 partitions (PERFORMANCE.md P8)."""

from __future__ import annotations

import time

from mq.broker.node import BrokerNode, Pending
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.metadata.image import MetadataImage
from mq.metadata.records import (
    ConfigRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_batches,
    encode_batch,
)
from mq.protocol.codec import RequestHeader
from mq.protocol.messages import (
    ApiKey,
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ProducePartitionData,
    ProduceRequest,
    ProduceTopicData,
)
from mq.protocol.record_batch import build_batch
from mq.storage.fileio import MemoryFileIO, OsFileIO

NOW = 1_700_000_000_000


def header(api: ApiKey) -> RequestHeader:
    return RequestHeader(api, 0, 1, "test")


def make_node(fileio, data_dir: str = "/data", **configs) -> BrokerNode:
    config = BrokerConfig.from_kafka({"log.dirs": data_dir, **configs})
    node = BrokerNode(config, fileio, rng=Rng(7), advertised_host="127.0.0.1", advertised_port=9092)
    node.start(now_ms=NOW)
    return node


def create(node: BrokerNode, name: str, partitions: int = 1, **configs: str) -> None:
    response = node.handle(header(ApiKey.CREATE_TOPICS),
                           CreateTopicsRequest([CreatableTopic(name, partitions, 1, configs)]), now_ms=NOW)
    assert response.topics[0].error_code == 0, response


def produce(node: BrokerNode, topic: str, value: bytes, acks: int = 1):
    records = build_batch([(None, value, (), NOW)])
    request = ProduceRequest(acks, 1000, [ProduceTopicData(topic, [ProducePartitionData(0, records)])])
    return node.handle(header(ApiKey.PRODUCE), request, now_ms=NOW)


def test_metadata_records_round_trip_and_replay():
    records = [TopicRecord("t", "id-1"), PartitionRecord("t", 0, (1,), 1, 0, (1,), 0),
               PartitionRecord("t", 1, (1,), 1, 0, (1,), 0), ConfigRecord("t", "retention.ms", "5"),
               ConfigRecord("t", "retention.ms", None), ConfigRecord("t", "segment.bytes", "2048"),
               TopicRecord("u", "id-2"), RemoveTopicRecord("u", "id-2")]
    assert decode_batches(encode_batch(records, now_ms=NOW)) == records
    image = MetadataImage().apply(records, last_offset=7)
    assert list(image.topics) == ["t"] and image.offset == 7
    assert dict(image.topics["t"].configs) == {"segment.bytes": "2048"}
    assert list(image.topics["t"].partitions) == [0, 1]
    # replay one at a time gives the same image
    one_by_one = MetadataImage()
    for record in records:
        one_by_one = one_by_one.replay(record)
    assert dict(one_by_one.topics["t"].configs) == dict(image.topics["t"].configs)


def test_metadata_log_survives_a_crash_of_unsynced_bytes():
    fileio = MemoryFileIO()
    node = make_node(fileio)
    create(node, "a", 3, **{"retention.ms": "1000"})
    create(node, "b")
    fileio.crash()  # the metadata log is fsynced on every commit: nothing is lost
    again = make_node(fileio)
    assert sorted(again.image.topics) == ["a", "b"]
    assert dict(again.image.topics["a"].configs) == {"retention.ms": "1000"}
    assert sorted(str(tp) for tp in again.partitions) == ["a-0", "a-1", "a-2", "b-0"]
    assert again.partitions[next(iter(again.partitions))].config.retention_ms == 1000


def test_group_commit_holds_acks_until_fsync():
    fileio = MemoryFileIO()
    node = make_node(fileio, **{"log.flush.policy": "always"})
    create(node, "g")
    waiting = [produce(node, "g", b"%d" % i) for i in range(3)]
    assert all(isinstance(w, Pending) for w in waiting)
    assert node.take_completions() == [] and node.needs_group_commit
    fetch = FetchRequest([FetchTopic("g", [FetchPartition(0, 0)])], max_wait_ms=1000)
    parked = node.handle(header(ApiKey.FETCH), fetch, now_ms=NOW)
    assert isinstance(parked, Pending)  # high watermark = fsynced offset = 0
    node.group_commit(now_ms=NOW)
    done = dict(node.take_completions())
    assert sorted(done) == sorted([w.op_id for w in waiting] + [parked.op_id])
    assert [done[w.op_id].topics[0].partitions[0].base_offset for w in waiting] == [0, 1, 2]
    assert done[parked.op_id].topics[0].partitions[0].high_watermark == 3
    fileio.crash()
    assert make_node(fileio).partitions[next(iter(node.partitions))].log.log_end_offset == 3


def test_thousand_partitions_open_within_five_seconds(tmp_path):
    data_dir = str(tmp_path / "data")
    node = make_node(OsFileIO(), data_dir)
    create(node, "wide", 1000)
    # No shutdown: the restart is a crash, so every partition is recovered without
    # a clean-shutdown checkpoint.
    started = time.perf_counter()
    again = make_node(OsFileIO(), data_dir)
    elapsed = time.perf_counter() - started
    assert len(again.partitions) == 1000
    assert elapsed <= 5.0, f"opening 1,000 partitions took {elapsed:.2f}s"


def test_flush_messages_and_flush_ms_under_replicated_policy():
    fileio = MemoryFileIO()
    node = make_node(fileio)
    create(node, "every", **{"flush.messages": "1"})
    create(node, "timed", **{"flush.ms": "1000"})
    every = node.partitions[next(tp for tp in node.partitions if tp.topic == "every")]
    timed = node.partitions[next(tp for tp in node.partitions if tp.topic == "timed")]
    assert produce(node, "every", b"a").topics[0].partitions[0].error_code == 0  # acked at once
    assert node.needs_group_commit
    node.group_commit(now_ms=NOW)
    assert every.log.recovery_point == 1
    produce(node, "timed", b"b")
    assert not node.needs_group_commit and timed.log.recovery_point == 0
    node.poll(now_ms=NOW + 500)
    assert not node.needs_group_commit
    node.poll(now_ms=NOW + 1000)
    assert node.needs_group_commit
    node.group_commit(now_ms=NOW + 1000)
    assert timed.log.recovery_point == 1


def test_deleting_a_topic_answers_its_parked_fetches():
    node = make_node(MemoryFileIO())
    create(node, "doomed")
    fetch = FetchRequest([FetchTopic("doomed", [FetchPartition(0, 0)])], max_wait_ms=60_000)
    parked = node.handle(header(ApiKey.FETCH), fetch, now_ms=NOW)
    assert isinstance(parked, Pending)
    node.handle(header(ApiKey.DELETE_TOPICS), DeleteTopicsRequest(["doomed"]), now_ms=NOW)
    [(op_id, response)] = node.take_completions()
    assert op_id == parked.op_id
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC
    assert len(node.purgatory) == 0
