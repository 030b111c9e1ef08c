"""One shard of the group coordinator: the groups of one ``__consumer_offsets``
partition this broker leads.

A new leader rebuilds the shard's state by replaying every record of its local copy
of the partition, from the log start to the log end as it was when leadership
arrived (only the leader appends, and it appends nothing while loading). Loading is
done in slices of ``LOAD_BYTES_PER_POLL`` so a large partition does not stall the
broker; meanwhile the shard's groups answer COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mq.broker.partition import Partition
from mq.coordinator import CoordinatorRecord, CoordinatorResult, GroupCoordinator
from mq.protocol.batch_format import iter_batches
from mq.protocol.control_batch import ControlType, marker_of
from mq.protocol.record_batch import decode_records

LOAD_BYTES_PER_POLL = 8 * 1024 * 1024
READ_CHUNK_BYTES = 1024 * 1024


@dataclass(slots=True)
class PendingWrite:
    """Records appended for a coordinator result, waiting for the high watermark."""

    shard: Shard
    result: CoordinatorResult
    end_offset: int


@dataclass(slots=True)
class Shard:
    partition: Partition
    coordinator: GroupCoordinator
    leader_epoch: int
    load_end: int  # load up to here (the log end when leadership arrived)
    cursor: int  # next offset to replay
    loaded: bool = False
    records_loaded: int = 0
    writes: dict[int, PendingWrite] = field(default_factory=dict)  # op id -> write
    # Transactional offset commits waiting for their marker, per producer id (mq.broker.txn_offsets).
    txn_offsets: dict[int, list[tuple[CoordinatorRecord, int]]] = field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.partition.tp.partition

    def load_some(self, *, max_bytes: int | None = None) -> bool:
        """Replay up to ``max_bytes`` (default ``LOAD_BYTES_PER_POLL``) more of the log;
        True once the shard is loaded. A corrupt batch raises ``LogCorruptedError``."""
        log = self.partition.log
        self.cursor = max(self.cursor, log.log_start_offset)
        budget = LOAD_BYTES_PER_POLL if max_bytes is None else max_bytes
        while self.cursor < self.load_end and budget > 0:
            data = log.read(self.cursor, max_bytes=min(READ_CHUNK_BYTES, budget), max_offset=self.load_end).records
            if not data:
                break
            budget -= len(data)
            with memoryview(data) as view:
                for pos, header in iter_batches(view):
                    if header.base_offset >= self.load_end:
                        break
                    if header.is_control:
                        if header.next_offset > self.cursor:
                            committed = marker_of(view[pos:pos + header.size])[0] == ControlType.COMMIT
                            for record, offset in self.txn_offsets.pop(header.producer_id, []):
                                if committed:
                                    self.coordinator.replay(record, offset=offset)
                    else:
                        for record in decode_records(view[pos:pos + header.size]):
                            if self.cursor <= record.offset < self.load_end and record.key is not None:
                                found = CoordinatorRecord(bytes(record.key), record.value)
                                if header.is_transactional:  # visible once its transaction commits
                                    self.txn_offsets.setdefault(header.producer_id, []).append((found, record.offset))
                                else:
                                    self.coordinator.replay(found, offset=record.offset)
                                self.records_loaded += 1
                    self.cursor = max(self.cursor, header.next_offset)
        if self.cursor >= self.load_end or self.cursor >= log.log_end_offset:
            self.loaded = True
        return self.loaded
