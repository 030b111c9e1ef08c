"""A partition's log: an ordered list of segments, the last one active.

Offsets are assigned here (``append_as_leader``) or kept (``append_as_follower``,
``append_as_mirror``);
reads return whole batches as stored bytes; retention and DeleteRecords remove whole
segments from the front; ``truncate_to`` cuts the end (replication). Durability is
the caller's policy: ``flush`` fsyncs and advances the recovery point, and
``checkpoint`` persists it (see ``mq.storage.checkpoint``). Every public method
turns an ``OSError`` into ``MqError(KAFKA_STORAGE_ERROR)`` and takes the log
offline: after a failed write or fsync the state of the files is unknown, so
nothing more is acknowledged from them.

Failpoints (``mq.core.failpoints``), scoped by the partition directory's name
(``storage.before_fsync@orders-0=oserror(EIO)`` fails one partition only):
``storage.before_append`` before a validated append reaches the segment (leader
and follower), ``storage.before_fsync`` before each segment fsync (``flush``,
``truncate_to``, ``close``). An injected ``OSError`` takes the log offline exactly
as a real one does.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TypeVar

from mq.core import failpoints
from mq.core.config import TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NO_TIMESTAMP, CleanupPolicy
from mq.protocol.batch_format import BatchHeader
from mq.protocol.record_batch import read_header
from mq.storage.checkpoint import LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, write_checkpoint
from mq.storage.cleaner_checkpoint import truncate_cleaner_checkpoint
from mq.storage.fileio import FileIO
from mq.storage.loader import load_log
from mq.storage.log_transactions import LogTransactions
from mq.storage.producer_snapshot import delete_snapshots, rebuild_producer_state, write_snapshot
from mq.storage.producer_state import CompletedTxn
from mq.storage.segment import LogCorruptedError, LogSegment
from mq.storage.swap import swap_in
from mq.storage.txn_index import AbortedTxn
from mq.storage.validator import (
    LogAppendInfo,
    ValidatedRecords,
    validate_as_follower,
    validate_as_leader,
    validate_as_mirror,
)

__all__ = ["FetchDataInfo", "Log", "LogAppendInfo"]

T = TypeVar("T")
_BASE = attrgetter("base_offset")


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Whole stored batches; ``first_offset`` is the base offset of the first one
    (≤ the offset asked for: the batch holding it), or the offset asked for when
    ``records`` is empty."""

    records: bytes
    first_offset: int


def _storage_errors(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def guarded(self: Log, *args: object, **kwargs: object) -> T:
        if self._failure is not None:
            raise MqError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.directory} is offline: {self._failure}")
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            self._failure = f"{method.__name__}: {exc}"
            raise MqError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.directory}: {self._failure}") from exc

    return guarded


class Log:
    """Open with ``Log.open``; see the module docstring. Not thread-safe: one owner
    (the broker's event loop) calls it."""

    def __init__(
        self, fileio: FileIO, directory: str, config: TopicConfig, segments: list[LogSegment], *,
        log_start_offset: int, recovery_point: int,
    ) -> None:
        self.fileio = fileio
        self.directory = directory
        self._config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._failure: str | None = None
        self._failpoint_scope = directory.rstrip("/").rsplit("/", 1)[-1]
        self._dir_dirty = False
        self._unflushed_bytes = 0
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        self.bytes_truncated_on_open = 0
        self.segments_recovered_on_open = 0
        # What each checkpoint file holds (as last read or written): a checkpoint whose
        # value has not moved is not rewritten, so closing an idle partition costs no
        # fsync (a broker with thousands of partitions shuts down in a blink).
        self._checkpointed: dict[str, int] = {}
        # (base offset, size) of the active segment when it and its indexes were last
        # fsynced in full; ``close`` skips the fsync when it has not changed.
        self._active_synced: tuple[int, int] | None = None
        # Idempotence (``mq.storage.producer_state``): kept by every replica from the
        # batches it appends; snapshotted beside each rolled segment and on close.
        # Transactions (``mq.storage.log_transactions``): the .txnindex files and what
        # bounds the last stable offset, fed by the control batches the state applies.
        self.transactions = LogTransactions(fileio, directory)
        self.producer_state = self.transactions.producer_state(self._transaction_completed)
        self._snapshot_offset = -1  # offset of the snapshot file matching the state

    @classmethod
    def open(
        cls, fileio: FileIO, directory: str, config: TopicConfig, *, now_ms: int,
        recovery_point: int | None = None,
    ) -> Log:
        """Open (creating if needed) and recover the partition in ``directory``.
        ``recovery_point`` None reads the partition's checkpoint; a number overrides
        it (0 re-reads and CRC-checks everything)."""
        try:
            loaded = load_log(fileio, directory, config, now_ms=now_ms, recovery_point=recovery_point)
        except OSError as exc:
            raise MqError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot open log {directory}: {exc}") from exc
        log = cls(
            fileio, directory, config, loaded.segments,
            log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
        )
        try:
            log._rebuild_producer_state()
        except OSError as exc:
            raise MqError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot load producer state of {directory}: {exc}") from exc
        log.bytes_truncated_on_open = loaded.bytes_truncated
        log.segments_recovered_on_open = loaded.segments_recovered
        # A missing or unreadable checkpoint reads as 0 (re-read everything / no offsets
        # deleted), so a new partition needs no file until its value moves.
        log._checkpointed[RECOVERY_POINT_FILE] = loaded.checkpointed_recovery_point or 0
        log._checkpointed[LOG_START_OFFSET_FILE] = loaded.checkpointed_log_start_offset or 0
        if loaded.segments_recovered == 0:
            # Nothing was re-read or rebuilt: the files are as the last owner left them.
            active = log.active_segment
            log._active_synced = (active.base_offset, active.size)
        return log

    # ---- state

    @property
    def config(self) -> TopicConfig:
        return self._config

    def update_config(self, config: TopicConfig) -> None:
        """New settings apply to segments created from now on, and at once to roll,
        retention, validation and flush decisions. A mirror topic promoted to a
        writable one starts its producer state empty (below)."""
        was_mirror = bool(self._config.mirror_source_region)
        self._config = config
        if was_mirror and not config.mirror_source_region and self._failure is None:
            self.producer_state.clear(self.log_end_offset)
            self._snapshot_offset = -1
            try:
                self._write_producer_snapshot(self.log_end_offset)
            except OSError as exc:
                self._failure = f"update_config: {exc}"

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def is_offline(self) -> bool:
        return self._failure is not None

    @property
    def unflushed_bytes(self) -> int:
        return self._unflushed_bytes

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    def should_flush(self, now_ms: int) -> bool:
        """Whether ``flush.messages`` or ``flush.ms`` asks for an fsync now."""
        if self._unflushed_messages == 0:
            return False
        cfg = self._config
        if 0 < cfg.flush_messages <= self._unflushed_messages:
            return True
        return cfg.flush_ms >= 0 and now_ms - (self._first_unflushed_ms or now_ms) >= cfg.flush_ms

    @property
    def _tracks_producers(self) -> bool:
        """A mirror topic holds another region's batches, whose producer ids are that
        region's (they may equal ids of this region): it keeps no producer state, so a
        promoted mirror never mistakes a local producer for a remote one."""
        return not self._config.mirror_source_region

    def _rebuild_producer_state(self) -> None:
        if not self._tracks_producers:
            self.producer_state.clear(self.log_end_offset)
            return
        self._snapshot_offset = rebuild_producer_state(
            self.producer_state, self.fileio, self.directory, self._segments,
            log_start_offset=self._log_start_offset, log_end_offset=self.log_end_offset)

    def _transaction_completed(self, header: BatchHeader, done: CompletedTxn) -> None:
        segment = self._segments[self._segment_index(header.base_offset)]
        found = segment.read(header.base_offset, max_bytes=header.size, max_offset=None, min_one_batch=True,
                             limit_offset=None)
        if found is not None:
            self.transactions.completed(segment.base_offset, found[0], done,
                                        first_unstable=self.producer_state.first_unstable_offset())

    def last_stable_offset(self, high_watermark: int) -> int:
        """The offset below which every transaction is decided and its marker replicated."""
        return self.transactions.last_stable_offset(high_watermark, self.producer_state.first_unstable_offset())

    @_storage_errors
    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)`` (read_committed fetches)."""
        return self.transactions.collect([s.base_offset for s in self._segments], fetch_offset, upper_bound)

    @_storage_errors
    def append_markers_as_leader(
        self, records: bytes | bytearray | memoryview, *, leader_epoch: int, now_ms: int
    ) -> LogAppendInfo:
        """Append transaction markers (control batches from WriteTxnMarkers). A marker
        of an epoch older than its producer's current one is refused
        (``INVALID_PRODUCER_EPOCH``): a late marker of a fenced producer ends nothing."""
        validated = validate_as_leader(
            records, next_offset=self.log_end_offset, leader_epoch=leader_epoch, now_ms=now_ms,
            config=self._config, markers=True,
        )
        data = validated.data
        headers = [read_header(data, pos) for pos, _, _, _ in validated.batches]
        for header in headers:
            entry = self.producer_state.entry(header.producer_id)
            if entry is not None and header.producer_epoch < entry.producer_epoch:
                raise MqError(ErrorCode.INVALID_PRODUCER_EPOCH, (
                    f"transaction marker of producer id {header.producer_id} has epoch {header.producer_epoch}, "
                    f"older than its current epoch {entry.producer_epoch}: the marker is stale"))
        self._append(validated, now_ms)
        self.producer_state.update_all(headers)
        return validated.info

    @_storage_errors
    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers silent longer than ``expiration_ms`` (producer.id.expiration.ms)."""
        return self.producer_state.remove_expired(now_ms, expiration_ms)

    # ---- appending

    @_storage_errors
    def append_as_leader(
        self, records: bytes | bytearray | memoryview, *, leader_epoch: int, now_ms: int
    ) -> LogAppendInfo:
        """Validate, check idempotent producers' sequences (``MqError`` for a gap, a
        stale epoch, an unknown producer), assign offsets, append. A retry of batches
        already appended appends nothing: the answer has their original offsets and
        ``duplicate`` set."""
        validated = validate_as_leader(
            records, next_offset=self.log_end_offset, leader_epoch=leader_epoch, now_ms=now_ms,
            config=self._config,
        )
        data = validated.data
        headers = [read_header(data, pos) for pos, _, _, _ in validated.batches]
        duplicate = self.producer_state.check_leader_append(headers)
        if duplicate is not None:
            info = validated.info
            return LogAppendInfo(
                duplicate.first_offset, duplicate.last_offset, duplicate.timestamp_ms,
                duplicate.timestamp_ms if info.log_append_time_ms != NO_TIMESTAMP else NO_TIMESTAMP,
                info.record_count, 0, duplicate=True)
        self._append(validated, now_ms)
        self.producer_state.update_all(headers)
        return validated.info

    @_storage_errors
    def append_as_follower(self, records: bytes | bytearray | memoryview, *, now_ms: int) -> LogAppendInfo:
        validated = validate_as_follower(records, log_end_offset=self.log_end_offset)
        self._append(validated, now_ms)
        self._update_producers(validated)
        return validated.info

    def _update_producers(self, validated: ValidatedRecords) -> None:
        if not self._tracks_producers:
            return
        data = validated.data
        self.producer_state.update_all(read_header(data, pos) for pos, _, _, _ in validated.batches)

    @_storage_errors
    def append_as_mirror(
        self, records: bytes | bytearray | memoryview, *, leader_epoch: int, now_ms: int, holes: bool = False,
    ) -> LogAppendInfo:
        """A mirror topic's leader: the source region's batches at their own offsets,
        which must continue this log exactly (or, with ``holes``, only follow it, as a
        compacted source's do); only the leader epoch is stamped."""
        validated = validate_as_mirror(records, log_end_offset=self.log_end_offset, leader_epoch=leader_epoch,
                                       max_message_bytes=self._config.max_message_bytes, holes=holes)
        self._append(validated, now_ms)
        self._update_producers(validated)
        return validated.info

    def _append(self, validated: ValidatedRecords, now_ms: int) -> None:
        info = validated.info
        segment = self._segments[-1]
        if segment.should_roll(
            self._config, incoming_bytes=info.size_bytes, max_timestamp=info.max_timestamp,
            last_offset=info.last_offset, now_ms=now_ms,
        ):
            segment = self._roll_to(max(self.log_end_offset, info.first_offset), now_ms)
        failpoints.hit("storage.before_append", self._failpoint_scope)
        segment.append(validated.data, validated.batches)
        self._unflushed_bytes += info.size_bytes
        self._unflushed_messages += info.record_count
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now_ms

    @_storage_errors
    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the log end offset (no-op when the active
        segment is empty)."""
        return self._roll_to(self.log_end_offset, now_ms)

    def _write_producer_snapshot(self, offset: int) -> None:
        """The producer state as of ``offset`` (every batch below it) beside the
        segment starting there, as Kafka does at each roll."""
        if self._snapshot_offset == offset:
            return
        write_snapshot(self.fileio, self.directory, offset, self.producer_state.entries)
        self._snapshot_offset = offset
        self._dir_dirty = True

    def _roll_to(self, base_offset: int, now_ms: int) -> LogSegment:
        active = self._segments[-1]
        if active.size == 0:
            if active.base_offset == base_offset:
                return active
            self._segments.pop().delete()
        else:
            active.on_become_inactive()
            # Files reach the disk in no particular order: unless the outgoing segment
            # is durable before the new one takes bytes, a power loss can keep the new
            # segment's records and lose the older ones below them, and the log that
            # recovery opens is no longer a prefix of what was written (a gap that
            # ``flush`` then declares durable). One fsync per roll buys the order.
            self._fsync_segment(active)
            self._write_producer_snapshot(base_offset)
        segment = LogSegment.create(self.fileio, self.directory, base_offset, self._config, now_ms=now_ms)
        self._segments.append(segment)
        self._dir_dirty = True
        return segment

    # ---- reading

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect_right(self._segments, offset, key=_BASE) - 1)

    @_storage_errors
    def read(
        self, offset: int, *, max_bytes: int, max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (unless
        the first batch is larger and ``min_one_batch``), none whose base offset is ≥
        ``max_offset`` (the high watermark). Data comes from one segment per call.
        A batch that fails its CRC raises ``LogCorruptedError`` instead of being served."""
        log_end = self.log_end_offset
        if offset < self._log_start_offset or offset > log_end:
            raise MqError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{self._log_start_offset}, {log_end}]",
            )
        if offset == log_end or (max_offset is not None and offset >= max_offset):
            return FetchDataInfo(b"", offset)
        segments = self._segments
        for i in range(self._segment_index(offset), len(segments)):
            limit = segments[i + 1].base_offset if i + 1 < len(segments) else None
            found = segments[i].read(
                offset, max_bytes=max_bytes, max_offset=max_offset, min_one_batch=min_one_batch,
                limit_offset=limit,
            )
            if found is not None:
                return FetchDataInfo(*found)
        return FetchDataInfo(b"", offset)

    @_storage_errors
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp ≥ ``timestamp_ms``
        at or after the log start (found via the first batch whose max_timestamp is ≥
        it, as Kafka); EARLIEST/LATEST give the log start/end with timestamp -1."""
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return self._log_start_offset, NO_TIMESTAMP
        if timestamp_ms == LATEST_TIMESTAMP:
            return self.log_end_offset, NO_TIMESTAMP
        for segment in self._segments[self._segment_index(self._log_start_offset) :]:
            if segment.max_timestamp >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)
                if found is not None:
                    return found
        return None

    # ---- removing

    @_storage_errors
    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or above ``offset`` (a batch holding ``offset`` goes
        too: truncation is to a batch boundary). Below the log start the log is
        emptied and restarts at ``offset``. Durable on return."""
        if offset < 0:
            raise MqError(ErrorCode.OFFSET_OUT_OF_RANGE, f"cannot truncate to offset {offset}")
        if offset >= self.log_end_offset:
            return
        if offset < self._log_start_offset:
            self._truncate_fully_and_start_at(offset)
            return
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            self._segments.pop().delete()
        active = self._segments[-1]
        active.truncate_to(offset)
        if active.next_offset < self._log_start_offset:
            # The batch holding the log start went too: restart the log there.
            self._truncate_fully_and_start_at(self._log_start_offset)
            return
        self._fsync_segment(active)
        self._dir_dirty = True
        self._after_truncation()
        self.transactions.truncate_to([s.base_offset for s in self._segments], offset)
        self._rebuild_producer_state()

    @_storage_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the empty log at ``offset`` (log start = log
        end = ``offset``), above or below the old range. A follower does this when its
        fetch offset fell below the leader's log start (retention or DeleteRecords
        removed what it still needed). Durable on return, checkpoints included."""
        if offset < 0:
            raise MqError(ErrorCode.OFFSET_OUT_OF_RANGE, f"cannot restart the log at offset {offset}")
        self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        created_ms = self._segments[-1].created_ms
        for segment in self._segments:
            segment.delete()
        self._segments = [
            LogSegment.create(self.fileio, self.directory, offset, self._config, now_ms=created_ms)
        ]
        self._log_start_offset = offset
        # Nothing below ``offset`` exists and the empty log is durable once this returns
        # (a restart higher must not leave the recovery point below the log start).
        self._recovery_point = offset
        self._dir_dirty = True
        self._after_truncation()
        delete_snapshots(self.fileio, self.directory, above=-1)
        self.transactions.reset()
        self.producer_state.clear(offset)
        self._snapshot_offset = -1

    def _after_truncation(self) -> None:
        self._recovery_point = min(self._recovery_point, self.log_end_offset)
        self._active_synced = None
        self.fileio.fsync_dir(self.directory)
        self._dir_dirty = False
        # Persist at once: a stale, higher recovery point would let recovery skip
        # the new bytes written where the old ones were.
        self._write_checkpoints()
        truncate_cleaner_checkpoint(self.fileio, self.directory, active_base=self._segments[-1].base_offset)

    @_storage_errors
    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (persisted before returning) and
        delete the segments wholly below it. Returns the new log start offset."""
        if offset > self.log_end_offset or offset < 0:
            raise MqError(
                ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is beyond the log end {self.log_end_offset}"
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._write_checkpoint(LOG_START_OFFSET_FILE, offset)
            self._delete_segments(self._deletable(lambda s, nxt: nxt is not None, upper_bound=offset))
        return self._log_start_offset

    @_storage_errors
    def apply_retention(self, now_ms: int, *, high_watermark: int | None = None) -> int:
        """Delete the oldest segments whose newest record is older than retention.ms,
        then while the log is larger than retention.bytes (whole segments only, never
        above ``high_watermark``; the active segment too, after a roll, as Kafka).
        Returns the number of segments deleted."""
        deleted = self._delete_segments(
            self._deletable(lambda s, nxt: nxt is not None, upper_bound=self._log_start_offset)
        )
        cfg = self._config
        if cfg.cleanup_policy == CleanupPolicy.COMPACT:
            return deleted
        hw = self.log_end_offset if high_watermark is None else high_watermark
        if cfg.retention_ms >= 0:
            def too_old(segment: LogSegment, nxt: LogSegment | None) -> bool:
                newest = segment.max_timestamp if segment.max_timestamp >= 0 else segment.created_ms
                return now_ms - newest > cfg.retention_ms

            deleted += self._delete_segments(self._deletable(too_old, upper_bound=hw), now_ms)
        if cfg.retention_bytes >= 0:
            excess = self.size_bytes - cfg.retention_bytes

            def over_size(segment: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_segments(self._deletable(over_size, upper_bound=hw), now_ms)
        return deleted

    def _deletable(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], *, upper_bound: int
    ) -> list[LogSegment]:
        """The longest run of oldest segments that satisfy ``predicate`` and end at or
        below ``upper_bound`` (an empty active segment is never deletable)."""
        out = []
        segments = self._segments
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            end = nxt.base_offset if nxt is not None else self.log_end_offset
            if (nxt is None and segment.size == 0) or end > upper_bound or not predicate(segment, nxt):
                break
            out.append(segment)
        return out

    def _delete_segments(self, doomed: list[LogSegment], now_ms: int = 0) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll_to(self.log_end_offset, now_ms)
        for segment in doomed:
            self._segments.remove(segment)
            segment.delete()
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self._dir_dirty = True
        self.producer_state.truncate_head(self._log_start_offset)
        delete_snapshots(self.fileio, self.directory, below=self._log_start_offset)
        return len(doomed)

    @_storage_errors
    def replace_segments(self, old: Sequence[LogSegment], *, created_ms: int) -> LogSegment:
        """Swap the consecutive inactive segments ``old`` for the log cleaner's output:
        the segment at ``old[0]``'s base offset written under the ``.cleaned`` suffix,
        fsynced and closed. Crash-safe (``mq.storage.swap``); returns the new segment."""
        segments = self._segments
        i = next((n for n, s in enumerate(segments) if s is old[0]), -1)
        if i < 0 or i + len(old) >= len(segments) or any(a is not b for a, b in zip(segments[i:], old)):
            raise MqError(ErrorCode.UNKNOWN_SERVER_ERROR, "the segments to replace are not in the log")
        aborted = self.transactions.merge([s.base_offset for s in old])
        new = swap_in(self.fileio, self.directory, old, self._config, created_ms=created_ms)
        segments[i : i + len(old)] = [new]
        self.transactions.forget_missing([s.base_offset for s in segments if s is not new])
        if aborted:
            self.transactions.index(new.base_offset).replace(aborted)
        return new

    # ---- durability

    @_storage_errors
    def flush(self, offset: int | None = None) -> None:
        """Fsync every segment holding offsets in [recovery point, ``offset``) (default:
        the log end) and advance the recovery point to ``offset``."""
        log_end = self.log_end_offset
        target = log_end if offset is None else min(offset, log_end)
        if target > self._recovery_point:
            segments = self._segments
            for i, segment in enumerate(segments):
                nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
                if segment.base_offset < target and (nxt is None or nxt > self._recovery_point):
                    self._fsync_segment(segment, indexes=nxt is not None)
            self._recovery_point = target
        if self._dir_dirty:
            self.fileio.fsync_dir(self.directory)
            self._dir_dirty = False
        if target == log_end:
            self._unflushed_bytes = self._unflushed_messages = 0
            self._first_unflushed_ms = None

    def _fsync_segment(self, segment: LogSegment, *, indexes: bool = True) -> None:
        failpoints.hit("storage.before_fsync", self._failpoint_scope)
        segment.flush(indexes=indexes)
        if indexes:
            self.transactions.flush(segment.base_offset)

    @_storage_errors
    def checkpoint(self) -> None:
        """Persist the recovery point and log start offset (the broker calls this every
        log.flush.offset.checkpoint.interval.ms, and ``close`` does)."""
        self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        self._write_checkpoint(RECOVERY_POINT_FILE, self._recovery_point)
        self._write_checkpoint(LOG_START_OFFSET_FILE, self._log_start_offset)

    def _write_checkpoint(self, name: str, offset: int) -> None:
        """Atomically replace checkpoint ``name`` unless it already holds ``offset``.
        The cached value is only updated after the rename, so a failed write is
        retried next time."""
        if self._checkpointed.get(name) == offset:
            return
        write_checkpoint(self.fileio, self.directory, name, offset)
        self._checkpointed[name] = offset

    @_storage_errors
    def first_damaged(self) -> tuple[int, LogCorruptedError] | None:
        """Read the whole log, checking every batch's structure and CRC (the segments
        below the recovery point included, which opening trusts): ``(offset where the
        sound prefix ends, the damage)`` for the first damage, or None. Changes nothing:
        whether to cut there is the replica's decision (a follower can re-fetch; a
        sole replica keeps its data and refuses to serve the damaged batch)."""
        for segment in self._segments:
            found = segment.first_damaged()
            if found is not None:
                return found
        return None

    @_storage_errors
    def verify(self) -> list[str]:
        """Deep check of every segment (all CRCs, offset order, index entries) for a
        start-up scrub or ``mq dump-log``; returns the problems found."""
        problems = []
        for i, segment in enumerate(self._segments):
            problems += segment.verify()
            if i + 1 < len(self._segments) and segment.next_offset > self._segments[i + 1].base_offset:
                problems.append(f"{segment.log_path}: offsets run into the next segment")
        return problems

    def close(self) -> None:
        """Flush, checkpoint and release the files (a clean shutdown). The files are
        released even when flushing fails (the error is raised after)."""
        try:
            if self._failure is None:
                self.flush()
                active = self._segments[-1]
                if self._active_synced != (active.base_offset, active.size):
                    self._fsync_segment(active)
                    self._active_synced = (active.base_offset, active.size)
                if self.log_end_offset > max(self._snapshot_offset, self._log_start_offset):
                    self._write_producer_snapshot(self.log_end_offset)  # a restart replays nothing
                    self.fileio.fsync_dir(self.directory)
                self.checkpoint()
        except OSError as exc:
            self._failure = f"close: {exc}"
            raise MqError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.directory}: {exc}") from exc
        finally:
            for segment in self._segments:
                try:
                    segment.close()
                except OSError:
                    pass  # a descriptor that cannot be closed is gone either way

    @_storage_errors
    def delete(self) -> None:
        """Remove the partition directory and everything in it."""
        for segment in self._segments:
            segment.close()
        self._segments = []
        if self.fileio.exists(self.directory):
            self.fileio.rmtree(self.directory)
        self._failure = "deleted"
