"""Kafka-exact key partitioning and KIP-480 sticky partitioning."""

from collections import Counter

import pytest

from mq.client.internals.partitioner import KeyPartitioner, StickyPartitioner, murmur2, to_positive
from mq.core.rng import Rng

# Vectors from Kafka's UtilsTest.testMurmur2.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,expected", sorted(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_of_every_tail_length_is_a_java_int() -> None:
    for n in range(9):
        h = murmur2(bytes(range(n)))
        assert -(2**31) <= h < 2**31


def test_to_positive_clears_the_sign_bit_like_kafka() -> None:
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; Kafka masks
    assert to_positive(5) == 5


def test_key_partition_is_to_positive_murmur2_mod_n() -> None:
    kp = KeyPartitioner()
    for key, h in KAFKA_VECTORS.items():
        for n in (1, 3, 7, 12):
            assert kp.partition_for_key(key, n) == (h & 0x7FFFFFFF) % n
    # a cached key gives the same answer
    assert kp.partition_for_key(b"abc", 7) == (479470107 & 0x7FFFFFFF) % 7


def test_keys_spread_over_partitions() -> None:
    kp = KeyPartitioner(cache_limit=10)  # also exercises cache eviction
    counts = Counter(kp.partition_for_key(b"key-%d" % i, 3) for i in range(3000))
    assert set(counts) == {0, 1, 2}
    assert min(counts.values()) > 800


def test_sticky_partition_holds_until_a_new_batch() -> None:
    sticky = StickyPartitioner(Rng(7))
    first = sticky.partition("t", [0, 1, 2, 3], 4)
    assert all(sticky.partition("t", [0, 1, 2, 3], 4) == first for _ in range(50))
    second = sticky.on_new_batch("t", first, [0, 1, 2, 3], 4)
    assert second != first
    assert sticky.partition("t", [0, 1, 2, 3], 4) == second
    # a stale on_new_batch (for a partition no longer sticky) does not switch again
    assert sticky.on_new_batch("t", first, [0, 1, 2, 3], 4) == second


def test_sticky_prefers_partitions_with_a_leader_and_visits_all() -> None:
    sticky = StickyPartitioner(Rng(1))
    seen = set()
    p = sticky.partition("t", [1, 3], 4)
    for _ in range(40):
        seen.add(p)
        p = sticky.on_new_batch("t", p, [1, 3], 4)
    assert seen == {1, 3}
    single = StickyPartitioner(Rng(2))
    assert single.on_new_batch("u", 0, [], 1) == 0  # one partition: nowhere else to go


def test_sticky_is_per_topic_and_seeded() -> None:
    a, b = StickyPartitioner(Rng(3)), StickyPartitioner(Rng(3))
    assert [a.partition(t, [], 10) for t in "xyz"] == [b.partition(t, [], 10) for t in "xyz"]
    firsts = {StickyPartitioner(Rng(seed)).partition("t", [], 10) for seed in range(30)}
    assert len(firsts) > 3  # not always partition 0
