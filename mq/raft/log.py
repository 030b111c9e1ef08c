"""The Raft log as the node sees it: a ``ReplicatedLog`` protocol and an in-memory one.

Offsets are Kafka's: the first entry has offset 0, ``end_offset`` is the offset the
next entry will get (Raft's ``lastIndex + 1``). Every entry carries the epoch (Raft's
term) of the leader that appended it. A snapshot replaces the prefix of the log below
its ``snapshot_id.offset``; its ``snapshot_id.leader_epoch`` is the epoch of the last
entry it covers, so the log can still answer "which epoch is at offset end - 1".

``MemoryReplicatedLog`` keeps a durable copy beside the live one: ``flush()`` makes
the live log durable, ``crash()`` throws away everything not flushed. That is how the
simulation models a node losing its page cache (Kafka's ``MockLog`` does the same).
Snapshots are durable as soon as they are stored (KRaft fsyncs a snapshot file before
it is used).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mq.core.types import OffsetAndEpoch

UNKNOWN = OffsetAndEpoch(-1, -1)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry of the Raft log. ``control`` marks the leader-change entry a new leader
    appends so that an entry of its own epoch exists to commit (Raft §8's no-op)."""

    offset: int
    epoch: int
    data: bytes
    control: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """State of the application after applying every entry below ``snapshot_id.offset``."""

    snapshot_id: OffsetAndEpoch
    data: bytes


def end_offset_for_epoch(
    epochs: Sequence[tuple[int, int]], epoch: int, *, start_offset: int, end_offset: int,
    snapshot: Snapshot | None,
) -> OffsetAndEpoch:
    """The OffsetsForLeaderEpoch answer from ``epochs`` = ``[(epoch, first offset), ...]``:
    the largest epoch <= ``epoch`` and the offset where the next epoch starts (or the log
    end). Below the log, the snapshot's epoch answers; with neither, ``UNKNOWN``."""
    for index in range(len(epochs) - 1, -1, -1):
        found, _ = epochs[index]
        if found <= epoch:
            end = epochs[index + 1][1] if index + 1 < len(epochs) else end_offset
            return OffsetAndEpoch(end, found)
    if snapshot is not None:
        if snapshot.snapshot_id.leader_epoch <= epoch:
            return OffsetAndEpoch(start_offset, snapshot.snapshot_id.leader_epoch)
        return UNKNOWN
    return OffsetAndEpoch(0, 0)


class ReplicatedLog(Protocol):
    """What ``RaftNode`` needs from its log. The node appends and truncates; the shell
    makes those changes durable (``flush``) before sending the node's messages."""

    @property
    def start_offset(self) -> int:
        """First offset still held as an entry (the latest snapshot's end, else 0)."""

    @property
    def end_offset(self) -> int:
        """Offset the next appended entry gets."""

    @property
    def last_epoch(self) -> int:
        """Epoch of the last entry (or of the snapshot when the log is empty; 0 if none)."""

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Append entries whose offsets continue at ``end_offset``."""

    def truncate_to(self, offset: int) -> None:
        """Remove every entry at ``offset`` or above (``offset`` ≥ ``start_offset``)."""

    def entries(self, from_offset: int, max_count: int) -> list[LogEntry]:
        """Up to ``max_count`` entries from ``from_offset`` (≥ ``start_offset``)."""

    def epoch_at(self, offset: int) -> int | None:
        """Epoch of the entry at ``offset``; for ``start_offset - 1`` the snapshot's epoch."""

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch ≤ ``epoch`` this log knows and the offset where it ends
        (KIP-101's OffsetsForLeaderEpoch); ``UNKNOWN`` when it lies below the snapshot."""

    def latest_snapshot(self) -> Snapshot | None: ...

    def compact(self, snapshot: Snapshot) -> None:
        """Store a snapshot of this log's own prefix and drop the entries it covers."""

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log with a snapshot fetched from the leader."""

    def flush(self) -> None:
        """Make every append and truncation so far durable."""


class MemoryReplicatedLog:
    """A ``ReplicatedLog`` in lists, with a durable copy that survives ``crash()``."""

    def __init__(self) -> None:
        self._entries: list[LogEntry] = []
        self._start = 0
        self._snapshot: Snapshot | None = None
        # (epoch, first offset of that epoch) in offset order: Kafka's LeaderEpochFileCache.
        self._epochs: list[tuple[int, int]] = []
        self._durable: list[LogEntry] = []
        self._dirty_from: int | None = None

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def last_epoch(self) -> int:
        if self._entries:
            return self._entries[-1].epoch
        return self._snapshot.snapshot_id.leader_epoch if self._snapshot else 0

    def append(self, entries: Sequence[LogEntry]) -> None:
        for entry in entries:
            if entry.offset != self.end_offset:
                raise ValueError(f"append at {entry.offset}, log ends at {self.end_offset}")
            if entry.epoch < self.last_epoch:
                raise ValueError(f"epoch {entry.epoch} after epoch {self.last_epoch}")
            if not self._epochs or self._epochs[-1][0] != entry.epoch:
                self._epochs.append((entry.epoch, entry.offset))
            self._entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        if offset < self._start:
            raise ValueError(f"truncate to {offset} below log start {self._start}")
        if offset >= self.end_offset:
            return
        del self._entries[offset - self._start:]
        while self._epochs and self._epochs[-1][1] >= offset:
            self._epochs.pop()
        self._dirty_from = offset if self._dirty_from is None else min(self._dirty_from, offset)

    def entries(self, from_offset: int, max_count: int) -> list[LogEntry]:
        if from_offset < self._start:
            raise ValueError(f"read at {from_offset} below log start {self._start}")
        first = from_offset - self._start
        return self._entries[first:first + max_count]

    def epoch_at(self, offset: int) -> int | None:
        if self._start <= offset < self.end_offset:
            return self._entries[offset - self._start].epoch
        if offset == self._start - 1 and self._snapshot is not None:
            return self._snapshot.snapshot_id.leader_epoch
        return None

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return end_offset_for_epoch(
            self._epochs, epoch, start_offset=self._start, end_offset=self.end_offset,
            snapshot=self._snapshot,
        )

    def latest_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def compact(self, snapshot: Snapshot) -> None:
        end = snapshot.snapshot_id.offset
        if not self._start < end <= self.end_offset:
            raise ValueError(f"snapshot at {end} outside ({self._start}, {self.end_offset}]")
        if self.epoch_at(end - 1) != snapshot.snapshot_id.leader_epoch:
            raise ValueError(f"snapshot epoch does not match the log at {end - 1}")
        self.flush()
        del self._entries[:end - self._start]
        self._durable = list(self._entries)
        self._start = end
        self._snapshot = snapshot
        self._epochs = [(e, max(o, end)) for i, (e, o) in enumerate(self._epochs)
                        if i + 1 == len(self._epochs) or self._epochs[i + 1][1] > end]
        if not self._entries:
            self._epochs = []

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self._entries = []
        self._durable = []
        self._epochs = []
        self._dirty_from = None
        self._start = snapshot.snapshot_id.offset
        self._snapshot = snapshot

    def flush(self) -> None:
        keep = len(self._durable)
        if self._dirty_from is not None:
            keep = min(keep, self._dirty_from - self._start)
        del self._durable[keep:]
        self._durable.extend(self._entries[keep:])
        self._dirty_from = None

    def crash(self) -> None:
        """Lose everything not flushed, as a power loss would."""
        self._entries = list(self._durable)
        self._dirty_from = None
        self._epochs = []
        for entry in self._entries:
            if not self._epochs or self._epochs[-1][0] != entry.epoch:
                self._epochs.append((entry.epoch, entry.offset))

    @property
    def durable_end_offset(self) -> int:
        return self._start + len(self._durable)
