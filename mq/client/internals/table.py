"""The merge core of a table view: records of a keyed topic and of its remote copies in,
one ``key -> (value | tombstone, stamp, origin region)`` map out, under the topic's
conflict policy (``mq.core.conflict``). Sans-IO: the shell (``mq.client.table_view``)
feeds it records in the order it reads them; the seeded simulation (``mq.sim.conflicts``)
feeds it every order a WAN can produce.

A record's origin region is its ``mq.origin.region`` header when the mirror set one, else
the region of the topic it was read from (``orders``: this region; ``east.orders``: east).

- ``none``: the last record applied wins. Regions read each other's writes in different
  orders, so their tables differ: this is what the policies fix.
- ``home-region``: only records from the key's home region are applied, in that region's
  log order, which every region reads the same; records from elsewhere (written before the
  policy, or by a forged origin) are counted in ``foreign`` and left out.
- ``last-writer-wins``: a record replaces the entry when ``(stamp, origin)`` is greater or
  equal (equal: the same region and stamp, and this record is later in that region's log).
  A record without a valid ``mq.hlc`` stamp (written before the policy was set) counts in
  ``unstamped`` and competes with ``(timestamp, 0)``, which the mirror preserves too.

A tombstone (value ``None``) is an entry: under last-writer-wins it must outlive older
writes still on their way, or they would bring the key back. ``view()`` leaves them out;
``digest()`` hashes the view, so two regions with equal digests show the same table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from mq.core.conflict import ORIGIN_REGION_HEADER, ConflictPolicy, ConflictRules
from mq.core.errors import MqError
from mq.core.hlc import HLC_HEADER, MAX_WALL_MS, ZERO, Hlc, decode_hlc

Headers = Sequence[tuple[str, bytes]]
_HOME_CACHE_LIMIT = 65_536


@dataclass(frozen=True, slots=True)
class Entry:
    """One row: the value (``None``: deleted), its stamp (``None`` when the record had
    none and the policy needs none) and the region that wrote it."""

    value: bytes | None
    hlc: Hlc | None
    region: str


@dataclass
class TableStats:
    applied: int = 0  # records that became (or replaced) an entry
    superseded: int = 0  # last-writer-wins: records older than the entry they met
    foreign: int = 0  # home-region: records from a region that is not the key's home
    unstamped: int = 0  # last-writer-wins: records without a valid mq.hlc
    keyless: int = 0  # records without a key (no row for them)


@dataclass
class TableState:
    rules: ConflictRules
    entries: dict[bytes, Entry] = field(default_factory=dict)
    stats: TableStats = field(default_factory=TableStats)
    max_hlc: Hlc = ZERO
    """The greatest stamp applied: a producer that observes it (``producer.observe_hlc``)
    stamps its next writes above everything this table has shown."""
    _homes: dict[bytes, str] = field(default_factory=dict, repr=False)  # key -> home (murmur2 is slow)

    def apply(self, key: bytes | None, value: bytes | None, headers: Headers, *, region: str,
              timestamp_ms: int = 0) -> bool:
        """Merge one record read from a topic of ``region`` (its origin unless a header
        says otherwise); True when the table changed."""
        if key is None:
            self.stats.keyless += 1
            return False
        origin, stamp = region, None
        for name, raw in headers:
            if name == ORIGIN_REGION_HEADER:
                origin = raw.decode("utf-8", errors="replace")
            elif name == HLC_HEADER:
                try:
                    stamp = decode_hlc(raw)
                except MqError:
                    stamp = None
        policy = self.rules.policy
        if policy is ConflictPolicy.LAST_WRITER_WINS:
            if stamp is None:
                self.stats.unstamped += 1
                stamp = Hlc(min(max(timestamp_ms, 0), MAX_WALL_MS), 0)
            current = self.entries.get(key)
            if current is not None and (stamp, origin) < (current.hlc, current.region):
                self.stats.superseded += 1
                return False
        elif policy is ConflictPolicy.HOME_REGION and self._home(key) != origin:
            self.stats.foreign += 1
            return False
        self.entries[key] = Entry(value, stamp, origin)
        if stamp is not None and stamp > self.max_hlc:
            self.max_hlc = stamp
        self.stats.applied += 1
        return True

    def _home(self, key: bytes) -> str:
        home = self._homes.get(key)
        if home is None:
            if len(self._homes) >= _HOME_CACHE_LIMIT:
                self._homes.clear()
            home = self._homes[key] = self.rules.home_of(key)
        return home

    def get(self, key: bytes) -> bytes | None:
        entry = self.entries.get(key)
        return None if entry is None else entry.value

    def view(self) -> dict[bytes, bytes]:
        """The live rows (tombstones left out), in key order."""
        return {k: e.value for k, e in sorted(self.entries.items()) if e.value is not None}

    def live(self) -> Iterator[tuple[bytes, Entry]]:
        """``(key, entry)`` of the live rows, in key order."""
        return ((k, e) for k, e in sorted(self.entries.items()) if e.value is not None)

    def __len__(self) -> int:
        return sum(1 for e in self.entries.values() if e.value is not None)

    def digest(self) -> str:
        """SHA-256 of the live rows in key order (length-prefixed keys and values): equal
        digests, equal tables."""
        h = hashlib.sha256()
        for key, value in self.view().items():
            h.update(len(key).to_bytes(4, "big"))
            h.update(key)
            h.update(len(value).to_bytes(4, "big"))
            h.update(value)
        return h.hexdigest()
