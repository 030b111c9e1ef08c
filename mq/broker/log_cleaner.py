"""The broker's log cleaner thread, as a poll-driven sans-IO manager (Kafka's
LogCleanerManager + CleanerThread, one thread).

``poll`` is called from the broker node's ``poll`` with every log the node hosts and
its high watermark. With no pass in progress it waits ``log.cleaner.backoff.ms``
between checks, then picks the *dirtiest* compacted log (Kafka's
grabFilthiestCompactedLog): the largest dirty ratio among the logs whose ratio is
at least ``min.cleanable.dirty.ratio``, whose oldest dirty record is older than
``max.compaction.lag.ms``, or that hold tombstones past their delete horizon. A pass
then advances by at most ``log.cleaner.io.max.bytes.per.poll`` bytes read per call
(at least one batch; and about ``MAX_BATCHES_PER_POLL`` batches), so one poll never
stalls the event loop for long; produce
goes on meanwhile (it appends to the active segment, which is never cleaned). A
pass whose log changed under it (truncated, retention, deleted, taken offline, no
longer compacted) is abandoned; a pass that fails (I/O error, corrupt batch) is
abandoned and its log skipped for one backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mq.core.config import BrokerConfig
from mq.core.errors import MqError
from mq.core.types import TopicPartition
from mq.storage.cleaner import LogCleaning, cleanable_log, is_compacted
from mq.storage.log import Log

__all__ = ["MAX_BATCHES_PER_POLL", "LastClean", "LogCleanerManager"]

MAX_BATCHES_PER_POLL = 500
"""Also stop a poll's work after the read that reaches this many batches: decoding costs
about 80 µs per batch, so a poll holds the event loop for some 40 ms at most, even over
``__consumer_offsets``' one-record batches."""

@dataclass(frozen=True, slots=True)
class LastClean:
    """The last finished pass over one log (for metrics)."""

    finished_ms: int
    duration_ms: int
    dirty_ratio: float
    bytes_read: int
    bytes_written: int
    records_removed: int
    size_before: int
    size_after: int


class LogCleanerManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.cleaned_bytes_total = 0
        """Bytes read by cleaning passes."""
        self.cleaner_runs_total = 0
        """Finished passes."""
        self.cleaner_aborts_total = 0
        self.max_dirty_ratio = 0.0
        """The largest dirty ratio seen at the last check."""
        self.last_clean: dict[TopicPartition, LastClean] = {}
        self._current: tuple[TopicPartition, LogCleaning] | None = None
        self._next_check_ms = 0
        self._failed_until: dict[TopicPartition, int] = {}
        # Logs a pass found corrupt: skipped until the partition's log is reopened
        # (Kafka's "uncleanable partitions", KIP-346); keyed by the Log object itself.
        self._uncleanable: dict[TopicPartition, Log] = {}
        self._errors: list[tuple[TopicPartition, str]] = []

    @property
    def cleaning(self) -> TopicPartition | None:
        """The partition a pass is in progress on."""
        return self._current[0] if self._current is not None else None

    def take_errors(self) -> list[tuple[TopicPartition, str]]:
        """Failed passes since the last call, for the shell to log."""
        errors, self._errors = self._errors, []
        return errors

    def poll(self, logs: Mapping[TopicPartition, tuple[Log, int]], *, now_ms: int) -> int | None:
        """Do a bounded amount of cleaning. ``logs``: partition → (log, high
        watermark). Returns when to call again (None: cleaning is disabled)."""
        if not self.config.log_cleaner_enable:
            return None
        if self._current is None:
            if now_ms < self._next_check_ms:
                return self._next_check_ms
            self._current = self._grab_filthiest(logs, now_ms)
            if self._current is None:
                return self._next_check_ms
        tp, cleaning = self._current
        entry = logs.get(tp)
        if entry is None or entry[0] is not cleaning.log or not cleaning.is_valid():
            self._abandon(None, now_ms)
            return now_ms
        read_before = cleaning.stats.bytes_read
        try:
            finished = cleaning.step(self.config.log_cleaner_io_max_bytes_per_poll, now_ms=now_ms,
                                     max_batches=MAX_BATCHES_PER_POLL)
        except (OSError, MqError) as exc:
            self._abandon(exc, now_ms)
            return now_ms
        finally:
            self.cleaned_bytes_total += cleaning.stats.bytes_read - read_before
        if finished:
            stats = cleaning.stats
            self.cleaner_runs_total += 1
            self.last_clean[tp] = LastClean(
                finished_ms=now_ms, duration_ms=now_ms - cleaning.started_ms,
                dirty_ratio=cleaning.cleanable.dirty_ratio, bytes_read=stats.bytes_read,
                bytes_written=stats.bytes_written, records_removed=stats.records_removed,
                size_before=stats.size_before, size_after=stats.size_after,
            )
            self._current = None
            self._next_check_ms = now_ms  # another log may be dirty too
        return now_ms

    def _abandon(self, exc: BaseException | None, now_ms: int) -> None:
        assert self._current is not None
        tp, cleaning = self._current
        self._current = None
        self.cleaner_aborts_total += 1
        try:
            cleaning.abort()
        except OSError:
            pass  # leftover .cleaned files are removed when the log is next opened
        if exc is not None:
            self._errors.append((tp, f"{type(exc).__name__}: {exc}"))
            self._failed_until[tp] = now_ms + self.config.log_cleaner_backoff_ms
            if isinstance(exc, MqError):  # corrupt data: retrying would fail the same way
                self._uncleanable[tp] = cleaning.log
        self._next_check_ms = now_ms

    def _grab_filthiest(
        self, logs: Mapping[TopicPartition, tuple[Log, int]], now_ms: int
    ) -> tuple[TopicPartition, LogCleaning] | None:
        backoff = self.config.log_cleaner_backoff_ms
        deadline = now_ms + backoff
        best = None
        self.max_dirty_ratio = 0.0
        for tp in sorted(logs):
            log, high_watermark = logs[tp]
            if log.is_offline or not is_compacted(log) or self._failed_until.get(tp, 0) > now_ms:
                continue
            if self._uncleanable.get(tp) is log:
                continue
            try:
                found = cleanable_log(log, high_watermark=high_watermark, now_ms=now_ms)
            except (OSError, MqError) as exc:
                self._errors.append((tp, f"{type(exc).__name__}: {exc}"))
                self._failed_until[tp] = now_ms + backoff
                if isinstance(exc, MqError):
                    self._uncleanable[tp] = log
                continue
            cfg = log.config
            self.max_dirty_ratio = max(self.max_dirty_ratio, found.dirty_ratio)
            if found.due(min_dirty_ratio=cfg.min_cleanable_dirty_ratio,
                         max_lag_ms=cfg.max_compaction_lag_ms, now_ms=now_ms):
                if best is None or found.dirty_ratio > best[1].dirty_ratio:
                    best = (tp, found, log)
                continue
            if found.next_horizon_ms is not None:
                deadline = min(deadline, found.next_horizon_ms)
            if found.dirty_bytes and found.oldest_dirty_ms is not None:
                deadline = min(deadline, found.oldest_dirty_ms + cfg.max_compaction_lag_ms + 1)
        self._failed_until = {tp: t for tp, t in self._failed_until.items() if t > now_ms}
        if best is None:
            self._next_check_ms = max(now_ms + 1, deadline)
            return None
        tp, found, log = best
        return tp, LogCleaning(log, found, now_ms=now_ms)
