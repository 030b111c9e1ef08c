"""AlterPartition on the controller: Kafka's checks, in Kafka's order, and the
partition epoch bump of an accepted ISR change."""

from __future__ import annotations

from metadata_harness import SESSION_MS, Harness

from mq.core.errors import ErrorCode
from mq.metadata.records import PartitionChangeRecord
from mq.protocol.inter_broker import (
    AlterPartitionPartition,
    AlterPartitionRequest,
    AlterPartitionTopic,
    BrokerState,
)


def three_brokers() -> tuple[Harness, int, tuple[int, ...]]:
    h = Harness.create()
    h.start_brokers(1, 2, 3)
    h.create_topic("t", 1, 3)
    part = h.partition("t", 0)
    return h, part.leader, part.replicas


def result_of(response):  # type: ignore[no-untyped-def]
    assert response.error_code == ErrorCode.NONE
    return response.topics[0].partitions[0]


def test_shrink_then_expand_bumps_partition_epoch_only() -> None:
    h, leader, replicas = three_brokers()
    follower = replicas[2]
    shrunk = [r for r in replicas if r != follower]
    result = result_of(h.alter_isr(leader, "t", 0, shrunk))
    assert (result.error_code, result.leader_id, result.leader_epoch, result.isr, result.partition_epoch) == (
        ErrorCode.NONE, leader, 0, shrunk, 1)
    assert h.log[-1] == [PartitionChangeRecord("t", 0, leader, 0, tuple(shrunk), 1)]
    result = result_of(h.alter_isr(leader, "t", 0, list(replicas)))
    assert (result.error_code, result.partition_epoch) == (ErrorCode.NONE, 2)
    assert h.partition("t", 0).isr == replicas


def test_unchanged_isr_writes_nothing() -> None:
    h, leader, replicas = three_brokers()
    result = h.controller.alter_partition(_request(h, leader, list(replicas)), now_ms=0)
    assert result.records == []
    assert result_of(result.response).partition_epoch == 0


def _request(h: Harness, leader: int, isr: list[int]):  # type: ignore[no-untyped-def]
    part = h.partition("t", 0)
    return AlterPartitionRequest(leader, h.epochs[leader], [AlterPartitionTopic("t", [
        AlterPartitionPartition(0, part.leader_epoch, isr, part.partition_epoch)])])


def test_zombie_leader_with_old_leader_epoch_is_fenced() -> None:
    h, old_leader, replicas = three_brokers()
    # The leader misses its session; another ISR member takes over with epoch 1.
    others = tuple(r for r in replicas if r != old_leader)
    h.advance(SESSION_MS + 2000, heartbeating=others)
    assert h.partition("t", 0).leader_epoch == 1
    h.heartbeat(old_leader)  # back, unfenced, but no longer leader
    result = result_of(h.alter_isr(old_leader, "t", 0, [old_leader], leader_epoch=0))
    assert result.error_code == ErrorCode.FENCED_LEADER_EPOCH
    # Right epoch but not the leader: fenced too.
    result = result_of(h.alter_isr(old_leader, "t", 0, [old_leader]))
    assert result.error_code == ErrorCode.FENCED_LEADER_EPOCH


def test_newer_leader_epoch_than_the_controller_knows() -> None:
    h, leader, _ = three_brokers()
    result = result_of(h.alter_isr(leader, "t", 0, [leader], leader_epoch=5))
    assert result.error_code == ErrorCode.NOT_CONTROLLER


def test_stale_partition_epoch_is_invalid_update_version() -> None:
    h, leader, replicas = three_brokers()
    result_of(h.alter_isr(leader, "t", 0, [leader, replicas[1]]))
    result = result_of(h.alter_isr(leader, "t", 0, [leader], partition_epoch=0))
    assert result.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert h.partition("t", 0).isr == (leader, replicas[1])


def test_stale_sender_broker_epoch_fails_the_whole_request() -> None:
    h, leader, _ = three_brokers()
    response = h.alter_isr(leader, "t", 0, [leader], broker_epoch=h.epochs[leader] + 100)
    assert response.error_code == ErrorCode.STALE_BROKER_EPOCH and response.topics == []


def test_unknown_topic_and_partition() -> None:
    h, leader, _ = three_brokers()
    request = AlterPartitionRequest(leader, h.epochs[leader], [
        AlterPartitionTopic("nope", [AlterPartitionPartition(0, 0, [leader], 0)]),
        AlterPartitionTopic("t", [AlterPartitionPartition(7, 0, [leader], 0)]),
    ])
    response = h.commit(h.controller.alter_partition(request, now_ms=0))
    assert [t.partitions[0].error_code for t in response.topics] == [ErrorCode.UNKNOWN_TOPIC] * 2


def test_ineligible_replicas() -> None:
    h, leader, replicas = three_brokers()
    follower = replicas[1]
    # Not a replica at all.
    h.start_brokers(4)
    assert result_of(h.alter_isr(leader, "t", 0, [leader, 4])).error_code == ErrorCode.INELIGIBLE_REPLICA
    # A stale broker epoch for a member (KIP-903): it restarted since the leader saw it.
    stale = [BrokerState(leader, h.epochs[leader]), BrokerState(follower, h.epochs[follower] + 1000)]
    assert result_of(h.alter_isr(leader, "t", 0, [leader, follower], with_epochs=stale)).error_code == (
        ErrorCode.INELIGIBLE_REPLICA)
    # A fenced member.
    h.heartbeat(follower, want_fence=True)
    isr = list(h.partition("t", 0).isr) + [follower]
    assert result_of(h.alter_isr(leader, "t", 0, isr)).error_code == ErrorCode.INELIGIBLE_REPLICA
    # Current epochs of live members are fine.
    h.heartbeat(follower)
    good = [BrokerState(r, h.epochs[r]) for r in replicas]
    assert result_of(h.alter_isr(leader, "t", 0, list(replicas), with_epochs=good)).error_code == ErrorCode.NONE


def test_malformed_isr_is_invalid_request() -> None:
    h, leader, replicas = three_brokers()
    others = [r for r in replicas if r != leader]
    for isr in ([], others, [leader, leader]):
        assert result_of(h.alter_isr(leader, "t", 0, isr)).error_code == ErrorCode.INVALID_REQUEST


def test_isr_shrink_then_leader_fenced_keeps_isr_nonempty() -> None:
    h, leader, replicas = three_brokers()
    result_of(h.alter_isr(leader, "t", 0, [leader]))
    others = tuple(r for r in replicas if r != leader)
    h.advance(SESSION_MS + 2000, heartbeating=others)
    part = h.partition("t", 0)
    assert part.isr == (leader,) and part.leader == -1


def test_bump_leader_epoch_starts_a_new_epoch_with_the_same_leader_and_isr() -> None:
    """mq's MirrorTruncate: the leader cut its log and needs a new epoch starting there."""
    h, leader, replicas = three_brokers()
    part = h.partition("t", 0)
    request = AlterPartitionRequest(leader, h.epochs[leader], [AlterPartitionTopic("t", [
        AlterPartitionPartition(0, part.leader_epoch, list(replicas), part.partition_epoch,
                                bump_leader_epoch=True)])])
    result = h.controller.alter_partition(request, now_ms=0)
    assert result.records == [PartitionChangeRecord("t", 0, leader, 1, replicas, 1)]
    answer = result_of(result.response)
    assert (answer.leader_id, answer.leader_epoch, answer.isr, answer.partition_epoch) == (leader, 1, list(replicas), 1)
    # a zombie asking with the old epoch is fenced like any AlterPartition
    h.controller.replay(result.records)
    stale = h.controller.alter_partition(request, now_ms=0)
    assert stale.records == [] and result_of(stale.response).error_code == ErrorCode.FENCED_LEADER_EPOCH
