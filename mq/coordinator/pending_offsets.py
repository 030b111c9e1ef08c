"""Offset commits written but not yet committed (Kafka's ``pendingOffsetCommits``).

Per group and partition, the writes in the order they were appended to the log. The
coordinator keeps them out of its committed state until ``confirm``: then the write
and every older one of its partition leave the queue (the log supersedes the older
ones, so a late confirm of one of them changes nothing). ``fail`` removes a write
alone; a tombstone removes everything before it.
"""

from __future__ import annotations

from mq.coordinator.result import PendingOffset
from mq.core.types import TopicPartition


class PendingOffsets:
    def __init__(self) -> None:
        self._writes: dict[str, dict[TopicPartition, list[PendingOffset]]] = {}  # group -> tp -> oldest first

    def __bool__(self) -> bool:
        return bool(self._writes)

    def __repr__(self) -> str:
        return f"PendingOffsets({self._writes!r})"

    def add(self, pending: PendingOffset) -> None:
        self._writes.setdefault(pending.group_id, {}).setdefault(pending.tp, []).append(pending)

    def partitions(self, group_id: str) -> list[TopicPartition]:
        """Partitions of the group with a pending write, sorted."""
        return sorted(self._writes.get(group_id, {}))

    def take(self, pending: PendingOffset, *, with_older: bool) -> bool:
        """Remove ``pending`` (``with_older``: and the older writes of its partition);
        whether it was still pending."""
        queue = self._writes.get(pending.group_id, {}).get(pending.tp)
        index = None if queue is None else next((i for i, p in enumerate(queue) if p is pending), None)
        if queue is None or index is None:
            return False
        del queue[0 if with_older else index:index + 1]
        self._tidy(pending.group_id, pending.tp)
        return True

    def drop(self, group_id: str, tp: TopicPartition | None = None) -> None:
        """A tombstone of ``tp`` (None: of the group) follows every pending write of it."""
        by_tp = self._writes.get(group_id)
        if by_tp is None:
            return
        if tp is None:
            del self._writes[group_id]
        elif by_tp.pop(tp, None) is not None:
            self._tidy(group_id, tp)

    def _tidy(self, group_id: str, tp: TopicPartition) -> None:
        by_tp = self._writes[group_id]
        if not by_tp.get(tp, True):
            del by_tp[tp]
        if not by_tp:
            del self._writes[group_id]
