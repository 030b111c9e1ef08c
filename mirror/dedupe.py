"""Exactly-once copies into remote topics without transactions (pure): where a flow resumes
after a restart, and which fetched records it has written already.

A flow writes remote topics with a plain (non-idempotent, non-transactional) producer. A
restart loses what the mirror had in memory: which source offset it had reached and which
writes the target acknowledged. Re-fetching from too far back would write duplicates;
from too far ahead would lose records. mq resolves both from the target itself:

* **Ownership.** The records a flow wrote are those whose provenance path ends with
  ``<source region>,<target region>`` (``mirror.remote``): nothing else writes that path
  into that region, whatever the naming policy.
* **Dedupe index** (``DedupeIndex``), per remote partition: the highest origin offset the
  flow has written for each origin (region, partition). A remote partition is written in
  source order, so origin offsets of one origin only grow along it; a fetched record whose
  origin offset is at or below the index's is a duplicate and is dropped.
* **Resume** (``TailScan``), per remote partition, on start: the last offset sync of the
  partition (``mirror.translation``: source offset ``s`` is at target offset ``t``) says
  every source record up to ``s`` is done. The scan reads the target from ``t`` to its end:
  the record at ``t`` must be the flow's (else the sync is stale: the topic was re-created),
  and every record the flow wrote after it is there, so the index built from them covers
  every record the re-fetch from ``s + 1`` can bring again. When the last record the flow
  wrote came straight from the source's own topic (its origin is the source region), its
  origin offset *is* its source offset: the flow resumes right after it, with nothing to
  re-fetch. Without a usable sync the scan walks back from the end in doubling windows to
  the flow's last record: a direct one gives the resume point; otherwise (a forwarded
  record, whose source offset no header holds) the whole partition is indexed and the flow
  re-reads the source from its log start, dropping what it has written.

The offset syncs are written only after the target acknowledged the records they name,
so a sync is never ahead; the index drops whatever the re-fetch brings twice. A restart at
any point of a write sequence therefore neither duplicates nor loses
(``tests/unit/mirror/test_mirror_dedupe.py`` crashes a simulated flow at every step).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from mirror.remote import Headers, OriginKey, Provenance, ProvenanceError, decode_provenance
from mirror.translation import OffsetSync

FIRST_WINDOW = 16  # records read back from the end first when no sync can be used


class DedupeIndex:
    """The highest origin offset written per origin, for one remote partition."""

    def __init__(self, high: dict[OriginKey, int] | None = None) -> None:
        self.high: dict[OriginKey, int] = dict(high or {})
        self.duplicates = 0

    def observe(self, p: Provenance) -> None:
        key = (p.origin_region, p.origin_partition)
        if p.origin_offset > self.high.get(key, -1):
            self.high[key] = p.origin_offset

    def admit(self, p: Provenance) -> bool:
        """True: a new record, to write (and now counted as written); False: a duplicate."""
        return self.admit_origin((p.origin_region, p.origin_partition), p.origin_offset)

    def admit_origin(self, key: OriginKey, origin_offset: int) -> bool:
        """``admit`` by origin (region, partition) and offset (``Stamper.copy``'s answer)."""
        if origin_offset <= self.high.get(key, -1):
            self.duplicates += 1
            return False
        self.high[key] = origin_offset
        return True

    def admit_run(self, key: OriginKey, origin_offsets: Sequence[int]) -> int:
        """``admit_origin`` for a run of records of one origin whose origin offsets increase
        (a source batch read straight from the origin): the index of the first one admitted
        (``len`` when none is). Those before it are duplicates, those from it on are new:
        one comparison per run instead of one call per record."""
        high = self.high.get(key, -1)
        first = bisect_right(origin_offsets, high) if origin_offsets and origin_offsets[0] <= high else 0
        if first < len(origin_offsets):
            self.high[key] = origin_offsets[-1]
        self.duplicates += first
        return first


def written_by(p: Provenance | None, source_region: str, target_region: str) -> bool:
    """Whether a record in the target with provenance ``p`` was written by the flow
    ``source_region`` -> ``target_region``."""
    return p is not None and p.path[-2:] == (source_region, target_region)


def _provenance(headers: Headers) -> Provenance | None:
    try:
        return decode_provenance(headers)
    except ProvenanceError:
        return None  # not the flow's: it never writes a malformed provenance


class ScanPhase(Enum):
    VERIFY_SYNC = "verify-sync"  # reading [sync target offset, end)
    BACKWARD = "backward"  # reading windows back from the end for the flow's last record
    FULL = "full"  # reading the whole partition
    DONE = "done"


@dataclass(frozen=True)
class Resume:
    """Where a remote partition's copy starts again, and what it has written."""

    fetch_offset: int  # the source offset to fetch from
    index: DedupeIndex = field(compare=False)
    reason: str


class TailScan:
    """The start-up read of one remote partition (rules in the module docstring).

    Drive it: while ``next_read()`` gives ``(start, stop)``, read the target partition's
    records with offsets in ``[start, stop)`` and hand them, in offset order, to ``feed``
    (any number of calls; a compacted partition has holes), then call ``finish_read``.
    ``result`` is set once the phase is ``DONE``."""

    def __init__(self, *, source_region: str, target_region: str, log_start: int, end: int,
                 sync: OffsetSync | None, source_log_start: int, first_window: int = FIRST_WINDOW) -> None:
        self.source_region = source_region
        self.target_region = target_region
        self.log_start = log_start
        self.end = end
        self.sync = sync
        self.source_log_start = source_log_start
        self.window = max(1, first_window)
        self.result: Resume | None = None
        self.records_read = 0
        self._range: tuple[int, int] | None = None
        self._ours: list[tuple[int, Provenance]] = []  # the flow's records in the current range
        self._seen_at_sync: Provenance | None = None
        if end <= log_start:
            self._finish(source_log_start, DedupeIndex(), "the remote partition is empty: copy from the "
                         "source's log start")
        elif sync is not None and log_start <= sync.target_offset < end:
            self.phase = ScanPhase.VERIFY_SYNC
            self._range = (sync.target_offset, end)
        else:
            self._backward_from(end)

    # ------------------------------------------------------------------ driving

    def next_read(self) -> tuple[int, int] | None:
        return None if self.phase is ScanPhase.DONE else self._range

    def feed(self, records: Iterable[tuple[int, Headers]]) -> None:
        assert self._range is not None and self.phase is not ScanPhase.DONE
        start, stop = self._range
        for offset, headers in records:
            if not start <= offset < stop:
                continue
            self.records_read += 1
            p = _provenance(headers)
            if self.phase is ScanPhase.VERIFY_SYNC and self.sync is not None \
                    and offset == self.sync.target_offset:
                self._seen_at_sync = p
            if written_by(p, self.source_region, self.target_region):
                assert p is not None
                self._ours.append((offset, p))

    def finish_read(self) -> None:
        if self.phase is ScanPhase.VERIFY_SYNC:
            self._after_verify()
        elif self.phase is ScanPhase.BACKWARD:
            self._after_window()
        elif self.phase is ScanPhase.FULL:
            self._finish(self.source_log_start, self._index(),
                         "the flow's last record was forwarded and no offset sync can be used: "
                         "re-reading the source from its log start, dropping what was written")

    # ------------------------------------------------------------------ phases

    def _direct(self, p: Provenance) -> bool:
        return p.origin_region == self.source_region and p.path == (self.source_region, self.target_region)

    def _index(self) -> DedupeIndex:
        index = DedupeIndex()
        for _, p in self._ours:
            index.observe(p)
        return index

    def _after_verify(self) -> None:
        sync = self.sync
        assert sync is not None
        at = self._seen_at_sync
        if at is None or not written_by(at, self.source_region, self.target_region) \
                or (self._direct(at) and at.origin_offset != sync.source_offset):
            # not the flow's record, or not the one the sync names: a stale sync
            self._ours = []
            self._backward_from(self.end)
            return
        resume = sync.source_offset + 1
        last = self._ours[-1][1] if self._ours else None
        if last is not None and self._direct(last):
            resume = max(resume, last.origin_offset + 1)
        self._finish(resume, self._index(), f"offset sync ({sync.source_offset} -> {sync.target_offset}) and "
                     f"{len(self._ours)} records of the flow after it")

    def _backward_from(self, hi: int) -> None:
        self.phase = ScanPhase.BACKWARD
        self._range = (max(self.log_start, hi - self.window), hi)

    def _after_window(self) -> None:
        assert self._range is not None
        lo, _ = self._range
        if self._ours:
            last = self._ours[-1][1]
            if self._direct(last):
                self._finish(last.origin_offset + 1, self._index(),
                             f"the flow's last record is offset {last.origin_offset} of the source")
                return
            self._ours = []
            self.phase = ScanPhase.FULL
            self._range = (self.log_start, self.end)
            return
        if lo <= self.log_start:
            self._finish(self.source_log_start, DedupeIndex(),
                         "the remote partition holds nothing the flow wrote: copy from the source's log start")
            return
        self.window *= 2
        self._backward_from(lo)

    def _finish(self, fetch_offset: int, index: DedupeIndex, reason: str) -> None:
        self.phase = ScanPhase.DONE
        self._range = None
        self.result = Resume(fetch_offset, index, reason)


def scan_log(scan: TailScan, log: Sequence[tuple[int, Headers]]) -> Resume:
    """Run ``scan`` over a target partition held in memory, ``(offset, headers)`` in
    offset order (tests and the simulation; the mirror reads with a consumer)."""
    offsets = [o for o, _ in log]
    while (window := scan.next_read()) is not None:
        start, stop = window
        scan.feed(log[bisect_left(offsets, start):bisect_left(offsets, stop)])
        scan.finish_read()
    assert scan.result is not None
    return scan.result
