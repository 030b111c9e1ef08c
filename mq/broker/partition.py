"""A partition hosted by this broker: its log, its high watermark, its flush state.

With one replica the high watermark is the log end offset under flush policy
``replicated`` (no fsync before a record counts), and the recovery point (the fsynced
prefix) under ``always``: a consumer never sees a record that a power loss could
still take away. Replication (next issue) replaces both with "replicated to the ISR".
"""

from __future__ import annotations

from mq.core.config import TopicConfig
from mq.core.types import FlushPolicy, TopicPartition
from mq.storage.log import Log


class Partition:
    __slots__ = ("flush_policy", "leader_epoch", "log", "tp")

    def __init__(self, tp: TopicPartition, log: Log, *, leader_epoch: int, flush_policy: FlushPolicy) -> None:
        self.tp = tp
        self.log = log
        self.leader_epoch = leader_epoch
        self.flush_policy = flush_policy

    @property
    def config(self) -> TopicConfig:
        return self.log.config

    @property
    def high_watermark(self) -> int:
        if self.flush_policy == FlushPolicy.ALWAYS:
            return min(self.log.recovery_point, self.log.log_end_offset)
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def needs_flush(self) -> bool:
        return self.log.recovery_point < self.log.log_end_offset

    def flush(self) -> bool:
        """Fsync everything appended so far; True if the high watermark may have moved."""
        if not self.needs_flush:
            return False
        self.log.flush()
        return self.flush_policy == FlushPolicy.ALWAYS

    def flush_due(self, now_ms: int) -> bool:
        """``flush.ms`` / ``flush.messages`` ask for an fsync even under ``replicated``."""
        return self.needs_flush and self.log.should_flush(now_ms)

    def checkpoint(self) -> None:
        """Persist the recovery point and log start offset. ``Log.checkpoint`` rewrites
        only the files whose value moved since it last wrote or read them (each is an
        fsynced file: skipping idle partitions keeps a broker with thousands of them
        responsive)."""
        self.log.checkpoint()
