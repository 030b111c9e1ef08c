"""What every coordinator call returns: the records to append and the answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.coordinator.records import CoordinatorRecord
from mq.core.types import TopicPartition
from mq.protocol.messages import Response


@dataclass(frozen=True, slots=True, eq=False)
class PendingOffset:
    """One offset commit written but not yet known to be committed (Kafka's
    ``pendingOffsetCommits``): invisible until ``GroupCoordinator.confirm`` replays
    ``record``, dropped by ``fail``. Compared by identity: two commits of the same
    value are two writes."""

    group_id: str
    tp: TopicPartition
    record: CoordinatorRecord


@dataclass(frozen=True, slots=True)
class RedoRebalance:
    """A generation whose GroupMetadata record could not be written: rebalance again."""

    group_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    """``records`` are appended atomically (one batch) to the shard's partition; each
    ``(request_id, response)`` is sent once they are committed (at once if there are
    none).

    When they are committed the shell calls ``GroupCoordinator.confirm(result)`` (right
    before sending the responses): the result's offset commits (``offsets``) become
    visible then, not before. Its other records (group metadata, tombstones) the
    coordinator has already applied, speculatively, as Kafka's does: the shell must
    not replay them. When the records cannot be written or committed,
    ``GroupCoordinator.fail(result, code)`` drops the pending offsets, rebalances a
    generation that was not written (``undo``) and gives the error answers."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    responses: list[tuple[int, Response]] = field(default_factory=list)
    undo: tuple[RedoRebalance, ...] = field(default=(), repr=False, compare=False)
    offsets: tuple[PendingOffset, ...] = field(default=(), repr=False, compare=False)
