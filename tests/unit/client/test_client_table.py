"""The table-view merge core (``mq.client.internals.table``): each policy's rule, tombstones,
origins, and the property that makes tables converge: under last-writer-wins and home-region
the table does not depend on how the regions' streams interleave (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mq.client.internals.table import Entry, TableState
from mq.core.conflict import ConflictPolicy, ConflictRules, home_region
from mq.core.hlc import Hlc

REGIONS = ("east", "west", "south")
LWW = ConflictRules(ConflictPolicy.LAST_WRITER_WINS, REGIONS)
HOME = ConflictRules(ConflictPolicy.HOME_REGION, REGIONS)


def stamp(wall: int, logical: int = 0) -> tuple[tuple[str, bytes], ...]:
    return (("mq.hlc", Hlc(wall, logical).encode()),)


def test_last_writer_wins_keeps_the_greatest_stamp_then_region() -> None:
    table = TableState(LWW)
    assert table.apply(b"k", b"late", stamp(20), region="east")
    assert not table.apply(b"k", b"early", stamp(10), region="west")
    assert table.apply(b"k", b"tie-west", stamp(20), region="west")  # same stamp: west > east
    assert not table.apply(b"k", b"tie-east", stamp(20), region="east")
    assert table.apply(b"k", b"same-region-later", stamp(20), region="west")  # log order
    assert table.entries[b"k"] == Entry(b"same-region-later", Hlc(20), "west")
    assert table.stats.superseded == 2 and table.max_hlc == Hlc(20)


def test_a_tombstone_is_kept_so_an_older_write_cannot_resurrect_the_key() -> None:
    table = TableState(LWW)
    table.apply(b"k", b"v", stamp(10), region="east")
    table.apply(b"k", None, stamp(30), region="west")
    assert not table.apply(b"k", b"old", stamp(20), region="south")
    assert table.view() == {} and len(table) == 0 and table.get(b"k") is None
    assert table.entries[b"k"].value is None


def test_origin_header_wins_over_the_topic_region_and_unstamped_records_use_their_timestamp() -> None:
    table = TableState(LWW)
    table.apply(b"k", b"copied", (("mq.origin.region", b"west"), *stamp(10)), region="east")
    assert table.entries[b"k"].region == "west"
    assert table.apply(b"k", b"legacy", (), region="east", timestamp_ms=11)
    assert table.entries[b"k"] == Entry(b"legacy", Hlc(11), "east") and table.stats.unstamped == 1
    assert table.apply(b"k", b"bad", (("mq.hlc", b"x"),), region="east", timestamp_ms=12)
    assert table.stats.unstamped == 2
    assert not table.apply(None, b"keyless", stamp(99), region="east") and table.stats.keyless == 1


def test_home_region_applies_only_the_homes_records_in_their_order() -> None:
    key = next(k for k in (b"a", b"b", b"c", b"d") if home_region(k, REGIONS) == "west")
    table = TableState(HOME)
    assert not table.apply(key, b"from-east", (), region="east")
    assert table.apply(key, b"one", (), region="west") and table.apply(key, b"two", (), region="west")
    assert table.view() == {key: b"two"} and table.stats.foreign == 1


def test_no_policy_keeps_what_arrived_last() -> None:
    table = TableState(ConflictRules())
    table.apply(b"k", b"new", stamp(50), region="east")
    table.apply(b"k", b"old", stamp(10), region="west")
    assert table.view() == {b"k": b"old"}


def test_digest_is_of_the_visible_table() -> None:
    a, b = TableState(LWW), TableState(LWW)
    a.apply(b"k", b"v", stamp(1), region="east")
    b.apply(b"k", b"v", stamp(2), region="west")
    b.apply(b"gone", None, stamp(3), region="west")
    assert a.digest() == b.digest() and a.digest() != TableState(LWW).digest()
    b.apply(b"k2", b"", stamp(4), region="west")  # an empty value is a row, not a tombstone
    assert a.digest() != b.digest()


# ------------------------------------------------------------ convergence as a property

records = st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]), st.one_of(st.none(), st.binary(max_size=3)),
                    st.integers(0, 20), st.integers(0, 2))
streams = st.fixed_dictionaries({r: st.lists(records, max_size=15) for r in REGIONS})


def interleave(by_region: dict, picks: list[int]) -> list[tuple[str, tuple]]:
    """One delivery order: each region's records in their order, regions interleaved by ``picks``."""
    queues = {r: list(recs) for r, recs in by_region.items()}
    out = []
    i = 0
    while any(queues.values()):
        live = [r for r in REGIONS if queues[r]]
        region = live[picks[i % len(picks)] % len(live)] if picks else live[0]
        out.append((region, queues[region].pop(0)))
        i += 1
    return out


def merged(rules: ConflictRules, order: list[tuple[str, tuple]]) -> str:
    table = TableState(rules)
    for region, (key, value, wall, logical) in order:
        table.apply(key, value, stamp(wall, logical), region=region)
    return table.digest()


@given(streams, st.lists(st.integers(0, 5), max_size=30), st.lists(st.integers(0, 5), max_size=30))
def test_lww_and_home_region_tables_do_not_depend_on_the_interleaving(by_region, picks_a, picks_b) -> None:
    for rules in (LWW, HOME):
        assert merged(rules, interleave(by_region, picks_a)) == merged(rules, interleave(by_region, picks_b))
