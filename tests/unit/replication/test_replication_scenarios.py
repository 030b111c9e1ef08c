"""The two classic data-loss scenarios of Kafka's replication, replayed step by step.

KIP-101: truncating a restarted follower to its (stale) high watermark loses an
acknowledged record once that follower is elected; truncating by leader epoch keeps it.
KIP-279: after several leader changes in quick succession one OffsetsForLeaderEpoch
round trip is not enough; the follower must walk back epoch by epoch, or the replicas
diverge below the high watermark for good.
"""

from __future__ import annotations

from replication_harness import Cluster

from mq.core.errors import ErrorCode
from mq.core.types import Acks


def replicate(c: Cluster, *followers: int, rounds: int = 3) -> None:
    for _ in range(rounds):
        for f in followers:
            c.fetch(f)


def kip101_setup() -> Cluster:
    """A leads, B follows; m1 and m2 acknowledged with acks=all (min ISR 2), but the
    fetch response that would carry HW=2 to B is lost and B restarts with HW=1."""
    c = Cluster((1, 2), min_insync_replicas=2)
    assert c.produce(1, "m1") == 0
    replicate(c, 2, rounds=2)
    assert c.brokers[1].high_watermark == 1 and c.brokers[2].high_watermark == 1
    assert c.produce(1, "m2") == 1
    c.fetch(2)  # B gets m2; the response carries HW 1
    assert c.brokers[2].log.values() == ["m1", "m2"] and c.brokers[2].high_watermark == 1
    flight = c.send_fetch(2)
    assert flight is not None
    c.serve(flight)  # A hears B at offset 2: HW 2, m2 is acknowledged ...
    assert c.brokers[1].leader is not None
    assert c.brokers[1].leader.check_acks_all(2) == ErrorCode.NONE
    # ... and the response carrying HW 2 never reaches B: B restarts from its checkpoint.
    c.restart(2, hw_checkpoint=1)
    assert c.brokers[2].high_watermark == 1
    return c


def test_kip101_truncation_by_leader_epoch_keeps_the_acked_record() -> None:
    c = kip101_setup()
    outcome = c.fetch(2)  # B's first fetch after the restart names its last epoch
    assert outcome is not None and outcome.truncated_to is None
    assert c.brokers[2].log.values() == ["m1", "m2"]
    # A crashes; the controller elects B (in the ISR) and fences A out of it.
    c.elect(2, remove_old=True)
    c.learn(2)
    new_leader = c.brokers[2]
    assert new_leader.leader is not None and new_leader.leader.leader_epoch == 1
    assert new_leader.log.values() == ["m1", "m2"]
    assert new_leader.high_watermark == 2
    # A comes back as a follower: its log agrees, nothing is truncated.
    c.learn(1)
    outcome = c.fetch(1)
    assert outcome is not None and outcome.truncated_to is None
    assert c.brokers[1].log.entries() == new_leader.log.entries()


def test_kip101_restart_then_leader_crash_keeps_the_acked_record() -> None:
    """The exact KIP-101 order: B restarts, A dies before B fetches again."""
    c = kip101_setup()
    c.elect(2, remove_old=True)
    c.learn(2)
    assert c.brokers[2].log.values() == ["m1", "m2"]
    assert c.produce(2, "m3") == ErrorCode.NOT_ENOUGH_REPLICAS  # ISR {B} < min.insync 2
    assert c.produce(2, "m3", acks=Acks.LEADER) == 2
    c.learn(1)
    replicate(c, 1)
    assert c.brokers[1].log.values() == ["m1", "m2", "m3"]


def test_kip101_truncation_by_high_watermark_loses_the_acked_record() -> None:
    """The pre-KIP-101 rule, applied by hand to the same history: the loss is real."""
    c = kip101_setup()
    b = c.brokers[2]
    b.log.truncate_to(b.high_watermark)  # "truncate to HW on restart"
    b.cache.truncate_from_end(b.log.log_end_offset)
    c.elect(2, remove_old=True)
    c.learn(2)
    assert b.log.values() == ["m1"]  # m2 was acknowledged to the producer and is gone
    assert c.produce(2, "m3", acks=Acks.LEADER) == 1  # ... and offset 1 now holds another record
    c.learn(1)
    replicate(c, 1)
    assert c.brokers[1].log.values() == ["m1", "m3"]


def kip279_history() -> Cluster:
    """Five committed records from A (epoch 0), then four leader changes in a row with
    no fetch in between: B (epoch 1) writes 5-7, C (2) writes 5-8, B (3) writes 8,
    C (4) writes 9. B and C now disagree on 5-8 and share no epoch above 0 there."""
    c = Cluster((1, 2, 3))
    for i in range(5):
        assert c.produce(1, f"a{i}") == i
    replicate(c, 2, 3)
    assert c.brokers[1].high_watermark == 5
    c.elect(2, remove_old=True)
    c.learn(2)
    for i in range(3):
        c.produce(2, f"b1-{i}")
    c.elect(3)
    c.learn(3)
    for i in range(4):
        c.produce(3, f"c2-{i}")
    c.elect(2)
    c.learn(2)
    c.produce(2, "b3")
    c.elect(3)
    c.learn(3)
    c.produce(3, "c4")
    assert [(e.epoch, e.start_offset) for e in c.brokers[2].cache.entries] == [(0, 0), (1, 5), (3, 8)]
    assert [(e.epoch, e.start_offset) for e in c.brokers[3].cache.entries] == [(0, 0), (2, 5), (4, 9)]
    return c


def test_kip279_follower_walks_back_epoch_by_epoch() -> None:
    c = kip279_history()
    c.learn(2)
    first = c.fetch(2)
    assert first is not None
    assert (first.truncated_to, first.truncation_complete) == (8, False)  # epoch 2 unknown here
    second = c.fetch(2)
    assert second is not None
    assert (second.truncated_to, second.truncation_complete) == (5, True)  # epoch 0 ends at 5 on both
    c.heal()
    leader_entries = c.brokers[3].log.entries()
    for broker_id in (1, 2):
        assert c.brokers[broker_id].log.entries() == leader_entries
    assert c.brokers[3].log.values()[:5] == [f"a{i}" for i in range(5)]
    assert all(c.brokers[b].high_watermark == 10 for b in (1, 2, 3))


def test_kip279_single_round_truncation_diverges_below_the_high_watermark() -> None:
    """KIP-101's first design: ask the leader for the end of our last epoch once and
    truncate to min(answer, our end), ignoring which epoch answered. B keeps 5-8."""
    c = kip279_history()
    b, leader = c.brokers[2], c.brokers[3]
    answer = leader.cache.end_offset_for(b.cache.latest_epoch, leader.log.log_end_offset)
    b.log.truncate_to(min(answer.end_offset, b.log.log_end_offset))
    assert b.log.log_end_offset == 9  # nothing was cut
    b.log.append_as_follower(leader.log.read(9))
    mine = {o: v for o, _, v in b.log.entries()}
    theirs = {o: v for o, _, v in leader.log.entries()}
    assert [o for o in range(10) if mine[o] != theirs[o]] == [5, 6, 7, 8]
