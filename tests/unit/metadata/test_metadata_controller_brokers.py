"""Broker life cycle on the controller: registration, heartbeats, fencing on session
expiry, leader election from the ISR, restarts (new incarnations) and controlled shutdown."""

from __future__ import annotations

from metadata_harness import SESSION_MS, Harness

from mq.core.errors import ErrorCode
from mq.metadata.records import (
    NO_LEADER,
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from mq.protocol.inter_broker import (
    BrokerHeartbeatRequest,
    BrokerListener,
    BrokerRegistrationRequest,
)
from mq.protocol.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
)


def test_single_node_registers_heartbeats_unfences_and_creates_rf1_topic() -> None:
    h = Harness.create()
    epoch = h.register(1)
    assert epoch == 0
    assert h.image.broker(1).fenced
    assert h.image.live_broker_ids() == []
    # Not caught up yet (the registration is at offset 0, the broker applied nothing).
    response = h.heartbeat(1, offset=-1)
    assert (response.is_caught_up, response.is_fenced) == (False, True)
    response = h.heartbeat(1)
    assert (response.error_code, response.is_caught_up, response.is_fenced) == (ErrorCode.NONE, True, False)
    assert h.image.live_broker_ids() == [1]
    created = h.create_topic("orders", 3, 1)
    assert created.topics[0].error_code == ErrorCode.NONE
    for p in range(3):
        part = h.partition("orders", p)
        assert (part.replicas, part.leader, part.isr, part.leader_epoch, part.partition_epoch) == ((1,), 1, (1,), 0, 0)


def test_create_topics_needs_enough_live_brokers() -> None:
    h = Harness.create()
    response = h.create_topic("t", 1, 1)
    assert response.topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "0 alive" in response.topics[0].error_message
    h.start_brokers(1, 2)
    response = h.create_topic("t", 1, 3)
    assert response.topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "2 alive" in response.topics[0].error_message


def test_leaders_spread_evenly_and_replicas_are_distinct() -> None:
    for seed in range(20):
        h = Harness.create(seed=seed)
        h.start_brokers(1, 2, 3)
        assert h.create_topic("payments", 6, 3).topics[0].error_code == ErrorCode.NONE
        parts = [h.partition("payments", p) for p in range(6)]
        leaders = [p.leader for p in parts]
        assert sorted(leaders.count(b) for b in (1, 2, 3)) == [2, 2, 2]
        for part in parts:
            assert len(set(part.replicas)) == 3
            assert part.isr == part.replicas and part.leader == part.replicas[0]


def test_placement_skips_fenced_brokers() -> None:
    h = Harness.create()
    h.start_brokers(1, 2, 3)
    h.commit(h.controller.broker_heartbeat(BrokerHeartbeatRequest(2, h.epochs[2], h.next_offset, want_fence=True),
                                           now_ms=0))
    assert h.image.live_broker_ids() == [1, 3]
    h.create_topic("t", 4, 2)
    assert all(2 not in h.partition("t", p).replicas for p in range(4))


def test_session_expiry_fences_and_moves_leadership_to_isr_member() -> None:
    h = Harness.create()
    h.start_brokers(1, 2, 3)
    h.create_topic("t", 6, 3)
    before = {p: h.partition("t", p) for p in range(6)}
    h.advance(SESSION_MS + 2000, heartbeating=(1, 3))  # broker 2 goes silent
    assert h.image.broker(2).fenced
    assert h.image.live_broker_ids() == [1, 3]
    for p, old in before.items():
        new = h.partition("t", p)
        assert 2 not in new.isr and new.leader != 2
        assert new.partition_epoch == old.partition_epoch + 1
        if old.leader == 2:
            expected = next(r for r in old.replicas if r != 2)  # first live ISR member in replica order
            assert (new.leader, new.leader_epoch) == (expected, old.leader_epoch + 1)
        else:
            assert (new.leader, new.leader_epoch) == (old.leader, old.leader_epoch)


def test_isr_never_becomes_empty_and_last_member_leads_again_when_back() -> None:
    h = Harness.create()
    h.start_brokers(1, 2)
    h.create_topic("t", 2, 1)
    solo = next(p for p in range(2) if h.partition("t", p).leader == 2)
    h.advance(SESSION_MS + 2000, heartbeating=(1,))
    part = h.partition("t", solo)
    assert (part.leader, part.isr, part.leader_epoch) == (NO_LEADER, (2,), 1)
    response = h.heartbeat(2)
    assert not response.is_fenced
    part = h.partition("t", solo)
    assert (part.leader, part.isr, part.leader_epoch) == (2, (2,), 2)


def test_all_brokers_fenced_keeps_isr_nonempty() -> None:
    h = Harness.create()
    h.start_brokers(1, 2, 3)
    h.create_topic("t", 3, 3)
    h.advance(SESSION_MS * 3)
    assert h.image.live_broker_ids() == []
    for p in range(3):
        part = h.partition("t", p)
        assert part.leader == NO_LEADER and len(part.isr) == 1


def test_unclean_election_only_when_the_topic_allows_it() -> None:
    for unclean in (False, True):
        h = Harness.create()
        h.start_brokers(1, 2)
        configs = {"unclean.leader.election.enable": "true"} if unclean else {}
        h.create_topic("t", 1, 2, configs)
        leader = h.partition("t", 0).leader
        other = 3 - leader
        # The follower drops out of the ISR, then the leader dies.
        h.alter_isr(leader, "t", 0, [leader])
        h.advance(SESSION_MS + 2000, heartbeating=(other,))
        part = h.partition("t", 0)
        if unclean:
            assert (part.leader, part.isr) == (other, (other,))
        else:
            assert (part.leader, part.isr) == (NO_LEADER, (leader,))


def test_enabling_unclean_election_elects_a_leader() -> None:
    h = Harness.create()
    h.start_brokers(1, 2)
    h.create_topic("t", 1, 2)
    leader = h.partition("t", 0).leader
    other = 3 - leader
    h.alter_isr(leader, "t", 0, [leader])
    h.advance(SESSION_MS + 2000, heartbeating=(other,))
    assert h.partition("t", 0).leader == NO_LEADER
    resource = AlterConfigsResource(ConfigResourceType.TOPIC, "t", [
        AlterableConfig("unclean.leader.election.enable", AlterConfigOp.SET, "true")])
    h.commit(h.controller.alter_topic_configs(resource, validate_only=False))
    assert (h.partition("t", 0).leader, h.partition("t", 0).isr) == (other, (other,))


def test_restarted_broker_gets_higher_epoch_and_old_epoch_is_stale() -> None:
    h = Harness.create()
    h.start_brokers(1, 2, 3)
    h.create_topic("t", 3, 3)
    old_epoch = h.epochs[2]
    led = [p for p in range(3) if h.partition("t", p).leader == 2]
    new_epoch = h.register(2, incarnation="inc-2-restarted")
    assert new_epoch > old_epoch
    broker = h.image.broker(2)
    assert (broker.broker_epoch, broker.incarnation_id, broker.fenced) == (new_epoch, "inc-2-restarted", True)
    stale = h.heartbeat(2, epoch=old_epoch)
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    for p in range(3):  # the old incarnation lost its leadership and ISR seats
        part = h.partition("t", p)
        assert 2 not in part.isr and part.leader != 2
    for p in led:
        assert h.partition("t", p).leader_epoch == 1
    assert not h.heartbeat(2).is_fenced


def test_registration_retry_from_same_incarnation_is_idempotent() -> None:
    h = Harness.create()
    epoch = h.register(1)
    result = h.controller.register_broker(
        BrokerRegistrationRequest(1, "inc-1", [BrokerListener("127.0.0.1", 9091)]), next_offset=h.next_offset,
        now_ms=0)
    assert result.records == [] and result.response.broker_epoch == epoch


def test_heartbeat_from_unknown_broker_is_stale() -> None:
    h = Harness.create()
    result = h.controller.broker_heartbeat(BrokerHeartbeatRequest(9, 0, 0), now_ms=0)
    assert result.response.error_code == ErrorCode.STALE_BROKER_EPOCH and result.records == []


def test_heartbeats_keep_a_broker_alive_and_deadline_is_reported() -> None:
    h = Harness.create()
    h.start_brokers(1)
    assert h.controller.next_deadline_ms() == SESSION_MS
    h.advance(SESSION_MS * 5, heartbeating=(1,))
    assert h.image.live_broker_ids() == [1]
    assert h.controller.next_deadline_ms() == h.now_ms + SESSION_MS


def test_tick_is_idempotent_after_speculative_replay() -> None:
    h = Harness.create()
    h.start_brokers(1, 2)
    h.create_topic("t", 2, 2)
    records = h.controller.tick(SESSION_MS + 1)
    assert [type(r) for r in records if not isinstance(r, PartitionChangeRecord)] == [FenceBrokerRecord] * 2
    h.controller.replay(records)
    assert h.controller.tick(SESSION_MS + 2) == []


def test_unfence_elects_leaderless_partitions_whose_isr_holds_it() -> None:
    h = Harness.create()
    h.start_brokers(1, 2)
    h.create_topic("t", 2, 2)
    h.advance(SESSION_MS + 2000)  # both fenced
    assert all(h.partition("t", p).leader == NO_LEADER for p in range(2))
    last = {p: h.partition("t", p).isr[0] for p in range(2)}
    h.heartbeat(1)
    for p in range(2):
        expected = 1 if last[p] == 1 else NO_LEADER
        assert h.partition("t", p).leader == expected


def test_inactive_controller_does_not_fence_and_activation_restarts_sessions() -> None:
    h = Harness.create()
    h.start_brokers(1)
    committed = h.image
    h.controller.reset(committed)
    assert h.controller.tick(10 * SESSION_MS) == [] and h.controller.next_deadline_ms() is None
    h.controller.activate(10 * SESSION_MS)
    assert h.controller.tick(10 * SESSION_MS + 1) == []
    assert h.controller.next_deadline_ms() == 11 * SESSION_MS


def test_reset_drops_speculative_records() -> None:
    h = Harness.create()
    h.start_brokers(1)
    committed = h.image
    h.create_topic("t", 1, 1)
    assert "t" in h.image.topics
    h.controller.reset(committed)
    assert "t" not in h.controller.image.topics


def test_two_requests_before_commit_see_each_other() -> None:
    h = Harness.create()
    h.start_brokers(1)
    h.create_topic("t", 1, 1)
    again = h.create_topic("t", 1, 1)
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_controlled_shutdown_moves_leadership_then_says_shut_down() -> None:
    h = Harness.create()
    h.start_brokers(1, 2, 3)
    h.create_topic("t", 6, 3)
    before = {p: h.partition("t", p) for p in range(6)}
    first = h.heartbeat(2, want_shutdown=True)
    assert (first.is_fenced, first.should_shutdown) == (False, False)
    for p, old in before.items():
        new = h.partition("t", p)
        assert new.leader != 2 and 2 not in new.isr and new.isr
        if old.leader == 2:
            assert new.leader_epoch == old.leader_epoch + 1
    second = h.heartbeat(2, want_shutdown=True)
    assert (second.is_fenced, second.should_shutdown) == (False, True)  # nothing left to move
    # It exits; its session runs out and the controller fences it.
    h.now_ms += SESSION_MS + 1
    h.heartbeat(1)
    h.heartbeat(3)
    h.propose(h.controller.tick(h.now_ms))
    assert h.log[-1][0] == FenceBrokerRecord(2, h.epochs[2])
    # Broker 1 dies too: broker 3 (the last live ISR member) leads everything.
    h.now_ms += SESSION_MS + 1
    h.heartbeat(3)
    h.propose(h.controller.tick(h.now_ms))
    assert [h.partition("t", p).leader for p in range(6)] == [3] * 6


def test_controlled_shutdown_keeps_leading_what_nobody_else_can_take() -> None:
    h = Harness.create()
    h.start_brokers(1)
    h.create_topic("t", 2, 1)
    response = h.heartbeat(1, want_shutdown=True)
    assert (response.should_shutdown, response.is_fenced) == (True, False)
    for p in range(2):  # still led by it while it drains; fenced (leaderless) once it is gone
        part = h.partition("t", p)
        assert (part.leader, part.isr) == (1, (1,))


def test_records_of_registration_and_unfence() -> None:
    h = Harness.create()
    h.register(4)
    h.heartbeat(4)
    assert h.log == [[RegisterBrokerRecord(4, 0, "inc-4", "127.0.0.1", 9094, None)],
                     [UnfenceBrokerRecord(4, 0)]]


def test_shutting_down_broker_is_not_elected_until_it_calls_shutdown_off() -> None:
    h = Harness.create()
    h.start_brokers(1, 2)
    h.create_topic("t", 1, 2)
    leader = h.partition("t", 0).leader
    other = 3 - leader
    h.controller.sessions.set_shutting_down(other, True)  # asked, but its first heartbeat is still in flight
    h.now_ms += SESSION_MS + 1
    h.controller.sessions.touch(other, h.now_ms)
    h.propose(h.controller.tick(h.now_ms))  # the leader's session expired
    part = h.partition("t", 0)
    assert (part.leader, part.isr) == (NO_LEADER, (other,))
    h.heartbeat(other)  # want_shutdown=False: called off
    part = h.partition("t", 0)
    assert (part.leader, part.isr, part.leader_epoch) == (other, (other,), 2)
