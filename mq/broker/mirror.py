"""Mirror topics on the partition leader: MirrorAppend and MirrorTruncate.

A mirror topic (topic config ``mirror.source.region`` set) is written only by the
mirror service. **MirrorAppend** appends the source region's batches unchanged at their
source offsets (``mq.broker.mirror_plan`` decides batch by batch: append, duplicate,
diverged, gap, restart higher; with ``fetch_offset``, the holes a compacted source
leaves are appended as they are, as a follower appends its leader's), stamping this
leader's partition leader epoch, outside the CRC, so replication and truncation by
leader epoch inside this region keep working. Followers copy the holes as they copy a
compacted leader's: their fetch from inside a hole returns the next batch.
Its acks work as Produce's: ``acks=1`` answers after the append (after the group
commit's fsync under flush policy ``always``), ``acks=-1`` is refused below
``min.insync.replicas`` and otherwise parked in the produce purgatory until the high
watermark covers every batch of the request, duplicates included (a retry after a
timeout must not be acknowledged before the first attempt's records are replicated).

A restart higher (``start_offset``: the source's retention removed records before they
were mirrored) cuts the log fully and starts it at the new offset. It is a fenced step,
as a cut is: the leader first fences appends and asks the controller for a new leader
epoch with the same leader and ISR (``PartitionState.begin_restart``), and parks the
request; only once that epoch is in force, i.e. the controller quorum confirmed this
broker still leads, is the request planned again and the log restarted (then the
batches appended, and acks handled as for any append). A leader cut off from the quorum,
or already replaced, never restarts its log: the request times out or is answered
NOT_LEADER, and nothing changed. Nor does the restart move the high watermark by
itself: it moves once every ISR member fetched from the new start. Followers replicate
the restart as Kafka's do after retention: their next fetch, below the leader's log
start, answers OFFSET_OUT_OF_RANGE with that log start, and they restart their own log
there (``mq.replication.follower``).

**MirrorTruncate** cuts a mirror topic's partition on every replica. Followers find
divergence by leader epoch only, so a cut needs a new epoch starting at it (see
``mq.replication.leader``): the leader cuts its log and epoch cache, fences appends
and asks the controller for a new leader epoch with the same leader and ISR
(AlterPartition with ``bump_leader_epoch``, one metadata record). Once the epoch is in
force, each follower's next fetch names its last epoch, which now ends at the cut on
the leader, and it truncates there. The answer waits until every ISR member has
fetched in the new epoch without diverging, i.e. holds a prefix of the cut log: then
no replica that could be elected still has the cut records. Retrying is safe (an
offset at or past the log end cuts nothing and waits for the same condition).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mq.broker.leadership import find_leader
from mq.broker.mirror_plan import MirrorPlan, plan_append
from mq.broker.outbound import Pending
from mq.broker.partition import Partition
from mq.broker.produce import acks_all_message, truncating_refusal
from mq.core.errors import ErrorCode, MqError
from mq.core.types import FlushPolicy, TopicPartition
from mq.protocol.batch_format import HEADER_SIZE, BatchHeader, read_header
from mq.protocol.errors import ProtocolError
from mq.protocol.messages import Response
from mq.protocol.mirror_messages import (
    MirrorAppendRequest,
    MirrorAppendResponse,
    MirrorTruncateRequest,
    MirrorTruncateResponse,
)
from mq.replication import ProduceCompletion
from mq.storage import Log, LogCorruptedError

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode

__all__ = ["MirrorRequests"]


@dataclass(slots=True)
class _Truncation:
    op_id: int
    tp: TopicPartition


@dataclass(slots=True)
class _Restart:
    """A MirrorAppend that restarts the log higher, waiting for a leader epoch newer than
    the one it arrived in (``PartitionState.begin_restart``)."""

    op_id: int
    tp: TopicPartition
    request: MirrorAppendRequest
    leader_epoch: int
    deadline_ms: int


@dataclass(slots=True)
class DelayedMirrorAppend:
    """An acks=1 MirrorAppend under flush policy ``always``, held until the fsync covers
    it (the broker's ``DelayedProduce`` interface)."""

    op_id: int
    response: MirrorAppendResponse
    waits: list[tuple[Partition, int]]

    def satisfied(self) -> bool:
        return all(p.log.recovery_point >= end or p.log.log_end_offset < end for p, end in self.waits)

    def fail(self, failed: dict[TopicPartition, MqError]) -> bool:
        for partition, _ in self.waits:
            err = failed.get(partition.tp)
            if err is not None:
                self.response = MirrorAppendResponse(err.code, err.message)
                return True
        return False


class MirrorRequests:
    def __init__(self, node: BrokerNode, *, new_op_id: Callable[[], int],
                 complete: Callable[[int, Response], None]) -> None:
        self._node = node
        self._new_op_id = new_op_id
        self._complete = complete
        self._truncations: dict[int, _Truncation] = {}
        self._restarts: dict[int, _Restart] = {}

    # ------------------------------------------------------------ MirrorAppend

    def append(self, request: MirrorAppendRequest, now_ms: int) -> Response | Pending:
        return self._append(request, now_ms, deadline_ms=now_ms + max(0, request.timeout_ms))

    def _append(self, request: MirrorAppendRequest, now_ms: int, *, deadline_ms: int,
                restart: _Restart | None = None) -> Response | Pending:
        """Plan and write ``request``; ``restart``: it waited for the new leader epoch of its
        restart, which is in force now (answered under the same op id)."""
        node = self._node
        tp = TopicPartition(request.topic, request.partition)
        if request.acks not in (1, -1):
            return MirrorAppendResponse(ErrorCode.INVALID_REQUIRED_ACKS,
                                        f"acks={request.acks}: MirrorAppend takes 1 or -1 (all)")
        found = _mirror_leader(node, tp)
        if isinstance(found, tuple):
            return MirrorAppendResponse(*found)
        partition, state = found, found.leader
        assert state is not None
        if request.acks == -1 and state.check_produce(-1) != ErrorCode.NONE:
            isr, minimum = list(state.isr), partition.config.min_insync_replicas
            return _append_response(partition, (
                ErrorCode.NOT_ENOUGH_REPLICAS, f"{len(isr)} in-sync replica(s) {isr} < min.insync.replicas={minimum}"))
        try:
            plan = _plan(partition, request)
            if plan.restart_at is not None and restart is None:
                # (also while fenced: a retry of a restart joins the wait for the epoch)
                return self._await_restart_epoch(partition, request, now_ms, deadline_ms)
            if state.truncating:
                return _append_response(partition, truncating_refusal(tp))
            self._apply(partition, request, plan, now_ms)
        except LogCorruptedError as err:
            node.report_corruption(tp, err)
            return _append_response(partition, (err.code, f"stored data of {tp} failed its check: {err.problem}"))
        except MqError as err:
            if state.truncating:  # the log is being cut or restarted: judge the request after that
                return _append_response(partition, truncating_refusal(tp))
            node.stats.produce_failed(tp.topic)
            return _append_response(partition, (err.code, err.message))
        response = _append_response(partition, plan=plan)
        op_id = restart.op_id if restart is not None else None
        if request.acks == 1:
            if plan.appended and node.config.log_flush_policy == FlushPolicy.ALWAYS:
                op = DelayedMirrorAppend(op_id or self._new_op_id(), response,
                                         [(partition, partition.log.log_end_offset)])
                node.park_until_flushed(op)
                return Pending(op.op_id, None)
            return response
        op_id = op_id or self._new_op_id()
        required = plan.end_offset if plan.end_offset >= 0 else partition.log.log_end_offset

        def finish(completion: ProduceCompletion) -> Response:
            code = completion.errors.get(tp, ErrorCode.NONE)
            current = node.partitions.get(tp)
            error = None if code == ErrorCode.NONE else (code, acks_all_message(code))
            return _append_response(current, error, plan=plan)

        node.park_acks_all(op_id, tp, required, deadline_ms=deadline_ms, finish=finish)
        return Pending(op_id, max(0, deadline_ms - now_ms))

    def _await_restart_epoch(self, partition: Partition, request: MirrorAppendRequest, now_ms: int,
                             deadline_ms: int) -> Pending:
        """Fence the partition and ask for the new leader epoch the restart will happen
        in (unless a proposal is in flight); the request waits for an epoch newer than
        this one (``on_partition_update``), the log untouched."""
        state = partition.leader
        assert state is not None
        proposal = state.begin_restart()
        if proposal is not None:
            self._node.propose_isr_change(proposal)
        op = _Restart(self._new_op_id(), partition.tp, request, state.leader_epoch, deadline_ms)
        self._restarts[op.op_id] = op
        return Pending(op.op_id, max(0, deadline_ms - now_ms))

    def _apply(self, partition: Partition, request: MirrorAppendRequest, plan: MirrorPlan, now_ms: int) -> None:
        node, log, state = self._node, partition.log, partition.leader
        assert state is not None
        if plan.restart_at is not None:
            log.truncate_fully_and_start_at(plan.restart_at)
            partition.epoch_cache.clear()
            partition.epoch_cache.assign(state.leader_epoch, plan.restart_at)
            state.on_log_restarted(plan.restart_at)
            node.log_start_moved(partition)
            node.partition_moved(partition.tp)
        if plan.appended:
            with memoryview(request.records) as view:
                info = log.append_as_mirror(view[plan.append_from:], leader_epoch=state.leader_epoch,
                                            now_ms=now_ms, holes=request.fetch_offset >= 0)
            node.stats.produced(partition.tp.topic, info.record_count, info.size_bytes)
            node.appended(partition, now_ms=now_ms)

    # ------------------------------------------------------------ MirrorTruncate

    def truncate(self, request: MirrorTruncateRequest, now_ms: int) -> Response | Pending:
        node = self._node
        tp = TopicPartition(request.topic, request.partition)
        found = _mirror_leader(node, tp)
        if isinstance(found, tuple):
            return MirrorTruncateResponse(*found)
        partition, state = found, found.leader
        assert state is not None
        log = partition.log
        if request.offset < log.log_start_offset:
            return MirrorTruncateResponse(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"cannot cut {tp} at {request.offset}: below its log start {log.log_start_offset}",
                log.log_end_offset)
        if request.offset < log.log_end_offset:
            try:
                log.truncate_to(request.offset)
            except MqError as err:
                return MirrorTruncateResponse(err.code, err.message, log.log_end_offset)
            partition.epoch_cache.truncate_from_end(log.log_end_offset)
            proposal = state.begin_truncation(log.log_end_offset)
            if proposal is not None:
                node.propose_isr_change(proposal)
            node.partition_moved(tp)
        answer = _converged(partition)
        if answer is not None:
            return answer
        op = _Truncation(self._new_op_id(), tp)
        self._truncations[op.op_id] = op
        return Pending(op.op_id, max(0, request.timeout_ms))

    @property
    def waiting(self) -> bool:
        """A MirrorTruncate or a restarting MirrorAppend waits (``on_partition_update``)."""
        return bool(self._truncations or self._restarts)

    def on_partition_update(self, tp: TopicPartition, *, now_ms: int) -> None:
        """A follower fetched, the ISR or the leader epoch changed: write the restarts of
        ``tp`` whose new leader epoch is in force, answer the truncations that converged."""
        for restart in [op for op in self._restarts.values() if op.tp == tp]:
            partition = self._node.partitions.get(tp)
            state = None if partition is None else partition.leader
            if state is None:
                self.on_leadership_lost(tp)
                return
            if state.truncating or state.leader_epoch <= restart.leader_epoch:
                continue
            del self._restarts[restart.op_id]
            result = self._append(restart.request, now_ms, deadline_ms=restart.deadline_ms, restart=restart)
            if not isinstance(result, Pending):  # else parked under the same op id (acks, fsync)
                self._complete(restart.op_id, result)
        for op in [op for op in self._truncations.values() if op.tp == tp]:
            partition = self._node.partitions.get(tp)
            if partition is None or partition.leader is None:
                self.on_leadership_lost(tp)
                return
            answer = _converged(partition)
            if answer is not None:
                del self._truncations[op.op_id]
                self._complete(op.op_id, answer)

    def on_leadership_lost(self, tp: TopicPartition) -> None:
        for restart in [op for op in self._restarts.values() if op.tp == tp]:
            del self._restarts[restart.op_id]
            self._complete(restart.op_id, MirrorAppendResponse(
                ErrorCode.NOT_LEADER, f"leadership of {tp} moved before the new leader epoch of its restart at a "
                "higher log start was in force; nothing was changed; retry at the new leader"))
        for op in [op for op in self._truncations.values() if op.tp == tp]:
            del self._truncations[op.op_id]
            self._complete(op.op_id, MirrorTruncateResponse(
                ErrorCode.NOT_LEADER, f"leadership of {tp} moved before every replica was cut; retry at the new leader"))

    def expire(self, op_id: int, *, now_ms: int) -> bool:
        restart = self._restarts.pop(op_id, None)
        if restart is not None:
            partition = self._node.partitions.get(restart.tp)
            message = (f"{restart.tp}: the restart at a higher log start waits for a new leader epoch, which "
                       "the controller did not confirm within timeout_ms (this broker may be cut off from it); "
                       "nothing was changed; retry")
            self._complete(op_id, _append_response(partition, (ErrorCode.REQUEST_TIMED_OUT, message)))
            return True
        op = self._truncations.pop(op_id, None)
        if op is None:
            return False
        partition = self._node.partitions.get(op.tp)
        end = -1 if partition is None else partition.log.log_end_offset
        self._complete(op_id, MirrorTruncateResponse(
            ErrorCode.REQUEST_TIMED_OUT,
            f"{op.tp}: the leader's log is cut, but not every in-sync replica fetched in the new leader epoch "
            "within timeout_ms; retry to wait again", end))
        return True

    def cancel(self, op_id: int) -> None:
        self._truncations.pop(op_id, None)
        self._restarts.pop(op_id, None)


def _mirror_leader(node: BrokerNode, tp: TopicPartition) -> Partition | tuple[ErrorCode, str]:
    found = find_leader(node, tp)
    if not isinstance(found, Partition):
        return found
    if not found.config.mirror_source_region:
        return ErrorCode.NOT_MIRROR_TOPIC, (
            f"topic {tp.topic} is not a mirror topic (mirror.source.region is not set): the mirror writes "
            "only into mirror topics, never into a topic that has its own producers")
    return found


def _converged(partition: Partition) -> MirrorTruncateResponse | None:
    """The answer once the new leader epoch is in force and every ISR member fetched in
    it without diverging (None: not yet)."""
    state = partition.leader
    assert state is not None
    if state.truncating or not state.isr_fetched_in_epoch:
        return None
    return MirrorTruncateResponse(ErrorCode.NONE, "", partition.log.log_end_offset)


def _plan(partition: Partition, request: MirrorAppendRequest) -> MirrorPlan:
    log = partition.log
    return plan_append(
        request.records, log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset,
        start_offset=request.start_offset, max_message_bytes=partition.config.max_message_bytes,
        stored_batch=lambda offset: _stored_batch(log, offset), fetch_offset=request.fetch_offset)


def _stored_batch(log: Log, offset: int) -> BatchHeader | None:
    """The first stored batch holding ``offset`` or after it (``mirror_plan.StoredBatch``)."""
    data = log.read(offset, max_bytes=HEADER_SIZE, min_one_batch=True).records
    if len(data) < HEADER_SIZE:
        return None
    try:
        return read_header(data)
    except ProtocolError:
        return None


def _append_response(
    partition: Partition | None, error: tuple[ErrorCode, str] | None = None, *, plan: MirrorPlan | None = None,
) -> MirrorAppendResponse:
    code, message = error if error is not None else (ErrorCode.NONE, "")
    if partition is None:
        return MirrorAppendResponse(code, message)
    appended = plan.appended if plan is not None and code == ErrorCode.NONE else 0
    duplicates = plan.duplicates if plan is not None and code == ErrorCode.NONE else 0
    return MirrorAppendResponse(code, message, partition.log.log_end_offset, partition.high_watermark,
                                partition.log_start_offset, appended, duplicates)
