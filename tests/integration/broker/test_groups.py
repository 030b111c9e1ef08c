"""Consumer groups against a real broker process, with raw requests: FindCoordinator
creates ``__consumer_offsets``, a member joins, commits and reads its offsets back,
and the offsets survive a broker restart (the coordinator replays the partition)."""

from __future__ import annotations

import dataclasses

from mq.core.errors import ErrorCode
from mq.protocol.group_messages import (
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
)
from mq.protocol.messages import MetadataRequest

from .raw import RawClient, until

CONFIGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "10",
           "offsets.topic.num.partitions": "3"}
RETRIABLE = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_COORDINATOR)



def _offsets(client: RawClient, group: str) -> dict[int, int]:
    response = until(lambda: client.request(OffsetFetchRequest(group, [OffsetFetchTopic("clicks", [0, 1])])))
    return {p.partition: p.offset for p in response.topics[0].partitions}


def test_find_join_commit_fetch_and_restart(broker_factory):
    broker = broker_factory(CONFIGS)
    with RawClient.to(broker) as c:
        c.create_topic("clicks", 2)
        first = c.request(FindCoordinatorRequest("analytics"))
        assert first.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        found = until(lambda: c.request(FindCoordinatorRequest("analytics")))
        assert (found.node_id, found.port) == (1, broker.port)
        meta = c.request(MetadataRequest(["__consumer_offsets"]))
        assert meta.topics[0].is_internal and len(meta.topics[0].partitions) == 3

        join = JoinGroupRequest("analytics", session_timeout_ms=10_000, rebalance_timeout_ms=5000,
                                assignors=["range"], topics=["clicks"])
        required = until(lambda: c.request(join), ok=lambda r: r.error_code not in RETRIABLE)
        assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED and required.member_id, required  # KIP-394
        joined = c.request(dataclasses.replace(join, member_id=required.member_id))
        assert joined.error_code == ErrorCode.NONE, joined
        assert joined.generation_id >= 1 and joined.member_id
        assert sorted((t.topic, p) for t in joined.assignment for p in t.partitions) == [("clicks", 0), ("clicks", 1)]
        beat = c.request(HeartbeatRequest("analytics", joined.generation_id, joined.member_id))
        assert beat.error_code == ErrorCode.NONE

        commit = OffsetCommitRequest("analytics", [OffsetCommitTopic("clicks", [
            OffsetCommitPartition(0, 10), OffsetCommitPartition(1, 20, metadata="m")])],
            generation_id=joined.generation_id, member_id=joined.member_id)
        committed = c.request(commit)
        assert [p.error_code for p in committed.topics[0].partitions] == [ErrorCode.NONE, ErrorCode.NONE]
        zombie = c.request(OffsetCommitRequest("analytics", commit.topics, generation_id=joined.generation_id + 5,
                                               member_id=joined.member_id))
        assert zombie.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
        assert _offsets(c, "analytics") == {0: 10, 1: 20}
        listed = c.request(ListGroupsRequest())
        assert [g.group_id for g in listed.groups] == ["analytics"]

    broker.stop()
    broker.start()
    with RawClient.to(broker) as c:
        assert _offsets(c, "analytics") == {0: 10, 1: 20}
    assert "Traceback" not in broker.stderr_text()
