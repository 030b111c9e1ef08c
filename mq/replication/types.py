"""Values the replication cores exchange with the broker and the controller.

The cores never touch the network or the metadata log: a leader *proposes* an ISR
change as an ``AlterPartitionRequest`` and applies the controller's committed
``LeaderAndIsr`` when it arrives; a follower's fetch answer arrives as a
``ReplicaFetchResponse`` (the wire Fetch response plus the diverging epoch of KIP-320).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mq.core.errors import ErrorCode
from mq.core.types import NO_LEADER_EPOCH, TopicPartition
from mq.replication.epoch_cache import EpochEndOffset

__all__ = [
    "AlterPartitionRequest",
    "LeaderAndIsr",
    "LogEndView",
    "ReplicaFetchResponse",
    "ReplicaLog",
    "check_leader_epoch",
]

NO_BROKER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's committed replication state, as the controller published it.
    ``leader_epoch`` bumps on every leader change; ``partition_epoch`` on every change
    at all (ISR included), so an AlterPartition based on an old state is refused."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A leader's proposal to the controller (Kafka's AlterPartition). The controller
    applies it only when ``leader_epoch`` and ``partition_epoch`` match its own: a
    deposed leader or a proposal built on a stale ISR is rejected. ``broker_epochs``
    pairs each proposed member with the broker epoch it fetched with (KIP-903), so a
    restarted broker's old incarnation cannot be added. ``bump_leader_epoch`` asks for a
    new leader epoch with the same leader: the leader cut its log (MirrorTruncate), and
    the new epoch, starting at the cut, makes every follower truncate there too."""

    tp: TopicPartition
    leader: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    broker_epochs: tuple[tuple[int, int], ...] = ()
    bump_leader_epoch: bool = False  # start a new epoch, same leader (a MirrorTruncate cut the log)


@dataclass(frozen=True, slots=True)
class ReplicaFetchResponse:
    """One partition of a leader's answer to a follower fetch. ``diverging_epoch`` is
    set instead of ``records`` when the follower's ``last_fetched_epoch`` ends below
    its fetch offset on the leader (or is unknown there)."""

    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview = b""
    diverging_epoch: EpochEndOffset | None = None


class LogEndView(Protocol):
    """What the leader's partition state reads of its log: where it starts and ends."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...


class ReplicaLog(Protocol):
    """What a follower needs from its log; ``mq.storage.Log`` has it all but
    ``truncate_fully_and_start_at`` (Kafka's name for restarting an empty log at the
    leader's log start, used when the follower fell below it). ``delete_records``
    moves the follower's log start up to the leader's (DeleteRecords, retention)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def append_as_follower(self, records: bytes | memoryview, *, now_ms: int) -> object: ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def delete_records(self, offset: int) -> int: ...


def check_leader_epoch(requested: int, current: int) -> ErrorCode:
    """KIP-320 fencing of a request that names the leader epoch it believes in:
    older than ours → FENCED_LEADER_EPOCH (the sender is a zombie or has stale
    metadata), newer → UNKNOWN_LEADER_EPOCH (we have not caught up on metadata; the
    sender retries). -1 means the sender did not say (old clients): no check."""
    if requested == NO_LEADER_EPOCH or requested == current:
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH
