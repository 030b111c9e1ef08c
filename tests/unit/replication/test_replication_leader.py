from __future__ import annotations

import pytest
from replication_harness import TP, MemLog, record

from mq.core.errors import ErrorCode
from mq.core.types import Acks
from mq.replication import (
    EpochEndOffset,
    LeaderAndIsr,
    LeaderEpochCache,
    PartitionState,
    check_leader_epoch,
)

LAG_MS = 10_000


def leader(
    *, isr: tuple[int, ...] = (1, 2, 3), epoch: int = 5, records: int = 0, hw: int = 0,
    min_isr: int = 1, cache: LeaderEpochCache | None = None, log: MemLog | None = None,
) -> tuple[PartitionState, MemLog]:
    log = log or MemLog()
    for i in range(records):
        log.append_as_leader(record(f"old{i}"), leader_epoch=epoch - 1)
    state = LeaderAndIsr(1, epoch, isr, 10, (1, 2, 3))
    p = PartitionState(
        TP, local_id=1, state=state, log=log, epoch_cache=cache or LeaderEpochCache(),
        high_watermark=hw, now_ms=0, min_insync_replicas=min_isr, replica_lag_time_max_ms=LAG_MS,
    )
    return p, log


def append(p: PartitionState, log: MemLog, n: int = 1) -> None:
    for i in range(n):
        log.append_as_leader(record(f"v{i}"), leader_epoch=p.leader_epoch)
    p.on_leader_append()


def fetch(p: PartitionState, replica: int, offset: int, *, now_ms: int = 0, epoch: int | None = None,
          last_fetched_epoch: int | None = None):  # type: ignore[no-untyped-def]
    return p.fetch_from_follower(
        replica, fetch_offset=offset, now_ms=now_ms,
        last_fetched_epoch=p.leader_epoch if last_fetched_epoch is None else last_fetched_epoch,
        current_leader_epoch=p.leader_epoch if epoch is None else epoch,
    )


def test_leader_epoch_fencing_rules() -> None:
    assert check_leader_epoch(-1, 5) == ErrorCode.NONE
    assert check_leader_epoch(5, 5) == ErrorCode.NONE
    assert check_leader_epoch(4, 5) == ErrorCode.FENCED_LEADER_EPOCH
    assert check_leader_epoch(6, 5) == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_becoming_leader_assigns_the_epoch_at_the_log_end() -> None:
    p, log = leader(records=3, hw=1)
    assert p.epoch_cache.end_offset_for(5, log.log_end_offset) == EpochEndOffset(5, 3)
    assert p.high_watermark == 1
    with pytest.raises(ValueError):
        PartitionState(
            TP, local_id=2, state=LeaderAndIsr(1, 1, (1,), 0, (1,)), log=log,
            epoch_cache=LeaderEpochCache(), high_watermark=0, now_ms=0,
        )


def test_high_watermark_is_the_minimum_log_end_of_the_isr() -> None:
    p, log = leader()
    append(p, log, 4)
    assert p.high_watermark == 0  # followers not heard from in this epoch hold it
    r = fetch(p, 2, 3)
    assert (r.error, r.high_watermark, r.high_watermark_changed) == (ErrorCode.NONE, 0, False)
    r = fetch(p, 3, 2)
    assert (r.high_watermark, r.high_watermark_changed) == (2, True)
    assert fetch(p, 3, 4).high_watermark == 3
    assert fetch(p, 2, 4).high_watermark == 4


def test_high_watermark_never_goes_back() -> None:
    p, log = leader(isr=(1, 2))
    append(p, log, 3)
    fetch(p, 2, 3)
    assert p.high_watermark == 3
    fetch(p, 2, 1)  # a follower re-fetching lower (it truncated): HW stays
    assert p.high_watermark == 3


def test_leader_alone_in_the_isr_commits_on_append() -> None:
    p, log = leader(isr=(1,))
    append(p, log, 2)
    assert p.high_watermark == 2
    assert p.check_acks_all(2) == ErrorCode.NONE


def test_stale_and_future_epochs_are_fenced() -> None:
    p, log = leader()
    append(p, log, 2)
    assert fetch(p, 2, 2, epoch=4).error == ErrorCode.FENCED_LEADER_EPOCH
    assert fetch(p, 2, 2, epoch=6).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert p.follower(2).log_end_offset == -1  # a fenced fetch records nothing
    assert fetch(p, 9, 0).error == ErrorCode.NOT_LEADER  # not a replica
    # Ahead of the leader in its own epoch: told where the epoch ends (truncate there).
    assert fetch(p, 2, 5).diverging_epoch == EpochEndOffset(5, 2)
    assert fetch(p, 2, 5, last_fetched_epoch=-1).error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_follower_ahead_in_an_old_epoch_gets_the_diverging_epoch() -> None:
    cache = LeaderEpochCache()
    old = MemLog()
    cache.assign(3, 0)
    for i in range(4):
        old.append_as_leader(record(f"e3-{i}"), leader_epoch=3)
    p, log = leader(epoch=5, cache=cache, log=old, hw=4)  # epoch 5 starts at 4
    append(p, log, 2)
    r = fetch(p, 2, 7, last_fetched_epoch=4)  # it had epoch-4 records at 4..6
    assert r.diverging_epoch == EpochEndOffset(3, 4)
    assert p.follower(2).log_end_offset == -1
    r = fetch(p, 2, 4, last_fetched_epoch=3)
    assert r.diverging_epoch is None and p.follower(2).log_end_offset == 4


def test_produce_with_acks_all_needs_min_insync_replicas() -> None:
    p, log = leader(isr=(1, 2), min_isr=3)
    assert p.check_produce(Acks.ALL) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert p.check_produce(Acks.LEADER) == ErrorCode.NONE
    assert p.check_produce(0) == ErrorCode.NONE
    p.update_config(min_insync_replicas=2)
    assert p.check_produce(Acks.ALL) == ErrorCode.NONE
    append(p, log, 1)
    assert p.check_acks_all(1) is None
    fetch(p, 2, 1)
    assert p.check_acks_all(1) == ErrorCode.NONE
    p.update_config(min_insync_replicas=3)
    assert p.check_acks_all(1) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_isr_shrinks_after_replica_lag_time_max() -> None:
    p, log = leader()
    append(p, log, 2)
    fetch(p, 2, 2, now_ms=1_000)  # caught up
    fetch(p, 3, 1, now_ms=1_000)  # behind
    assert p.maybe_shrink_isr(LAG_MS) is None  # ISR members get a full window after election
    request = p.maybe_shrink_isr(LAG_MS + 1)
    assert request is not None
    assert (request.new_isr, request.leader_epoch, request.partition_epoch) == ((1, 2), 5, 10)
    assert p.maybe_shrink_isr(LAG_MS + 2) is None  # one proposal in flight at a time
    assert p.isr == (1, 2, 3) and p.maximal_isr == (1, 2, 3)
    assert p.apply(LeaderAndIsr(1, 5, (1, 2), 11, (1, 2, 3)), now_ms=LAG_MS + 3)
    assert p.isr == (1, 2) and p.pending_alter_partition is None
    assert p.high_watermark == 2  # 3 no longer holds it back


def test_a_follower_keeping_up_with_a_stream_of_appends_stays_in_sync() -> None:
    p, log = leader(isr=(1, 2))
    now = 0
    for _ in range(30):
        now += 1_000
        append(p, log, 1)
        fetch(p, 2, log.log_end_offset - 1, now_ms=now)  # always one behind
        assert p.maybe_shrink_isr(now) is None


def test_isr_expands_when_the_follower_reaches_the_high_watermark() -> None:
    p, log = leader(isr=(1, 2))
    append(p, log, 3)
    fetch(p, 2, 3)
    assert p.high_watermark == 3
    assert fetch(p, 3, 2).alter_partition is None  # below the HW
    r = fetch(p, 3, 3)
    assert r.alter_partition is not None
    assert r.alter_partition.new_isr == (1, 2, 3) and r.alter_partition.partition_epoch == 10
    p.on_alter_partition_error()  # refused: proposed again on the next fetch
    assert fetch(p, 3, 3).alter_partition is not None


def test_expansion_needs_the_start_of_the_leader_epoch() -> None:
    """KIP-320 rule 4: a new leader's HW may lag; a follower at that HW but below the
    leader's epoch start may lack committed records of the old epoch."""
    p, _ = leader(isr=(1, 2), records=5, hw=3)  # epoch 5 starts at 5; HW stale at 3
    assert fetch(p, 3, 4, last_fetched_epoch=4).alter_partition is None
    assert fetch(p, 3, 5, last_fetched_epoch=4).alter_partition is not None


def test_high_watermark_waits_for_a_pending_isr_member() -> None:
    """Until the controller answers, the proposed member counts (maximal ISR): if it is
    committed and elected, it must hold everything below the HW."""
    p, log = leader(isr=(1, 2))
    append(p, log, 2)
    fetch(p, 2, 2)
    r = fetch(p, 3, 2)
    assert r.alter_partition is not None and p.maximal_isr == (1, 2, 3)
    append(p, log, 2)
    fetch(p, 2, 4)
    assert p.high_watermark == 2  # 3 is pending and still at 2
    fetch(p, 3, 4)
    assert p.high_watermark == 4


def test_apply_ignores_stale_states_and_restarts_on_a_new_epoch() -> None:
    p, log = leader(isr=(1, 2))
    append(p, log, 2)
    fetch(p, 2, 2)
    assert p.high_watermark == 2
    assert p.apply(LeaderAndIsr(1, 5, (1,), 9, (1, 2, 3)), now_ms=0)  # older partition epoch
    assert p.isr == (1, 2)
    assert p.apply(LeaderAndIsr(1, 6, (1, 2), 11, (1, 2, 3)), now_ms=0)  # re-elected
    assert p.leader_epoch == 6 and p.follower(2).log_end_offset == -1
    assert p.epoch_cache.start_offset_of(6) == 2
    assert fetch(p, 2, 2, epoch=5).error == ErrorCode.FENCED_LEADER_EPOCH
    assert p.apply(LeaderAndIsr(2, 4, (1, 2), 8, (1, 2, 3)), now_ms=0)  # late and old: ignored
    assert p.leader_epoch == 6
    assert not p.apply(LeaderAndIsr(2, 7, (1, 2), 12, (1, 2, 3)), now_ms=0)  # deposed


def test_alter_partition_carries_the_broker_epochs() -> None:
    p, log = leader(isr=(1,))
    append(p, log, 1)
    r = p.fetch_from_follower(
        2, fetch_offset=1, last_fetched_epoch=5, current_leader_epoch=5, now_ms=0, broker_epoch=42,
    )
    assert r.alter_partition is not None
    assert r.alter_partition.broker_epochs == ((2, 42),)


def test_flush_policy_always_counts_the_leader_only_once_fsynced() -> None:
    log = MemLog()
    p = PartitionState(
        TP, local_id=1, state=LeaderAndIsr(1, 0, (1, 2), 0, (1, 2)), log=log,
        epoch_cache=LeaderEpochCache(), high_watermark=0, now_ms=0, flushed_offset=0,
    )
    append(p, log, 3)
    fetch(p, 2, 3)
    assert p.high_watermark == 0  # the follower has it; the leader has not fsynced
    assert p.on_local_flush(2) and p.high_watermark == 2
    assert not p.on_local_flush(1) and p.high_watermark == 2
    assert p.on_local_flush(3) and p.high_watermark == 3
    unflushed, _ = leader()
    with pytest.raises(ValueError):
        unflushed.on_local_flush(1)


def test_a_deliberate_cut_lowers_the_high_watermark_fences_and_asks_for_a_new_epoch() -> None:
    p, log = leader(isr=(1, 2))
    append(p, log, 4)
    fetch(p, 2, 4)
    assert p.high_watermark == 4
    log.truncate_to(2)
    p.epoch_cache.truncate_from_end(log.log_end_offset)
    proposal = p.begin_truncation(log.log_end_offset)
    assert p.truncating and p.high_watermark == 2
    assert proposal is not None and proposal.bump_leader_epoch and proposal.new_isr == (1, 2)
    # a follower past the cut in the old epoch is told where its epoch ends on the leader
    assert fetch(p, 2, 4).diverging_epoch == EpochEndOffset(5, 2)
    # refused (a concurrent ISR change): the next fetch proposes again
    p.on_alter_partition_error()
    assert fetch(p, 2, 2).alter_partition.bump_leader_epoch  # type: ignore[union-attr]
    p.apply(LeaderAndIsr(1, 6, (1, 2), 11, (1, 2, 3)), now_ms=0)
    assert not p.truncating and p.epoch_cache.start_offset_of(6) == 2
    assert not p.isr_fetched_in_epoch  # progress of the old epoch is forgotten
    assert fetch(p, 2, 4, last_fetched_epoch=5).diverging_epoch == EpochEndOffset(5, 2)
    fetch(p, 2, 2, last_fetched_epoch=5)
    assert p.isr_fetched_in_epoch


def restart_in_new_epoch(p: PartitionState, log: MemLog, start: int, *, isr: tuple[int, ...]) -> bool:
    """What the broker does for a MirrorAppend with ``start_offset``: fence, get the new
    epoch from the controller, then restart the log and tell the leader state."""
    proposal = p.begin_restart()
    assert p.truncating and proposal is not None and proposal.bump_leader_epoch and proposal.new_isr == isr
    p.apply(LeaderAndIsr(1, p.leader_epoch + 1, isr, p.partition_epoch + 1, (1, 2, 3)), now_ms=0)
    assert not p.truncating
    log.truncate_fully_and_start_at(start)
    p.epoch_cache.clear()
    p.epoch_cache.assign(p.leader_epoch, start)
    return p.on_log_restarted(start)


def test_a_restart_higher_waits_for_its_epoch_and_only_the_isr_commits_it() -> None:
    p, log = leader(isr=(1, 2))
    append(p, log, 4)
    fetch(p, 2, 4)
    assert p.high_watermark == 4
    proposal = p.begin_restart()
    assert proposal is not None and p.truncating
    assert (log.log_start_offset, log.log_end_offset, p.high_watermark) == (0, 4, 4)  # untouched until the epoch
    p.on_alter_partition_error()  # refused (e.g. a concurrent ISR change): the next fetch proposes again
    assert fetch(p, 2, 4).alter_partition.bump_leader_epoch  # type: ignore[union-attr]
    p.on_alter_partition_error()
    # in the new epoch the log restarts at 100, but the high watermark stays: not alone
    assert not restart_in_new_epoch(p, log, 100, isr=(1, 2))
    assert (log.log_start_offset, log.log_end_offset, p.high_watermark) == (100, 100, 4)
    # the follower's fetch below the new start is not progress: it is told to restart
    below = fetch(p, 2, 4, last_fetched_epoch=5)
    assert below.error == ErrorCode.OFFSET_OUT_OF_RANGE and p.high_watermark == 4
    append(p, log, 3)
    assert p.high_watermark == 4
    assert fetch(p, 2, 100, last_fetched_epoch=-1).high_watermark == 100  # restarted there
    assert fetch(p, 2, 103).high_watermark == 103


def test_a_restart_higher_with_the_leader_alone_in_the_isr_commits_at_once() -> None:
    p, log = leader(isr=(1,))
    append(p, log, 2)
    assert p.high_watermark == 2
    assert restart_in_new_epoch(p, log, 50, isr=(1,)) and p.high_watermark == 50


def test_the_low_watermark_is_the_isrs_smallest_log_start_as_their_fetches_said() -> None:
    p, log = leader(isr=(1, 2))
    append(p, log, 10)

    def follower_fetch(replica: int, log_start: int):  # type: ignore[no-untyped-def]
        return p.fetch_from_follower(replica, fetch_offset=10, last_fetched_epoch=5, current_leader_epoch=5,
                                     now_ms=0, log_start_offset=log_start)

    assert p.low_watermark == -1  # 2 has not fetched in this epoch
    follower_fetch(2, 0)
    follower_fetch(3, 0)
    log.delete_records(6)
    assert p.low_watermark == 0  # 2 has not said it moved
    assert follower_fetch(2, 6).low_watermark_changed and p.low_watermark == 6  # 3 is outside the ISR
    p.apply(LeaderAndIsr(1, 6, (1, 2, 3), 11, (1, 2, 3)), now_ms=0)
    assert p.low_watermark == -1  # a new epoch: nobody has said anything in it yet


def test_a_fetch_of_an_earlier_incarnation_of_a_follower_is_not_progress() -> None:
    p, log = leader(isr=(1, 2))
    append(p, log, 10)
    log.delete_records(4)

    def follower_fetch(offset: int, *, broker_epoch: int, log_start: int):  # type: ignore[no-untyped-def]
        return p.fetch_from_follower(2, fetch_offset=offset, last_fetched_epoch=5, current_leader_epoch=5,
                                     now_ms=0, broker_epoch=broker_epoch, log_start_offset=log_start)

    follower_fetch(10, broker_epoch=21, log_start=4)
    assert p.low_watermark == 4
    # the same life re-read with an older log start (a parked fetch): the start stays
    assert not follower_fetch(10, broker_epoch=21, log_start=0).low_watermark_changed and p.low_watermark == 4
    follower_fetch(10, broker_epoch=22, log_start=0)  # it restarted: its new life counts
    assert p.low_watermark == 0
    stale = follower_fetch(10, broker_epoch=21, log_start=4)
    assert stale.error == ErrorCode.STALE_BROKER_EPOCH and p.low_watermark == 0
