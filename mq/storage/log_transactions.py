"""What a partition's log knows about transactions: the last stable offset and the
aborted transactions of each segment (Kafka's ``ProducerStateManager`` transaction
half plus ``TransactionIndex`` handling in ``UnifiedLog``).

The producer state (``mq.storage.producer_state``) knows each producer's open
transaction (its first offset). When a control batch ends one, ``TxnProducerState``
calls back here; an ABORT marker adds an ``AbortedTxn`` to the ``.txnindex`` of the
segment holding the marker, and every ended transaction waits in ``unreplicated``
until the high watermark passes its marker.

The last stable offset (LSO) is the smallest of: the high watermark, the first
offset of the oldest open transaction, the first offset of the oldest ended
transaction whose marker is not yet below the high watermark. A ``read_committed``
fetch reads below it, so it never returns data of a transaction whose outcome is
not decided and replicated.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence

from mq.protocol.batch_format import BatchHeader
from mq.protocol.control_batch import ControlType, marker_of
from mq.storage.fileio import FileIO
from mq.storage.producer_state import CompletedTxn, ProducerStateManager
from mq.storage.segment import segment_name
from mq.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

__all__ = ["LogTransactions", "TxnProducerState"]

OnCompleted = Callable[[BatchHeader, CompletedTxn], None]


class TxnProducerState(ProducerStateManager):
    """The producer state, reporting each transaction a control batch ends."""

    def __init__(self, on_completed: OnCompleted) -> None:
        super().__init__()
        self._on_completed = on_completed

    def update(self, header: BatchHeader) -> CompletedTxn | None:
        done = super().update(header)
        if done is not None:
            self._on_completed(header, done)
        return done


class LogTransactions:
    """Per-segment ``.txnindex`` files and the unreplicated ended transactions."""

    def __init__(self, fileio: FileIO, directory: str) -> None:
        self.fileio = fileio
        self.directory = directory
        self._indexes: dict[int, TransactionIndex] = {}
        self.unreplicated: list[CompletedTxn] = []

    def index(self, base_offset: int) -> TransactionIndex:
        found = self._indexes.get(base_offset)
        if found is None:
            path = posixpath.join(self.directory, segment_name(base_offset) + TXN_INDEX_SUFFIX)
            found = self._indexes[base_offset] = TransactionIndex(self.fileio, path)
        return found

    def completed(self, segment_base: int, marker: bytes, done: CompletedTxn, *, first_unstable: int | None) -> None:
        """A control batch (``marker``, in the segment at ``segment_base``) ended ``done``."""
        control_type, _ = marker_of(marker)
        if control_type == ControlType.ABORT:
            lso = done.last_offset + 1 if first_unstable is None else min(first_unstable, done.last_offset + 1)
            self.index(segment_base).append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))
        self.unreplicated.append(done)

    def last_stable_offset(self, high_watermark: int, first_unstable: int | None) -> int:
        self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]
        lso = high_watermark
        if first_unstable is not None:
            lso = min(lso, first_unstable)
        for txn in self.unreplicated:
            lso = min(lso, txn.first_offset)
        return lso

    def collect(self, segment_bases: Sequence[int], fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)``, by marker offset."""
        self.forget_missing(segment_bases)
        out: list[AbortedTxn] = []
        for i, base in enumerate(segment_bases):
            nxt = segment_bases[i + 1] if i + 1 < len(segment_bases) else None
            if base >= upper_bound:
                break
            if nxt is not None and nxt <= fetch_offset:
                continue  # every marker of this segment is below the fetch offset
            out.extend(self.index(base).collect(fetch_offset, upper_bound))
        return out

    def forget_missing(self, segment_bases: Sequence[int]) -> None:
        live = set(segment_bases)
        for base in [b for b in self._indexes if b not in live]:
            del self._indexes[base]

    def truncate_to(self, segment_bases: Sequence[int], offset: int) -> None:
        """Replication cut the log at ``offset``: markers at or above it are gone."""
        self.forget_missing(segment_bases)
        for base in segment_bases:
            self.index(base).truncate_to(offset)
        self.unreplicated = [t for t in self.unreplicated if t.last_offset < offset]

    def reset(self) -> None:
        self._indexes.clear()
        self.unreplicated = []

    def merge(self, old_bases: Sequence[int]) -> list[AbortedTxn]:
        """The entries of segments about to be replaced by one (the cleaner's output)."""
        return [e for base in old_bases for e in self.index(base).entries]

    def flush(self, base_offset: int) -> None:
        index = self._indexes.get(base_offset)
        if index is not None:
            index.flush()

    def producer_state(self, on_completed: OnCompleted) -> ProducerStateManager:
        return TxnProducerState(on_completed)
