"""The leader epoch cache: which leader epoch wrote which range of offsets (KIP-101).

Every batch carries the epoch of the leader that appended it
(``partition_leader_epoch``). The cache keeps one entry per epoch, ``(epoch,
start_offset)``: the first offset written in that epoch. An epoch's entries end where
the next epoch starts, the last one at the log end. This is what lets two replicas
find where their logs diverge without trusting a high watermark: "what is the end
offset of epoch E on your log?" (``end_offset_for``, Kafka's OffsetsForLeaderEpoch)
answered by the leader, compared with the same question answered locally.

Kafka keeps it in ``leader-epoch-checkpoint`` in the partition directory. The format
(text, Kafka's CheckpointFile) is::

    0              <- version
    3              <- number of entries
    0 0            <- "epoch start_offset", ascending in both
    2 120
    5 388

The cache itself does no I/O: every change calls the ``persist`` callable it was given
(the storage side writes the file with ``LeaderEpochCheckpointFile`` or keeps it in
memory). Truncations persist at once, as Kafka does, so a restart never resurrects an
epoch whose offsets were cut.
"""

from __future__ import annotations

import posixpath
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from mq.core.errors import ErrorCode, MqError
from mq.core.types import NO_LEADER_EPOCH
from mq.protocol.batch_format import iter_batches
from mq.storage.fileio import FileIO

__all__ = [
    "CHECKPOINT_FILE",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "EpochEntry",
    "LeaderEpochCache",
    "LeaderEpochCheckpointFile",
    "format_checkpoint",
    "parse_checkpoint",
]

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, order=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """An OffsetsForLeaderEpoch answer: the largest epoch ≤ the one asked for that the
    log knows, and the offset where it ends (the next epoch's start, or the log end).
    ``(-1, -1)`` means "no answer" (the cache is empty or the epoch is unknown and
    newer than every known one)."""

    epoch: int
    end_offset: int

    @property
    def is_undefined(self) -> bool:
        return self.epoch == NO_LEADER_EPOCH and self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED = EpochEndOffset(NO_LEADER_EPOCH, UNDEFINED_EPOCH_OFFSET)


class LeaderEpochCache:
    """Sorted ``(epoch, start_offset)`` entries; both columns strictly ascending (an
    epoch that wrote nothing before the next one was elected leaves no entry)."""

    def __init__(
        self, entries: Iterable[EpochEntry] = (), *,
        persist: Callable[[Sequence[EpochEntry]], None] | None = None,
    ) -> None:
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self._check_order(entry)
            self._entries.append(entry)
        self._persist = persist

    def _check_order(self, entry: EpochEntry) -> None:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"negative epoch entry {entry}")
        if self._entries:
            last = self._entries[-1]
            if entry.epoch <= last.epoch or entry.start_offset <= last.start_offset:
                raise ValueError(f"epoch entry {entry} does not follow {last}")

    # ---- queries

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch that wrote to this log, -1 for none (a follower sends it
        as ``last_fetched_epoch``)."""
        return self._entries[-1].epoch if self._entries else NO_LEADER_EPOCH

    @property
    def earliest_epoch(self) -> int:
        return self._entries[0].epoch if self._entries else NO_LEADER_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        """First offset written in exactly ``epoch``, None if the epoch wrote nothing."""
        i = bisect_left(self._entries, epoch, key=_epoch_of)
        if i < len(self._entries) and self._entries[i].epoch == epoch:
            return self._entries[i].start_offset
        return None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote ``offset`` (-1 if before the first entry)."""
        i = bisect_right(self._entries, offset, key=_start_of)
        return self._entries[i - 1].epoch if i else NO_LEADER_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's ``LeaderEpochFileCache.endOffsetFor``: the largest known epoch ≤
        ``requested_epoch`` and the first offset after it. For the latest epoch that
        is the log end. For an epoch older than every entry the answer is the
        requested epoch ending where the first entry starts (nothing of it is here)."""
        if requested_epoch == NO_LEADER_EPOCH or not self._entries:
            return UNDEFINED
        if self._entries[-1].epoch == requested_epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = bisect_right(self._entries, requested_epoch, key=_epoch_of)
        if higher == len(self._entries):
            # Newer than anything we know; a leader never gets here because it
            # assigns its own epoch when elected and fences newer ones first (KIP-279).
            return UNDEFINED
        end = self._entries[higher].start_offset
        if higher == 0:
            return EpochEndOffset(requested_epoch, end)
        return EpochEndOffset(self._entries[higher - 1].epoch, end)

    # ---- changes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts writing at ``start_offset`` (a leader when it is
        elected, a follower for each fetched batch with a newer epoch). Entries that
        conflict (an epoch ≥ it, or one starting at or after it) are removed first:
        they describe offsets that are being overwritten. Returns whether it changed."""
        if epoch < 0:
            return False
        latest = self._entries[-1] if self._entries else None
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        self._entries = [*kept, EpochEntry(epoch, start_offset)]
        self._flush()
        return True

    def assign_from_batches(self, records: bytes | bytearray | memoryview) -> bool:
        """Assign every epoch newer than the latest one found in the batch headers of
        ``records`` (a follower after appending fetched data, or a rebuild of a lost
        checkpoint from the log). Batches without an epoch (-1) are skipped."""
        changed = False
        for _pos, header in iter_batches(records):
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch > self.latest_epoch:
                changed |= self.assign(epoch, header.base_offset)
        return changed

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was cut to ``end_offset``: drop the epochs that start at or after it."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return False
        self._entries = [e for e in self._entries if e.start_offset < end_offset]
        self._flush()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved to ``start_offset`` (retention, DeleteRecords): drop the
        epochs wholly below it and move the start of the one holding it up."""
        i = bisect_right(self._entries, start_offset, key=_start_of)
        if i == 0 or (i == 1 and self._entries[0].start_offset == start_offset):
            return False
        holding = self._entries[i - 1]
        self._entries = [EpochEntry(holding.epoch, start_offset), *self._entries[i:]]
        self._flush()
        return True

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._flush()

    def _flush(self) -> None:
        if self._persist is not None:
            self._persist(tuple(self._entries))

    def __repr__(self) -> str:
        body = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochCache([{body}])"


def _epoch_of(entry: EpochEntry) -> int:
    return entry.epoch


def _start_of(entry: EpochEntry) -> int:
    return entry.start_offset


# ---- the checkpoint file


def format_checkpoint(entries: Sequence[EpochEntry]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode()


def parse_checkpoint(data: bytes) -> list[EpochEntry]:
    """Parse ``leader-epoch-checkpoint`` text; raises MqError(CORRUPT_MESSAGE) on a
    malformed file (the caller then rebuilds the cache from the log's batches)."""
    lines = data.decode("ascii", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
            raise ValueError("bad version line")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise ValueError(f"{count} entries declared, {len(lines) - 2} present")
        entries = []
        for line in lines[2:]:
            epoch, offset = line.split(" ")
            entries.append(EpochEntry(int(epoch), int(offset)))
        LeaderEpochCache(entries)  # validates ordering
    except ValueError as exc:
        raise MqError(ErrorCode.CORRUPT_MESSAGE, f"bad {CHECKPOINT_FILE}: {exc}") from exc
    return entries


class LeaderEpochCheckpointFile:
    """``<partition dir>/leader-epoch-checkpoint`` behind the FileIO seam: written to a
    ``.tmp`` file, fsynced, renamed over the old one (a reader sees old or new, never
    torn). Pass ``checkpoint.write`` as a ``LeaderEpochCache``'s ``persist``."""

    def __init__(self, fileio: FileIO, directory: str) -> None:
        self.fileio = fileio
        self.path = posixpath.join(directory, CHECKPOINT_FILE)

    def write(self, entries: Sequence[EpochEntry]) -> None:
        tmp = self.path + ".tmp"
        handle = self.fileio.open(tmp)
        try:
            handle.truncate(0)
            handle.append(format_checkpoint(entries))
            handle.fsync()
        finally:
            handle.close()
        self.fileio.rename(tmp, self.path)

    def read(self) -> list[EpochEntry] | None:
        """The entries, or None when the file is missing."""
        if not self.fileio.exists(self.path):
            return None
        handle = self.fileio.open(self.path)
        try:
            data = handle.pread(0, handle.size())
        finally:
            handle.close()
        return parse_checkpoint(data)
