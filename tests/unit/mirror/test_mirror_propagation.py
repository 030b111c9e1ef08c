"""mirror.propagation: one record followed hop by hop over a topology, with the mirror's
forwarding rule and with it switched off (the loop lab 06 counts)."""

from __future__ import annotations

from mirror.propagation import Flow, chain, mesh, propagate, ring, star
from mirror.remote import DefaultReplicationPolicy

REGIONS = ("east", "west", "south")


def test_without_prevention_a_two_region_ring_never_stops_and_comes_back() -> None:
    p = propagate(ring(REGIONS[:2], forward=True), "east", prevention=False, max_steps=9)
    assert p.per_step() == [1] * 9 and not p.stopped
    assert p.back_at("east") == 4 and p.back_at("west") == 5  # every other crossing lands at home


def test_without_prevention_a_three_region_mesh_doubles_every_crossing() -> None:
    p = propagate(mesh(REGIONS), "east", prevention=False, max_steps=8)
    assert p.per_step() == [2 ** k for k in range(1, 9)] and not p.stopped


def test_the_rule_stops_every_topology_after_its_direct_and_forwarded_copies() -> None:
    cases = {"ring": (ring(REGIONS[:2], forward=True), [1]), "mesh": (mesh(REGIONS), [2]),
             "chain": (chain(REGIONS), [1, 1]), "star": (star("east", ["west", "south"]), [2])}
    for name, (flows, per_step) in cases.items():
        for policy in (None, DefaultReplicationPolicy(REGIONS)):
            p = propagate(flows, "east", policy=policy)
            assert p.stopped and p.per_step()[:-1] == per_step, (name, policy, p.per_step())
            assert p.back_at("east") == 0
            assert all(c.hops == len(c.path) - 1 and c.path[0] == "east" for c in p.copies)


def test_with_remote_names_each_region_holds_the_record_once_per_name() -> None:
    policy = DefaultReplicationPolicy(REGIONS)
    p = propagate(mesh(REGIONS, forward=True), "east", policy=policy)
    assert p.names() == {("south", "east.orders"): 1, ("south", "west.east.orders"): 1,
                         ("west", "east.orders"): 1, ("west", "south.east.orders"): 1}
    # identity names put both copies under one name: forward: true in a mesh duplicates
    same = propagate(mesh(REGIONS, forward=True), "east")
    assert same.names() == {("south", "orders"): 2, ("west", "orders"): 2}


def test_a_spoke_reaches_the_other_spokes_through_the_hub() -> None:
    p = propagate(star("east", ["west", "south"]), "west", policy=DefaultReplicationPolicy(REGIONS))
    assert [(c.region, c.topic, c.path) for c in p.copies] == [
        ("east", "west.orders", ("west", "east")), ("south", "east.west.orders", ("west", "east", "south"))]
    assert Flow("west", "east") in star("east", ["west", "south"])
