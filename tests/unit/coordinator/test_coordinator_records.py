"""Record encoding of __consumer_offsets and Kafka's group -> partition hash."""

from __future__ import annotations

import pytest

from mq.coordinator import CoordinatorRecord, GroupConfig, group_partition
from mq.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode,
    group_metadata_record,
    java_string_hash,
    offset_commit_record,
)
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.frame import pack_header


def test_group_partition_is_kafkas_hash() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(2**31)  # abs() of it is 0 in Kafka
    assert group_partition("polygenelubricants", 50) == 0
    assert group_partition("hello", 50) == 99162322 % 50
    assert group_partition("analytics", 50) == abs(java_string_hash("analytics")) % 50
    assert all(0 <= group_partition(f"g{i}", 7) < 7 for i in range(100))


def test_records_round_trip_and_tombstones() -> None:
    tp = TopicPartition("t", 3)
    value = OffsetCommitValue(42, 5, "meta", 1000)
    assert decode(offset_commit_record("g", tp, value)) == (OffsetCommitKey("g", tp), value)
    assert decode(offset_commit_record("g", tp, None)) == (OffsetCommitKey("g", tp), None)
    member = MemberMetadata("m-1", "i1", "c", "/h", 10_000, 5_000, ("t",), "t.*", ("range", "sticky"),
                            (TopicPartition("t", 0), TopicPartition("u", 2)))
    group = GroupMetadataValue("consumer", 7, "range", "m-1", 99, (member,))
    assert decode(group_metadata_record("g", group)) == (GroupMetadataKey("g"), group)
    assert decode(group_metadata_record("g", None)) == (GroupMetadataKey("g"), None)


def test_an_unknown_key_type_is_skipped_and_garbage_is_corrupt() -> None:
    assert decode(CoordinatorRecord(pack_header([9, "future"]), b"")) is None
    for record in (CoordinatorRecord(b"\xc1", None), CoordinatorRecord(pack_header([1, "g"]), None),
                   CoordinatorRecord(pack_header([2, "g"]), pack_header({"generation": "x"}))):
        with pytest.raises(MqError) as caught:
            decode(record)
        assert caught.value.code == ErrorCode.CORRUPT_MESSAGE


def test_group_config_from_the_broker_config() -> None:
    config = GroupConfig.from_broker(BrokerConfig(offsets_retention_minutes=2, group_initial_rebalance_delay_ms=0))
    assert config.offsets_retention_ms == 120_000 and config.initial_rebalance_delay_ms == 0
    assert config.min_session_timeout_ms == 6000
