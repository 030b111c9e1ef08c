"""Active-active replication policy (pure): remote topic names, provenance headers, and the
forwarding rule that keeps records from looping in any topology.

**Naming** (MirrorMaker 2's ``ReplicationPolicy``). A flow in ``mode: active-active``
writes the source region's ``orders`` to ``<source region>.orders`` in the target: the
*remote topic*. The policy is pluggable (``ReplicationPolicy``); two ship:

* ``DefaultReplicationPolicy`` (``default``): ``east`` + ``orders`` -> ``east.orders``;
  ``origin_of("east.orders") == ("east", "orders")``. Remote names nest along a chain:
  east -> west -> south gives ``west.east.orders`` in south. A name is remote only when
  its prefix is a known region (``regions``), so ``my.topic`` stays local.
* ``IdentityReplicationPolicy`` (``identity``): the name is kept. MM2's identity policy
  cannot detect cycles; here the provenance headers still can (below).

**Provenance headers**, on every record a flow writes (Confluent Replicator's idea, with
the whole path instead of one cluster id). Values are ASCII:

================================ ===============================================
header                           value
================================ ===============================================
``mq.origin.region``             the region where the record was first produced
``mq.origin.partition``          its partition there (decimal, int32 >= 0)
``mq.origin.offset``             its offset there (decimal, int64 >= 0)
``mq.origin.timestamp``          its timestamp there (decimal ms, int64)
``mq.hops``                      how many flows have copied it (decimal, >= 1)
``mq.path``                      the regions it was written to, origin first,
                                 comma-separated (``east,west,south``)
================================ ===============================================

``hops == len(path) - 1`` always; a path names at most ``MAX_HOPS + 1`` regions, each at
most 64 characters of ``[A-Za-z0-9._-]``, and never one region twice. A record carrying
some but not all of them, a header twice, or a value outside those bounds is
``MALFORMED_PROVENANCE`` (``ProvenanceError``): the mirror never writes such a record
onward (it cannot prove where the record has been).

**Forwarding rule** (``should_forward``), for a record read from a source region by a
flow to a target region:

1. a record that carries provenance was written by a flow: it is copied onward only by a
   flow with ``forward: true`` (chains such as east -> west -> south); otherwise it stays
   (MM2's rule that a remote topic is never mirrored onward);
2. a record is never written to a region already in its path, nor to its origin;
3. never more than ``MAX_HOPS`` copies.

Rule 2 is what makes every topology loop-free, even with identity naming: a record that
went east -> west carries ``east,west`` and the flow west -> east drops it. Topic-level
decisions (``topic_route``) apply the same rules to names, so a flow never even reads a
topic all of whose records it would drop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Protocol, runtime_checkable

from mq.core.conflict import (
    ORIGIN_REGION_HEADER as ORIGIN_REGION,  # the broker's conflict checks read it too
)
from mq.protocol.stamped_batch import AppendedHeaders

ORIGIN_PARTITION = "mq.origin.partition"
ORIGIN_OFFSET = "mq.origin.offset"
ORIGIN_TIMESTAMP = "mq.origin.timestamp"
HOPS = "mq.hops"
PATH = "mq.path"
PROVENANCE_HEADERS = (ORIGIN_REGION, ORIGIN_PARTITION, ORIGIN_OFFSET, ORIGIN_TIMESTAMP, HOPS, PATH)
_PROVENANCE_SET = frozenset(PROVENANCE_HEADERS)

MAX_HOPS = 16
MAX_TOPIC_NAME_LENGTH = 249  # Kafka's and mq's limit (mq.metadata.controller)
_REGION = re.compile(r"[A-Za-z0-9._-]{1,64}")
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
_MAX_DIGITS = 20  # "-9223372036854775808"
_MAX_PATH_BYTES = (MAX_HOPS + 1) * 65

_first = itemgetter(0)

MALFORMED_PROVENANCE = "MALFORMED_PROVENANCE"
INVALID_REMOTE_NAME = "INVALID_REMOTE_NAME"


class ProvenanceError(ValueError):
    """A record's provenance headers, or a name the policy is asked to build, are invalid.
    ``code`` names the error (``MALFORMED_PROVENANCE``, ``INVALID_REMOTE_NAME``)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def _malformed(message: str) -> ProvenanceError:
    return ProvenanceError(MALFORMED_PROVENANCE, message)


# ---------------------------------------------------------------------------- naming


@runtime_checkable
class ReplicationPolicy(Protocol):
    """How a flow names the topics it writes, and how a name tells where it came from."""

    def remote_topic(self, source_region: str, topic: str) -> str:
        """The name in the target of ``topic`` of ``source_region``."""
        ...

    def origin_of(self, topic: str) -> tuple[str, str] | None:
        """``(source region, upstream topic)`` of a remote topic, None for a local one."""
        ...

    def is_remote(self, topic: str) -> bool:
        ...


@dataclass(frozen=True)
class DefaultReplicationPolicy:
    """``<source region><separator><topic>``; a prefix is a region only when ``regions``
    names it (an empty ``regions`` accepts any prefix, as MM2 does)."""

    regions: tuple[str, ...] = ()
    separator: str = "."

    def __post_init__(self) -> None:
        if not self.separator or not re.fullmatch(r"[A-Za-z0-9._-]+", self.separator):
            raise ProvenanceError(INVALID_REMOTE_NAME, f"replication.policy.separator {self.separator!r} "
                                  f"must be one or more of [A-Za-z0-9._-]")
        for region in self.regions:
            self._check_region(region)

    def _check_region(self, region: str) -> None:
        if not _REGION.fullmatch(region):
            raise ProvenanceError(INVALID_REMOTE_NAME, f"region name {region!r} is not 1 to 64 of "
                                  f"[A-Za-z0-9._-]")
        if self.separator in region:
            raise ProvenanceError(INVALID_REMOTE_NAME, f"region name {region!r} contains the replication "
                                  f"separator {self.separator!r}: remote topic names would be ambiguous; "
                                  f"rename the region or set replication.policy.separator")

    def remote_topic(self, source_region: str, topic: str) -> str:
        self._check_region(source_region)
        if not topic:
            raise ProvenanceError(INVALID_REMOTE_NAME, "the topic name is empty")
        name = f"{source_region}{self.separator}{topic}"
        if len(name) > MAX_TOPIC_NAME_LENGTH:
            raise ProvenanceError(INVALID_REMOTE_NAME, f"remote topic {name[:40]}... would be {len(name)} "
                                  f"characters, over the {MAX_TOPIC_NAME_LENGTH} limit: shorten the topic")
        return name

    def origin_of(self, topic: str) -> tuple[str, str] | None:
        region, sep, rest = topic.partition(self.separator)
        if not sep or not region or not rest:
            return None
        if self.regions and region not in self.regions:
            return None
        if not _REGION.fullmatch(region):
            return None
        return region, rest

    def is_remote(self, topic: str) -> bool:
        return self.origin_of(topic) is not None


@dataclass(frozen=True)
class IdentityReplicationPolicy:
    """Remote topics keep the source's name (MM2's ``IdentityReplicationPolicy``): a
    name says nothing about origin, so loops are stopped by provenance alone."""

    def remote_topic(self, source_region: str, topic: str) -> str:
        if not topic:
            raise ProvenanceError(INVALID_REMOTE_NAME, "the topic name is empty")
        return topic

    def origin_of(self, topic: str) -> tuple[str, str] | None:
        return None

    def is_remote(self, topic: str) -> bool:
        return False


POLICIES = ("default", "identity")


def replication_policy(name: str, *, regions: Sequence[str] = (), separator: str = ".") -> ReplicationPolicy:
    """The policy called ``name`` in a flow's ``replication.policy``."""
    if name == "default":
        return DefaultReplicationPolicy(tuple(regions), separator)
    if name == "identity":
        return IdentityReplicationPolicy()
    raise ProvenanceError(INVALID_REMOTE_NAME, f"unknown replication.policy {name!r} "
                          f"(known: {', '.join(POLICIES)})")


def upstream_regions(policy: ReplicationPolicy, topic: str) -> tuple[str, ...]:
    """The regions a topic's name says its records came through, nearest first
    (``west.east.orders`` -> ``("west", "east")``); bounded by ``MAX_HOPS``."""
    regions: list[str] = []
    while len(regions) <= MAX_HOPS:
        origin = policy.origin_of(topic)
        if origin is None:
            break
        regions.append(origin[0])
        topic = origin[1]
    return tuple(regions)


# ---------------------------------------------------------------------------- provenance


@dataclass(frozen=True, slots=True)
class Provenance:
    origin_region: str
    origin_partition: int
    origin_offset: int
    origin_timestamp: int
    path: tuple[str, ...]  # origin first; the last is the region holding this copy

    @property
    def hops(self) -> int:
        return len(self.path) - 1

    def __post_init__(self) -> None:
        _check_provenance(self)


def _check_provenance(p: Provenance) -> None:
    if not p.path or p.path[0] != p.origin_region:
        raise _malformed(f"{PATH} {','.join(p.path)!r} must start with the origin region {p.origin_region!r}")
    if len(p.path) < 2:
        raise _malformed(f"{PATH} {p.path[0]!r} names only the origin: a copied record has at least one hop")
    if len(p.path) > MAX_HOPS + 1:
        raise _malformed(f"{PATH} has {len(p.path) - 1} hops, more than the {MAX_HOPS} allowed")
    for region in p.path:
        if not _REGION.fullmatch(region):
            raise _malformed(f"{PATH} names {region[:70]!r}, not a region name (1 to 64 of [A-Za-z0-9._-])")
    if len(set(p.path)) != len(p.path):
        raise _malformed(f"{PATH} {','.join(p.path)!r} names a region twice")
    if not 0 <= p.origin_partition <= _INT32_MAX:
        raise _malformed(f"{ORIGIN_PARTITION} {p.origin_partition} is not in [0, 2^31)")
    if not 0 <= p.origin_offset <= _INT64_MAX:
        raise _malformed(f"{ORIGIN_OFFSET} {p.origin_offset} is not in [0, 2^63)")
    if not -_INT64_MAX - 1 <= p.origin_timestamp <= _INT64_MAX:
        raise _malformed(f"{ORIGIN_TIMESTAMP} {p.origin_timestamp} is outside the 64-bit range")


Headers = Sequence[tuple[str, bytes]]
OriginKey = tuple[str, int]  # (origin region, origin partition)


def encode_provenance(p: Provenance) -> tuple[tuple[str, bytes], ...]:
    return ((ORIGIN_REGION, p.origin_region.encode()), (ORIGIN_PARTITION, b"%d" % p.origin_partition),
            (ORIGIN_OFFSET, b"%d" % p.origin_offset), (ORIGIN_TIMESTAMP, b"%d" % p.origin_timestamp),
            (HOPS, b"%d" % p.hops), (PATH, ",".join(p.path).encode()))


def _int(name: str, raw: bytes) -> int:
    if not 0 < len(raw) <= _MAX_DIGITS or not re.fullmatch(rb"-?[0-9]+", raw):
        raise _malformed(f"header {name} is {raw[:40]!r}: not a decimal integer")
    return int(raw)


def _ascii(name: str, raw: bytes, limit: int) -> str:
    if len(raw) > limit:
        raise _malformed(f"header {name} is {len(raw)} bytes, more than {limit}")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise _malformed(f"header {name} is {raw[:40]!r}: not ASCII") from None


def decode_provenance(headers: Headers) -> Provenance | None:
    """The provenance a record carries; None when it carries none (produced locally).
    Raises ``ProvenanceError`` (``MALFORMED_PROVENANCE``) when it is partial, repeated or
    out of bounds."""
    found: dict[str, bytes] = {}
    for name, value in headers:
        if name in _PROVENANCE_SET:
            if name in found:
                raise _malformed(f"header {name} appears twice")
            found[name] = value
    if not found:
        return None
    missing = [h for h in PROVENANCE_HEADERS if h not in found]
    if missing:
        raise _malformed(f"the record has {', '.join(h for h in PROVENANCE_HEADERS if h in found)} "
                         f"but not {', '.join(missing)}")
    region = _ascii(ORIGIN_REGION, found[ORIGIN_REGION], 64)
    path = tuple(_ascii(PATH, found[PATH], _MAX_PATH_BYTES).split(","))
    hops = _int(HOPS, found[HOPS])
    p = Provenance(region, _int(ORIGIN_PARTITION, found[ORIGIN_PARTITION]),
                   _int(ORIGIN_OFFSET, found[ORIGIN_OFFSET]),
                   _int(ORIGIN_TIMESTAMP, found[ORIGIN_TIMESTAMP]), path)
    if hops != p.hops:
        raise _malformed(f"header {HOPS} is {hops} but {PATH} {','.join(path)!r} has {p.hops} hops")
    return p


def strip_provenance(headers: Headers) -> tuple[tuple[str, bytes], ...]:
    return tuple(h for h in headers if h[0] not in _PROVENANCE_SET)


def next_provenance(current: Provenance | None, *, source_region: str, target_region: str,
                    partition: int, offset: int, timestamp: int) -> Provenance:
    """The provenance of the copy a flow writes to ``target_region`` of the record at
    ``offset`` of ``partition`` in ``source_region`` (``current``: what it carries)."""
    if current is None:
        return Provenance(source_region, partition, offset, timestamp, (source_region, target_region))
    path = current.path if current.path[-1] == source_region else (*current.path, source_region)
    return Provenance(current.origin_region, current.origin_partition, current.origin_offset,
                      current.origin_timestamp, (*path, target_region))


def with_provenance(headers: Headers, p: Provenance) -> tuple[tuple[str, bytes], ...]:
    """``headers`` with its provenance replaced by ``p`` (other headers kept, in order)."""
    return (*strip_provenance(headers), *encode_provenance(p))


# ---------------------------------------------------------------------------- forwarding


@dataclass(frozen=True, slots=True)
class Route:
    """What the forwarding rule needs of a flow."""

    source_region: str
    target_region: str
    forward: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    forward: bool
    reason: str  # why not ("" when forwarded)

    def __bool__(self) -> bool:
        return self.forward


FORWARD = Decision(True, "")


def should_forward(provenance: Provenance | None, route: Route) -> Decision:
    """Whether a record read from ``route.source_region`` is written to
    ``route.target_region`` (rules in the module docstring). ``provenance`` is what
    ``decode_provenance`` read from it."""
    if provenance is None:
        if route.source_region == route.target_region:
            return Decision(False, "the source and target regions are the same")
        return FORWARD
    path = provenance.path if provenance.path[-1] == route.source_region \
        else (*provenance.path, route.source_region)
    if route.target_region == provenance.origin_region:
        return Decision(False, f"the record was produced in {route.target_region}")
    if route.target_region in path:
        return Decision(False, f"the record has been in {route.target_region} already (path {','.join(path)})")
    if not route.forward:
        return Decision(False, f"the record was copied from {provenance.origin_region} and the flow "
                               f"{route.source_region}->{route.target_region} does not forward (forward: false)")
    if len(path) > MAX_HOPS:
        return Decision(False, f"the record has made {len(path) - 1} hops; {MAX_HOPS} is the limit")
    return FORWARD


def forward_copy(headers: Headers, route: Route, *, partition: int, offset: int,
                 timestamp: int) -> tuple[Decision, Provenance | None, tuple[tuple[str, bytes], ...]]:
    """One record's decision and, when forwarded, the provenance and headers of its copy.
    A malformed provenance is a ``Decision`` not to forward, with the decoder's message."""
    try:
        current = decode_provenance(headers)
    except ProvenanceError as exc:
        return Decision(False, exc.message), None, ()
    decision = should_forward(current, route)
    if not decision:
        return decision, None, ()
    p = next_provenance(current, source_region=route.source_region, target_region=route.target_region,
                        partition=partition, offset=offset, timestamp=timestamp)
    return decision, p, with_provenance(headers, p)


def forward_headers(headers: Headers, route: Route, *, partition: int, offset: int,
                    timestamp: int) -> tuple[Decision, tuple[tuple[str, bytes], ...]]:
    """``forward_copy`` without the provenance."""
    decision, _, out = forward_copy(headers, route, partition=partition, offset=offset, timestamp=timestamp)
    return decision, out


class Stamper:
    """``forward_copy`` for one partition of a flow, with a fast path for the common
    record: one produced in the source (no provenance), whose copy's headers are built
    from bytes prepared once. ``copy`` returns ``(decision, (origin region, origin
    partition), origin offset, headers)``; the last three are empty when not forwarded."""

    def __init__(self, route: Route, partition: int) -> None:
        self.route = route
        self.partition = partition
        self.origin = (route.source_region, partition)
        self._head = ((ORIGIN_REGION, route.source_region.encode()), (ORIGIN_PARTITION, b"%d" % partition))
        self._tail = ((HOPS, b"1"), (PATH, f"{route.source_region},{route.target_region}".encode()))
        self._local = route.source_region != route.target_region
        self.appended = AppendedHeaders(self._head, (ORIGIN_OFFSET, ORIGIN_TIMESTAMP), self._tail)

    def copy(self, headers: Headers, offset: int, timestamp: int
             ) -> tuple[Decision, OriginKey | None, int, tuple[tuple[str, bytes], ...]]:
        if self._local and not any(name in _PROVENANCE_SET for name, _ in headers):
            return FORWARD, self.origin, offset, (*headers, *self._head, (ORIGIN_OFFSET, b"%d" % offset),
                                                   (ORIGIN_TIMESTAMP, b"%d" % timestamp), *self._tail)
        decision, p, out = forward_copy(headers, self.route, partition=self.partition, offset=offset,
                                        timestamp=timestamp)
        if p is None:
            return decision, None, -1, ()
        return decision, (p.origin_region, p.origin_partition), p.origin_offset, out

    def takes_fast_path(self, headers: Sequence[Headers]) -> bool:
        """Whether every record of a run (a decoded batch's headers column) takes ``copy``'s
        fast path: each is forwarded, its origin is ``self.origin``, its origin offset and
        timestamp are its own, and its copy's headers are its own plus ``self.appended``.
        False when some record carries a provenance header (decide those one by one)."""
        return self._local and (headers.count(()) == len(headers) or _PROVENANCE_SET.isdisjoint(
            map(_first, chain.from_iterable(headers))))

    def stamp_columns(self, offsets: Sequence[int], timestamps: Sequence[int],
                      headers: Sequence[Headers]) -> list[tuple[tuple[str, bytes], ...]] | None:
        """The headers column of the copies of a run of records that ``takes_fast_path``
        (None when it does not), built in C-level passes from the prepared header pairs:
        only the origin offset and timestamp are formatted per record."""
        if not self.takes_fast_path(headers):
            return None
        return self.appended.columns(headers, offsets, timestamps)


# ---------------------------------------------------------------------------- topics


def is_internal_topic(topic: str) -> bool:
    """Topics the mirror keeps for itself or the brokers keep: never copied."""
    return topic.startswith("__") or topic.endswith(".internal")


def topic_route(policy: ReplicationPolicy, topic: str, route: Route) -> tuple[str | None, str]:
    """``(remote topic name, "")`` when an active-active flow reads ``topic``, else
    ``(None, why not)``. The name-level form of ``should_forward``: a topic whose name
    says its records came through the target (``west.orders`` for a flow to west) or
    that is remote while the flow does not forward is left out."""
    if is_internal_topic(topic):
        return None, f"{topic} is internal"
    upstream = upstream_regions(policy, topic)
    if route.target_region in upstream:
        return None, (f"{topic} holds records that came from {route.target_region}: "
                      f"copying it there would be a loop")
    if upstream and not route.forward:
        return None, (f"{topic} is a remote topic (from {upstream[0]}) and the flow does not "
                      f"forward (forward: false)")
    if len(upstream) >= MAX_HOPS:
        return None, f"{topic} has come through {len(upstream)} regions; {MAX_HOPS} is the limit"
    try:
        return policy.remote_topic(route.source_region, topic), ""
    except ProvenanceError as exc:
        return None, exc.message


def remote_topics_of(policy: ReplicationPolicy, topics: Iterable[str], route: Route) -> dict[str, str]:
    """``{source topic: remote topic}`` for the topics a flow copies (sorted by name)."""
    out: dict[str, str] = {}
    for topic in sorted(topics):
        name, _ = topic_route(policy, topic, route)
        if name is not None:
            out[topic] = name
    return out
