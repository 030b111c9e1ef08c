"""MirrorAppend with ``fetch_offset`` on three real BrokerNodes in one process: the holes
of a compacted source (whole batches removed by its cleaner) are appended as they are,
replicated byte for byte, found by reads from inside a hole, acknowledged as duplicates
when resent, and kept across a leader change; without ``fetch_offset``, or fetched past
the log end, the request is refused and nothing changes."""

from __future__ import annotations

from mq.core.errors import ErrorCode
from mq.protocol.batch_format import iter_batches
from mq.protocol.mirror_messages import MirrorAppendRequest, MirrorAppendResponse
from mq.protocol.record_batch import build_batch
from tests.unit.broker.broker_cluster import Cluster
from tests.unit.broker.test_broker_mirror import (
    SOURCE_EPOCH,
    T0,
    TP,
    ask,
    epochs,
    mirror_cluster,
    stored,
)


def batch(base: int, count: int = 3) -> bytes:
    """A source batch of about 600 bytes (segments of 1024 bytes hold one)."""
    return build_batch([(b"k%d" % (base + i), b"v%d." % (base + i) + bytes(180), (), T0 + base + i)
                        for i in range(count)], base_offset=base, partition_leader_epoch=SOURCE_EPOCH)


# The source after compaction: offsets 3-9, 13-29 and 33-99 hold no record.
HOLEY = [batch(0), batch(10), batch(30), batch(100, 2)]


def append(c: Cluster, records: bytes, *, fetch_offset: int, node_id: int = 1, acks: int = -1,
           start_offset: int = -1) -> MirrorAppendResponse:
    result = ask(c, node_id, MirrorAppendRequest("orders", 0, records, acks=acks, start_offset=start_offset,
                                                 timeout_ms=5000, fetch_offset=fetch_offset))
    if not isinstance(result, MirrorAppendResponse):
        c.settle()
        result = c.result(node_id, result)
    assert isinstance(result, MirrorAppendResponse), result
    return result


def test_holes_are_appended_and_replicated_byte_for_byte():
    c = mirror_cluster(configs={"segment.bytes": "1024"})
    first = append(c, HOLEY[0] + HOLEY[1], fetch_offset=0)
    assert (first.error_code, first.appended_batches, first.log_end_offset) == (ErrorCode.NONE, 2, 13), first
    rest = append(c, HOLEY[2] + HOLEY[3], fetch_offset=13)  # the fetch from 13 found 30 first
    assert (rest.error_code, rest.log_end_offset, rest.high_watermark) == (ErrorCode.NONE, 102, 102), rest
    c.advance(600)  # the followers' next fetches tell them the high watermark
    for n in (1, 2, 3):
        p = c.nodes[n].partitions[TP]
        assert stored(c, n) == HOLEY
        assert epochs(c, n)[:2] == [0, 0] and p.log.verify() == []
        bases = [seg.base_offset for seg in p.log.segments]  # rolled at a batch, not inside a hole
        assert len(bases) > 1 and set(bases) <= {0, 10, 30, 100}, bases
        assert (p.log.log_start_offset, p.log.log_end_offset, p.high_watermark) == (0, 102, 102)
    # a consumer fetching from inside a hole gets the next batch
    fetched = c.fetch(1, "orders", 40).topics[0].partitions[0]
    assert [h.base_offset for _, h in iter_batches(fetched.records)] == [100]


def test_a_resent_request_with_holes_is_acknowledged_as_duplicates():
    c = mirror_cluster()
    append(c, b"".join(HOLEY[:3]), fetch_offset=0)
    again = append(c, b"".join(HOLEY), fetch_offset=0)  # the retry fetched one batch more
    assert (again.error_code, again.duplicate_batches, again.appended_batches) == (ErrorCode.NONE, 3, 1)
    only = append(c, b"".join(HOLEY[1:]), fetch_offset=5)
    assert (only.duplicate_batches, only.appended_batches, only.log_end_offset) == (3, 0, 102)
    for n in (1, 2, 3):
        assert stored(c, n) == HOLEY


def test_holes_without_fetch_offset_or_fetched_past_the_end_change_nothing():
    c = mirror_cluster()
    append(c, HOLEY[0], fetch_offset=0)
    cases = [
        (-1, HOLEY[1], ErrorCode.MIRROR_OFFSET_GAP),  # today's strict rule: the hole 3-9 is a gap
        (-1, batch(3) + HOLEY[1], ErrorCode.INVALID_RECORD),  # not contiguous
        (5, HOLEY[1], ErrorCode.MIRROR_OFFSET_GAP),  # offsets 3-4 never fetched
        (0, HOLEY[1], ErrorCode.MIRROR_DIVERGED),  # the target holds 0-2 where the source has none
    ]
    for fetch_offset, records, code in cases:
        response = append(c, records, fetch_offset=fetch_offset)
        assert response.error_code == code, (fetch_offset, code, response)
        assert response.error_message and response.log_end_offset == 3
    c.settle()
    for n in (1, 2, 3):
        assert stored(c, n) == [HOLEY[0]]


def test_holes_survive_a_leader_change_and_a_replica_that_was_away():
    c = mirror_cluster()
    c.kill(3)
    assert append(c, b"".join(HOLEY[:2]), fetch_offset=0, acks=1).log_end_offset == 13
    c.settle()
    c.elect(TP, 2, isr=(1, 2))
    c.settle()
    moved = append(c, b"".join(HOLEY[2:]), fetch_offset=13, node_id=2)
    assert (moved.error_code, moved.log_end_offset) == (ErrorCode.NONE, 102), moved
    c.restart(3)
    c.advance(600)
    c.settle()
    for n in (1, 2, 3):
        assert stored(c, n) == HOLEY
        assert epochs(c, n) == [0, 0, 1, 1]
        assert c.nodes[n].partitions[TP].log.verify() == []


def test_a_restart_after_retention_is_followed_by_a_hole_on_every_replica():
    c = mirror_cluster()
    append(c, HOLEY[0], fetch_offset=0)
    # the source's retention moved its log start to 5 (the mirror fetched from there);
    # its cleaner had removed 5-9: the partition restarts at 5, the first batch is at 10
    moved = append(c, HOLEY[1] + HOLEY[2], fetch_offset=5, start_offset=5)
    assert (moved.error_code, moved.log_start_offset, moved.log_end_offset) == (ErrorCode.NONE, 5, 33), moved
    c.advance(600)
    c.settle()
    for n in (1, 2, 3):
        p = c.nodes[n].partitions[TP]
        assert (p.log.log_start_offset, p.log.log_end_offset, p.high_watermark) == (5, 33, 33)
        assert stored(c, n) == HOLEY[1:3] and p.log.verify() == []
    assert not c.nodes[2].take_unclean_truncations()
