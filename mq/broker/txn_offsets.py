"""TxnOffsetCommit: offsets committed inside a transaction (KIP-98, KIP-447).

Served by the group's coordinator (the leader of its ``__consumer_offsets``
partition). The offsets are checked against the group (KIP-447: a member id and
generation that are not current are refused with UNKNOWN_MEMBER_ID /
ILLEGAL_GENERATION / FENCED_INSTANCE_ID, so a copier whose partitions moved to
another member in a rebalance cannot commit them), then appended as a
*transactional* batch of the producer (its id and epoch: the partition's producer
state refuses a fenced epoch, as for any transactional write) and answered once
replicated. They stay invisible (``Shard.txn_offsets``) until the transaction's
marker reaches this partition: COMMIT replays them into the group coordinator,
ABORT drops them. A coordinator that loads the partition does the same with the
transactional batches it replays (``mq.broker.group_loader``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq.broker.group_loader import Shard
from mq.coordinator.records import OffsetCommitValue, decode, offset_commit_record
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.record_batch import build_batch
from mq.protocol.txn_messages import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
    TxnTopicResult,
)
from mq.replication import ProduceCompletion

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode


@dataclass(slots=True)
class _Commit:
    request: TxnOffsetCommitRequest
    op_id: int


def _answer(request: TxnOffsetCommitRequest, code: ErrorCode, message: str = "") -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse([TxnTopicResult(t.name, [TxnPartitionResult(p.partition, code)
                                                            for p in t.partitions]) for t in request.topics], message)


class TxnOffsets:
    def __init__(self, node: BrokerNode, *, new_op_id: Callable[[], int],
                 complete: Callable[[int, object], None]) -> None:
        self.node = node
        self._new_op_id = new_op_id
        self._complete = complete
        self._writes: dict[int, _Commit] = {}

    def handle(self, request: TxnOffsetCommitRequest, *, op_id: int, now_ms: int) -> TxnOffsetCommitResponse | None:
        """The answer now, or None when it comes later through ``complete``."""
        routed = self.node.groups.route(request.group_id)
        if not isinstance(routed, Shard):
            return _answer(request, *routed)
        fenced = _check_member(routed, request)
        if fenced is not None:
            return _answer(request, *fenced)
        partition = routed.partition
        state = partition.leader
        if state is None:
            return _answer(request, ErrorCode.NOT_COORDINATOR, "the group's coordinator moved; retry")
        records = [offset_commit_record(request.group_id, TopicPartition(t.name, p.partition), OffsetCommitValue(
            p.committed_offset, p.committed_leader_epoch, p.metadata, now_ms)) for t in request.topics
            for p in t.partitions]
        if not records:
            return _answer(request, ErrorCode.NONE)
        entry = partition.log.producer_state.entry(request.producer_id)
        seq = 0 if entry is None or entry.producer_epoch != request.producer_epoch or not entry.batches \
            else entry.last_seq + 1
        batch = build_batch([(r.key, r.value, (), now_ms) for r in records], producer_id=request.producer_id,
                            producer_epoch=request.producer_epoch, base_sequence=seq, is_transactional=True)
        try:
            info = partition.log.append_as_leader(batch, leader_epoch=state.leader_epoch, now_ms=now_ms)
        except MqError as err:
            code = ErrorCode.PRODUCER_FENCED if err.code == ErrorCode.INVALID_PRODUCER_EPOCH else err.code
            return _answer(request, code, err.message)
        pending = routed.txn_offsets.setdefault(request.producer_id, [])
        pending.extend((r, info.first_offset + i) for i, r in enumerate(records))
        write_id = self._new_op_id()
        self._writes[write_id] = _Commit(request, op_id)
        self.node.appended(partition, now_ms=now_ms)
        self.node.await_high_watermark(write_id, partition.tp, info.last_offset + 1,
                                       deadline_ms=now_ms + self.node.config.offsets_commit_timeout_ms)
        return None

    def owns(self, op_id: int) -> bool:
        return op_id in self._writes

    def on_write_done(self, completion: ProduceCompletion) -> None:
        commit = self._writes.pop(completion.request_id)
        code = next(iter(completion.errors.values()), ErrorCode.NONE)
        self._complete(commit.op_id, _answer(commit.request, code if code != ErrorCode.NOT_LEADER
                                             else ErrorCode.NOT_COORDINATOR))

    def on_marker(self, tp: TopicPartition, producer_id: int, committed: bool, marker_offset: int) -> None:
        """A marker was appended to offsets partition ``tp``: settle the producer's offsets."""
        shard = self.node.groups.shards.get(tp.partition)
        if shard is None:
            return
        settle(shard, producer_id, committed)


def settle(shard: Shard, producer_id: int, committed: bool) -> None:
    pending = shard.txn_offsets.pop(producer_id, [])
    if committed:
        for record, offset in pending:
            shard.coordinator.replay(record, offset=offset)


def unstable_offsets(shard: Shard, group_id: str) -> bool:
    """Whether a transaction holds offsets of ``group_id`` not yet settled by a marker:
    OffsetFetch then answers UNSTABLE_OFFSET_COMMIT (KIP-447), so a restarted copier
    does not read the offsets from before a commit still being completed."""
    for pending in shard.txn_offsets.values():
        for record, _ in pending:
            key = decode(record)
            if key is not None and getattr(key[0], "group_id", None) == group_id:
                return True
    return False


def _check_member(shard: Shard, request: TxnOffsetCommitRequest) -> tuple[ErrorCode, str] | None:
    """KIP-447: the consumer's generation and member id must be current."""
    if request.generation_id < 0 and not request.member_id:
        return None  # a producer that does not name its consumer (Kafka's old path): no group fencing
    group = shard.coordinator.groups.get(request.group_id)
    if group is None or request.member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID, (
            f"member {request.member_id!r} is not in group {request.group_id!r}: its partitions were reassigned; "
            "abort the transaction and rejoin")
    if request.group_instance_id is not None and group.instances.get(request.group_instance_id) != request.member_id:
        return ErrorCode.FENCED_INSTANCE_ID, f"group.instance.id {request.group_instance_id!r} has a newer member"
    if request.generation_id != group.generation:
        return ErrorCode.ILLEGAL_GENERATION, (
            f"generation {request.generation_id} of group {request.group_id!r} is not the current "
            f"{group.generation}: abort the transaction and rejoin")
    return None
