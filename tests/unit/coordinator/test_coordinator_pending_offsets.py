"""Offset commits not yet committed (Kafka's ``pendingOffsetCommits``): invisible until
``confirm``, dropped by ``fail``, superseded in log order, and deleted with their group."""

from __future__ import annotations

from mq.coordinator import CoordinatorResult
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol import group_messages as gm
from tests.unit.coordinator.harness import Shard

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _member(shard: Shard) -> tuple[str, int]:
    response = shard.answer(shard.join(client_id="a"))
    assert isinstance(response, gm.JoinGroupResponse)
    return response.member_id, response.generation_id


def _commit(shard: Shard, offsets: dict[TopicPartition, int], member: str, generation: int,
            ) -> tuple[int, CoordinatorResult]:
    """Send a commit while ``shard.hold`` is set: its request id and held result."""
    parts = [gm.OffsetCommitPartition(tp.partition, offset) for tp, offset in offsets.items()]
    rid = shard.send(gm.OffsetCommitRequest("g", [gm.OffsetCommitTopic("t", parts)], generation, member))
    assert shard.held and shard.held[-1] is shard.last_result
    return rid, shard.last_result


def _held_shard(committed: int = 5) -> tuple[Shard, str, int]:
    shard = Shard()
    member, generation = _member(shard)
    assert shard.commit({T0: committed}, generation=generation, member_id=member) == {T0: 0}
    shard.hold = True
    return shard, member, generation


def test_a_pending_commit_is_invisible_until_confirmed() -> None:
    shard, member, generation = _held_shard(5)
    rid, result = _commit(shard, {T0: 9, T1: 3}, member, generation)
    assert shard.answer(rid) is None  # answered once committed
    assert shard.fetch([T0, T1]) == {T0: 5, T1: -1}
    assert shard.fetch() == {T0: 5}  # all partitions: the committed ones only
    assert shard.coordinator.group_offsets() == {"g": {T0: 5}}
    assert shard.coordinator.pending_offsets.partitions("g") == [T0, T1]
    shard.commit_held(result)
    assert shard.answer(rid).topics[0].partitions[0].error_code == ErrorCode.NONE  # type: ignore[union-attr]
    assert shard.fetch([T0, T1]) == {T0: 9, T1: 3}
    assert shard.coordinator.group_offsets() == {"g": {T0: 9, T1: 3}}
    assert not shard.coordinator.pending_offsets


def test_fail_drops_the_pending_commit_and_answers_the_error() -> None:
    shard, member, generation = _held_shard(4)
    rid, result = _commit(shard, {T0: 9}, member, generation)
    shard.fail_held(result, ErrorCode.NOT_COORDINATOR)
    assert shard.answer(rid).topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR  # type: ignore[union-attr]
    assert shard.fetch([T0]) == {T0: 4} and not shard.coordinator.pending_offsets
    shard.coordinator.confirm(result)  # a late confirm of a failed write changes nothing
    assert shard.fetch([T0]) == {T0: 4}
    assert shard.reload().group_offsets() == {"g": {T0: 4}}


def test_two_interleaved_failing_commits_leave_the_last_confirmed_value() -> None:
    """The case the old undo got wrong: reverting the older write restored nothing
    (the newer had replaced it), reverting the newer restored the older's value."""
    shard, member, generation = _held_shard(5)
    _, first = _commit(shard, {T0: 6}, member, generation)
    _, other = _commit(shard, {T1: 1}, member, generation)
    _, second = _commit(shard, {T0: 7}, member, generation)
    shard.fail_held(first)
    shard.commit_held(other)
    shard.fail_held(second)
    assert shard.fetch([T0, T1]) == {T0: 5, T1: 1}
    assert not shard.coordinator.pending_offsets
    assert shard.reload().group_offsets() == {"g": {T0: 5, T1: 1}}


def test_a_failed_write_between_confirmed_ones_is_skipped() -> None:
    shard, member, generation = _held_shard(5)
    _, a = _commit(shard, {T0: 6}, member, generation)
    _, b = _commit(shard, {T0: 7}, member, generation)
    _, c = _commit(shard, {T0: 8}, member, generation)
    shard.commit_held(a)
    assert shard.fetch([T0]) == {T0: 6}
    shard.fail_held(c)
    shard.commit_held(b)
    assert shard.fetch([T0]) == {T0: 7} and not shard.coordinator.pending_offsets


def test_confirming_a_newer_write_first_supersedes_the_older() -> None:
    """Log order wins: once a write is committed, every older one is too, and its
    value is superseded — a late confirm of the older one changes nothing."""
    shard, member, generation = _held_shard(5)
    _, older = _commit(shard, {T0: 6}, member, generation)
    _, newer = _commit(shard, {T0: 7}, member, generation)
    shard.commit_held(newer)
    assert shard.fetch([T0]) == {T0: 7} and not shard.coordinator.pending_offsets
    shard.commit_held(older)
    assert shard.fetch([T0]) == {T0: 7}


def test_the_same_partition_twice_in_one_commit_ends_with_the_last() -> None:
    shard, member, generation = _held_shard(5)
    _, result = _commit(shard, {T0: 6}, member, generation)
    parts = [gm.OffsetCommitPartition(0, 8), gm.OffsetCommitPartition(0, 7)]
    shard.send(gm.OffsetCommitRequest("g", [gm.OffsetCommitTopic("t", parts)], generation, member))
    twice = shard.last_result
    assert len(twice.records) == 2
    shard.commit_held(result)
    shard.commit_held(twice)
    assert shard.fetch([T0]) == {T0: 7}
    assert shard.reload().group_offsets() == {"g": {T0: 7}}


def test_deleting_a_group_tombstones_its_pending_commits_too() -> None:
    """An admin commit to a group with no offsets yet, then DeleteGroups before it is
    committed: the pending partition gets a tombstone and the late confirm does not
    bring the offset (or the group) back; a reload agrees."""
    shard = Shard()
    shard.hold = True
    rid = shard.send(gm.OffsetCommitRequest("g", [gm.OffsetCommitTopic("t", [gm.OffsetCommitPartition(0, 3)])]))
    commit = shard.last_result
    shard.send(gm.DeleteGroupsRequest(["g"]))
    delete = shard.last_result
    assert [r.value for r in delete.records] == [None, None]  # the pending partition and the group
    assert not shard.coordinator.pending_offsets
    shard.commit_held(commit)
    shard.commit_held(delete)
    assert shard.answer(rid).topics[0].partitions[0].error_code == ErrorCode.NONE  # type: ignore[union-attr]
    assert shard.coordinator.groups == {} and shard.fetch([T0]) == {T0: -1}
    assert shard.reload().groups == {}


def test_a_group_with_a_pending_commit_does_not_expire() -> None:
    shard = Shard()
    assert shard.commit({T0: 4}) == {T0: 0}  # an admin commit: an Empty group with offsets
    shard.advance(99_500)
    shard.hold = True
    shard.send(gm.OffsetCommitRequest("g", [gm.OffsetCommitTopic("t", [gm.OffsetCommitPartition(0, 5)])]))
    commit = shard.last_result
    shard.advance(2_000)  # the retention of the committed offset passed, a check ran
    assert shard.held == [commit] and shard.fetch([T0]) == {T0: 4}
    shard.commit_held(commit)  # its timestamp (99.5 s) restarts the clock
    shard.hold = False
    shard.advance(97_000)
    assert shard.fetch([T0]) == {T0: 5}
    shard.advance(2_000)
    assert shard.coordinator.groups == {}


def test_unload_forgets_pending_commits_and_a_reload_replays_what_reached_the_log() -> None:
    """Loading replays the log: a record there is committed by definition."""
    shard, member, generation = _held_shard(5)
    _commit(shard, {T0: 6}, member, generation)
    assert shard.coordinator.unload() == [] and not shard.coordinator.pending_offsets
    assert shard.reload().group_offsets() == {"g": {T0: 6}}
