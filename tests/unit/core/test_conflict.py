"""Conflict policies as pure functions: a key's home region, last-writer-wins, and the
topic configs that name them (bad input refused with INVALID_CONFIG, saying what to fix)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mq.client.internals import partitioner
from mq.core.config import TopicConfig
from mq.core.conflict import ConflictPolicy, ConflictRules, home_region, lww_wins, parse_home_map
from mq.core.errors import ErrorCode, MqError
from mq.core.hashing import murmur2, to_positive
from mq.core.hlc import Hlc

REGIONS = ("east", "west", "south")


def test_home_is_kafkas_key_hash_over_the_ordered_region_list() -> None:
    for key in (b"k", b"order-17", b"", "ключ".encode()):
        assert home_region(key, REGIONS) == REGIONS[to_positive(murmur2(key)) % 3]
    assert partitioner.murmur2 is murmur2  # one hash for a key's partition and its home


def test_homes_spread_over_the_regions() -> None:
    counts = Counter(home_region(f"key-{i}".encode(), REGIONS) for i in range(3000))
    assert set(counts) == set(REGIONS)
    assert all(800 <= n <= 1200 for n in counts.values()), counts


@given(st.binary(max_size=40))
def test_home_is_one_of_the_regions_and_stable(key: bytes) -> None:
    home = home_region(key, REGIONS)
    assert home in REGIONS and home == home_region(bytes(key), list(REGIONS))


def test_the_longest_prefix_of_the_map_wins_over_the_hash() -> None:
    prefixes = parse_home_map("eu-:west,eu-fr-:south,user:1:east")
    assert prefixes == ((b"eu-", "west"), (b"eu-fr-", "south"), (b"user:1", "east"))
    assert home_region(b"eu-de-1", REGIONS, prefixes) == "west"
    assert home_region(b"eu-fr-9", REGIONS, prefixes) == "south"
    assert home_region(b"user:123", REGIONS, prefixes) == "east"  # a prefix may hold ':'
    assert home_region(b"us-1", REGIONS, dict(prefixes)) == home_region(b"us-1", REGIONS)
    with pytest.raises(ValueError):
        home_region(b"us-1", (), prefixes)


def test_last_writer_wins_by_stamp_then_region_name() -> None:
    assert lww_wins((Hlc(10, 1), "east"), (Hlc(10, 0), "west"))
    assert lww_wins((Hlc(11, 0), "east"), (Hlc(10, 9), "west"))
    assert lww_wins((Hlc(10, 0), "west"), (Hlc(10, 0), "east"))
    assert not lww_wins((Hlc(10, 0), "east"), (Hlc(10, 0), "west"))
    assert not lww_wins((Hlc(10, 0), "east"), (Hlc(10, 0), "east"))


@given(st.lists(st.tuples(st.builds(Hlc, st.integers(0, 50), st.integers(0, 3)),
                          st.sampled_from(REGIONS)), min_size=1, max_size=20))
def test_the_winner_does_not_depend_on_the_order_of_arrival(versions) -> None:
    def winner(order):
        best = order[0]
        for v in order[1:]:
            if lww_wins(v, best):
                best = v
        return best
    assert winner(versions) == winner(list(reversed(versions))) == max(versions)


def test_rules_from_topic_configs() -> None:
    config = TopicConfig.from_kafka({"conflict.policy": "Home-Region", "conflict.home.regions": "east, west",
                                     "conflict.home.map": "eu-:west"})
    assert config.conflict_policy is ConflictPolicy.HOME_REGION
    assert config.overrides() == {"conflict.policy": "home-region", "conflict.home.regions": "east,west",
                                  "conflict.home.map": "eu-:west"}
    rules = config.conflict_rules
    assert rules == ConflictRules(ConflictPolicy.HOME_REGION, ("east", "west"), ((b"eu-", "west"),))
    assert rules.home_of(b"eu-1") == "west" and rules.active
    assert ConflictRules.from_configs(config.overrides()) == rules
    assert not TopicConfig().conflict_rules.active
    assert TopicConfig.from_kafka(TopicConfig.from_kafka({"conflict.policy": "last-writer-wins"}).to_kafka()) \
        .conflict_policy is ConflictPolicy.LAST_WRITER_WINS


@pytest.mark.parametrize(("configs", "fragment"), [
    ({"conflict.policy": "lww"}, "conflict.policy='lww': must be one of none, home-region, last-writer-wins"),
    ({"conflict.policy": "home-region"}, "conflict.policy=home-region needs conflict.home.regions"),
    ({"conflict.home.regions": "east,west", "conflict.home.map": "eu-:north"},
     "conflict.home.map sends prefix 'eu-' to region 'north', which conflict.home.regions=east,west does not name"),
    ({"conflict.home.map": "eu-:west"}, "which conflict.home.regions=(empty) does not name"),
    ({"conflict.home.regions": "east,east"}, "distinct region names"),
    ({"conflict.home.regions": "east,,west"}, "distinct region names"),
    ({"conflict.home.regions": "east west"}, "distinct region names"),
    ({"conflict.home.regions": "east", "conflict.home.map": "west"}, "PREFIX:REGION"),
    ({"conflict.home.regions": "east", "conflict.home.map": "a:east,a:east"}, "PREFIX:REGION"),
])
def test_bad_conflict_configs_are_refused(configs: dict, fragment: str) -> None:
    with pytest.raises(MqError) as info:
        TopicConfig.from_kafka(configs)
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert fragment in info.value.message
    with pytest.raises(MqError):
        ConflictRules.from_configs(configs)


def test_an_alter_that_breaks_the_combination_is_refused() -> None:
    base = TopicConfig.from_kafka({"conflict.policy": "home-region", "conflict.home.regions": "east"})
    with pytest.raises(MqError, match="needs conflict.home.regions"):
        TopicConfig.from_kafka({"conflict.home.regions": ""}, base=base)
