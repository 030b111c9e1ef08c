"""Three real BrokerNodes in one process: leaders and followers from the metadata
image, acks=all through the produce purgatory, the high watermark, fencing, ISR
changes through AlterPartition, and truncation by leader epoch (KIP-101)."""

from __future__ import annotations

from mq.broker.node import Pending
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.metadata.records import ConfigRecord, PartitionRecord
from mq.protocol import inter_broker as ib
from mq.protocol.messages import ApiKey, MetadataRequest, ProduceResponse
from tests.unit.broker.broker_cluster import Cluster, header, produce_error

TP = TopicPartition("t", 0)


def leader_state(c: Cluster, node_id: int):
    state = c.nodes[node_id].partitions[TP].leader
    assert state is not None, f"node {node_id} does not lead {TP}"
    return state


def test_image_makes_leader_and_followers():
    c = Cluster()
    c.create_topic("t")
    assert c.nodes[1].partitions[TP].leader is not None
    for f in (2, 3):
        p = c.nodes[f].partitions[TP]
        assert p.leader is None and p.follower is not None and p.follower.leader_id == 1
    assert sorted(c.nodes[2].replicas.fetchers.fetchers) == [1]


def test_partition_not_hosted_without_a_replica_here():
    c = Cluster()
    c.create_topic("t", replicas=(1, 2))
    assert TP not in c.nodes[3].partitions
    response = c.fetch(3, "t")
    assert response.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER


def test_acks_all_waits_for_every_isr_member_then_answers():
    c = Cluster()
    c.create_topic("t")
    pending = c.produce(1, "t", b"a")
    assert isinstance(pending, Pending)
    assert leader_state(c, 1).high_watermark == 0
    # consumers never see an unreplicated record
    assert c.fetch(1, "t").topics[0].partitions[0].records == b""
    c.settle()
    response = c.result(1, pending)
    assert isinstance(response, ProduceResponse) and produce_error(response) == ErrorCode.NONE
    assert leader_state(c, 1).high_watermark == 1
    assert c.values(2, "t") == c.values(3, "t") == [b"a"]
    assert len(c.fetch(1, "t").topics[0].partitions[0].records) > 0


def test_acks_all_times_out_when_a_follower_is_gone():
    c = Cluster()
    c.create_topic("t")
    c.kill(3)
    pending = c.produce(1, "t", b"a", timeout_ms=1000)
    assert isinstance(pending, Pending)
    c.settle()
    assert c.result(1, pending) is None
    c.advance(1000)
    assert produce_error(c.result(1, pending)) == ErrorCode.REQUEST_TIMED_OUT


def test_not_enough_replicas_below_min_isr():
    c = Cluster()
    c.create_topic("t")
    c.publish([ConfigRecord("t", "min.insync.replicas", "2")])
    c.publish([PartitionRecord("t", 0, (1, 2, 3), 1, 0, (1,), 1)])
    assert produce_error(c.produce(1, "t", b"a")) == ErrorCode.NOT_ENOUGH_REPLICAS
    # acks=1 is not refused
    assert produce_error(c.produce(1, "t", b"b", acks=1)) == ErrorCode.NONE


def test_followers_answer_not_leader_naming_the_leader():
    c = Cluster()
    c.create_topic("t")
    response = c.produce(2, "t", b"a")
    assert isinstance(response, ProduceResponse)
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.NOT_LEADER and "leader is 1" in part.error_message
    assert c.fetch(3, "t").topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER


def test_consumer_fetch_is_fenced_by_leader_epoch():
    c = Cluster()
    c.create_topic("t")
    c.elect(TP, 1)  # epoch 1, same leader
    part = c.fetch(1, "t", current_leader_epoch=0).topics[0].partitions[0]
    assert part.error_code == ErrorCode.FENCED_LEADER_EPOCH
    part = c.fetch(1, "t", current_leader_epoch=2).topics[0].partitions[0]
    assert part.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert c.fetch(1, "t", current_leader_epoch=1).topics[0].partitions[0].error_code == ErrorCode.NONE


def test_losing_leadership_answers_parked_acks_all_with_not_leader():
    c = Cluster()
    c.create_topic("t")
    c.kill(3)
    pending = c.produce(1, "t", b"a")
    c.settle()
    assert c.result(1, pending) is None
    c.elect(TP, 2, isr=(2,))
    c.settle()
    assert produce_error(c.result(1, pending)) == ErrorCode.NOT_LEADER
    assert c.nodes[1].partitions[TP].follower is not None


def test_leader_election_moves_followers_and_keeps_acknowledged_records():
    c = Cluster()
    c.create_topic("t")
    for v in (b"a", b"b"):
        c.produce(1, "t", v)
        c.settle()
    c.kill(1)
    c.elect(TP, 2, isr=(2, 3))
    assert c.nodes[3].partitions[TP].follower.leader_id == 2
    assert sorted(c.nodes[3].replicas.fetchers.fetchers) == [2]
    pending = c.produce(2, "t", b"c")
    c.settle()
    assert produce_error(c.result(2, pending)) == ErrorCode.NONE
    assert c.values(2, "t") == c.values(3, "t") == [b"a", b"b", b"c"]


def test_kip101_divergent_tail_truncated_by_leader_epoch():
    c = Cluster()
    c.create_topic("t")
    c.produce(1, "t", b"a")
    c.settle()
    # Node 1 is cut off; it appends b, c with acks=1 that nobody else gets.
    c.cut |= {frozenset((1, 2)), frozenset((1, 3))}
    for v in (b"b", b"c"):
        assert produce_error(c.produce(1, "t", v, acks=1)) == ErrorCode.NONE
    c.settle()
    assert c.values(1, "t") == [b"a", b"b", b"c"]
    # The controller elects 2 (epoch 1) without telling node 1; d is committed by 2 and 3.
    c.elect(TP, 2, isr=(2, 3), to=(2, 3))
    pending = c.produce(2, "t", b"d")
    c.settle()
    assert produce_error(c.result(2, pending)) == ErrorCode.NONE
    # Healed: node 1 learns it follows 2, fetches with last epoch 0 at offset 3, is told
    # epoch 0 ends at 1 on the leader, truncates there and fetches d.
    c.cut.clear()
    c.publish([], to=(1,))
    c.settle()
    assert c.values(1, "t") == c.values(2, "t") == c.values(3, "t") == [b"a", b"d"]
    assert [e.epoch for e in c.nodes[1].partitions[TP].epoch_cache.entries] == [0, 1]


def test_isr_shrinks_for_a_dead_follower_and_releases_acks_all():
    c = Cluster(configs={"replica.lag.time.max.ms": "1000", "replica.fetch.wait.max.ms": "100"})
    c.create_topic("t")
    c.kill(3)
    pending = c.produce(1, "t", b"a", timeout_ms=60_000)
    c.settle()
    assert c.result(1, pending) is None
    c.run(2000)
    assert c.image.partition(TP).isr == (1, 2)
    assert produce_error(c.result(1, pending)) == ErrorCode.NONE
    assert c.alter_requests and c.alter_requests[0].topics[0].partitions[0].new_isr == [1, 2]


def test_isr_expands_when_a_restarted_follower_catches_up():
    c = Cluster(configs={"replica.lag.time.max.ms": "1000", "replica.fetch.wait.max.ms": "100"})
    c.create_topic("t")
    c.kill(3)
    c.run(2000)
    assert c.image.partition(TP).isr == (1, 2)
    for v in (b"a", b"b"):
        c.produce(1, "t", v)
        c.settle()
    c.restart(3)
    c.run(500)
    assert c.image.partition(TP).isr == (1, 2, 3)
    assert c.values(3, "t") == [b"a", b"b"]
    proposal = c.alter_requests[-1]
    assert proposal.broker_id == 1
    assert ib.BrokerState(3, c.epochs[3]) in proposal.topics[0].partitions[0].new_isr_with_epochs


def test_high_watermark_never_goes_back_and_consumers_stay_below_it():
    c = Cluster()
    c.create_topic("t")
    seen = 0
    for i in range(20):
        c.produce(1, "t", b"%d" % i, acks=1)
        c.step()
        hw = leader_state(c, 1).high_watermark
        assert hw >= seen
        seen = hw
        part = c.fetch(1, "t").topics[0].partitions[0]
        assert part.high_watermark == hw
        assert len(c.values(1, "t", committed_only=True)) == hw
    c.settle()
    assert leader_state(c, 1).high_watermark == 20


def test_flush_policy_always_counts_the_leader_after_its_fsync():
    c = Cluster(configs={"log.flush.policy": "always"}, auto_fsync=False)
    c.create_topic("t")
    pending = c.produce(1, "t", b"a")
    c.settle()
    # followers fetched (and fsynced) it; the leader has not fsynced yet
    assert c.values(2, "t") == [b"a"]
    assert c.nodes[2].partitions[TP].log.recovery_point == 1
    assert leader_state(c, 1).high_watermark == 0 and c.result(1, pending) is None
    c.nodes[1].group_commit(now_ms=c.now)
    c.settle()
    assert leader_state(c, 1).high_watermark == 1
    assert produce_error(c.result(1, pending)) == ErrorCode.NONE


def test_offsets_for_leader_epoch_from_the_epoch_cache():
    c = Cluster()
    c.create_topic("t")
    c.produce(1, "t", b"a")
    c.settle()
    c.elect(TP, 1)
    c.produce(1, "t", b"b")
    c.settle()
    request = ib.OffsetsForLeaderEpochRequest([ib.OffsetForLeaderTopic("t", [
        ib.OffsetForLeaderPartition(0, 0, current_leader_epoch=1),
        ib.OffsetForLeaderPartition(0, 1, current_leader_epoch=1),
        ib.OffsetForLeaderPartition(0, 0, current_leader_epoch=0),
    ])])
    response = c.nodes[1].handle(header(ApiKey.OFFSET_FOR_LEADER_EPOCH), request, now_ms=c.now)
    got = [(r.error_code, r.leader_epoch, r.end_offset) for r in response.topics[0].partitions]
    assert got == [(0, 0, 1), (0, 1, 2), (ErrorCode.FENCED_LEADER_EPOCH, -1, -1)]
    on_follower = c.nodes[2].handle(header(ApiKey.OFFSET_FOR_LEADER_EPOCH), request, now_ms=c.now)
    assert on_follower.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER


def test_metadata_answers_from_the_image():
    c = Cluster()
    c.create_topic("t")
    c.publish([PartitionRecord("t", 0, (1, 2, 3), -1, 1, (2,), 1)])
    response = c.nodes[2].handle(header(ApiKey.METADATA), MetadataRequest(None), now_ms=c.now)
    part = response.topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.leader_epoch, part.replicas, part.isr) == (
        ErrorCode.LEADER_NOT_AVAILABLE, -1, 1, [1, 2, 3], [2])
    assert response.controller_id == 100
    # a partition without a leader is neither led nor followed
    p = c.nodes[2].partitions[TP]
    assert p.leader is None and p.follower is None


def test_epoch_cache_survives_a_crash():
    c = Cluster(configs={"log.flush.policy": "always"})  # followers fsync what they fetch
    c.create_topic("t")
    c.produce(1, "t", b"a")
    c.settle()
    c.elect(TP, 1)
    c.produce(1, "t", b"b")
    c.settle()
    c.kill(2, crash=True)
    c.restart(2)
    assert [(e.epoch, e.start_offset) for e in c.nodes[2].partitions[TP].epoch_cache.entries] == [(0, 0), (1, 1)]
    c.settle()
    assert c.values(2, "t") == [b"a", b"b"]


def test_follower_losing_its_unsynced_tail_refetches_it():
    c = Cluster()  # replicated: followers do not fsync
    c.create_topic("t")
    c.produce(1, "t", b"a")
    c.settle()
    c.kill(2, crash=True)
    c.restart(2)
    assert c.nodes[2].partitions[TP].log.log_end_offset == 0
    c.settle()
    assert c.values(2, "t") == [b"a"]
    assert [e.epoch for e in c.nodes[2].partitions[TP].epoch_cache.entries] == [0]


def _check_invariants(c: Cluster, acked: dict[int, bytes], hws: dict[tuple[int, int], int]) -> None:
    leader_id = c.image.partition(TP).leader
    if leader_id in c.down:
        return
    leader = c.nodes[leader_id].partitions[TP]
    state = leader.leader
    assert state is not None
    key = (leader_id, state.leader_epoch)
    assert state.high_watermark >= hws.get(key, 0), "high watermark went back"
    hws[key] = state.high_watermark
    committed = c.values(leader_id, "t", committed_only=True)
    for offset, value in acked.items():
        assert offset < len(committed) and committed[offset] == value, f"acked record {offset} lost"
    everything = c.values(leader_id, "t")
    for node_id in c.ids:
        if node_id in c.down or node_id == leader_id:
            continue
        mine = c.values(node_id, "t")
        upto = min(len(mine), state.high_watermark)
        assert mine[:upto] == everything[:upto], f"node {node_id} diverges below the high watermark"


def test_random_leader_changes_lose_no_acknowledged_record():
    import random

    for seed in range(12):
        rnd = random.Random(seed)
        c = Cluster(configs={"replica.lag.time.max.ms": "1000", "replica.fetch.wait.max.ms": "100"})
        c.create_topic("t")
        c.publish([ConfigRecord("t", "min.insync.replicas", "2")])
        acked: dict[int, bytes] = {}
        hws: dict[tuple[int, int], int] = {}
        waiting: list[tuple[int, Pending, bytes]] = []
        for i in range(60):
            image = c.image.partition(TP)
            action = rnd.random()
            if action < 0.6 and image.leader not in c.down and image.leader >= 0:
                value = b"%d-%d" % (seed, i)
                result = c.produce(image.leader, "t", value, acks=rnd.choice((1, -1)), timeout_ms=2000)
                if isinstance(result, Pending):
                    waiting.append((image.leader, result, value))
            elif action < 0.7 and not c.down:
                victim = rnd.choice(c.ids)
                if victim == image.leader:
                    live_isr = [r for r in image.isr if r != victim]
                    if live_isr:
                        c.kill(victim, crash=rnd.random() < 0.5)
                        c.elect(TP, live_isr[0], isr=tuple(live_isr))
                else:
                    c.kill(victim, crash=rnd.random() < 0.5)
            elif action < 0.8 and c.down:
                c.restart(sorted(c.down)[0])
            c.advance(rnd.choice((0, 50, 200)))
            for node_id, pending, value in list(waiting):
                response = c.result(node_id, pending)
                if response is not None:
                    waiting.remove((node_id, pending, value))
                    part = response.topics[0].partitions[0]
                    if part.error_code == ErrorCode.NONE:
                        acked[part.base_offset] = value
            _check_invariants(c, acked, hws)
        for node_id in sorted(c.down):
            c.restart(node_id)
        c.run(3000)
        _check_invariants(c, acked, hws)
        leader_id = c.image.partition(TP).leader
        final = c.values(leader_id, "t")
        for node_id in c.ids:
            assert c.values(node_id, "t") == final, f"seed {seed}: node {node_id} differs at the end"


def test_a_follower_cut_below_its_high_watermark_counts_the_lost_offsets():
    """An unclean election (a leader from outside the ISR) makes the log shorter than
    what was committed: the follower that truncates below its high watermark counts
    the offsets it lost, per topic (mq_topic_truncated_committed_offsets)."""
    c = Cluster()
    c.create_topic("t")
    c.produce(1, "t", b"a")
    c.settle()
    c.cut |= {frozenset((1, 3)), frozenset((2, 3))}
    c.elect(TP, 1, isr=(1, 2), to=(1, 2))
    c.produce(1, "t", b"b")
    c.settle()
    c.produce(1, "t", b"b2")  # the follower learns the high watermark covering b
    c.settle()
    assert c.values(2, "t") == [b"a", b"b", b"b2"]
    committed = c.nodes[2].partitions[TP].high_watermark
    assert committed >= 2
    c.kill(1)
    c.cut.clear()
    c.elect(TP, 3, isr=(3,))  # unclean: node 3 only has a
    c.settle()
    assert c.values(2, "t") == c.values(3, "t") == [b"a"]
    lost = c.nodes[2].stats.topics["t"].truncated_committed_offsets
    assert lost == committed - 1
    assert [(cut.from_offset, cut.to_offset) for cut in c.nodes[2].take_unclean_truncations()] == [(committed, 1)]
