"""Log compaction (Kafka's LogCleaner): keep the latest record per key, in bounded steps.

A compacted log has a *clean* section (everything below the first dirty offset,
``cleaner-offset-checkpoint``: already cleaned) and a *dirty* one up to the first
uncleanable offset, the base offset of the first segment that is the active one,
reaches the high watermark, or holds a record younger than
``min.compaction.lag.ms``. Cleaning is by whole segments below that offset; the
active segment, where appends go, is never touched, so producing goes on meanwhile.

One pass (``LogCleaning``), as Kafka's:

1. **Map**: read the dirty section, key → offset of its latest record.
2. **Clean**: from the log start up to the first uncleanable offset, in groups of
   adjacent segments whose sizes sum to at most ``segment.bytes``, copy each batch
   keeping only the records that are the latest for their key (or have no key: mq
   does not refuse keyless records on compacted topics at produce time, so they are
   kept). A fully kept batch is copied byte for byte; a partly kept one is rebuilt
   with the same header fields and offsets (``rebuild_batch``: holes inside a batch);
   a batch with no record left is dropped, except the last batch of a group, kept
   empty so the group still ends where it did (the loader relies on it, and so does
   finishing a swap after a crash). Control batches are kept. Each group's output is
   written as ``.cleaned`` files and swapped in (``Log.replace_segments``).
3. The first dirty offset moves to the first uncleanable offset.

Tombstones (value None) are kept until their *delete horizon*, ``delete.retention.ms``
after the first cleaning that saw them (KIP-534), so a consumer reading from the log
start within that time still sees the deletion. Horizons are kept per segment in the
cleaner checkpoint. A segment whose horizon has not passed is cleaned on its own
(never merged), so a horizon is never pushed later by merging; a pass that merges
segments gives the tombstones it keeps the horizon now + ``delete.retention.ms``.

Work is measured in bytes read: ``step(budget)`` reads about ``budget`` bytes (at
least one batch) and returns; the caller checks ``is_valid`` before each step and
abandons the pass if the log changed under it (retention, truncation, deletion).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.protocol.record_batch import BatchHeader, decode_record_columns, iter_batches, rebuild_batch
from mq.storage.aborted_filter import AbortedBatches
from mq.storage.cleanable import CleanableLog, cleanable_log, is_compacted
from mq.storage.cleaner_checkpoint import CleanerCheckpoint, write_cleaner_checkpoint
from mq.storage.index import MAX_RELATIVE_OFFSET
from mq.storage.log import Log
from mq.storage.segment import MAX_SEGMENT_BYTES, LogSegment
from mq.storage.swap import CLEANED_SUFFIX, remove_cleaned

__all__ = ["CleanStats", "CleanableLog", "LogCleaning", "clean_now", "cleanable_log", "is_compacted"]

READ_CHUNK_BYTES = 256 * 1024


@dataclass(slots=True)
class CleanStats:
    bytes_read: int = 0
    batches_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    batches_rewritten: int = 0
    groups_swapped: int = 0
    size_before: int = 0
    size_after: int = 0


@dataclass(frozen=True, slots=True)
class _Chunk:
    size: int
    batches: list[tuple[BatchHeader, memoryview]]
    end: int
    """The offset after the last batch."""


@dataclass(slots=True)
class _Group:
    segments: list[LogSegment]
    droppable: list[bool] = field(default_factory=list)
    """Per segment: its tombstones' horizon has passed."""
    own_horizon: int | None = None
    """A singleton group's unexpired horizon (its retained tombstones keep it)."""


class LogCleaning:
    """One cleaning pass over one log, done in steps of bounded bytes read."""

    def __init__(self, log: Log, cleanable: CleanableLog, *, now_ms: int) -> None:
        segments = log.segments
        end = next(i for i, s in enumerate(segments) if s.base_offset == cleanable.first_uncleanable_offset)
        self.log = log
        self.cleanable = cleanable
        self.started_ms = now_ms
        self.stats = CleanStats()
        self._segments = list(segments[:end])
        self._sizes = [s.size for s in self._segments]
        self.stats.size_before = sum(self._sizes)
        self._horizons = dict(cleanable.checkpoint.horizons)
        self._map: dict[bytes | None, int] = {}
        self._mapping = True
        self._seg_i = next(i for i, s in enumerate(self._segments + [segments[end]])
                           if s.base_offset == cleanable.first_dirty_offset)
        self._cursor = segments[self._seg_i].base_offset
        # Aborted transactions' records are garbage: they never supersede a key.
        self._map_aborted = AbortedBatches(log.aborted_transactions(self._cursor, cleanable.first_uncleanable_offset))
        self._write_aborted = AbortedBatches(())
        self._groups: list[_Group] = []
        self._g = 0
        self._out: LogSegment | None = None
        self._src_i = 0
        self._changed = False
        self._retained_tombstone = False
        self.done = False

    # ---- checks

    def is_valid(self) -> bool:
        """Whether the log still holds the segments this pass works on, unchanged."""
        log = self.log
        if log.is_offline or not is_compacted(log):
            return False
        segments = log.segments
        mine = self._segments
        return len(segments) > len(mine) and all(
            a is b and a.size == size for a, b, size in zip(segments, mine, self._sizes)
        )

    def abort(self) -> None:
        """Abandon the pass: drop its unfinished output (swapped groups stay)."""
        out, self._out = self._out, None
        if out is not None:
            out.close()
            remove_cleaned(self.log.fileio, self.log.directory, out.base_offset)
        self.done = True

    # ---- work

    def step(self, budget: int, *, now_ms: int, max_batches: int | None = None) -> bool:
        """Read about ``budget`` bytes (at least one batch) of the pass, and stop after
        the chunk that reaches ``max_batches`` batches (small batches cost CPU per
        batch, not per byte); True when the pass is finished (its result swapped in
        and checkpointed)."""
        used = 0
        batches_before = self.stats.batches_read
        while not self.done and (used < budget or used == 0):
            if max_batches is not None and self.stats.batches_read - batches_before >= max_batches:
                break
            if self._mapping:
                used += self._map_some(max(1, budget - used))
            else:
                used += self._clean_some(max(1, budget - used), now_ms)
        self.stats.bytes_read += used
        return self.done

    def _read(self, segment: LogSegment, offset: int, max_bytes: int) -> _Chunk | None:
        """Whole batches of ``segment`` from ``offset`` (None at its end)."""
        found = segment.read(offset, max_bytes=min(max_bytes, READ_CHUNK_BYTES))
        if found is None or not found[0]:
            return None
        data = found[0]
        view = memoryview(data)
        batches = [(header, view[pos : pos + header.size]) for pos, header in iter_batches(data)]
        self.stats.batches_read += len(batches)
        return _Chunk(len(data), batches, batches[-1][0].next_offset)

    def _map_some(self, budget: int) -> int:
        segments = self._segments
        if self._seg_i >= len(segments):
            self._mapping = False
            self._map.pop(None, None)
            self._groups = self._group_segments()
            return 0
        got = self._read(segments[self._seg_i], self._cursor, budget)
        if got is None:
            self._seg_i += 1
            if self._seg_i < len(segments):
                self._cursor = segments[self._seg_i].base_offset
            return 0
        self._cursor = got.end
        update = self._map.update
        for header, batch in got.batches:
            if not self._map_aborted.is_aborted(header, batch) and not header.is_control:
                cols = decode_record_columns(batch, verify_crc=False)
                update(zip(cols.keys, cols.offsets))
        return got.size

    def _group_segments(self) -> list[_Group]:
        """Kafka's groupSegmentsBySize: adjacent segments whose sizes sum to at most
        segment.bytes and whose offsets fit one segment. Empty segments and segments
        whose tombstone horizon has not passed stay alone."""
        cfg = self.log.config
        limit = min(cfg.segment_bytes, MAX_SEGMENT_BYTES)
        segments = self._segments
        following = [s.base_offset for s in segments[1:]] + [self.cleanable.first_uncleanable_offset]
        groups: list[_Group] = []
        now = self.started_ms

        def alone(i: int) -> bool:
            horizon = self._horizons.get(segments[i].base_offset)
            return segments[i].size == 0 or (horizon is not None and horizon > now)

        i = 0
        while i < len(segments):
            group, size = [segments[i]], segments[i].size
            j = i + 1
            if not alone(i):
                while (j < len(segments) and not alone(j) and size + segments[j].size <= limit
                       and following[j] - 1 - segments[i].base_offset <= MAX_RELATIVE_OFFSET):
                    group.append(segments[j])
                    size += segments[j].size
                    j += 1
            groups.append(_Group(group))
            i = j
        return groups

    def _clean_some(self, budget: int, now_ms: int) -> int:
        if self._g >= len(self._groups):
            self._finish()
            return 0
        group = self._groups[self._g]
        if self._out is None:
            if group.segments[0].size == 0:  # nothing to clean
                self._g += 1
                return 0
            self._start_group(group, now_ms)
        src_i = self._src_i
        source = group.segments[src_i]
        got = self._read(source, self._cursor, budget)
        if got is None:
            self._src_i += 1
            if self._src_i == len(group.segments):
                self._finish_group(group, now_ms)
            else:
                self._cursor = group.segments[self._src_i].base_offset
            return 0
        self._cursor = got.end
        last_in_group = src_i == len(group.segments) - 1
        self._write(got, droppable=group.droppable[src_i],
                    group_end=source.next_offset if last_in_group else None)
        return got.size

    def _start_group(self, group: _Group, now_ms: int) -> None:
        log = self.log
        first = group.segments[0]
        group.droppable = [
            (h := self._horizons.get(s.base_offset)) is not None and h <= now_ms for s in group.segments
        ]
        horizon = self._horizons.get(first.base_offset)
        group.own_horizon = horizon if len(group.segments) == 1 and horizon is not None \
            and horizon > now_ms else None
        self._out = LogSegment.create(
            log.fileio, log.directory, first.base_offset, log.config, now_ms=now_ms,
            file_suffix=CLEANED_SUFFIX,
        )
        self._src_i = 0
        self._cursor = first.base_offset
        self._write_aborted = AbortedBatches(log.aborted_transactions(first.base_offset, group.segments[-1].next_offset))
        self._changed = False
        self._retained_tombstone = False

    def _write(self, chunk: _Chunk, *, droppable: bool, group_end: int | None) -> None:
        """Append the kept records of the batches in ``chunk`` to the output."""
        latest = self._map.get
        out = bytearray()
        batches: list[tuple[int, int, int, int]] = []
        for header, batch in chunk.batches:
            stored: bytes | memoryview = batch
            aborted = self._write_aborted.is_aborted(header, batch)
            if not header.is_control:
                cols = decode_record_columns(batch, verify_crc=False)
                kept = []
                for record in zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers):
                    if aborted:
                        continue  # an aborted transaction's record: never read under read_committed
                    key = record[2]
                    if key is not None:
                        newest = latest(key)
                        if newest is not None and record[0] < newest:
                            continue  # superseded
                        if record[3] is None:
                            if droppable:
                                continue  # a tombstone past its horizon
                            self._retained_tombstone = True
                    kept.append(record)
                if len(kept) < header.record_count:
                    self._changed = True
                    self.stats.records_removed += header.record_count - len(kept)
                    if not kept and header.next_offset != group_end:
                        continue
                    stored = rebuild_batch(header, kept)
                    self.stats.batches_rewritten += 1
            batches.append((len(out), len(stored), header.last_offset, header.max_timestamp))
            out += stored
        if out:
            assert self._out is not None
            self._out.append(out, batches)
            self.stats.bytes_written += len(out)

    def _finish_group(self, group: _Group, now_ms: int) -> None:
        log = self.log
        out, self._out = self._out, None
        assert out is not None
        base = out.base_offset
        horizon: int | None = None
        if self._retained_tombstone:
            horizon = group.own_horizon
            if horizon is None:
                horizon = now_ms + log.config.delete_retention_ms
        for segment in group.segments[1:]:
            self._horizons.pop(segment.base_offset, None)
        if self._horizons.get(base) != horizon:
            if horizon is None:
                del self._horizons[base]
            else:
                self._horizons[base] = horizon
            # Before the swap: should it not happen, the old segment at this base
            # only keeps its tombstones longer.
            self._write_checkpoint(self.cleanable.first_dirty_offset)
        if not self._changed and len(group.segments) == 1:
            out.close()
            remove_cleaned(log.fileio, log.directory, base)
        else:
            out.on_become_inactive()
            out.flush()
            out.close()
            new = log.replace_segments(group.segments, created_ms=group.segments[-1].created_ms)
            i = next(n for n, s in enumerate(self._segments) if s is group.segments[0])
            self._segments[i : i + len(group.segments)] = [new]
            self._sizes[i : i + len(group.segments)] = [new.size]
            self.stats.groups_swapped += 1
        self._g += 1

    def _finish(self) -> None:
        live = {s.base_offset for s in self.log.segments}
        self._horizons = {b: ms for b, ms in self._horizons.items() if b in live}
        self._write_checkpoint(self.cleanable.first_uncleanable_offset)
        self.stats.size_after = sum(s.size for s in self._segments)
        self.done = True

    def _write_checkpoint(self, first_dirty: int) -> None:
        write_cleaner_checkpoint(
            self.log.fileio, self.log.directory,
            CleanerCheckpoint(first_dirty, tuple(sorted(self._horizons.items()))),
        )




def clean_now(log: Log, *, high_watermark: int, now_ms: int) -> CleanStats:
    """Run one whole pass at once (tests, tools): no ratio or lag threshold applies."""
    cleaning = LogCleaning(log, cleanable_log(log, high_watermark=high_watermark, now_ms=now_ms), now_ms=now_ms)
    while not cleaning.step(1 << 62, now_ms=now_ms):
        pass
    return cleaning.stats
