"""What every coordinator call returns: the records to append and the answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.coordinator.records import CoordinatorRecord, OffsetCommitValue
from mq.core.types import TopicPartition
from mq.protocol.messages import Response


@dataclass(frozen=True, slots=True)
class RevertOffset:
    """Undo of one speculative offset commit (when its record could not be written)."""

    group_id: str
    tp: TopicPartition
    written: OffsetCommitValue
    previous: OffsetCommitValue | None


@dataclass(frozen=True, slots=True)
class RedoRebalance:
    """A generation whose GroupMetadata record could not be written: rebalance again."""

    group_id: str
    generation: int


Undo = RevertOffset | RedoRebalance


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    """``records`` are appended atomically (one batch) to the shard's partition; each
    ``(request_id, response)`` is sent once they are committed (at once if there are
    none). The coordinator has already applied ``records`` (speculatively, as Kafka's
    coordinator runtime does): the shell must not replay them. When they cannot be
    written, ``GroupCoordinator.fail(result, code)`` undoes them and gives the error
    answers; ``undo`` is what it needs for that."""

    records: list[CoordinatorRecord] = field(default_factory=list)
    responses: list[tuple[int, Response]] = field(default_factory=list)
    undo: tuple[Undo, ...] = field(default=(), repr=False, compare=False)
