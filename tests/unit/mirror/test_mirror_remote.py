"""Active-active naming, provenance headers and the forwarding rule, without a cluster:
round trips and bounds of the headers, and propagation through random topologies that
never loops, never writes a record to a region it has been in, and reaches what it should."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.remote import (
    HOPS,
    MALFORMED_PROVENANCE,
    MAX_HOPS,
    ORIGIN_OFFSET,
    ORIGIN_REGION,
    PATH,
    PROVENANCE_HEADERS,
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    Provenance,
    ProvenanceError,
    ReplicationPolicy,
    Route,
    decode_provenance,
    encode_provenance,
    forward_headers,
    next_provenance,
    remote_topics_of,
    replication_policy,
    should_forward,
    topic_route,
    upstream_regions,
)

REGIONS = ("east", "west", "south", "north", "eu-1")
region_names = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


# ---------------------------------------------------------------------------- naming


def test_default_policy_prefixes_the_source_region_and_reads_it_back() -> None:
    policy = DefaultReplicationPolicy(REGIONS)
    assert isinstance(policy, ReplicationPolicy)
    assert policy.remote_topic("east", "orders") == "east.orders"
    assert policy.origin_of("east.orders") == ("east", "orders")
    assert policy.origin_of("west.east.orders") == ("west", "east.orders")
    assert upstream_regions(policy, "west.east.orders") == ("west", "east")
    assert policy.is_remote("east.orders") and not policy.is_remote("orders")
    # a dotted name whose prefix is not a region stays local
    assert policy.origin_of("my.topic") is None and not policy.is_remote("my.topic")
    # without a region list every prefix counts (MirrorMaker 2's DefaultReplicationPolicy)
    assert DefaultReplicationPolicy().origin_of("my.topic") == ("my", "topic")


def test_default_policy_refuses_ambiguous_or_too_long_names_with_a_clear_error() -> None:
    with pytest.raises(ProvenanceError, match="contains the replication separator"):
        DefaultReplicationPolicy(("us.east",))
    with pytest.raises(ProvenanceError, match="over the 249 limit"):
        DefaultReplicationPolicy().remote_topic("east", "x" * 245)
    with pytest.raises(ProvenanceError, match="not 1 to 64"):
        DefaultReplicationPolicy().remote_topic("", "orders")
    assert DefaultReplicationPolicy(separator="_").remote_topic("us.east", "orders") == "us.east_orders"


def test_policies_by_name() -> None:
    assert replication_policy("default", regions=("east",)).remote_topic("east", "a") == "east.a"
    identity = replication_policy("identity")
    assert isinstance(identity, IdentityReplicationPolicy)
    assert identity.remote_topic("east", "a") == "a" and identity.origin_of("east.a") is None
    with pytest.raises(ProvenanceError, match="unknown replication.policy 'mm2'.*default, identity"):
        replication_policy("mm2")


@given(region=region_names, topic=st.from_regex(r"[A-Za-z0-9._-]{1,60}", fullmatch=True))
def test_remote_names_round_trip(region: str, topic: str) -> None:
    policy = DefaultReplicationPolicy()
    assert policy.origin_of(policy.remote_topic(region, topic)) == (region, topic)


def test_topic_routes_leave_out_loops_remote_topics_without_forward_and_internal_topics() -> None:
    policy = DefaultReplicationPolicy(REGIONS)
    topics = ["orders", "west.orders", "south.orders", "west.south.orders", "mq-offset-syncs.west.internal",
              "west.checkpoints.internal", "__consumer_offsets", "heartbeats"]
    to_west = Route("east", "west")
    assert remote_topics_of(policy, topics, to_west) == {"heartbeats": "east.heartbeats",
                                                          "orders": "east.orders"}
    assert "loop" in topic_route(policy, "west.orders", to_west)[1]
    assert "does not forward" in topic_route(policy, "south.orders", to_west)[1]
    forwarding = Route("east", "west", forward=True)
    assert remote_topics_of(policy, topics, forwarding) == {
        "heartbeats": "east.heartbeats", "orders": "east.orders", "south.orders": "east.south.orders"}


# ---------------------------------------------------------------------------- headers


provenances = st.builds(
    lambda path, partition, offset, ts: Provenance(path[0], partition, offset, ts, tuple(path)),
    st.lists(region_names, min_size=2, max_size=MAX_HOPS + 1, unique=True),
    st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.integers(-(2**63), 2**63 - 1))


@given(provenances, st.lists(st.tuples(st.sampled_from(["a", "hlc", "trace"]), st.binary(max_size=8)),
                             max_size=3))
def test_provenance_round_trips_and_other_headers_are_kept(p: Provenance, others: list) -> None:
    headers = (*others, *encode_provenance(p))
    assert decode_provenance(headers) == p
    assert dict(encode_provenance(p))[HOPS] == b"%d" % (len(p.path) - 1)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from([*PROVENANCE_HEADERS, "x"]), st.binary(max_size=30)), max_size=8))
def test_any_headers_decode_or_fail_with_malformed_provenance_only(headers: list) -> None:
    try:
        decode_provenance(headers)
    except ProvenanceError as exc:
        assert exc.code == MALFORMED_PROVENANCE and exc.message


def good() -> list[tuple[str, bytes]]:
    return list(encode_provenance(Provenance("east", 2, 41, 1000, ("east", "west"))))


def replaced(name: str, value: bytes) -> list[tuple[str, bytes]]:
    return [(n, value if n == name else v) for n, v in good()]


@pytest.mark.parametrize(("headers", "message"), [
    (good()[:3], "but not mq.origin.timestamp, mq.hops, mq.path"),
    (good() + [(HOPS, b"1")], "mq.hops appears twice"),
    (replaced(ORIGIN_OFFSET, b"4x"), "mq.origin.offset is b'4x': not a decimal integer"),
    (replaced(ORIGIN_OFFSET, b"-1"), r"mq.origin.offset -1 is not in \[0, 2\^63\)"),
    (replaced(ORIGIN_OFFSET, b"9" * 21), "not a decimal integer"),
    (replaced(HOPS, b"2"), "mq.hops is 2 but mq.path 'east,west' has 1 hops"),
    (replaced(PATH, b"west,east"), "must start with the origin region 'east'"),
    (replaced(PATH, b"east,west,east"), "names a region twice"),
    (replaced(PATH, b"east"), "names only the origin"),
    (replaced(PATH, b"east,w st"), "not a region name"),
    (replaced(PATH, ",".join(["east"] + [f"r{i}" for i in range(MAX_HOPS + 1)]).encode()), "more than the 16"),
    (replaced(ORIGIN_REGION, "\u00e9".encode()), "not ASCII"),
    (replaced(PATH, b"x" * 5000), "more than 1105"),
])
def test_malformed_provenance_is_named_and_explained(headers: list, message: str) -> None:
    with pytest.raises(ProvenanceError, match=message) as info:
        decode_provenance(headers)
    assert info.value.code == MALFORMED_PROVENANCE


def test_a_record_without_provenance_decodes_to_none() -> None:
    assert decode_provenance([("trace", b"1")]) is None and decode_provenance([]) is None


# ---------------------------------------------------------------------------- forwarding


def test_a_local_record_gets_its_origin_and_one_hop() -> None:
    decision, headers = forward_headers([("k", b"v")], Route("east", "west"), partition=3, offset=7,
                                        timestamp=123)
    assert decision and headers[0] == ("k", b"v")
    assert decode_provenance(headers) == Provenance("east", 3, 7, 123, ("east", "west"))


def test_a_copied_record_is_forwarded_only_by_a_forwarding_flow_and_keeps_its_origin() -> None:
    copied = next_provenance(None, source_region="east", target_region="west", partition=1, offset=5,
                             timestamp=9)
    headers = encode_provenance(copied)
    decision, _ = forward_headers(headers, Route("west", "south"), partition=1, offset=77, timestamp=10)
    assert not decision and "does not forward" in decision.reason
    decision, out = forward_headers(headers, Route("west", "south", forward=True), partition=1, offset=77,
                                    timestamp=10)
    assert decision
    assert decode_provenance(out) == Provenance("east", 1, 5, 9, ("east", "west", "south"))


def test_a_record_never_goes_back_to_its_origin_or_a_region_in_its_path() -> None:
    p = Provenance("east", 0, 1, 1, ("east", "west", "south"))
    assert "produced in east" in should_forward(p, Route("south", "east", forward=True)).reason
    assert "in west already" in should_forward(p, Route("south", "west", forward=True)).reason
    assert should_forward(p, Route("south", "north", forward=True))


def test_malformed_provenance_is_never_forwarded() -> None:
    decision, headers = forward_headers(replaced(HOPS, b"x"), Route("east", "west", forward=True),
                                        partition=0, offset=0, timestamp=0)
    assert not decision and "mq.hops" in decision.reason and headers == ()


def test_hops_are_bounded() -> None:
    path = tuple(f"r{i}" for i in range(MAX_HOPS + 1))
    p = Provenance("r0", 0, 0, 0, path)
    assert "16 is the limit" in should_forward(p, Route(path[-1], "far", forward=True)).reason


# ---------------------------------------------------------------------------- topologies


def propagate(flows: list[tuple[str, str, bool]], policy: ReplicationPolicy,
              origin: str) -> list[tuple[str, str, Provenance]]:
    """Every copy of one record produced in ``origin``'s ``orders``: (region, topic,
    provenance), following flows until nothing moves (the decision rules, no cluster)."""
    copies: list[tuple[str, str, Provenance]] = []
    queue: deque[tuple[str, str, tuple]] = deque([(origin, "orders", ())])
    steps = 0
    while queue:
        steps += 1
        assert steps < 10_000, "propagation does not end: a loop"
        region, topic, headers = queue.popleft()
        for source, target, forward in flows:
            if source != region:
                continue
            route = Route(source, target, forward)
            name, _ = topic_route(policy, topic, route)
            if name is None:
                continue
            decision, out = forward_headers(headers, route, partition=0, offset=len(copies), timestamp=0)
            if decision:
                p = decode_provenance(out)
                assert p is not None
                copies.append((target, name, p))
                queue.append((target, name, out))
    return copies


topologies = st.lists(
    st.tuples(st.sampled_from(REGIONS[:4]), st.sampled_from(REGIONS[:4]), st.booleans())
    .filter(lambda f: f[0] != f[1]), max_size=12, unique_by=lambda f: (f[0], f[1]))


@settings(max_examples=150)
@given(topologies, st.sampled_from(REGIONS[:4]), st.booleans())
def test_no_topology_loops_or_returns_a_record_to_a_region_it_has_been_in(flows, origin, identity) -> None:
    policy: ReplicationPolicy = IdentityReplicationPolicy() if identity else DefaultReplicationPolicy(REGIONS)
    copies = propagate(flows, policy, origin)
    for region, _, p in copies:
        assert p.origin_region == origin and p.path[-1] == region and region != origin
        assert len(set(p.path)) == len(p.path) and p.hops == len(p.path) - 1 <= MAX_HOPS
    if not identity:
        # a remote name records the path: one copy per region per name
        names = [(region, name) for region, name, _ in copies]
        assert len(names) == len(set(names))
        for region, name, p in copies:
            assert upstream_regions(policy, name) == tuple(reversed(p.path[:-1]))
    # without forwarding, exactly the origin's direct targets get it, once each
    direct = sorted(t for s, t, _ in flows if s == origin)
    no_forward = [(s, t, False) for s, t, _ in flows]
    assert sorted(r for r, _, _ in propagate(no_forward, policy, origin)) == direct


def test_a_chain_with_forwarding_reaches_the_end_with_the_whole_path() -> None:
    policy = DefaultReplicationPolicy(REGIONS)
    copies = propagate([("east", "west", False), ("west", "south", True)], policy, "east")
    assert [(r, n, p.path) for r, n, p in copies] == [
        ("west", "east.orders", ("east", "west")), ("south", "west.east.orders", ("east", "west", "south"))]


def test_a_two_region_ring_with_identity_names_stops_after_one_hop() -> None:
    copies = propagate([("east", "west", True), ("west", "east", True)], IdentityReplicationPolicy(), "east")
    assert [(r, n, p.hops) for r, n, p in copies] == [("west", "orders", 1)]


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(["a", "trace", *PROVENANCE_HEADERS]), st.binary(max_size=12)), max_size=4),
       st.booleans(), st.integers(0, 2**40), st.integers(-(2**40), 2**40))
def test_the_stamper_decides_and_stamps_as_forward_copy_does(headers: list, forward: bool, offset: int,
                                                             ts: int) -> None:
    from mirror.remote import Stamper, forward_copy

    route = Route("east", "west", forward)
    stamped = [headers, [h for h in headers if h[0] not in PROVENANCE_HEADERS],
               [*headers[:1], *encode_provenance(Provenance("south", 2, 9, 1, ("south", "east")))]]
    for hs in stamped:
        decision, origin, origin_offset, out = Stamper(route, 2).copy(hs, offset, ts)
        want, p, want_out = forward_copy(hs, route, partition=2, offset=offset, timestamp=ts)
        assert (bool(decision), decision.reason, out) == (bool(want), want.reason, want_out)
        if p is not None:
            assert (origin, origin_offset) == ((p.origin_region, p.origin_partition), p.origin_offset)
