"""Where one record goes in a topology of active-active flows, hop by hop (pure): with the
mirror's own decisions (``mirror.remote``: ``topic_route`` and ``forward_copy``), or with the
loop prevention switched off, to count the copies a loop makes.

A *step* is one link crossing: every flow copies, at once, the copies that reached its
source region at the step before. ``propagate`` follows one record produced in ``origin``
and returns every copy it makes, step by step, until nothing moves or ``max_steps``.

``prevention=False`` is MirrorMaker 2 with ``IdentityReplicationPolicy`` in both directions,
which cannot detect cycles: a flow copies every record of every topic it reads, whatever
headers it carries, into a topic of the same name. Only the hop count travels with the
copy (no path, so no region can recognise its own record). In a ring each copy comes
back; in a full mesh each copy is copied to every other region, so the copies per step
double (three regions) every link crossing. ``prevention=True`` runs the real rule of
``mirror.remote`` on the same flows: provenance with the whole path, never back to a region
in the path, remote topics copied onward only by ``forward: true`` flows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from mirror.remote import (
    IdentityReplicationPolicy,
    ReplicationPolicy,
    Route,
    decode_provenance,
    forward_copy,
    topic_route,
)


@dataclass(frozen=True, slots=True)
class Flow:
    source: str
    target: str
    forward: bool = False


@dataclass(frozen=True, slots=True)
class Copy:
    """A copy of the record: written to ``topic`` in ``region`` at link crossing ``step``
    (1 = the origin's direct targets), ``hops`` flows after the original."""

    region: str
    topic: str
    hops: int
    step: int
    path: tuple[str, ...] = ()  # with prevention: the provenance path (origin first)


@dataclass(frozen=True)
class Propagation:
    copies: tuple[Copy, ...]
    steps: int  # link crossings simulated
    stopped: bool  # True when nothing moved any more; False: cut off at max_steps/max_copies

    def per_step(self) -> list[int]:
        """Copies written at each step 1..steps."""
        counts = [0] * self.steps
        for c in self.copies:
            counts[c.step - 1] += 1
        return counts

    def back_at(self, region: str) -> int:
        """Copies written into ``region`` (for the origin: the record coming back)."""
        return sum(1 for c in self.copies if c.region == region)

    def names(self) -> dict[tuple[str, str], int]:
        """``{(region, topic): copies}``; 1 everywhere when each region holds the record
        once under each name."""
        out: dict[tuple[str, str], int] = {}
        for c in self.copies:
            out[(c.region, c.topic)] = out.get((c.region, c.topic), 0) + 1
        return dict(sorted(out.items()))


def propagate(flows: Sequence[Flow], origin: str, *, prevention: bool = True,
              policy: ReplicationPolicy | None = None, topic: str = "orders", max_steps: int = 12,
              max_copies: int = 1_000_000) -> Propagation:
    """Every copy one record produced in ``origin``'s ``topic`` makes (module docstring).
    ``policy`` names remote topics (default: identity, where loops are possible at all)."""
    policy = policy or IdentityReplicationPolicy()
    copies: list[Copy] = []
    # what arrived at the last step: (region, topic, headers or hop count)
    frontier: list[tuple[str, str, tuple, int]] = [(origin, topic, (), 0)]
    step = 0
    while frontier and step < max_steps and len(copies) < max_copies:
        step += 1
        arrived: list[tuple[str, str, tuple, int]] = []
        for region, name, headers, hops in frontier:
            for flow in flows:
                if flow.source != region:
                    continue
                if not prevention:  # identity naming, every record copied, nothing checked
                    copies.append(Copy(flow.target, name, hops + 1, step))
                    arrived.append((flow.target, name, (), hops + 1))
                    continue
                route = Route(flow.source, flow.target, flow.forward)
                remote, _ = topic_route(policy, name, route)
                if remote is None:
                    continue
                decision, p, out = forward_copy(headers, route, partition=0, offset=0, timestamp=0)
                if not decision:
                    continue
                assert p is not None and decode_provenance(out) == p
                copies.append(Copy(flow.target, remote, p.hops, step, p.path))
                arrived.append((flow.target, remote, out, p.hops))
        frontier = arrived
    return Propagation(tuple(copies), step, not frontier)


def ring(regions: Sequence[str], *, forward: bool = False) -> list[Flow]:
    """A flow each way between neighbours (two regions: east <-> west)."""
    flows: list[Flow] = []
    n = len(regions)
    for i, a in enumerate(regions):
        b = regions[(i + 1) % n]
        if a != b and Flow(a, b, forward) not in flows:
            flows.append(Flow(a, b, forward))
        if a != b and Flow(b, a, forward) not in flows:
            flows.append(Flow(b, a, forward))
    return flows


def mesh(regions: Sequence[str], *, forward: bool = False) -> list[Flow]:
    """A flow between every ordered pair of regions."""
    return [Flow(a, b, forward) for a in regions for b in regions if a != b]


def chain(regions: Sequence[str]) -> list[Flow]:
    """``a -> b -> c ...``: the first flow copies local records, the next ones forward."""
    return [Flow(a, b, i > 0) for i, (a, b) in enumerate(pairwise(regions))]


def star(hub: str, spokes: Sequence[str]) -> list[Flow]:
    """Every spoke to and from the hub; the hub forwards what a spoke sent to the others."""
    return [f for s in spokes for f in (Flow(s, hub, False), Flow(hub, s, True))]
