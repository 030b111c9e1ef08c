"""A partition hosted by this broker: its log, its leader epoch cache, its role.

The metadata image makes the broker the partition's leader (``leader``: an
``mq.replication.PartitionState`` holding the ISR and the high watermark), a follower
(``follower``: an ``mq.replication.FollowerPartition`` fetched by a ``ReplicaFetcher``)
or neither (no leader elected, or this broker no longer a replica). The high
watermark is the leader's, the follower's copy of it, or the last one known.

Under flush policy ``always`` the leader's own copy counts only once fsynced (the
leader state tracks the recovery point), so a consumer never sees a record that a
power loss could take away.
"""

from __future__ import annotations

import posixpath

from mq.core.config import TopicConfig
from mq.core.errors import MqError
from mq.core.types import FlushPolicy, TopicPartition
from mq.protocol.batch_format import iter_batches
from mq.replication import (
    FollowerPartition,
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    PartitionState,
)
from mq.storage.fileio import FileIO
from mq.storage.log import Log
from mq.storage.segment import LogCorruptedError

_REBUILD_CHUNK_BYTES = 1024 * 1024


class Partition:
    __slots__ = ("_high_watermark", "damaged", "epoch_cache", "flush_policy", "follower", "leader",
                 "leader_epoch", "leader_id", "log", "tp")

    def __init__(
        self, tp: TopicPartition, log: Log, *, leader_epoch: int, flush_policy: FlushPolicy,
        epoch_cache: LeaderEpochCache | None = None,
    ) -> None:
        self.tp = tp
        self.log = log
        self.leader_epoch = leader_epoch  # from the metadata image
        self.leader_id = -1  # from the metadata image (-1: none)
        self.flush_policy = flush_policy
        self.epoch_cache = epoch_cache if epoch_cache is not None else LeaderEpochCache()
        self.leader: PartitionState | None = None
        self.follower: FollowerPartition | None = None
        self._high_watermark = 0
        self.damaged: tuple[int, LogCorruptedError] | None = None
        """``(offset, damage)``: the log is sound only below ``offset`` (found on open)."""

    def cut_damage(self) -> tuple[int, LogCorruptedError] | None:
        """As a follower: truncate the log where the damage found on open starts, so
        the rest is fetched again from the leader. Returns what was cut (None: nothing)."""
        damaged, self.damaged = self.damaged, None
        if damaged is None or damaged[0] >= self.log.log_end_offset:
            return None
        self.log.truncate_to(damaged[0])
        self.epoch_cache.truncate_from_end(self.log.log_end_offset)
        return damaged

    @classmethod
    def open(
        cls, fileio: FileIO, directory: str, tp: TopicPartition, config: TopicConfig, *,
        leader_epoch: int, flush_policy: FlushPolicy, now_ms: int,
    ) -> Partition:
        # recovery_point=None: the log reads its own recovery-point checkpoint.
        log = Log.open(fileio, directory, config, now_ms=now_ms)
        if log.recovery_point < log.log_end_offset and flush_policy == FlushPolicy.ALWAYS:
            # Bytes that survived a crash in the page cache but were never fsynced:
            # make them durable before they count as committed.
            log.flush()
        partition = cls(tp, log, leader_epoch=leader_epoch, flush_policy=flush_policy,
                        epoch_cache=load_epoch_cache(fileio, directory, log))
        # Opening trusts the segments below the recovery point; a replica reads them all
        # once, so bytes that rotted while the broker was stopped are found now (R8)
        # rather than when it leads and a fetch hits them.
        partition.damaged = log.first_damaged()
        return partition

    @property
    def config(self) -> TopicConfig:
        return self.log.config

    @property
    def is_leader(self) -> bool:
        return self.leader is not None

    @property
    def high_watermark(self) -> int:
        if self.leader is not None:
            return self.leader.high_watermark
        if self.follower is not None:
            return self.follower.high_watermark
        return min(self._high_watermark, self.log.log_end_offset)

    def remember_high_watermark(self) -> None:
        """Keep the current high watermark when the partition loses its role."""
        self._high_watermark = self.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def needs_flush(self) -> bool:
        return self.log.recovery_point < self.log.log_end_offset

    def flush(self) -> bool:
        """Fsync everything appended so far; True if the high watermark moved."""
        if not self.needs_flush:
            return False
        self.log.flush()
        if self.leader is not None and self.flush_policy == FlushPolicy.ALWAYS:
            return self.leader.on_local_flush(self.log.recovery_point)
        return False

    def flush_due(self, now_ms: int) -> bool:
        """``flush.ms`` / ``flush.messages`` ask for an fsync even under ``replicated``."""
        return self.needs_flush and self.log.should_flush(now_ms)

    def log_start_moved(self) -> None:
        self.epoch_cache.truncate_from_start(self.log.log_start_offset)

    def checkpoint(self) -> None:
        """Persist the recovery point and log start offset. ``Log.checkpoint`` rewrites
        only the files whose value moved since it last wrote or read them (each is an
        fsynced file: skipping idle partitions keeps a broker with thousands of them
        responsive)."""
        self.log.checkpoint()


def load_epoch_cache(fileio: FileIO, directory: str, log: Log) -> LeaderEpochCache:
    """The partition's ``leader-epoch-checkpoint``, trimmed to the log as recovered (a
    crash may have cut the tail); rebuilt from the batch headers when missing or
    damaged. Every later change is persisted at once."""
    checkpoint = LeaderEpochCheckpointFile(fileio, directory)
    try:
        entries = checkpoint.read()
    except MqError:
        entries = None
    if entries is None:
        cache = LeaderEpochCache(persist=checkpoint.write)
        if log.log_end_offset > log.log_start_offset:
            _rebuild(cache, log)
            checkpoint.write(cache.entries)
    else:
        cache = LeaderEpochCache(entries, persist=checkpoint.write)
    entries = cache.entries
    if entries and entries[-1].start_offset > log.log_end_offset:
        # An epoch starting exactly at the log end wrote nothing yet and stays true.
        cache.truncate_from_end(log.log_end_offset)
    if entries and entries[0].start_offset < log.log_start_offset:
        cache.truncate_from_start(log.log_start_offset)
    return cache


def _rebuild(cache: LeaderEpochCache, log: Log) -> None:
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=_REBUILD_CHUNK_BYTES).records
        if not data:
            break
        cache.assign_from_batches(data)
        next_offset = _end_of(data)
        if next_offset <= offset:
            break
        offset = next_offset


def _end_of(data: bytes | memoryview) -> int:
    end = -1
    for _pos, header in iter_batches(data):
        end = header.next_offset
    return end


def partition_directory(log_dir: str, tp: TopicPartition) -> str:
    return posixpath.join(log_dir, f"{tp.topic}-{tp.partition}")
