"""Which transactional batches belong to aborted transactions, batch by batch in
offset order (the same walk a read_committed consumer does, Kafka's
``FetchCollector``/``LogCleaner`` ``AbortedTransactionMetadata``): an aborted
transaction's producer becomes *active* at its first offset (from the ``.txnindex``
entries) and stops being so at its ABORT marker; its transactional batches in
between are aborted data.

The log cleaner uses it so that aborted records never count as the latest value of
a key (they would make compaction delete the committed value they hide) and are
dropped from the cleaned segments.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from mq.protocol.batch_format import BatchHeader
from mq.protocol.control_batch import ControlType, marker_of
from mq.storage.txn_index import AbortedTxn

__all__ = ["AbortedBatches"]


class AbortedBatches:
    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._active: set[int] = set()

    def is_aborted(self, header: BatchHeader, batch: bytes | memoryview) -> bool:
        """Call for every batch, in offset order."""
        pid = header.producer_id
        if pid < 0 or not (self._pending or self._active):
            return False
        while self._pending and self._pending[0].first_offset <= header.last_offset:
            self._active.add(self._pending.popleft().producer_id)
        if header.is_control:
            if pid in self._active and marker_of(batch)[0] == ControlType.ABORT:
                self._active.discard(pid)
            return False
        return header.is_transactional and pid in self._active
