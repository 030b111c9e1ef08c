"""Mirror topics on three real BrokerNodes in one process: MirrorAppend keeps the
source's offsets and bytes on every replica (only the leader epoch is the target's),
acknowledges duplicates, refuses divergence, gaps and bad input without changing the
log, restarts a partition higher (replicated), honours acks and min.insync.replicas;
Produce to a mirror topic is refused; MirrorTruncate converges on every replica."""

from __future__ import annotations

import dataclasses

from mq.broker.node import Pending
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.metadata.records import ConfigRecord, PartitionRecord
from mq.protocol.batch_format import LEADER_EPOCH_AT, iter_batches
from mq.protocol.messages import ApiKey, Response
from mq.protocol.mirror_messages import (
    MirrorAppendRequest,
    MirrorAppendResponse,
    MirrorTruncateRequest,
    MirrorTruncateResponse,
)
from mq.protocol.record_batch import build_batch
from tests.unit.broker.broker_cluster import Cluster, _Parked, header, produce_error

TP = TopicPartition("orders", 0)
T0 = 1_700_000_000_000
SOURCE_EPOCH = 42


def batch(base: int, count: int = 3, *, tag: bytes = b"v") -> bytes:
    """A batch as the source region's leader stored it (its own offsets and epoch)."""
    return build_batch([(b"k", tag + b"%d" % (base + i), (), T0 + base + i) for i in range(count)],
                       base_offset=base, partition_leader_epoch=SOURCE_EPOCH)


def mirror_cluster(*, configs: dict[str, str] | None = None, broker_configs: dict[str, str] | None = None) -> Cluster:
    c = Cluster(configs=broker_configs or {})
    c.create_topic("orders")
    c.publish([ConfigRecord("orders", "mirror.source.region", "east")])
    for name, value in (configs or {}).items():
        c.publish([ConfigRecord("orders", name, value)])
    c.settle()
    return c


def ask(c: Cluster, node_id: int, request) -> Response | Pending:
    result = c.nodes[node_id].handle(header(request.API_KEY), request, now_ms=c.now)
    if isinstance(result, Pending):
        deadline = None if result.timeout_ms is None else c.now + result.timeout_ms
        c.parked[(node_id, result.op_id)] = _Parked(-1, -1, deadline)
    return result


def append(c: Cluster, records: bytes, *, node_id: int = 1, acks: int = -1, start_offset: int = -1,
           topic: str = "orders") -> MirrorAppendResponse:
    result = ask(c, node_id, MirrorAppendRequest(topic, 0, records, acks=acks, start_offset=start_offset,
                                                 timeout_ms=5000))
    if isinstance(result, Pending):
        c.settle()
        result = c.result(node_id, result)
    assert isinstance(result, MirrorAppendResponse), result
    return result


def stored(c: Cluster, node_id: int) -> list[bytes]:
    """The node's batches with the partition leader epoch blanked, as the source holds them."""
    p = c.nodes[node_id].partitions[TP]
    data = p.log.read(p.log.log_start_offset, max_bytes=1 << 24).records if p.log.log_end_offset else b""
    out = []
    offset = p.log.log_start_offset
    while offset < p.log.log_end_offset:
        data = p.log.read(offset, max_bytes=1 << 24).records
        for pos, h in iter_batches(data):
            raw = bytearray(data[pos:pos + h.size])
            raw[LEADER_EPOCH_AT:LEADER_EPOCH_AT + 4] = SOURCE_EPOCH.to_bytes(4, "big")
            out.append(bytes(raw))
            offset = h.next_offset
    return out


def epochs(c: Cluster, node_id: int) -> list[int]:
    p = c.nodes[node_id].partitions[TP]
    data = p.log.read(p.log.log_start_offset, max_bytes=1 << 24).records
    return [h.partition_leader_epoch for _, h in iter_batches(data)]


def test_append_keeps_offsets_and_bytes_on_every_replica():
    c = mirror_cluster()
    source = [batch(0), batch(3), batch(6, 5)]
    response = append(c, b"".join(source))
    assert response.error_code == ErrorCode.NONE, response
    assert (response.appended_batches, response.duplicate_batches) == (3, 0)
    assert (response.log_end_offset, response.high_watermark, response.log_start_offset) == (11, 11, 0)
    for n in (1, 2, 3):
        assert stored(c, n) == source
        assert epochs(c, n) == [0, 0, 0]  # the target leader's epoch, not the source's


def test_a_resent_request_is_acknowledged_as_duplicates_and_changes_nothing():
    c = mirror_cluster()
    append(c, batch(0) + batch(3))
    again = append(c, batch(3) + batch(6))
    assert (again.error_code, again.duplicate_batches, again.appended_batches) == (ErrorCode.NONE, 1, 1)
    assert stored(c, 1) == stored(c, 2) == [batch(0), batch(3), batch(6)]
    only = append(c, batch(0) + batch(3) + batch(6))
    assert (only.duplicate_batches, only.appended_batches, only.log_end_offset) == (3, 0, 9)


def test_diverged_gap_and_bad_input_leave_the_log_untouched():
    c = mirror_cluster()
    append(c, batch(0) + batch(3))
    corrupt = bytearray(batch(6))
    corrupt[-2] ^= 0x55
    cases = {
        ErrorCode.MIRROR_DIVERGED: batch(3, tag=b"west") + batch(6),
        ErrorCode.MIRROR_OFFSET_GAP: batch(9),
        ErrorCode.CORRUPT_MESSAGE: bytes(corrupt),
        ErrorCode.INVALID_RECORD: batch(6) + batch(10),
    }
    for code, records in cases.items():
        response = append(c, records)
        assert response.error_code == code, (code, response)
        assert response.error_message and response.log_end_offset == 6
    c.settle()
    for n in (1, 2, 3):
        assert stored(c, n) == [batch(0), batch(3)]


def test_start_offset_restarts_the_partition_higher_on_every_replica():
    c = mirror_cluster()
    append(c, batch(0))
    gap = append(c, batch(100))
    assert gap.error_code == ErrorCode.MIRROR_OFFSET_GAP
    moved = append(c, batch(100) + batch(103), start_offset=100)
    assert moved.error_code == ErrorCode.NONE, moved
    assert (moved.log_start_offset, moved.log_end_offset, moved.high_watermark) == (100, 106, 106)
    for n in (1, 2, 3):
        p = c.nodes[n].partitions[TP]
        assert (p.log.log_start_offset, p.log.log_end_offset) == (100, 106)
        assert stored(c, n) == [batch(100), batch(103)]
    # the followers restarted because the leader's log start passed their end, not by loss
    assert not c.nodes[2].take_unclean_truncations()


def test_an_empty_request_with_start_offset_moves_the_start_only():
    c = mirror_cluster()
    append(c, batch(0))
    response = append(c, b"", start_offset=500)
    assert (response.error_code, response.log_start_offset, response.log_end_offset) == (ErrorCode.NONE, 500, 500)
    assert append(c, batch(500)).log_end_offset == 503


def test_a_restart_waits_for_a_new_epoch_and_only_the_isr_commits_it():
    """Seed 6275 of the mirror simulation in small: a leader cut off from its region
    restarted its log alone and raised its high watermark to the new start, which went
    back when the region elected a replica that never restarted. Now nothing changes
    until the controller confirms the leadership with a new epoch, and then the high
    watermark moves only once the ISR fetched from the new start."""
    c = mirror_cluster()
    append(c, batch(0))
    c.cut.update({frozenset((1, 2)), frozenset((1, 3))})
    c.controller_cut.add(1)
    p = c.nodes[1].partitions[TP]
    restart = MirrorAppendRequest("orders", 0, batch(100), acks=-1, start_offset=100, timeout_ms=1000)
    pending = ask(c, 1, restart)
    assert isinstance(pending, Pending)
    c.settle()
    assert c.result(1, pending) is None
    fenced = ask(c, 1, MirrorAppendRequest("orders", 0, batch(3), acks=1))
    assert fenced.error_code == ErrorCode.NOT_LEADER and "new leader epoch" in fenced.error_message  # type: ignore[union-attr]
    c.advance(1000)
    timed_out = c.result(1, pending)
    assert isinstance(timed_out, MirrorAppendResponse) and timed_out.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert "nothing was changed" in timed_out.error_message
    assert (p.log.log_start_offset, p.log.log_end_offset, p.high_watermark) == (0, 3, 3)
    # the controller answers again (the followers are still cut off): the retry restarts
    # the log in a new epoch, but the high watermark stays below the new start
    c.heal_controller()
    epoch = c.image.partition(TP).leader_epoch
    pending = ask(c, 1, dataclasses.replace(restart, timeout_ms=5000))
    assert isinstance(pending, Pending)
    c.settle()
    assert c.image.partition(TP).leader_epoch > epoch
    assert (p.log.log_start_offset, p.log.log_end_offset, p.high_watermark) == (100, 103, 3)
    assert c.result(1, pending) is None  # acks=-1: not committed yet
    c.cut.clear()
    c.run(1500)  # the followers' fetches (after their backoff), below the new start, restart them there
    response = c.result(1, pending)
    assert isinstance(response, MirrorAppendResponse) and response.error_code == ErrorCode.NONE, response
    assert (response.log_start_offset, response.log_end_offset, response.high_watermark) == (100, 103, 103)
    for n in (2, 3):
        assert stored(c, n) == [batch(100)]


def test_a_restart_asked_of_a_deposed_leader_changes_nothing():
    c = mirror_cluster()
    append(c, batch(0))
    c.controller_cut.add(1)
    pending = ask(c, 1, MirrorAppendRequest("orders", 0, batch(100), start_offset=100, timeout_ms=5000))
    assert isinstance(pending, Pending)
    c.elect(TP, 2)  # the region moved on while broker 1 waited for its new epoch
    c.settle()
    moved = c.result(1, pending)
    assert isinstance(moved, MirrorAppendResponse) and moved.error_code == ErrorCode.NOT_LEADER, moved
    p = c.nodes[1].partitions[TP]
    assert (p.log.log_start_offset, p.log.log_end_offset, p.high_watermark) == (0, 3, 3)
    assert append(c, batch(100), node_id=2, start_offset=100).error_code == ErrorCode.NONE
    c.advance(600)
    assert stored(c, 1) == [batch(100)]


def test_not_a_mirror_topic_and_produce_to_a_mirror_topic():
    c = mirror_cluster()
    c.create_topic("plain")
    c.settle()
    response = ask(c, 1, MirrorAppendRequest("plain", 0, batch(0)))
    assert isinstance(response, MirrorAppendResponse) and response.error_code == ErrorCode.NOT_MIRROR_TOPIC
    refused = c.produce(1, "orders", b"x", acks=1)
    assert produce_error(refused) == ErrorCode.MIRROR_TOPIC_READ_ONLY
    message = refused.topics[0].partitions[0].error_message  # type: ignore[union-attr]
    assert "mirror of region east" in message and "produce in east" in message
    # promotion: the config is deleted and the topic is writable, at the mirrored offsets
    append(c, batch(0))
    c.publish([ConfigRecord("orders", "mirror.source.region", None)])
    promoted = c.produce(1, "orders", b"x", acks=1)
    assert produce_error(promoted) == ErrorCode.NONE
    assert promoted.topics[0].partitions[0].base_offset == 3  # type: ignore[union-attr]
    after = ask(c, 1, MirrorAppendRequest("orders", 0, batch(4)))
    assert after.error_code == ErrorCode.NOT_MIRROR_TOPIC  # type: ignore[union-attr]


def test_routing_acks_and_min_insync_replicas():
    c = mirror_cluster(configs={"min.insync.replicas": "2"})
    assert append(c, batch(0), node_id=2).error_code == ErrorCode.NOT_LEADER
    assert append(c, batch(0), acks=0).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    c.publish([PartitionRecord("orders", 0, (1, 2, 3), 1, 0, (1,), 1)])
    assert append(c, batch(0)).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    one = append(c, batch(0), acks=1)  # acks=1 is not refused, as for Produce
    assert (one.error_code, one.log_end_offset) == (ErrorCode.NONE, 3)


def test_acks_1_under_flush_policy_always_answers_after_the_fsync():
    c = mirror_cluster(broker_configs={"log.flush.policy": "always"})
    pending = ask(c, 1, MirrorAppendRequest("orders", 0, batch(0), acks=1))
    assert isinstance(pending, Pending)
    assert c.nodes[1].partitions[TP].log.recovery_point == 0  # not durable yet: no answer
    c.settle()  # the harness group-commits every node after each step
    response = c.result(1, pending)
    assert isinstance(response, MirrorAppendResponse) and response.error_code == ErrorCode.NONE
    assert c.nodes[1].partitions[TP].log.recovery_point == 3


def test_acks_all_waits_for_the_followers_and_times_out_without_them():
    c = mirror_cluster()
    c.kill(3)
    pending = ask(c, 1, MirrorAppendRequest("orders", 0, batch(0), timeout_ms=1000))
    assert isinstance(pending, Pending)
    c.settle()
    assert c.result(1, pending) is None
    c.advance(1000)
    timed_out = c.result(1, pending)
    assert isinstance(timed_out, MirrorAppendResponse) and timed_out.error_code == ErrorCode.REQUEST_TIMED_OUT
    # the retry finds the batch already appended: a duplicate, answered once replicated
    c.restart(3)
    retry = append(c, batch(0))
    assert (retry.error_code, retry.duplicate_batches, retry.high_watermark) == (ErrorCode.NONE, 1, 3)


def truncate(c: Cluster, offset: int, *, node_id: int = 1) -> MirrorTruncateResponse:
    result = ask(c, node_id, MirrorTruncateRequest("orders", 0, offset, timeout_ms=5000))
    if isinstance(result, Pending):
        c.settle()
        result = c.result(node_id, result)
    assert isinstance(result, MirrorTruncateResponse), result
    return result


def test_truncate_cuts_every_replica_and_a_new_tail_converges():
    c = mirror_cluster()
    append(c, batch(0) + batch(3) + batch(6))
    c.advance(600)  # the followers' next fetches tell them the high watermark (9)
    assert all(c.nodes[n].partitions[TP].high_watermark == 9 for n in (2, 3))
    response = truncate(c, 3)
    assert (response.error_code, response.log_end_offset) == (ErrorCode.NONE, 3), response
    assert c.image.partition(TP).leader_epoch == 1  # a new epoch, same leader
    for n in (1, 2, 3):
        assert stored(c, n) == [batch(0)]
    # a different tail at the cut offsets replicates without a trace of the old one
    append(c, batch(3, tag=b"west") + batch(6, 4, tag=b"west"))
    for n in (1, 2, 3):
        assert stored(c, n) == [batch(0), batch(3, tag=b"west"), batch(6, 4, tag=b"west")]
        assert epochs(c, n) == [0, 1, 1]
    for n in (2, 3):  # cut below their high watermark: reported as a mirror cut, not as a loss
        cuts = c.nodes[n].take_unclean_truncations()
        assert cuts and all(cut.mirror_topic and cut.to_offset == 3 for cut in cuts)
        assert "orders" not in c.nodes[n].stats.topics  # no truncated_committed_offsets counted


def test_truncate_reaches_a_replica_that_was_away_and_waits_for_the_isr():
    c = mirror_cluster()
    append(c, batch(0) + batch(3) + batch(6))
    c.kill(3)  # still in the ISR: the truncation cannot be acknowledged without it
    pending = ask(c, 1, MirrorTruncateRequest("orders", 0, 3, timeout_ms=1000))
    assert isinstance(pending, Pending)
    # until the controller starts the new epoch nothing is appended (retriable NOT_LEADER)
    fenced = ask(c, 1, MirrorAppendRequest("orders", 0, batch(3, tag=b"west"), acks=1))
    assert fenced.error_code == ErrorCode.NOT_LEADER and "new leader epoch" in fenced.error_message  # type: ignore[union-attr]
    c.settle()
    assert c.result(1, pending) is None
    c.advance(1000)
    timed_out = c.result(1, pending)
    assert isinstance(timed_out, MirrorTruncateResponse) and timed_out.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert append(c, batch(3, tag=b"west"), acks=1).error_code == ErrorCode.NONE  # in the new epoch
    c.restart(3)
    c.settle()
    again = truncate(c, 6)  # a retry: nothing more to cut, waits until the ISR fetched in the epoch
    assert (again.error_code, again.log_end_offset) == (ErrorCode.NONE, 6)
    for n in (1, 2, 3):
        assert stored(c, n) == [batch(0), batch(3, tag=b"west")]


def test_truncate_needs_the_leader_a_mirror_topic_and_an_offset_above_the_start():
    c = mirror_cluster()
    append(c, batch(0) + batch(3))
    assert truncate(c, 3, node_id=2).error_code == ErrorCode.NOT_LEADER
    c.create_topic("plain")
    c.settle()
    plain = ask(c, 1, MirrorTruncateRequest("plain", 0, 0))
    assert plain.error_code == ErrorCode.NOT_MIRROR_TOPIC  # type: ignore[union-attr]
    append(c, b"", start_offset=100)
    assert truncate(c, 50).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    nothing = truncate(c, 1000)
    assert (nothing.error_code, nothing.log_end_offset) == (ErrorCode.NONE, 100)


def test_mirror_append_is_served_by_the_api_table():
    c = mirror_cluster()
    assert ApiKey.MIRROR_APPEND in c.nodes[1]._handlers and ApiKey.MIRROR_TRUNCATE in c.nodes[1]._handlers
