"""The assignors: Kafka's documented layouts, and properties over random groups.

Properties (hypothesis): every partition of every subscribed topic is assigned exactly
once and only to a subscribed member; round-robin and the sticky assignors are balanced
within one when all members subscribe to the same topics; range has Kafka's per-topic
layout; sticky moves the minimum number of partitions (join, leave, any previous
ownership); the cooperative hand-off never assigns a partition another member still
owns and completes in the next generation.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.coordinator.assignors import (
    ASSIGNORS,
    MemberSubscription,
    assign,
    cooperative_withhold,
    is_cooperative,
    validate,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

FAST = settings(max_examples=100, deadline=None)
BALANCED = ("round-robin", "sticky", "cooperative-sticky")
STICKY = ("sticky", "cooperative-sticky")


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def member(member_id: str, *topics: str, instance: str | None = None,
           owned: tuple[TopicPartition, ...] = ()) -> MemberSubscription:
    return MemberSubscription(member_id, instance, tuple(sorted(topics)), owned)


def all_partitions(partitions_per_topic, topics) -> set[TopicPartition]:
    return {tp(t, p) for t in topics for p in range(partitions_per_topic.get(t, 0))}


# --- strategies -------------------------------------------------------------------------

TOPIC_POOL = ("a", "b", "clicks", "t0", "t1", "zeta")
ID_POOL = ("m0", "m1", "m10", "m2", "a", "b-1", "consumer-x", "z", "Z", "0")
partition_counts = st.dictionaries(st.sampled_from(TOPIC_POOL), st.integers(0, 12), min_size=1,
                                   max_size=4)
member_ids = st.lists(st.sampled_from(ID_POOL), min_size=1, max_size=8, unique=True)
masks = st.lists(st.integers(0, 31), min_size=8, max_size=8)  # subscription and static bits
seeds = st.integers(0, 2**32 - 1)


@st.composite
def groups(draw, *, same_topics: bool = False, with_owned: bool = True):
    """(members, partitions_per_topic): ids in any order, static members, subscriptions
    that may name a topic that does not exist, and (optionally) disjoint previous owners
    that may name partitions that no longer exist. Few, module-level strategies keep
    generation cheap."""
    counts = draw(partition_counts)
    names = sorted(counts) + ["ghost"]  # "ghost" has no partition count: ignored
    ids = draw(member_ids)
    bits = draw(masks)
    shared = bits[-1] | 1
    members = []
    for k, member_id in enumerate(ids):
        mask = shared if same_topics else bits[k]
        topics = tuple(t for i, t in enumerate(names) if mask >> i & 1)
        static = bool(bits[k] >> 4 & 1)
        members.append(MemberSubscription(member_id, f"i-{member_id}" if static else None, topics))
    if with_owned:
        rng = random.Random(draw(seeds))
        owners = [None, *ids]
        universe = sorted({tp(t, p) for t in names for p in range(14)})
        owner = {x: rng.choice(owners) for x in universe}
        members = [MemberSubscription(m.member_id, m.group_instance_id, m.topics,
                                      tuple(x for x in universe if owner[x] == m.member_id))
                   for m in members]
    return members, counts


def check_complete(result, members, partitions_per_topic):
    """Every partition of a subscribed topic exactly once, only to a subscriber; every
    member present; lists sorted."""
    assert sorted(result) == sorted(m.member_id for m in members)
    topics_of = {m.member_id: set(m.topics) for m in members}
    seen: list[TopicPartition] = []
    for member_id, assigned in result.items():
        assert assigned == sorted(assigned)
        for x in assigned:
            assert x.topic in topics_of[member_id], (member_id, x)
        seen.extend(assigned)
    subscribed = {t for m in members for t in m.topics}
    assert sorted(seen) == sorted(all_partitions(partitions_per_topic, subscribed))


def moved(before: dict[str, tuple[TopicPartition, ...]], after: dict[str, list[TopicPartition]]) -> int:
    """Previously owned partitions that now belong to someone else (or nobody)."""
    owner_now = {x: mid for mid, assigned in after.items() for x in assigned}
    return sum(1 for mid, owned in before.items() for x in owned if owner_now.get(x) != mid)


def minimum_moves(kept_counts: list[int], total: int) -> int:
    """Fewest kept partitions that must move to reach counts within one: the n % m
    largest holders may keep quota + 1, the others quota."""
    quota, extra = divmod(total, len(kept_counts))
    ordered = sorted(kept_counts, reverse=True)
    return sum(max(0, c - (quota + 1 if i < extra else quota)) for i, c in enumerate(ordered))


# --- names ------------------------------------------------------------------------------


def test_names_and_validate():
    assert ASSIGNORS == ("range", "round-robin", "sticky", "cooperative-sticky")
    for name in ASSIGNORS:
        validate(name)
    assert is_cooperative("cooperative-sticky") and not is_cooperative("sticky")


@pytest.mark.parametrize("name", ["", "roundrobin", "Range", "uniform"])
def test_unknown_assignor_is_an_inconsistent_protocol(name):
    with pytest.raises(MqError) as raised:
        validate(name)
    assert raised.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    with pytest.raises(MqError) as raised:
        assign(name, [member("m1", "a")], {"a": 1})
    assert raised.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("name", ASSIGNORS)
def test_edge_cases(name):
    assert assign(name, [], {"a": 3}) == {}
    # Unknown and empty topics are ignored; a member with nothing to take is present.
    result = assign(name, [member("m1", "ghost"), member("m2", "a", "empty")], {"a": 2, "empty": 0})
    assert result == {"m1": [], "m2": tps("a", 0, 1)}
    with pytest.raises(ValueError):
        assign(name, [member("m1", "a"), member("m1", "a")], {"a": 1})


# --- Kafka's documented layouts -------------------------------------------------------------


def test_range_kafka_javadoc_example():
    # RangeAssignor javadoc: two consumers, t0 and t1 with three partitions each.
    result = assign("range", [member("C1", "t0", "t1"), member("C0", "t0", "t1")], {"t0": 3, "t1": 3})
    assert result == {"C0": tps("t0", 0, 1) + tps("t1", 0, 1), "C1": tps("t0", 2) + tps("t1", 2)}


def test_range_orders_static_members_first_by_instance_id():
    members = [member("a-dynamic", "t"), member("z-member", "t", instance="i1"),
               member("b-member", "t", instance="i2")]
    result = assign("range", members, {"t": 7})
    assert result == {"z-member": tps("t", 0, 1, 2), "b-member": tps("t", 3, 4),
                      "a-dynamic": tps("t", 5, 6)}


def test_round_robin_kafka_javadoc_examples():
    both = [member("C0", "t0", "t1"), member("C1", "t0", "t1")]
    assert assign("round-robin", both, {"t0": 3, "t1": 3}) == {
        "C0": tps("t0", 0, 2) + tps("t1", 1), "C1": tps("t0", 1) + tps("t1", 0, 2)}
    # Unequal subscriptions: members not subscribed to a topic are skipped.
    unequal = [member("C2", "t0", "t1", "t2"), member("C0", "t0"), member("C1", "t0", "t1")]
    assert assign("round-robin", unequal, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": tps("t0", 0), "C1": tps("t1", 0), "C2": tps("t1", 1) + tps("t2", 0, 1, 2)}


def test_sticky_kafka_javadoc_example():
    # StickyAssignor javadoc: C0..C2 share t0..t3 (2 partitions each), then C1 leaves:
    # round-robin would move 5 partitions, sticky moves only C1's 3... here C1 held 3 of 8.
    members = [member(m, "t0", "t1", "t2", "t3") for m in ("C0", "C1", "C2")]
    counts = {t: 2 for t in ("t0", "t1", "t2", "t3")}
    first = assign("sticky", members, counts)
    assert sorted(len(v) for v in first.values()) == [2, 3, 3]
    survivors = [member(m, "t0", "t1", "t2", "t3", owned=tuple(first[m])) for m in ("C0", "C2")]
    second = assign("sticky", survivors, counts)
    for m in ("C0", "C2"):
        assert set(first[m]) <= set(second[m])
    assert sorted(len(v) for v in second.values()) == [4, 4]


# --- properties -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ASSIGNORS)
@FAST
@given(group=groups())
def test_every_partition_exactly_once_to_a_subscriber(name, group):
    members, counts = group
    check_complete(assign(name, members, counts), members, counts)


@pytest.mark.parametrize("name", ASSIGNORS)
@FAST
@given(group=groups(), data=st.data())
def test_deterministic_whatever_the_input_order(name, group, data):
    members, counts = group
    shuffled = data.draw(st.permutations(members))
    assert assign(name, shuffled, counts) == assign(name, members, counts)


@pytest.mark.parametrize("name", BALANCED)
@FAST
@given(group=groups(same_topics=True))
def test_balanced_within_one_with_identical_subscriptions(name, group):
    members, counts = group
    sizes = [len(v) for v in assign(name, members, counts).values()]
    assert max(sizes) - min(sizes) <= 1, sizes


@FAST
@given(group=groups(with_owned=False))
def test_range_per_topic_layout(group):
    """Per topic: the subscribers in Kafka's member order hold consecutive ranges, the
    first n % k of them one partition more."""
    members, counts = group
    result = assign("range", members, counts)
    order = sorted(members, key=lambda m: (0, m.group_instance_id, m.member_id)
                   if m.group_instance_id is not None else (1, m.member_id, ""))
    for topic in sorted({t for m in members for t in m.topics}):
        n = counts.get(topic, 0)
        subscribers = [m.member_id for m in order if topic in m.topics]
        per, extra = divmod(n, len(subscribers))
        expected: list[int] = []
        for i, member_id in enumerate(subscribers):
            got = [x.partition for x in result[member_id] if x.topic == topic]
            size = per + (1 if i < extra else 0)
            assert got == list(range(len(expected), len(expected) + size)), (topic, member_id, got)
            expected.extend(got)
        assert expected == list(range(n))


@pytest.mark.parametrize("name", STICKY)
@FAST
@given(group=groups())
def test_sticky_is_balanced_in_kafkas_sense(name, group):
    """No member holds two more than another member that could take one of its
    partitions (Kafka's AbstractStickyAssignor.isBalanced)."""
    members, counts = group
    result = assign(name, members, counts)
    topics_of = {m.member_id: set(m.topics) for m in members}
    for donor, held in result.items():
        for taker, other in result.items():
            if len(held) > len(other) + 1:
                assert not any(x.topic in topics_of[taker] for x in held), (donor, taker)


@pytest.mark.parametrize("name", STICKY)
@FAST
@given(group=groups(same_topics=True))
def test_sticky_moves_the_minimum_from_any_previous_ownership(name, group):
    members, counts = group
    result = assign(name, members, counts)
    valid = all_partitions(counts, members[0].topics)
    before = {m.member_id: tuple(x for x in m.owned if x in valid) for m in members}
    assert moved(before, result) == minimum_moves([len(v) for v in before.values()], len(valid))


@pytest.mark.parametrize("name", STICKY)
@FAST
@given(group=groups(same_topics=True, with_owned=False), newcomer=st.sampled_from(["new", "a0", "zz"]))
def test_sticky_join_moves_the_minimum(name, group, newcomer):
    members, counts = group
    previous = assign(name, members, counts)
    rejoined = [MemberSubscription(m.member_id, m.group_instance_id, m.topics, tuple(previous[m.member_id]))
                for m in members]
    joined = [*rejoined, MemberSubscription(newcomer, None, members[0].topics)]
    result = assign(name, joined, counts)
    total = sum(len(v) for v in previous.values())
    owned = {m.member_id: m.owned for m in joined}
    assert moved(owned, result) == minimum_moves([len(v) for v in owned.values()], total)
    sizes = [len(v) for v in result.values()]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("name", STICKY)
@FAST
@given(group=groups(same_topics=True, with_owned=False), data=st.data())
def test_sticky_leave_moves_only_the_leavers_partitions(name, group, data):
    members, counts = group
    previous = assign(name, members, counts)
    leaver = data.draw(st.sampled_from(members))
    stay = [MemberSubscription(m.member_id, m.group_instance_id, m.topics, tuple(previous[m.member_id]))
            for m in members if m is not leaver]
    result = assign(name, stay, counts)
    for m in stay:
        assert set(m.owned) <= set(result[m.member_id]), m.member_id
    check_complete(result, stay, counts)


@pytest.mark.parametrize("name", STICKY)
@FAST
@given(group=groups(with_owned=False))
def test_sticky_is_stable_when_nothing_changes(name, group):
    members, counts = group
    first = assign(name, members, counts)
    again = [MemberSubscription(m.member_id, m.group_instance_id, m.topics, tuple(first[m.member_id]))
             for m in members]
    assert assign(name, again, counts) == first


def test_sticky_double_claim_is_reassigned_once():
    members = [member("m1", "t", owned=(tp("t", 0),)), member("m2", "t", owned=(tp("t", 0), tp("t", 1)))]
    result = assign("sticky", members, {"t": 2})
    assert result == {"m1": tps("t", 0), "m2": tps("t", 1)}


def test_sticky_scales_to_a_large_group():
    counts = {f"t{i}": 50 for i in range(20)}  # 1,000 partitions, 100 members
    members = [member(f"m{i:03}", *counts) for i in range(100)]
    first = assign("sticky", members, counts)
    rejoined = [member(m.member_id, *counts, owned=tuple(first[m.member_id])) for m in members[1:]]
    rejoined.append(member("new", *counts))
    result = assign("sticky", rejoined, counts)
    assert sorted({len(v) for v in result.values()}) == [10]


# --- cooperative (KIP-429) ----------------------------------------------------------------


def test_cooperative_withhold_example():
    target = {"m1": tps("t", 0, 1), "m2": tps("t", 2, 3), "m3": tps("t", 4)}
    owned = {"m1": tps("t", 0, 1, 2), "m2": tps("t", 3, 4), "m3": []}
    assert cooperative_withhold(target, owned) == {"m1": tps("t", 0, 1), "m2": tps("t", 3),
                                                   "m3": []}


@FAST
@given(group=groups())
def test_cooperative_never_assigns_a_partition_still_owned_by_another(group):
    members, counts = group
    target = assign("cooperative-sticky", members, counts)
    owned = {m.member_id: m.owned for m in members}
    granted = cooperative_withhold(target, owned)
    owner = {x: mid for mid, held in owned.items() for x in held}
    for member_id, assigned in granted.items():
        assert set(assigned) <= set(target[member_id])
        for x in assigned:
            assert owner.get(x, member_id) == member_id, (member_id, x)
    # Withholding only ever removes partitions another member owns.
    for member_id in target:
        for x in set(target[member_id]) - set(granted[member_id]):
            assert owner[x] != member_id


@FAST
@given(group=groups(same_topics=True))
def test_cooperative_hand_off_completes_in_the_next_generation(group):
    """Generation 1 grants the target minus partitions others still own; the owners
    revoke them; generation 2 (owners = what generation 1 granted) withholds nothing."""
    members, counts = group
    target = assign("cooperative-sticky", members, counts)
    granted = cooperative_withhold(target, {m.member_id: m.owned for m in members})
    second = [MemberSubscription(m.member_id, m.group_instance_id, m.topics, tuple(granted[m.member_id]))
              for m in members]
    target2 = assign("cooperative-sticky", second, counts)
    assert cooperative_withhold(target2, granted) == target2
    for member_id, held in granted.items():
        assert set(held) <= set(target2[member_id])
