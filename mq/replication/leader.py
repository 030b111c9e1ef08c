"""The leader's view of one partition: ISR, follower progress, the high watermark.

Kafka's ``Partition`` (leader half) without the log and the network. The broker calls:

- ``PartitionState(...)`` when the metadata makes this broker the leader, and
  ``apply(LeaderAndIsr)`` for every later committed change of the partition;
- ``check_produce(acks)`` before appending, ``on_leader_append()`` after;
- ``fetch_from_follower(...)`` for each partition of a follower's fetch: it fences
  the request, checks the follower's last fetched epoch against the epoch cache
  (a diverging epoch answer instead of data, KIP-320), records the follower's
  progress (and log start: ``low_watermark``), moves the high watermark and may
  propose adding the follower to the ISR;
- ``maybe_shrink_isr(now_ms)`` periodically (every ``replica.lag.time.max.ms / 2``);
- ``on_alter_partition_error()`` when the controller refuses a proposal;
- ``begin_truncation(new_end)`` after cutting the log of a mirror topic
  (MirrorTruncate); ``begin_restart()`` before restarting it higher (a MirrorAppend's
  ``start_offset``) and ``on_log_restarted(start)`` once it did, in the new epoch.

Under flush policy ``always`` the broker passes ``flushed_offset`` and reports each
fsync with ``on_local_flush``: the leader's own copy then counts only once durable
(followers fsync before their next fetch, which is their acknowledgement).

The high watermark is the smallest log end offset of the *maximal* ISR (the
committed ISR plus a pending expansion, or before a pending shrink): a proposal is
not in force until the controller commits it, so it must not let the high watermark
run ahead of a replica it might still need. It never goes back, but for a deliberate
cut (``begin_truncation``). A follower counts
only after fetching in the current leader epoch with a matching last fetched epoch
(its progress is reset on every new epoch), so the high watermark only covers
offsets the ISR holds exactly as the leader does.

A cut of the leader's log (MirrorTruncate) must reach every replica. Followers find
where their log diverges by leader epoch, so the cut needs a new epoch starting at it:
without one, a follower still holding the cut records in epoch E would fetch on top of
them once the leader had appended past them in the same epoch E (a silent divergence),
and the leader would count its stale progress towards the high watermark. So
``begin_truncation`` lowers the high watermark to the cut, fences appends and proposes
an AlterPartition with ``bump_leader_epoch``; when the controller's new epoch arrives
(``apply``) the epoch cache starts it at the cut, follower progress is forgotten, and
each follower's next fetch (last fetched epoch E, past the cut) is answered with the
diverging epoch (E, cut) instead of data, so it truncates there (KIP-101/279).

A restart of the log higher up (the mirror's source lost records to retention before
they were mirrored: the log restarts empty at the source's log start) is fenced the
same way, but acted on only once the new epoch is in force: ``begin_restart`` fences
appends and proposes the bump *before* anything changes, so a leader cut off from the
controller quorum, or already deposed, never restarts its log. ``on_log_restarted``
then keeps the high watermark where it is, below the new log start: the restart is
committed, as any append, only once every ISR member fetched from the new start
(a follower fetching below the leader's log start is answered OFFSET_OUT_OF_RANGE
and restarts its own log there; its old progress does not count). A leader that
raised its high watermark to the new start alone would see it go back when the
quorum elected a replica that never restarted.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.core.errors import ErrorCode
from mq.core.types import Acks, TopicPartition
from mq.replication.epoch_cache import EpochEndOffset, LeaderEpochCache
from mq.replication.types import (
    NO_BROKER_EPOCH,
    AlterPartitionRequest,
    LeaderAndIsr,
    LogEndView,
    check_leader_epoch,
)

__all__ = ["FollowerFetchResult", "PartitionState", "ReplicaState"]

DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ``ReplicaState``)."""

    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET  # as its last fetch in this epoch said
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    broker_epoch: int = NO_BROKER_EPOCH

    def reset(self, *, now_ms: int, in_isr: bool) -> None:
        """A new leader epoch: forget progress made under the old one. ISR members get
        a full lag window to show up before they can be shrunk away."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_caught_up_ms = now_ms if in_isr else 0
        self.last_fetch_ms = 0
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET

    def on_fetch(self, fetch_offset: int, *, leader_log_end_offset: int, now_ms: int) -> None:
        """A follower fetching at ``fetch_offset`` has everything below it. It was
        caught up at this fetch if it reached the leader's end, or at the previous one
        if it now has what the leader had then (Kafka's rule: a steady stream of
        appends does not make a keeping-up follower look lagging)."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_ms = now_ms

    def is_caught_up(self, leader_log_end_offset: int, *, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset == leader_log_end_offset or now_ms - self.last_caught_up_ms <= max_lag_ms


@dataclass(frozen=True, slots=True)
class FollowerFetchResult:
    """The leader's decision on one follower fetch. With ``error`` NONE and no
    ``diverging_epoch`` the broker reads the log from the fetch offset (no upper
    bound: followers replicate above the high watermark)."""

    error: ErrorCode
    high_watermark: int
    diverging_epoch: EpochEndOffset | None = None
    high_watermark_changed: bool = False
    alter_partition: AlterPartitionRequest | None = None
    low_watermark_changed: bool = False  # the follower's log start raised it (DeleteRecords waits on it)


class PartitionState:
    def __init__(
        self, tp: TopicPartition, *, local_id: int, state: LeaderAndIsr, log: LogEndView,
        epoch_cache: LeaderEpochCache, high_watermark: int, now_ms: int,
        min_insync_replicas: int = 1,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        flushed_offset: int | None = None,
    ) -> None:
        if state.leader != local_id:
            raise ValueError(f"{tp}: broker {local_id} is not the leader in {state}")
        self.tp = tp
        self.local_id = local_id
        self.log = log
        self.epoch_cache = epoch_cache
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._state = state
        self._high_watermark = min(high_watermark, log.log_end_offset)
        self._pending: AlterPartitionRequest | None = None
        self._followers: dict[int, ReplicaState] = {}
        # The log was cut (or is about to restart higher): appends wait for the new leader epoch.
        self._truncating = False
        # Flush policy ``always``: the leader's own copy counts only once fsynced
        # (``on_local_flush``); None (``replicated``) counts the log end at once.
        self._flushed_offset = flushed_offset
        self._new_leader_epoch(now_ms)
        self._maybe_increment_high_watermark()  # an ISR of the leader alone commits at once

    def _new_leader_epoch(self, now_ms: int) -> None:
        # The epoch starts at our log end: followers with more in older epochs
        # truncate to here (KIP-101), and a follower's fetch naming a newer epoch than
        # the cache knows cannot happen (KIP-279).
        self.epoch_cache.assign(self._state.leader_epoch, self.log.log_end_offset)
        self._followers = {
            r: ReplicaState(r) for r in self._state.replicas if r != self.local_id
        }
        for replica_id, follower in self._followers.items():
            follower.reset(now_ms=now_ms, in_isr=replica_id in self._state.isr)
        self._pending = None
        self._truncating = False

    # ---- state

    @property
    def leader_epoch(self) -> int:
        return self._state.leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._state.partition_epoch

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._state.replicas

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR (what the controller would elect from)."""
        return self._state.isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """Committed ISR ∪ the pending proposal: whom the high watermark waits for."""
        extra = () if self._pending is None else self._pending.new_isr
        return self._state.isr + tuple(r for r in extra if r not in self._state.isr)

    @property
    def pending_alter_partition(self) -> AlterPartitionRequest | None:
        return self._pending

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def is_under_replicated(self) -> bool:
        return len(self._state.isr) < len(self._state.replicas)

    @property
    def is_under_min_isr(self) -> bool:
        return len(self._state.isr) < self.min_insync_replicas

    def follower(self, replica_id: int) -> ReplicaState:
        return self._followers[replica_id]

    @property
    def low_watermark(self) -> int:
        """The smallest log start offset of the ISR: ours and each other member's as its
        last fetch in this epoch said (-1: one has not fetched in it yet). Kafka's
        ``lowWatermarkIfLeader``, over the ISR rather than every live replica: once
        DeleteRecords' offset is below it, no replica that could be elected still
        serves the deleted records (``DeleteRecordsPurgatory``)."""
        low = self.log.log_start_offset
        for replica_id in self._state.isr:
            if replica_id == self.local_id:
                continue
            follower = self._followers.get(replica_id)
            if follower is None or follower.log_start_offset == UNKNOWN_OFFSET:
                return UNKNOWN_OFFSET
            low = min(low, follower.log_start_offset)
        return low

    @property
    def truncating(self) -> bool:
        """The log was cut (MirrorTruncate) or waits to restart higher (a MirrorAppend's
        ``start_offset``), and the new leader epoch is not in force yet: no appends."""
        return self._truncating

    @property
    def isr_fetched_in_epoch(self) -> bool:
        """Every other ISR member fetched in this leader epoch without diverging, so its
        log is a prefix of ours (progress is only recorded for such fetches)."""
        return all(
            r == self.local_id
            or (r in self._followers and self._followers[r].log_end_offset != UNKNOWN_OFFSET)
            for r in self._state.isr
        )

    # ---- metadata

    def apply(self, state: LeaderAndIsr, *, now_ms: int) -> bool:
        """A committed change from the controller. A newer leader epoch with us still
        leader starts a new epoch; an older partition epoch is ignored. Returns False
        when the state no longer names this broker leader (the caller drops this
        object and starts following)."""
        if state.leader_epoch < self._state.leader_epoch:
            return True  # a late, older state: we know better
        if state.leader != self.local_id:
            return False
        if (
            state.leader_epoch == self._state.leader_epoch
            and state.partition_epoch <= self._state.partition_epoch
        ):
            return True
        new_epoch = state.leader_epoch > self._state.leader_epoch
        self._state = state
        if new_epoch:
            self._new_leader_epoch(now_ms)
        else:
            self._pending = None
            for replica_id in state.replicas:
                if replica_id != self.local_id and replica_id not in self._followers:
                    self._followers[replica_id] = ReplicaState(replica_id)
            for replica_id in [r for r in self._followers if r not in state.replicas]:
                del self._followers[replica_id]
        self._maybe_increment_high_watermark()
        return True

    def on_alter_partition_error(self) -> None:
        """The controller refused the proposal (stale epochs, fenced broker): forget
        it; the next fetch or shrink check proposes again from the current state."""
        self._pending = None

    def update_config(self, *, min_insync_replicas: int) -> None:
        self.min_insync_replicas = min_insync_replicas

    # ---- mirror topics: a deliberate cut, a restart higher up

    def begin_truncation(self, new_end: int) -> AlterPartitionRequest | None:
        """The log was cut to ``new_end`` (MirrorTruncate; the epoch cache already
        truncated): lower the high watermark there, fence appends, and propose the new
        leader epoch (None: a proposal is in flight; the next fetch or shrink check
        proposes it). See the module docstring."""
        self._high_watermark = min(self._high_watermark, new_end)
        if self._flushed_offset is not None:
            self._flushed_offset = min(self._flushed_offset, new_end)
        self._truncating = True
        return self._maybe_bump_epoch()

    def _maybe_bump_epoch(self) -> AlterPartitionRequest | None:
        if not self._truncating or self._pending is not None:
            return None
        return self._propose(self._state.isr, bump_leader_epoch=True)

    def begin_restart(self) -> AlterPartitionRequest | None:
        """A MirrorAppend asks to restart the log empty above its end: fence appends and
        propose the new leader epoch the restart will happen in (None: a proposal is in
        flight; the next fetch or shrink check proposes it). The log is not touched
        until the epoch is in force (``on_log_restarted``); see the module docstring."""
        self._truncating = True
        return self._maybe_bump_epoch()

    def on_log_restarted(self, log_start_offset: int) -> bool:
        """The log restarted empty at ``log_start_offset``, above its old end, in a
        leader epoch the controller confirmed. The high watermark does not jump to the
        new start: it moves as ever, once every ISR member fetched from there. Follower
        progress below the start is forgotten (those logs restart too), and the
        leader's own copy is durable up to it (the restart is fsynced on return).
        Returns whether the high watermark moved (an ISR of the leader alone)."""
        for follower in self._followers.values():
            if follower.log_end_offset < log_start_offset:
                follower.log_end_offset = UNKNOWN_OFFSET
        if self._flushed_offset is not None:
            self._flushed_offset = max(self._flushed_offset, log_start_offset)
        return self._maybe_increment_high_watermark()

    # ---- produce

    def check_produce(self, acks: Acks | int) -> ErrorCode:
        """``acks=all`` is refused before the append when the ISR is below
        ``min.insync.replicas``: the record could be acknowledged by fewer copies than
        the topic promises."""
        if Acks(acks) == Acks.ALL and self.is_under_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def on_leader_append(self) -> bool:
        """After an append: with the ISR being the leader alone the high watermark
        moves at once. Returns whether it moved."""
        return self._maybe_increment_high_watermark()

    def on_local_flush(self, flushed_offset: int) -> bool:
        """Flush policy ``always``: the leader fsynced up to ``flushed_offset`` (its
        recovery point). Returns whether the high watermark moved."""
        if self._flushed_offset is None:
            raise ValueError("on_local_flush without flushed_offset tracking")
        self._flushed_offset = max(self._flushed_offset, flushed_offset)
        return self._maybe_increment_high_watermark()

    def check_acks_all(self, required_offset: int) -> ErrorCode | None:
        """For the produce purgatory: None while ``required_offset`` (last offset + 1)
        is above the high watermark, else the answer to give."""
        if self._high_watermark < required_offset:
            return None
        if self.is_under_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    # ---- follower fetches

    def fetch_from_follower(
        self, replica_id: int, *, fetch_offset: int, last_fetched_epoch: int,
        current_leader_epoch: int, now_ms: int, broker_epoch: int = NO_BROKER_EPOCH,
        log_start_offset: int = UNKNOWN_OFFSET,
    ) -> FollowerFetchResult:
        hw = self._high_watermark
        error = check_leader_epoch(current_leader_epoch, self._state.leader_epoch)
        if error != ErrorCode.NONE:
            return FollowerFetchResult(error, hw)
        follower = self._followers.get(replica_id)
        if follower is None:
            return FollowerFetchResult(ErrorCode.NOT_LEADER, hw)
        leader_end = self.log.log_end_offset
        if last_fetched_epoch >= 0:
            ours = self.epoch_cache.end_offset_for(last_fetched_epoch, leader_end)
            if ours.end_offset < fetch_offset or ours.epoch < last_fetched_epoch:
                return FollowerFetchResult(ErrorCode.NONE, hw, diverging_epoch=ours)
        if fetch_offset > leader_end or fetch_offset < self.log.log_start_offset:
            # Below our log start the follower's log restarts at ours (the answer names
            # it): what it holds now is not progress (Kafka's read fails before the
            # follower's fetch state is updated).
            return FollowerFetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw)
        if NO_BROKER_EPOCH not in (broker_epoch, follower.broker_epoch) and broker_epoch < follower.broker_epoch:
            # A fetch of an earlier incarnation of the follower, parked here before it
            # restarted and re-read on a wake-up: not its progress any more.
            return FollowerFetchResult(ErrorCode.STALE_BROKER_EPOCH, hw)
        low = self.low_watermark
        if broker_epoch == follower.broker_epoch:  # its log start only grows in one life and epoch
            log_start_offset = max(log_start_offset, follower.log_start_offset)
        follower.on_fetch(fetch_offset, leader_log_end_offset=leader_end, now_ms=now_ms)
        follower.broker_epoch = broker_epoch
        follower.log_start_offset = log_start_offset
        alter = self._maybe_bump_epoch() or self._maybe_expand_isr(follower)
        moved = self._maybe_increment_high_watermark()
        return FollowerFetchResult(
            ErrorCode.NONE, self._high_watermark, high_watermark_changed=moved, alter_partition=alter,
            low_watermark_changed=self.low_watermark > low,
        )

    # ---- high watermark and ISR

    def _maybe_increment_high_watermark(self) -> bool:
        candidate = self.log.log_end_offset
        if self._flushed_offset is not None:
            candidate = min(candidate, self._flushed_offset)
        for replica_id in self.maximal_isr:
            if replica_id == self.local_id:
                continue
            follower = self._followers.get(replica_id)
            if follower is None or follower.log_end_offset == UNKNOWN_OFFSET:
                return False  # an ISR member not heard from in this epoch holds it back
            candidate = min(candidate, follower.log_end_offset)
        if candidate > self._high_watermark:
            self._high_watermark = candidate
            return True
        return False

    def _maybe_expand_isr(self, follower: ReplicaState) -> AlterPartitionRequest | None:
        """Add a follower that reached the high watermark and has replicated at least
        up to the start of this leader epoch (KIP-320 rule 4: a replica still holding
        an older epoch's divergent tail must not count)."""
        if self._pending is not None or follower.replica_id in self.maximal_isr:
            return None
        epoch_start = self.epoch_cache.start_offset_of(self._state.leader_epoch)
        if epoch_start is None or follower.log_end_offset < max(self._high_watermark, epoch_start):
            return None
        return self._propose((*self._state.isr, follower.replica_id))

    def maybe_shrink_isr(self, now_ms: int) -> AlterPartitionRequest | None:
        """Propose dropping ISR members that have not caught up within
        ``replica.lag.time.max.ms`` (stuck or dead followers would otherwise hold the
        high watermark, and every acks=all produce, forever)."""
        if self._pending is not None or self._truncating:
            return self._maybe_bump_epoch()
        leader_end = self.log.log_end_offset
        lagging = [
            r for r in self._state.isr
            if r != self.local_id and r in self._followers
            and not self._followers[r].is_caught_up(
                leader_end, now_ms=now_ms, max_lag_ms=self.replica_lag_time_max_ms
            )
        ]
        if not lagging:
            return None
        return self._propose(tuple(r for r in self._state.isr if r not in lagging))

    def _propose(self, new_isr: tuple[int, ...], *, bump_leader_epoch: bool = False) -> AlterPartitionRequest:
        epochs = tuple(
            (r, self._followers[r].broker_epoch) for r in new_isr if r in self._followers
        )
        self._pending = AlterPartitionRequest(
            self.tp, self.local_id, self._state.leader_epoch, self._state.partition_epoch,
            new_isr, epochs, bump_leader_epoch,
        )
        return self._pending
