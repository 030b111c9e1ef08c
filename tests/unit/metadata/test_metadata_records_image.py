"""Metadata records on the wire (one Raft entry's payload) and the image they build."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.core.errors import ErrorCode, MqError
from mq.metadata.image import BrokerImage, MetadataImage
from mq.metadata.placement import assign_replicas
from mq.metadata.records import (
    NO_LEADER,
    ConfigRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    decode_batches,
    decode_record,
    decode_records,
    encode_batch,
    encode_record,
    encode_records,
)
from mq.protocol.frame import pack_header

INT = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=10)
INTS = st.lists(INT, max_size=4).map(tuple)
RECORDS = st.one_of(
    st.builds(TopicRecord, TEXT, TEXT),
    st.builds(PartitionRecord, TEXT, INT, INTS, INT, INT, INTS, INT),
    st.builds(ConfigRecord, TEXT, TEXT, st.none() | TEXT),
    st.builds(RemoveTopicRecord, TEXT, TEXT),
    st.builds(RegisterBrokerRecord, INT, INT, TEXT, TEXT, INT, st.none() | TEXT),
    st.builds(FenceBrokerRecord, INT, INT),
    st.builds(UnfenceBrokerRecord, INT, INT),
    st.builds(PartitionChangeRecord, TEXT, INT, INT, INT, INTS, INT),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(RECORDS, max_size=6))
def test_records_round_trip(records: list) -> None:
    assert decode_records(encode_records(records)) == records
    for record in records:
        assert decode_record(*encode_record(record)) == record


def test_batch_encoding_still_works_for_new_records() -> None:
    records = [RegisterBrokerRecord(1, 5, "x", "h", 1), PartitionChangeRecord("t", 0, 1, 2, (1,), 3)]
    assert decode_batches(encode_batch(records, now_ms=0)) == records


@pytest.mark.parametrize("payload", [
    b"", b"\xc1", pack_header({"a": 1}), pack_header([["Nope", {}]]), pack_header([["TopicRecord"]]),
    pack_header([["TopicRecord", {"name": 1, "topic_id": "x"}]]),
    pack_header([["TopicRecord", {"name": "a"}]]),
    pack_header([["TopicRecord", {"name": "a", "topic_id": "x", "extra": 1}]]),
    pack_header([["FenceBrokerRecord", {"broker_id": True, "broker_epoch": 0}]]),
    pack_header([["PartitionChangeRecord", {"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 0,
                                            "isr": ["1"], "partition_epoch": 0}]]),
    pack_header([[1, {}]]), pack_header([["TopicRecord", []]]),
])
def test_bad_payload_is_corrupt_message(payload: bytes) -> None:
    with pytest.raises(MqError) as info:
        decode_records(payload)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_never_escapes_as_another_exception(data: bytes) -> None:
    try:
        decode_records(data)
    except MqError as err:
        assert err.code == ErrorCode.CORRUPT_MESSAGE


def test_image_replays_broker_records_idempotently() -> None:
    register = RegisterBrokerRecord(1, 10, "a", "h", 9092, "r1")
    image = MetadataImage().apply([register])
    assert image.broker(1) == BrokerImage(1, 10, "a", "h", 9092, "r1", fenced=True)
    assert image.live_broker_ids() == []
    image = image.apply([UnfenceBrokerRecord(1, 10)])
    assert image.live_broker_ids() == [1]
    assert image.apply([register]) == image  # replaying the same registration changes nothing
    assert image.apply([UnfenceBrokerRecord(1, 9), FenceBrokerRecord(1, 9)]) == image  # stale epochs ignored
    newer = image.apply([RegisterBrokerRecord(1, 20, "b", "h", 9093)])
    assert newer.broker(1) == BrokerImage(1, 20, "b", "h", 9093, None, fenced=True)
    assert newer.apply([RegisterBrokerRecord(1, 10, "a", "h", 9092)]) == newer
    assert newer.apply([FenceBrokerRecord(1, 20)]) == newer
    assert image.apply([FenceBrokerRecord(2, 0), UnfenceBrokerRecord(2, 0)]) == image  # unknown broker


def test_image_brokers_are_sorted_and_old_image_untouched() -> None:
    image = MetadataImage().apply([RegisterBrokerRecord(b, b, "x", "h", b) for b in (3, 1, 2)])
    image = image.apply([UnfenceBrokerRecord(3, 3), UnfenceBrokerRecord(1, 1)])
    assert list(image.brokers) == [1, 2, 3]
    assert image.live_broker_ids() == [1, 3]
    before = image
    image.apply([FenceBrokerRecord(1, 1)])
    assert before.live_broker_ids() == [1, 3]


def test_partition_change_replaces_leader_and_isr() -> None:
    image = MetadataImage().apply([TopicRecord("t", "id"), PartitionRecord("t", 0, (1, 2, 3), 1, 0, (1, 2, 3), 0)])
    change = PartitionChangeRecord("t", 0, 2, 1, (2, 3), 1)
    after = image.apply([change])
    part = after.topics["t"].partitions[0]
    assert (part.replicas, part.leader, part.leader_epoch, part.isr, part.partition_epoch) == (
        (1, 2, 3), 2, 1, (2, 3), 1)
    assert after.apply([change]) == after
    # A change for a partition deleted meanwhile is dropped.
    assert image.apply([PartitionChangeRecord("t", 9, 1, 1, (1,), 1)]) == image
    gone = after.apply([RemoveTopicRecord("t", "id"), PartitionChangeRecord("t", 0, NO_LEADER, 2, (3,), 2)])
    assert gone.topics == {}


@pytest.mark.parametrize("brokers,partitions,rf", [(3, 6, 3), (5, 10, 3), (1, 4, 1), (4, 7, 2), (2, 3, 2)])
def test_placement_spreads_leaders_and_keeps_replicas_distinct(brokers: int, partitions: int, rf: int) -> None:
    ids = list(range(1, brokers + 1))
    for start in range(brokers):
        for shift in range(max(1, brokers - 1)):
            assignment = assign_replicas(ids, partitions, rf, start_index=start, shift=shift)
            leaders = [r[0] for r in assignment]
            counts = [leaders.count(b) for b in ids]
            assert max(counts) - min(counts) <= 1
            assert all(len(set(r)) == rf for r in assignment)


def test_placement_refuses_too_few_brokers() -> None:
    with pytest.raises(MqError) as info:
        assign_replicas([1, 2], 1, 3)
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
