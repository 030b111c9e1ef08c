"""Conflict policies for keyed topics written in several regions (topic config
``conflict.policy``), as pure functions every layer shares.

- ``none``: no rule; each region's view of a key is whatever it applied last, so regions
  that receive each other's writes in different orders disagree.
- ``home-region``: every key has one home region and is written only there; other regions
  refuse it with ``NOT_HOME_REGION``. Each key then has a single writer, so every region
  applies its writes in the same order (the home's log order): convergent by construction.
  The home is the longest prefix of the key listed in ``conflict.home.map``, else
  ``conflict.home.regions[toPositive(murmur2(key)) % len(regions)]`` (Kafka's key hash,
  as for partitions: stable while the list keeps its order; adding a region re-homes keys).
- ``last-writer-wins``: every keyed record carries a hybrid logical clock stamp (header
  ``mq.hlc``, ``mq.core.hlc``); a table keeps, per key, the record with the greatest
  ``(stamp, origin region)``. The region name breaks ties between regions; two records of
  one region with the same stamp are ordered by that region's log, which every region
  receives in the same order.

Config syntax: ``conflict.home.regions=east,west,south`` (ordered, distinct region names);
``conflict.home.map=eu-:west,us-:east`` (comma-separated ``PREFIX:REGION``; the prefix is
the key's leading UTF-8 text and may itself hold ``:``, the region is after the last one).
Every region the map names must be in ``conflict.home.regions``; ``home-region`` needs the
list. Keyless records are outside every policy (a table has no row for them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from mq.core.errors import ErrorCode, MqError
from mq.core.hashing import murmur2, to_positive
from mq.core.hlc import Hlc

ORIGIN_REGION_HEADER = "mq.origin.region"
"""Provenance header the active-active mirror puts on records it copies into a remote
topic (``<source region>.<topic>``): the region where the record was first produced."""

_REGION = re.compile(r"[A-Za-z0-9._-]{1,64}")
_KEY_SHOWN = 40


class ConflictPolicy(str, Enum):
    NONE = "none"
    HOME_REGION = "home-region"
    LAST_WRITER_WINS = "last-writer-wins"


POLICY_CHOICES = ", ".join(p.value for p in ConflictPolicy)


def parse_policy(raw: object) -> ConflictPolicy | str:
    """``conflict.policy`` text -> the policy; unknown text comes back unchanged, for the
    config validator to refuse with the list of choices."""
    if isinstance(raw, ConflictPolicy):
        return raw
    text = str(raw).strip().lower()
    for policy in ConflictPolicy:
        if policy.value == text:
            return policy
    return str(raw)


def normalize_list(raw: object) -> str:
    """``"east, west"`` -> ``"east,west"`` (spaces around commas are forgiven)."""
    return ",".join(part.strip() for part in str(raw).split(",")) if str(raw).strip() else ""


def parse_regions(text: str) -> tuple[str, ...]:
    """``conflict.home.regions`` -> the ordered region names; ValueError saying what is wrong."""
    if not text:
        return ()
    regions = tuple(part.strip() for part in text.split(","))
    for name in regions:
        if not _REGION.fullmatch(name):
            raise ValueError(f"{name!r} is not a region name (1 to 64 of [A-Za-z0-9._-])")
    for i, name in enumerate(regions):
        if name in regions[:i]:
            raise ValueError(f"region {name!r} is listed twice")
    return regions


def parse_home_map(text: str) -> tuple[tuple[bytes, str], ...]:
    """``conflict.home.map`` -> ``((prefix, region), ...)`` in the given order; ValueError
    saying what is wrong."""
    if not text:
        return ()
    out: list[tuple[bytes, str]] = []
    for item in (part.strip() for part in text.split(",")):
        prefix, sep, region = item.rpartition(":")
        if not sep or not prefix:
            raise ValueError(f"{item!r} is not PREFIX:REGION (for example eu-:west)")
        if not _REGION.fullmatch(region):
            raise ValueError(f"{region!r} in {item!r} is not a region name")
        key = prefix.encode("utf-8")
        if any(key == p for p, _ in out):
            raise ValueError(f"prefix {prefix!r} is mapped twice")
        out.append((key, region))
    return tuple(out)


def regions_ok(text: str) -> bool:
    try:
        parse_regions(text)
    except ValueError:
        return False
    return True


def home_map_ok(text: str) -> bool:
    try:
        parse_home_map(text)
    except ValueError:
        return False
    return True


def home_region(key: bytes, regions: Sequence[str],
                prefix_map: Sequence[tuple[bytes, str]] | Mapping[bytes, str] = ()) -> str:
    """The home region of ``key``: the region of its longest prefix in ``prefix_map``, else
    ``regions[toPositive(murmur2(key)) % len(regions)]``. ValueError without regions."""
    items = prefix_map.items() if isinstance(prefix_map, Mapping) else prefix_map
    best: tuple[int, str] | None = None
    for prefix, region in items:
        if key.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), region)
    if best is not None:
        return best[1]
    if not regions:
        raise ValueError("no home regions to hash the key over")
    return regions[_key_hash(key if type(key) is bytes else bytes(key)) % len(regions)]


@lru_cache(maxsize=65_536)
def _key_hash(key: bytes) -> int:
    """``toPositive(murmur2(key))``, remembered: murmur2 in Python costs microseconds, and
    brokers and producers see the same keys again and again."""
    return to_positive(murmur2(key))


def shown_key(key: bytes) -> str:
    """A key as an error message shows it: UTF-8 text (escaped where it is not), cut at 40."""
    text = key[:_KEY_SHOWN].decode("utf-8", errors="backslashreplace")
    return repr(text + ("..." if len(key) > _KEY_SHOWN else ""))


def not_home_message(key: bytes, topic: str, home: str, here: str) -> str:
    """The words of ``NOT_HOME_REGION``, the same from a broker and from a client."""
    return (f"key {shown_key(key)} of topic {topic} lives in region {home} (conflict.policy=home-region), "
            f"not {here or 'this region'}: produce there, or let the client route keys to their home "
            "(Producer(home_bootstraps=...), mq produce --route-home)")


Version = tuple[Hlc, str]
"""What last-writer-wins compares: ``(stamp, origin region)``."""


def lww_wins(a: Version, b: Version) -> bool:
    """True when a write with version ``a`` replaces one with version ``b`` under
    last-writer-wins: a greater stamp wins; equal stamps go to the greater region name.
    Equal versions come from one region and one millisecond (two producers there); a table
    keeps the later one in that region's log, which every region reads in the same order
    (``mq.client.internals.table``: it replaces on equality)."""
    return a > b


@dataclass(frozen=True)
class ConflictRules:
    """A topic's conflict configs, parsed: what producers, brokers and tables apply."""

    policy: ConflictPolicy = ConflictPolicy.NONE
    regions: tuple[str, ...] = ()
    home_map: tuple[tuple[bytes, str], ...] = ()

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> ConflictRules:
        """From ``{"conflict.policy": ..., "conflict.home.regions": ..., ...}`` (the topic's
        configs; absent names take their defaults); ``MqError(INVALID_CONFIG)`` if invalid."""
        policy = parse_policy(configs.get("conflict.policy", "none"))
        if not isinstance(policy, ConflictPolicy):
            raise MqError(ErrorCode.INVALID_CONFIG,
                          f"conflict.policy={policy!r}: must be one of {POLICY_CHOICES}")
        try:
            regions = parse_regions(normalize_list(configs.get("conflict.home.regions", "")))
            home_map = parse_home_map(normalize_list(configs.get("conflict.home.map", "")))
        except ValueError as exc:
            raise MqError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        rules = cls(policy, regions, home_map)
        check_rules(rules)
        return rules

    def home_of(self, key: bytes) -> str:
        return home_region(key, self.regions, self.home_map)

    @property
    def active(self) -> bool:
        return self.policy is not ConflictPolicy.NONE


def check_rules(rules: ConflictRules) -> None:
    """Settings valid alone that do not fit together: ``MqError(INVALID_CONFIG)``."""
    unknown = [(prefix, region) for prefix, region in rules.home_map if region not in rules.regions]
    if unknown:
        prefix, region = unknown[0]
        listed = ",".join(rules.regions) or "(empty)"
        raise MqError(ErrorCode.INVALID_CONFIG,
                      f"conflict.home.map sends prefix {prefix.decode('utf-8', 'replace')!r} to region "
                      f"{region!r}, which conflict.home.regions={listed} does not name: add it to "
                      "conflict.home.regions or fix the map")
    if rules.policy is ConflictPolicy.HOME_REGION and not rules.regions:
        raise MqError(ErrorCode.INVALID_CONFIG,
                      "conflict.policy=home-region needs conflict.home.regions, the ordered list of "
                      "regions a key's home is chosen from (for example east,west)")
