"""Eager vs cooperative hand-off, regex subscriptions, replay after fail-over."""

from __future__ import annotations

from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol import group_messages as gm
from tests.unit.coordinator.harness import Shard, assigned, tps

COOP = ("cooperative-sticky",)


def test_eager_hands_partitions_over_in_one_generation_disjointly() -> None:
    shard = Shard()
    a = shard.answer(shard.join(client_id="a", assignors=("sticky",)))
    rb = shard.join(client_id="b", assignors=("sticky",))
    ra = shard.join(member_id=a.member_id, assignors=("sticky",))  # type: ignore[union-attr]  # revoked all first
    new_a, new_b = assigned(shard.answer(ra)), assigned(shard.answer(rb))
    assert not set(new_a) & set(new_b) and len(new_a) == len(new_b) == 3
    assert set(new_a) <= set(tps("t", 0, 1, 2, 3, 4, 5))
    assert shard.coordinator.group_states() == {"g": "Stable"}


def test_cooperative_never_gives_a_partition_its_previous_owner_still_holds() -> None:
    shard = Shard()
    first = shard.answer(shard.join(client_id="a", assignors=COOP))
    a, held_a = first.member_id, assigned(first)  # type: ignore[union-attr]
    assert len(held_a) == 6
    rb = shard.join(client_id="b", assignors=COOP)
    assert shard.heartbeat(a, 1) == ErrorCode.REBALANCE_IN_PROGRESS  # a keeps consuming meanwhile
    ra = shard.join(member_id=a, assignors=COOP, owned=held_a)
    gen2_a, gen2_b = shard.answer(ra), shard.answer(rb)
    assert gen2_a.generation_id == gen2_b.generation_id == 2  # type: ignore[union-attr]
    assert assigned(gen2_b) == ()  # everything b should get is still a's
    assert len(assigned(gen2_a)) == 3 and set(assigned(gen2_a)) < set(held_a)
    # the follow-up rebalance started at once: a revokes and rejoins, b rejoins
    assert shard.coordinator.group_states() == {"g": "PreparingRebalance"}
    b = gen2_b.member_id  # type: ignore[union-attr]
    assert shard.heartbeat(b, 2) == ErrorCode.REBALANCE_IN_PROGRESS
    rb = shard.join(member_id=b, assignors=COOP)
    ra = shard.join(member_id=a, assignors=COOP, owned=assigned(gen2_a))
    gen3_a, gen3_b = assigned(shard.answer(ra)), assigned(shard.answer(rb))
    assert gen3_a == assigned(gen2_a) and len(gen3_b) == 3 and not set(gen3_a) & set(gen3_b)
    assert shard.coordinator.group_states() == {"g": "Stable"}


def test_cooperative_withholds_what_a_member_still_reports_owning() -> None:
    """A member that missed a response still holds an older generation's partitions:
    they are not handed to anyone until it has given them up."""
    shard = Shard()
    a = shard.answer(shard.join(client_id="a", assignors=COOP)).member_id  # type: ignore[union-attr]
    rb = shard.join(client_id="b", assignors=COOP)
    shard.join(member_id=a, assignors=COOP, owned=tps("t", 0, 1, 2, 3, 4, 5))
    b = shard.answer(rb).member_id  # type: ignore[union-attr]
    # a "lost" its gen-2 answer and rejoins still claiming everything
    ra = shard.join(member_id=a, assignors=COOP, owned=tps("t", 0, 1, 2, 3, 4, 5))
    rb = shard.join(member_id=b, assignors=COOP)
    assert assigned(shard.answer(rb)) == ()
    assert len(assigned(shard.answer(ra))) == 3


def test_a_pattern_subscription_picks_up_new_topics_but_not_internal_ones() -> None:
    shard = Shard(topics={"clicks-1": 2, "__consumer_offsets": 50, "views": 1})
    first = shard.answer(shard.join(topics=(), pattern=r"clicks.*"))
    member = first.member_id  # type: ignore[union-attr]
    assert assigned(first) == tps("clicks-1", 0, 1)
    shard.advance(100)
    assert shard.heartbeat(member, 1) == ErrorCode.NONE
    shard.topics["clicks-2"] = 1
    shard.topics["__clicks"] = 1
    shard.advance(100)
    assert shard.heartbeat(member, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    again = shard.answer(shard.join(member_id=member, topics=(), pattern=r"clicks.*"))
    assert assigned(again) == (*tps("clicks-1", 0, 1), TopicPartition("clicks-2", 0))
    del shard.topics["clicks-1"]  # a deleted topic rebalances too
    shard.advance(100)
    assert shard.heartbeat(member, 2) == ErrorCode.REBALANCE_IN_PROGRESS


def test_replay_rebuilds_the_same_groups_and_members_then_heartbeat_normally() -> None:
    shard = Shard()
    a = shard.answer(shard.join(client_id="a", instance="i-a")).member_id  # type: ignore[union-attr]
    rb = shard.join(client_id="b", topics=("t", "u"))
    shard.join(member_id=a, instance="i-a")
    b = shard.answer(rb).member_id  # type: ignore[union-attr]
    shard.commit({TopicPartition("t", 1): 8}, generation=2, member_id=b)
    shard.commit({TopicPartition("t", 2): 3}, group="other")
    old = shard.coordinator
    new = shard.reload()
    assert new.group_states() == old.group_states() == {"g": "Stable", "other": "Empty"}
    assert new.group_offsets() == old.group_offsets()
    for group_id in ("g", "other"):
        before, after = old.groups[group_id], new.groups[group_id]
        assert (after.generation, after.assignor, after.leader, after.protocol_type) == (
            before.generation, before.assignor, before.leader, before.protocol_type)
        assert [m.to_metadata() for m in after.members.values()] == [m.to_metadata() for m in before.members.values()]
    assert new.groups["g"].instances == {"i-a": a}
    # members carry on; b goes silent and is removed after its session
    assert new.next_deadline_ms() == 0  # sessions start at the next call
    shard.advance(1_000)  # the sessions of loaded members start here
    for _ in range(3):
        shard.advance(3_000)
        assert shard.heartbeat(a, 2, instance="i-a") == ErrorCode.NONE
    shard.advance(1_000)
    assert shard.heartbeat(a, 2, instance="i-a") == ErrorCode.REBALANCE_IN_PROGRESS
    assert shard.heartbeat(b, 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_generation_that_could_not_be_written_is_rebalanced_again() -> None:
    shard = Shard()
    ra = shard.join(client_id="a")
    result = shard.last_result
    shard.responses.clear()
    answers = shard.coordinator.fail(result, ErrorCode.REQUEST_TIMED_OUT)
    assert answers[0][0] == ra and answers[0][1].error_code == ErrorCode.REQUEST_TIMED_OUT  # type: ignore[attr-defined]
    member = answers[0][1].member_id  # type: ignore[attr-defined]
    assert shard.coordinator.group_states() == {"g": "PreparingRebalance"}
    again = shard.answer(shard.join(member_id=member))
    assert again.generation_id == 2 and len(assigned(again)) == 6  # type: ignore[union-attr]


def test_a_cut_short_hand_off_finishes_after_a_fail_over() -> None:
    """The follow-up rebalance lives in memory; after a fail-over the new coordinator
    sees partitions nobody holds and rebalances."""
    shard = Shard()
    a = shard.answer(shard.join(client_id="a", assignors=COOP)).member_id  # type: ignore[union-attr]
    rb = shard.join(client_id="b", assignors=COOP)
    ra = shard.join(member_id=a, assignors=COOP, owned=tps("t", 0, 1, 2, 3, 4, 5))
    b = shard.answer(rb).member_id  # type: ignore[union-attr]
    assert len(assigned(shard.answer(ra))) == 3
    shard.reload()
    assert shard.coordinator.group_states() == {"g": "Stable"}
    shard.advance(10)
    assert shard.coordinator.group_states() == {"g": "PreparingRebalance"}
    assert shard.heartbeat(b, 2) == ErrorCode.REBALANCE_IN_PROGRESS
    rb2 = shard.join(member_id=b, assignors=COOP)
    assert shard.answer(rb2) is None  # waits for a
    ra = shard.join(member_id=a, assignors=COOP, owned=shard.coordinator.groups["g"].members[a].assignment)
    assert shard.coordinator.group_states() == {"g": "Stable"}
    final_a, final_b = shard.answer(ra), shard.answer(rb2)
    assert isinstance(final_a, gm.JoinGroupResponse) and final_a.generation_id == 3
    assert len(assigned(final_a)) == len(assigned(final_b)) == 3
