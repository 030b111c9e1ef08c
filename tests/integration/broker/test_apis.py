"""Every API of the broker over a real socket, against a real broker process."""

from __future__ import annotations

from mq.core.errors import ErrorCode
from mq.protocol.codec import SUPPORTED_VERSIONS
from mq.protocol.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsRequest,
    AlterConfigsResource,
    ApiVersionsRequest,
    ConfigResource,
    ConfigResourceType,
    CreatableTopic,
    CreateTopicsRequest,
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    MetadataRequest,
    ProducePartitionData,
    ProduceRequest,
    ProduceTopicData,
)

from .raw import RawClient, batch, values_of


def test_api_versions_lists_every_api(module_broker):
    with RawClient.to(module_broker) as c:
        response = c.request(ApiVersionsRequest("test"))
    assert response.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} == {
        (int(k), lo, hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items()}


def test_metadata_lists_broker_and_topics(module_broker):
    with RawClient.to(module_broker) as c:
        c.create_topic("orders", 3)
        meta = c.request(MetadataRequest(None))
        assert [(b.node_id, b.host, b.port) for b in meta.brokers] == [(1, "127.0.0.1", module_broker.port)]
        assert meta.controller_id == 1 and meta.cluster_id
        [topic] = [t for t in meta.topics if t.name == "orders"]
        assert topic.name == "orders" and topic.error_code == 0 and topic.topic_id
        assert [(p.partition, p.leader_id, p.replicas, p.isr) for p in topic.partitions] == [
            (0, 1, [1], [1]), (1, 1, [1], [1]), (2, 1, [1], [1])]
        unknown = c.request(MetadataRequest(["nope"]))
        assert unknown.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC
        assert c.request(MetadataRequest([])).topics == []


def test_create_topics_validates_like_kafka(module_broker):
    cases = {
        "ok.name-1_x": ErrorCode.NONE,
        "": ErrorCode.INVALID_TOPIC,
        ".": ErrorCode.INVALID_TOPIC,
        "..": ErrorCode.INVALID_TOPIC,
        "bad/name": ErrorCode.INVALID_TOPIC,
        "x" * 250: ErrorCode.INVALID_TOPIC,
        "__cluster_metadata": ErrorCode.INVALID_TOPIC,
    }
    with RawClient.to(module_broker) as c:
        response = c.request(CreateTopicsRequest([CreatableTopic(n, 1) for n in cases]))
        assert {r.name: r.error_code for r in response.topics} == cases
        assert "x" * 249 in [r.name for r in c.request(CreateTopicsRequest([CreatableTopic("x" * 249)])).topics]
        checks = [
            (CreatableTopic("p0", 0), ErrorCode.INVALID_PARTITIONS),
            (CreatableTopic("rf2", 1, 2), ErrorCode.INVALID_REPLICATION_FACTOR),
            (CreatableTopic("rf0", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR),
            (CreatableTopic("cfg", 1, 1, {"segment.bytes": "tiny"}), ErrorCode.INVALID_CONFIG),
            (CreatableTopic("cfg2", 1, 1, {"no.such.key": "1"}), ErrorCode.INVALID_CONFIG),
            (CreatableTopic("ok.name-1_x"), ErrorCode.TOPIC_ALREADY_EXISTS),
            (CreatableTopic("ok_name-1_x"), ErrorCode.INVALID_TOPIC),  # collides with ok.name-1_x
        ]
        response = c.request(CreateTopicsRequest([t for t, _ in checks]))
        assert [r.error_code for r in response.topics] == [code for _, code in checks]
        dup = c.request(CreateTopicsRequest([CreatableTopic("d"), CreatableTopic("d")]))
        assert [r.error_code for r in dup.topics] == [ErrorCode.INVALID_REQUEST] * 2
        only = c.request(CreateTopicsRequest([CreatableTopic("dry", 2)], validate_only=True))
        assert only.topics[0].error_code == 0 and only.topics[0].num_partitions == 2
        names = {t.name for t in c.request(MetadataRequest(None)).topics}
    assert {"ok.name-1_x", "x" * 249} <= names
    assert not names & {"", ".", "..", "bad/name", "p0", "rf2", "rf0", "cfg", "cfg2", "ok_name-1_x", "d", "dry"}


def test_delete_topics_removes_partition_dirs(module_broker):
    with RawClient.to(module_broker) as c:
        c.create_topic("gone", 2)
        assert c.produce("gone", 1, batch([b"a"])).error_code == 0
        assert (module_broker.data_dir / "gone-1").is_dir()
        response = c.request(DeleteTopicsRequest(["gone", "never"]))
        assert [r.error_code for r in response.topics] == [0, ErrorCode.UNKNOWN_TOPIC]
        assert not (module_broker.data_dir / "gone-0").exists() and not (module_broker.data_dir / "gone-1").exists()
        assert c.produce("gone", 0, batch([b"a"])).error_code == ErrorCode.UNKNOWN_TOPIC
        c.create_topic("gone", 1)  # the name is free again, and the log starts empty
        assert c.fetch("gone", 0, 0).high_watermark == 0


def test_describe_and_alter_configs(module_broker):
    topic = ConfigResource(ConfigResourceType.TOPIC, "cfgtopic")
    with RawClient.to(module_broker) as c:
        c.create_topic("cfgtopic", 1, {"retention.ms": "60000"})
        [result] = c.request(DescribeConfigsRequest([topic])).results
        entries = {e.name: e for e in result.configs}
        assert entries["retention.ms"].value == "60000" and not entries["retention.ms"].is_default
        assert entries["segment.bytes"].is_default and entries["segment.bytes"].documentation
        alter = AlterConfigsRequest([AlterConfigsResource(ConfigResourceType.TOPIC, "cfgtopic", [
            AlterableConfig("retention.ms", AlterConfigOp.DELETE),
            AlterableConfig("max.message.bytes", AlterConfigOp.SET, "2048")])])
        assert c.request(alter).results[0].error_code == 0
        [result] = c.request(DescribeConfigsRequest([ConfigResource(
            ConfigResourceType.TOPIC, "cfgtopic", ["retention.ms", "max.message.bytes"])])).results
        assert {e.name: (e.value, e.is_default) for e in result.configs} == {
            "retention.ms": ("604800000", True), "max.message.bytes": ("2048", False)}
        # Applied to the live log: a 3 KiB batch is now too large.
        assert c.produce("cfgtopic", 0, batch([b"x" * 3000])).error_code == ErrorCode.RECORD_TOO_LARGE
        bad = c.request(AlterConfigsRequest([
            AlterConfigsResource(ConfigResourceType.TOPIC, "cfgtopic", [AlterableConfig("retention.ms", 0, "soon")]),
            AlterConfigsResource(ConfigResourceType.TOPIC, "nope", [AlterableConfig("retention.ms", 0, "1")]),
            AlterConfigsResource(ConfigResourceType.BROKER, "1", [AlterableConfig("num.partitions", 0, "3")]),
        ]))
        assert [r.error_code for r in bad.results] == [
            ErrorCode.INVALID_CONFIG, ErrorCode.UNKNOWN_TOPIC, ErrorCode.INVALID_CONFIG]
        [b] = c.request(DescribeConfigsRequest([ConfigResource(ConfigResourceType.BROKER, "1")])).results
        broker_entries = {e.name: e for e in b.configs}
        assert broker_entries["node.id"].value == "1" and broker_entries["node.id"].read_only
        assert broker_entries["log.dirs"].value == str(module_broker.data_dir)
        [missing] = c.request(DescribeConfigsRequest([ConfigResource(ConfigResourceType.TOPIC, "nope")])).results
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC


def test_produce_fetch_round_trip_and_offsets(module_broker):
    with RawClient.to(module_broker) as c:
        c.create_topic("t", 2)
        first = c.produce("t", 0, batch([b"a", b"b", b"c"]))
        second = c.produce("t", 0, batch([b"d"]))
        assert (first.error_code, first.base_offset, second.base_offset) == (0, 0, 3)
        assert first.log_start_offset == 0
        fetched = c.fetch("t", 0, 0)
        assert fetched.error_code == 0 and fetched.high_watermark == 4 and fetched.log_start_offset == 0
        assert values_of(fetched.records) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
        # A fetch from the middle of a batch returns the whole batch (the client skips).
        assert values_of(c.fetch("t", 0, 1).records)[0] == (0, b"a")
        assert c.fetch("t", 0, 4).records == b""
        assert c.fetch("t", 0, 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert c.fetch("t", 1, 0).high_watermark == 0
        assert c.fetch("t", 9, 0).error_code == ErrorCode.UNKNOWN_TOPIC


def test_produce_acks(module_broker):
    with RawClient.to(module_broker) as c:
        c.create_topic("a", 1)
        c.create_topic("strict", 1, {"min.insync.replicas": "2"})
        assert c.produce("a", 0, batch([b"0"]), acks=0) is None
        assert c.produce("a", 0, batch([b"1"]), acks=-1).base_offset == 1  # ordered after acks=0
        assert c.produce("a", 0, batch([b"x"]), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
        assert c.produce("strict", 0, batch([b"x"]), acks=-1).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert c.produce("strict", 0, batch([b"x"]), acks=1).error_code == 0
        assert c.produce("nope", 0, batch([b"x"])).error_code == ErrorCode.UNKNOWN_TOPIC
        assert c.produce("a", -1, batch([b"x"])).error_code == ErrorCode.UNKNOWN_TOPIC
        assert c.produce("a", 1, batch([b"x"])).error_code == ErrorCode.UNKNOWN_TOPIC
        assert [v for _, v in values_of(c.fetch("a", 0, 0).records)] == [b"0", b"1"]


def test_produce_many_partitions_in_one_request(module_broker):
    with RawClient.to(module_broker) as c:
        c.create_topic("m", 3)
        request = ProduceRequest(1, 5000, [ProduceTopicData("m", [
            ProducePartitionData(p, batch([f"v{p}".encode()])) for p in range(3)])])
        response = c.request(request)
        assert [(p.partition, p.error_code, p.base_offset) for p in response.topics[0].partitions] == [
            (0, 0, 0), (1, 0, 0), (2, 0, 0)]


def test_list_offsets(module_broker):
    with RawClient.to(module_broker) as c:
        c.create_topic("lo", 1)
        c.produce("lo", 0, batch([b"a", b"b"], timestamp_ms=1_000))
        c.produce("lo", 0, batch([b"c"], timestamp_ms=2_000))
        c.produce("lo", 0, batch([b"d"], timestamp_ms=3_000))

        def lookup(ts: int):
            request = ListOffsetsRequest([ListOffsetsTopic("lo", [ListOffsetsPartition(0, ts)])])
            p = c.request(request).topics[0].partitions[0]
            return p.error_code, p.offset

        assert lookup(-2) == (0, 0)
        assert lookup(-1) == (0, 4)
        assert lookup(1_500) == (0, 2)
        assert lookup(2_000) == (0, 2)
        assert lookup(3_001) == (0, -1)
        assert lookup(-7)[0] == ErrorCode.INVALID_REQUEST
        request = ListOffsetsRequest([ListOffsetsTopic("nope", [ListOffsetsPartition(0, -1)])])
        assert c.request(request).topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC


def test_delete_records_then_fetch_below_start(module_broker):
    with RawClient.to(module_broker) as c:
        c.create_topic("dr", 1)
        for i in range(5):
            c.produce("dr", 0, batch([f"{i}".encode()]))

        def delete(offset: int):
            request = DeleteRecordsRequest([DeleteRecordsTopic("dr", [DeleteRecordsPartition(0, offset)])])
            p = c.request(request).topics[0].partitions[0]
            return p.error_code, p.low_watermark

        assert delete(3) == (0, 3)
        assert delete(1) == (0, 3)  # never moves back
        assert delete(9)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert c.fetch("dr", 0, 2).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        fetched = c.fetch("dr", 0, 3)
        assert fetched.log_start_offset == 3 and [v for _, v in values_of(fetched.records)] == [b"3", b"4"]
        request = ListOffsetsRequest([ListOffsetsTopic("dr", [ListOffsetsPartition(0, -2)])])
        assert c.request(request).topics[0].partitions[0].offset == 3
        assert delete(-1) == (0, 5)  # -1: up to the high watermark


def test_pipelined_requests_answer_in_order(module_broker):
    with RawClient.to(module_broker) as c:
        c.create_topic("pipe", 1)
        requests = [ProduceRequest(1, 5000, [ProduceTopicData("pipe", [ProducePartitionData(0, batch([b"%d" % i]))])])
                    for i in range(200)]
        cids = [c.send(r) for r in requests]
        answers = [c.recv(ProduceRequest) for _ in cids]
        assert [cid for cid, _ in answers] == cids
        assert [r.topics[0].partitions[0].base_offset for _, r in answers] == list(range(200))
