"""The Raft log on disk: ``ReplicatedLog`` over an ordinary ``mq.storage.Log``.

Each Raft entry is one record batch whose ``base_offset`` is the entry's offset and
whose ``partition_leader_epoch`` is its Raft epoch (KRaft stores the metadata log the
same way); a leader-change entry is a control batch. One entry per batch because
``Log.truncate_to`` cuts at batch boundaries while Raft truncates at any entry.

The epoch cache (Kafka's LeaderEpochFileCache: first offset of each epoch) is rebuilt
from the batch headers on open, so it never disagrees with the segments.

Snapshots are files beside the segments, ``<20-digit offset>-<10-digit epoch>.checkpoint``
as in KRaft, each one record batch (CRC-checked on load) written to a ``.tmp`` file,
fsynced and renamed, so a snapshot is durable before the log prefix it replaces is
dropped. A crash between storing a snapshot and trimming the log is finished on open.

Durability: ``flush`` fsyncs (metadata is always fsynced); truncation is durable on
return (``Log.truncate_to`` is), which is stricter than Raft needs.
"""

from __future__ import annotations

import posixpath
import struct
from bisect import bisect_right
from collections.abc import Sequence

from mq.core.clock import Clock
from mq.core.types import OffsetAndEpoch
from mq.metadata.log import METADATA_LOG_CONFIG
from mq.protocol.batch_format import (
    ATTRIBUTES_AT,
    BATCH_LENGTH_AT,
    CONTROL_BIT,
    CRC_AT,
    LOG_OVERHEAD,
)
from mq.protocol.errors import ProtocolError
from mq.protocol.record_batch import (
    build_batch,
    compute_crc,
    decode_records,
    iter_batches,
    read_header,
)
from mq.raft.log import LogEntry, Snapshot, end_offset_for_epoch
from mq.storage.fileio import FileIO
from mq.storage.log import Log

SNAPSHOT_SUFFIX = ".checkpoint"
TMP_SUFFIX = ".tmp"
READ_CHUNK_BYTES = 1024 * 1024
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")


def encode_entry(entry: LogEntry, *, timestamp_ms: int) -> bytes:
    """One batch holding ``entry``; a control entry sets the batch's control bit."""
    batch = bytearray(build_batch([(None, entry.data, (), timestamp_ms)], base_offset=entry.offset,
                                  partition_leader_epoch=entry.epoch))
    if entry.control:
        (attributes,) = _I16.unpack_from(batch, ATTRIBUTES_AT)
        _I16.pack_into(batch, ATTRIBUTES_AT, attributes | CONTROL_BIT)
        (length,) = _I32.unpack_from(batch, BATCH_LENGTH_AT)
        _U32.pack_into(batch, CRC_AT, compute_crc(batch, 0, length + LOG_OVERHEAD))
    return bytes(batch)


def decode_entries(data: bytes | memoryview) -> list[LogEntry]:
    out = []
    view = memoryview(data)
    for pos, header in iter_batches(view):
        for record in decode_records(view[pos:pos + header.size]):
            out.append(LogEntry(record.offset, header.partition_leader_epoch, record.value or b"",
                                header.is_control))
    return out


def snapshot_name(snapshot_id: OffsetAndEpoch) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.leader_epoch:010d}{SNAPSHOT_SUFFIX}"


class StorageReplicatedLog:
    """A ``ReplicatedLog`` in a partition directory; open with ``StorageReplicatedLog.open``."""

    def __init__(self, log: Log, clock: Clock) -> None:
        self.log = log
        self._clock = clock
        self._snapshot: Snapshot | None = None
        # (epoch, first offset of that epoch) in offset order.
        self._epochs: list[tuple[int, int]] = []

    @classmethod
    def open(cls, fileio: FileIO, directory: str, *, clock: Clock) -> StorageReplicatedLog:
        """Open (creating if needed) and recover the log in ``directory``."""
        log = Log.open(fileio, directory, METADATA_LOG_CONFIG, now_ms=clock.wall_ms())
        opened = cls(log, clock)
        opened._snapshot = opened._load_snapshot()
        opened._rebuild_epochs()
        if opened._snapshot is not None:
            opened._finish_snapshot(opened._snapshot)
        return opened

    # ---- state

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_epoch(self) -> int:
        if self._epochs:
            return self._epochs[-1][0]
        return self._snapshot.snapshot_id.leader_epoch if self._snapshot else 0

    # ---- entries

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Validate every entry first so a bad one appends nothing."""
        end, last = self.end_offset, self.last_epoch
        for entry in entries:
            if entry.offset != end:
                raise ValueError(f"append at {entry.offset}, log ends at {end}")
            if entry.epoch < last:
                raise ValueError(f"epoch {entry.epoch} after epoch {last}")
            end, last = end + 1, entry.epoch
        now_ms = self._clock.wall_ms()
        for entry in entries:
            self.log.append_as_follower(encode_entry(entry, timestamp_ms=now_ms), now_ms=now_ms)
            if not self._epochs or self._epochs[-1][0] != entry.epoch:
                self._epochs.append((entry.epoch, entry.offset))

    def truncate_to(self, offset: int) -> None:
        if offset < self.start_offset:
            raise ValueError(f"truncate to {offset} below log start {self.start_offset}")
        if offset >= self.end_offset:
            return
        self.log.truncate_to(offset)
        while self._epochs and self._epochs[-1][1] >= offset:
            self._epochs.pop()

    def entries(self, from_offset: int, max_count: int) -> list[LogEntry]:
        if from_offset < self.start_offset:
            raise ValueError(f"read at {from_offset} below log start {self.start_offset}")
        out: list[LogEntry] = []
        offset, end = from_offset, min(self.end_offset, from_offset + max(max_count, 0))
        while offset < end:
            data = self.log.read(offset, max_bytes=READ_CHUNK_BYTES, max_offset=end).records
            if not data:
                break
            found = [e for e in decode_entries(data) if offset <= e.offset < end]
            if not found:
                break
            out += found
            offset = found[-1].offset + 1
        return out

    def epoch_at(self, offset: int) -> int | None:
        if self.start_offset <= offset < self.end_offset:
            index = bisect_right(self._epochs, offset, key=lambda pair: pair[1]) - 1
            return self._epochs[index][0] if index >= 0 else None
        if offset == self.start_offset - 1 and self._snapshot is not None:
            return self._snapshot.snapshot_id.leader_epoch
        return None

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return end_offset_for_epoch(
            self._epochs, epoch, start_offset=self.start_offset, end_offset=self.end_offset,
            snapshot=self._snapshot,
        )

    # ---- snapshots

    def latest_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def compact(self, snapshot: Snapshot) -> None:
        end = snapshot.snapshot_id.offset
        if not self.start_offset < end <= self.end_offset:
            raise ValueError(f"snapshot at {end} outside ({self.start_offset}, {self.end_offset}]")
        if self.epoch_at(end - 1) != snapshot.snapshot_id.leader_epoch:
            raise ValueError(f"snapshot epoch does not match the log at {end - 1}")
        self.flush()
        self._store_snapshot(snapshot)
        self._finish_snapshot(snapshot)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self._store_snapshot(snapshot)
        self.log.truncate_fully_and_start_at(snapshot.snapshot_id.offset)
        self._epochs = []
        self._remove_older_snapshots(snapshot)

    def flush(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.close()

    # ---- internals

    def _rebuild_epochs(self) -> None:
        self._epochs = []
        offset, end = self.start_offset, self.end_offset
        while offset < end:
            data = self.log.read(offset, max_bytes=READ_CHUNK_BYTES).records
            if not data:
                break
            for _, header in iter_batches(data):
                if header.last_offset >= offset:
                    epoch = header.partition_leader_epoch
                    if not self._epochs or self._epochs[-1][0] != epoch:
                        self._epochs.append((epoch, max(header.base_offset, offset)))
                offset = max(offset, header.next_offset)

    def _finish_snapshot(self, snapshot: Snapshot) -> None:
        """Drop the log prefix ``snapshot`` covers. A log that does not reach the
        snapshot or disagrees with its epoch (an install interrupted by a crash) is
        replaced by the snapshot; one that agrees keeps the entries above it."""
        end = snapshot.snapshot_id.offset
        if end > self.end_offset or (
            end > self.start_offset and self.epoch_at(end - 1) != snapshot.snapshot_id.leader_epoch
        ):
            self.log.truncate_fully_and_start_at(end)
        elif end > self.start_offset:
            self.log.delete_records(end)
        self._snapshot = snapshot
        self._epochs = [(e, max(o, end)) for i, (e, o) in enumerate(self._epochs)
                        if i + 1 == len(self._epochs) or self._epochs[i + 1][1] > end]
        if self.end_offset == self.start_offset:
            self._epochs = []
        self._remove_older_snapshots(snapshot)

    def _store_snapshot(self, snapshot: Snapshot) -> None:
        fileio, directory = self.log.fileio, self.log.directory
        path = posixpath.join(directory, snapshot_name(snapshot.snapshot_id))
        batch = build_batch([(None, snapshot.data, (), self._clock.wall_ms())],
                            base_offset=snapshot.snapshot_id.offset,
                            partition_leader_epoch=snapshot.snapshot_id.leader_epoch)
        tmp = path + TMP_SUFFIX
        if fileio.exists(tmp):
            fileio.remove(tmp)
        handle = fileio.open(tmp)
        try:
            handle.append(batch)
            handle.fsync()
        finally:
            handle.close()
        fileio.rename(tmp, path)
        fileio.fsync_dir(directory)
        self._snapshot = snapshot

    def _snapshot_files(self) -> list[tuple[OffsetAndEpoch, str]]:
        found = []
        for name in self.log.fileio.listdir(self.log.directory):
            stem = name[:-len(SNAPSHOT_SUFFIX)]
            offset, _, epoch = stem.partition("-")
            if name.endswith(SNAPSHOT_SUFFIX) and offset.isdigit() and epoch.isdigit():
                found.append((OffsetAndEpoch(int(offset), int(epoch)), name))
        return sorted(found, key=lambda pair: (pair[0].offset, pair[0].leader_epoch))

    def _load_snapshot(self) -> Snapshot | None:
        """The newest snapshot file that reads back whole; unreadable ones are removed
        (they were never renamed into place complete, or the disk lost them)."""
        fileio = self.log.fileio
        for snapshot_id, name in reversed(self._snapshot_files()):
            path = posixpath.join(self.log.directory, name)
            handle = fileio.open(path)
            try:
                data = handle.pread(0, handle.size())
            finally:
                handle.close()
            try:
                header = read_header(data)
                records = decode_records(data[:header.size])
            except ProtocolError:
                fileio.remove(path)
                continue
            same_id = (header.base_offset, header.partition_leader_epoch) == (snapshot_id.offset, snapshot_id.leader_epoch)
            if same_id and len(records) == 1:
                return Snapshot(snapshot_id, records[0].value or b"")
            fileio.remove(path)
        return None

    def _remove_older_snapshots(self, keep: Snapshot) -> None:
        for snapshot_id, name in self._snapshot_files():
            if snapshot_id != keep.snapshot_id:
                self.log.fileio.remove(posixpath.join(self.log.directory, name))
