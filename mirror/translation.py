"""Offset translation for remote topics (pure): offset syncs, the store that translates a
source group's committed offset to the target, and checkpoints (MirrorMaker 2's
``OffsetSyncStore`` and ``MirrorCheckpointTask``, KIP-382).

A remote topic (``east.orders`` in west) has other offsets than its source (``orders``
in east): the target partition also holds what earlier runs wrote, records can be left
out (the forwarding rule, duplicates dropped after a restart) and a compacted source has
holes. So a group that fails over from east to west needs its committed offsets
*translated*.

**Offset syncs.** After the target acknowledges a write, the mirror knows where each
source record landed. Every so often it writes an ``OffsetSync`` to the internal topic
``mq-offset-syncs.<source region>.internal`` in the target: *the record at
``source_offset`` of ``topic``/``partition`` is at ``target_offset`` of the remote
topic*, plus ``run``: the ``run`` source offsets just before it were copied one-for-one
(source offset ``source_offset - k`` is at ``target_offset - k`` for ``k <= run``).
``OffsetSyncEmitter`` decides when (MM2's ``offset.lag.max``, plus a time bound):

* at the first record written after the mirror (re)starts a partition;
* when the source offset is ``offset.lag.max`` (default 100) or more past the last sync;
* when a written record has waited ``offset.sync.interval.ms`` (default 1000) without a
  sync: also when no more records come (``tick``), so a quiet partition ends at a sync.

The topic has ``cleanup.policy=delete`` (time and size retention), unlike MM2's
compacted ``mm2-offset-syncs``: compaction keeps one sync per partition, which is why
MM2 cannot translate older offsets after a restart (KAFKA-14666).

**Translation** (``translate``), for a committed source offset ``c`` (the next record the
group reads) and a partition's syncs:

* ``c`` inside a sync's run, or at a sync: exact, ``target_offset - (source_offset - c)``;
* else, after a sync ``s``: ``s.target_offset + 1``, the first target record after the
  synced one. Every target record from there to the record that stands for ``c`` is a
  copy of a source record in ``(s.source_offset, c)``: the re-reads are fewer than
  ``c - s.source_offset``, the distance to the previous sync;
* before every sync: no translation (None): the checkpoint is not written.

It is never ahead of the record ``c`` stands for (nothing is lost), monotonic in ``c``,
and exact at sync points; property tests check all four against random histories.

**How this differs from MirrorMaker 2.** MM2 translates every offset between two syncs to
*the last sync plus one* (after KAFKA-12468, PR #13178; before that, offsets could even be
ahead): with ``offset.lag.max=100`` a fail-over re-reads up to 99 records per partition
even when the copy was one-for-one. mq's syncs carry the length of the one-for-one run
behind them, so any offset covered by a run translates exactly: a remote topic copied
without filtering, restarts or source compaction fails over with zero re-reads up to the
last sync, and the tail after it is bounded by ``offset.lag.max`` records and
``offset.sync.interval.ms``. Only offsets in a stretch that was not one-for-one (records
left out, source holes, a restart) rewind to the previous sync, as MM2 does everywhere.

**Checkpoints.** For each group of the flow, the translated committed offsets are written
to ``<source region>.checkpoints.internal`` in the target (compacted; key: group, source
topic, partition), MM2's name. ``mq mirror failover --translate`` reads them.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mq.core.types import TopicPartition

OFFSET_LAG_MAX = 100
OFFSET_SYNC_INTERVAL_MS = 1_000
MAX_SYNCS_PER_PARTITION = 1_024
MAX_RECORD_BYTES = 4_096
MALFORMED_SYNC = "MALFORMED_OFFSET_SYNC"


def offset_syncs_topic(source_region: str) -> str:
    """The internal topic in the target that holds a source region's offset syncs."""
    return f"mq-offset-syncs.{source_region}.internal"


def checkpoints_topic(source_region: str) -> str:
    """The internal topic in the target that holds translated group offsets (MM2's name)."""
    return f"{source_region}.checkpoints.internal"


class TranslationFormatError(ValueError):
    """An offset-sync or checkpoint record that cannot be read (``code``: ``MALFORMED_OFFSET_SYNC``)."""

    def __init__(self, message: str) -> None:
        self.code = MALFORMED_SYNC
        self.message = message
        super().__init__(f"{MALFORMED_SYNC}: {message}")


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """The record at ``source_offset`` of ``tp`` (in the source) is at ``target_offset``
    of the remote topic; so are the ``run`` source offsets before it, one-for-one."""

    tp: TopicPartition
    source_offset: int
    target_offset: int
    run: int = 0


# ---------------------------------------------------------------------------- records


def _load(raw: bytes | None, what: str) -> object:
    if raw is None or len(raw) > MAX_RECORD_BYTES:
        raise TranslationFormatError(f"{what} is {'missing' if raw is None else f'{len(raw)} bytes'}: "
                                     f"expected a JSON document of at most {MAX_RECORD_BYTES} bytes")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise TranslationFormatError(f"{what} is not JSON: {raw[:40]!r}") from None


def _get(doc: object, name: str, what: str) -> object:
    if not isinstance(doc, dict) or name not in doc:
        raise TranslationFormatError(f"{what} has no {name!r}")
    return doc[name]


def _int(doc: object, name: str, what: str) -> int:
    value = _get(doc, name, what)
    if type(value) is not int or not 0 <= value < 1 << 63:
        raise TranslationFormatError(f"{what} field {name!r} is {value!r}: expected an integer in [0, 2^63)")
    return value


def _str(doc: object, name: str, what: str) -> str:
    value = _get(doc, name, what)
    if type(value) is not str or not value:
        raise TranslationFormatError(f"{what} field {name!r} is {value!r}: expected a non-empty string")
    return value


def _dumps(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """(key, value) of the record in ``mq-offset-syncs.<source>.internal``."""
    return (_dumps({"topic": sync.tp.topic, "partition": sync.tp.partition}),
            _dumps({"source_offset": sync.source_offset, "target_offset": sync.target_offset,
                    "run": sync.run}))


def decode_offset_sync(key: bytes | None, value: bytes | None) -> OffsetSync:
    k, v = _load(key, "offset sync key"), _load(value, "offset sync value")
    tp = TopicPartition(_str(k, "topic", "offset sync key"), _int(k, "partition", "offset sync key"))
    fields = [_int(v, n, "offset sync value") for n in ("source_offset", "target_offset", "run")]
    if fields[2] > fields[0] or fields[2] > fields[1]:
        raise TranslationFormatError(f"offset sync run {fields[2]} reaches below offset 0 "
                                     f"(source {fields[0]}, target {fields[1]})")
    return OffsetSync(tp, *fields)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Group ``group`` committed ``upstream_offset`` on ``tp`` in the source; in the target
    it reads the remote topic from ``downstream_offset``."""

    group: str
    tp: TopicPartition  # in the source
    remote_topic: str
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    @property
    def remote_tp(self) -> TopicPartition:
        return TopicPartition(self.remote_topic, self.tp.partition)


def encode_checkpoint(cp: Checkpoint) -> tuple[bytes, bytes]:
    """(key, value) of the record in ``<source>.checkpoints.internal`` (compacted by key)."""
    return (_dumps({"group": cp.group, "topic": cp.tp.topic, "partition": cp.tp.partition}),
            _dumps({"remote_topic": cp.remote_topic, "upstream_offset": cp.upstream_offset,
                    "downstream_offset": cp.downstream_offset, "metadata": cp.metadata}))


def decode_checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint:
    k, v = _load(key, "checkpoint key"), _load(value, "checkpoint value")
    metadata = v.get("metadata", "") if isinstance(v, dict) else ""
    return Checkpoint(
        _str(k, "group", "checkpoint key"),
        TopicPartition(_str(k, "topic", "checkpoint key"), _int(k, "partition", "checkpoint key")),
        _str(v, "remote_topic", "checkpoint value"), _int(v, "upstream_offset", "checkpoint value"),
        _int(v, "downstream_offset", "checkpoint value"), metadata if isinstance(metadata, str) else "")


# ---------------------------------------------------------------------------- emission


class OffsetSyncEmitter:
    """When to write an offset sync for one partition (rules in the module docstring).
    Fed the acknowledged writes, in order: ``(source offset, target offset)`` pairs."""

    def __init__(self, tp: TopicPartition, *, offset_lag_max: int = OFFSET_LAG_MAX,
                 interval_ms: int = OFFSET_SYNC_INTERVAL_MS) -> None:
        if offset_lag_max < 1 or interval_ms < 0:
            raise ValueError("offset.lag.max must be >= 1 and offset.sync.interval.ms >= 0")
        self.tp = tp
        self.offset_lag_max = offset_lag_max
        self.interval_ms = interval_ms
        self.reset()

    def reset(self) -> None:
        """A (re)start: the next written record gets a sync, and no run reaches before it."""
        self.last_sync: OffsetSync | None = None
        self.last_sync_ms = 0
        self.last: tuple[int, int] | None = None  # the last written (source, target)
        self.run = 0  # one-for-one records before ``last`` since the restart
        self.unsynced = False

    def on_written(self, pairs: Iterable[tuple[int, int]], now_ms: int) -> list[OffsetSync]:
        syncs: list[OffsetSync] = []
        for source, target in pairs:
            last = self.last
            if last is not None and (source <= last[0] or target <= last[1]):
                raise ValueError(f"{self.tp}: written pair ({source}, {target}) is not after ({last[0]}, "
                                 f"{last[1]}): writes must be fed in order")
            self.run = self.run + 1 if last is not None and source == last[0] + 1 \
                and target == last[1] + 1 else 0
            self.last = (source, target)
            self.unsynced = True
            if self.last_sync is None or source - self.last_sync.source_offset >= self.offset_lag_max:
                syncs.append(self._emit(now_ms))
        sync = self.tick(now_ms)
        if sync is not None:
            syncs.append(sync)
        return syncs

    def on_written_run(self, source_offset: int, target_offset: int, count: int,
                       now_ms: int) -> list[OffsetSync]:
        """``on_written`` for ``count`` records copied one-for-one: source offsets
        ``source_offset + k`` at target offsets ``target_offset + k``. The same syncs, at
        the same points, computed per sync instead of per record (a write of thousands of
        records emits a few)."""
        if count < 1:
            return []
        syncs = self._first_of_run(source_offset, target_offset, now_ms)
        done = 1  # records of the run fed so far
        while done < count:
            assert self.last_sync is not None and self.last is not None
            # the next record that is offset_lag_max past the last sync, or the run's last
            due = self.last_sync.source_offset + self.offset_lag_max - self.last[0]
            step = min(max(due, 1), count - done)
            self.run += step
            self.last = (self.last[0] + step, self.last[1] + step)
            self.unsynced = True
            done += step
            if self.last[0] - self.last_sync.source_offset >= self.offset_lag_max:
                syncs.append(self._emit(now_ms))
        sync = self.tick(now_ms)
        if sync is not None:
            syncs.append(sync)
        return syncs

    def _first_of_run(self, source: int, target: int, now_ms: int) -> list[OffsetSync]:
        """The first record of a run, exactly as ``on_written`` takes each (no tick)."""
        last = self.last
        if last is not None and (source <= last[0] or target <= last[1]):
            raise ValueError(f"{self.tp}: written pair ({source}, {target}) is not after ({last[0]}, "
                             f"{last[1]}): writes must be fed in order")
        self.run = self.run + 1 if last is not None and source == last[0] + 1 and target == last[1] + 1 else 0
        self.last = (source, target)
        self.unsynced = True
        if self.last_sync is None or source - self.last_sync.source_offset >= self.offset_lag_max:
            return [self._emit(now_ms)]
        return []

    def tick(self, now_ms: int) -> OffsetSync | None:
        """A sync for the last written record once it has waited ``interval_ms``."""
        if self.unsynced and now_ms - self.last_sync_ms >= self.interval_ms:
            return self._emit(now_ms)
        return None

    def next_deadline_ms(self) -> int | None:
        return self.last_sync_ms + self.interval_ms if self.unsynced else None

    def _emit(self, now_ms: int) -> OffsetSync:
        assert self.last is not None
        self.last_sync = OffsetSync(self.tp, self.last[0], self.last[1], self.run)
        self.last_sync_ms = now_ms
        self.unsynced = False
        return self.last_sync


# ---------------------------------------------------------------------------- translation


def translate(committed: int, syncs: Sequence[OffsetSync]) -> int | None:
    """The target offset that stands for source offset ``committed`` (None: before every
    sync). ``syncs``: one partition's, as ``OffsetSyncStore`` keeps them (source and
    target offsets increasing; each run above the previous sync)."""
    if not syncs:
        return None
    j = bisect_left(syncs, committed, key=lambda s: s.source_offset)
    if j < len(syncs):
        after = syncs[j]
        if committed >= after.source_offset - after.run:
            return after.target_offset - (after.source_offset - committed)
    if j == 0:
        return None
    return syncs[j - 1].target_offset + 1


@dataclass(frozen=True, slots=True)
class Translation:
    """Source offset ``committed`` stands for target offset ``offset``; a group that starts
    there re-reads at most ``reread_bound`` records it had read in the source (0 when
    ``exact``: at a sync or inside its one-for-one run)."""

    committed: int
    offset: int
    reread_bound: int
    exact: bool


def translate_bounded(committed: int, syncs: Sequence[OffsetSync]) -> Translation | None:
    """``translate`` with its re-read bound, the distance to the previous sync: past sync
    ``s``, the target records from ``s.target_offset + 1`` to the one standing for
    ``committed`` are copies of source records in ``(s.source_offset, committed)``, so at
    most ``committed - s.source_offset - 1`` of them."""
    offset = translate(committed, syncs)
    if offset is None:
        return None
    j = bisect_left(syncs, committed, key=lambda s: s.source_offset)
    if j < len(syncs) and committed >= syncs[j].source_offset - syncs[j].run:
        return Translation(committed, offset, 0, True)
    return Translation(committed, offset, committed - syncs[j - 1].source_offset - 1, False)


class OffsetSyncStore:
    """Each partition's offset syncs, read from the syncs topic in log order (MM2's
    ``OffsetSyncStore``). The newest sync wins: one that goes back (a source or target
    topic re-created) drops the stored syncs it contradicts, and a run is cut so that it
    never reaches the previous sync. At most ``max_syncs`` per partition: beyond that
    every other one of the older half is dropped, so old offsets still translate, more
    coarsely (never ahead: a translation from fewer syncs only rewinds further)."""

    def __init__(self, *, max_syncs: int = MAX_SYNCS_PER_PARTITION) -> None:
        if max_syncs < 2:
            raise ValueError("max_syncs must be >= 2")
        self.max_syncs = max_syncs
        self._syncs: dict[TopicPartition, list[OffsetSync]] = {}

    def add(self, sync: OffsetSync) -> None:
        kept = [s for s in self._syncs.get(sync.tp, ())
                if s.source_offset < sync.source_offset and s.target_offset < sync.target_offset]
        if kept:
            prev = kept[-1]
            run = min(sync.run, sync.source_offset - prev.source_offset - 1,
                      sync.target_offset - prev.target_offset - 1)
        else:
            run = min(sync.run, sync.source_offset, sync.target_offset)
        kept.append(sync if run == sync.run else OffsetSync(sync.tp, sync.source_offset, sync.target_offset,
                                                            max(0, run)))
        if len(kept) > self.max_syncs:
            half = (len(kept) + 1) // 2
            kept = kept[:half][::2] + kept[half:]
        self._syncs[sync.tp] = kept

    def syncs(self, tp: TopicPartition) -> Sequence[OffsetSync]:
        return tuple(self._syncs.get(tp, ()))

    def translate(self, tp: TopicPartition, committed: int) -> int | None:
        return translate(committed, self._syncs.get(tp, ()))

    def translate_bounded(self, tp: TopicPartition, committed: int) -> Translation | None:
        return translate_bounded(committed, self._syncs.get(tp, ()))

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._syncs)


# ---------------------------------------------------------------------------- checkpoints


def plan_checkpoints(committed: Mapping[tuple[str, TopicPartition], tuple[int, str]], store: OffsetSyncStore,
                     remote_topics: Mapping[str, str],
                     emitted: Mapping[tuple[str, TopicPartition], Checkpoint]) -> list[Checkpoint]:
    """The checkpoints to write now: ``committed`` maps (group, source tp) to (committed
    offset, metadata); ``remote_topics`` a source topic to its remote name; ``emitted``
    what was written before (a checkpoint is written again only when it changed). An
    offset that cannot be translated yet gets no checkpoint; offset 0 (nothing consumed)
    is 0 in the remote partition, sync or not."""
    out: list[Checkpoint] = []
    for (group, tp) in sorted(committed, key=lambda k: (k[0], k[1].topic, k[1].partition)):
        offset, metadata = committed[(group, tp)]
        remote = remote_topics.get(tp.topic)
        if remote is None or offset < 0:
            continue
        downstream = store.translate(tp, offset)
        if downstream is None and offset == 0:
            downstream = 0  # nothing consumed: the start of the remote partition (no sync needed)
        if downstream is None:
            continue
        cp = Checkpoint(group, tp, remote, offset, downstream, metadata)
        if emitted.get((group, tp)) != cp:
            out.append(cp)
    return out


def latest_checkpoints(checkpoints: Iterable[Checkpoint], group: str) -> dict[TopicPartition, Checkpoint]:
    """The last checkpoint of each partition of ``group`` (read in log order), keyed by
    the remote topic-partition a fail-over commits to."""
    out: dict[TopicPartition, Checkpoint] = {}
    for cp in checkpoints:
        if cp.group == group:
            out[cp.remote_tp] = cp
    return out
