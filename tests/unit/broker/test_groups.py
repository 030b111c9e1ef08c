"""Consumer groups wired into three BrokerNodes: FindCoordinator (creating
``__consumer_offsets`` once), routing to the coordinator of the group's partition,
commits held until the high watermark passes them, fail-over to a new leader that
reloads the partition, and unloading."""

from __future__ import annotations

from mq.broker import group_loader
from mq.broker.node import Pending
from mq.coordinator import OFFSETS_TOPIC
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.metadata.records import ConfigRecord, PartitionRecord
from mq.protocol.group_messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    ListGroupsRequest,
)
from mq.protocol.messages import (
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
)
from tests.unit.broker.broker_cluster import header
from tests.unit.broker.groups_cluster import (
    GroupCluster,
    commit_codes,
    commit_request,
    fetched,
    join_request,
)

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def cluster(**configs: str) -> GroupCluster:
    c = GroupCluster(configs={"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "10",
                              "offsets.topic.num.partitions": "3", **configs})
    c.create_topic("t", partitions=2)
    return c


def ready(c: GroupCluster) -> GroupCluster:
    c.create_offsets_topic(3)
    return c


def test_find_coordinator_creates_the_offsets_topic_once_then_names_the_leader():
    c = cluster()
    first = c.find(2, "g")
    assert first.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert c.find(2, "g").error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert c.find(2, "other").error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    [(op_id, request)] = c.control(2).creates.items()  # one creation in flight, not one per request
    assert isinstance(request, CreateTopicsRequest)
    [topic] = request.topics
    assert (topic.name, topic.num_partitions, topic.replication_factor) == (OFFSETS_TOPIC, 3, 3)
    assert topic.configs == {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024),
                             "min.insync.replicas": "2"}
    c.control(2).answer(op_id, CreateTopicsResponse([CreatableTopicResult(OFFSETS_TOPIC, ErrorCode.NONE)]))
    c.settle()
    c.create_offsets_topic(3)  # what the controller commits
    response = c.find(2, "g")
    leader = c.coordinator_of("g")
    assert (response.error_code, response.node_id, response.host, response.port) == (
        ErrorCode.NONE, leader, "127.0.0.1", 9090 + leader)
    assert len(c.control(2).creates) == 1


def test_a_failed_creation_is_retried_after_a_backoff():
    c = cluster()
    c.find(1, "g")
    [op_id] = c.control(1).creates
    c.control(1).answer(op_id, CreateTopicsResponse([CreatableTopicResult(
        OFFSETS_TOPIC, ErrorCode.INVALID_REPLICATION_FACTOR, "not enough brokers")]))
    c.settle()
    response = c.find(1, "g")
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "INVALID_REPLICATION_FACTOR" in response.error_message
    assert len(c.control(1).creates) == 1  # backing off
    c.advance(600)
    c.find(1, "g")
    assert len(c.control(1).creates) == 2


def test_replication_factor_is_capped_at_the_registered_brokers():
    c = GroupCluster(ids=(1,), configs={"offsets.topic.num.partitions": "1"})
    c.find(1, "g")
    [request] = c.control(1).creates.values()
    assert request.topics[0].replication_factor == 1  # type: ignore[attr-defined]
    assert request.topics[0].configs["min.insync.replicas"] == "1"  # type: ignore[attr-defined]


def test_find_coordinator_validates_its_key():
    c = ready(cluster())
    assert c.find(1, "").error_code == ErrorCode.INVALID_GROUP_ID
    assert c.call(1, FindCoordinatorRequest("g", key_type=3)).error_code == ErrorCode.INVALID_REQUEST
    # key type 1 is a transactional id, 2 a share group: their coordinators' topics are created on first use
    assert c.call(1, FindCoordinatorRequest("g", key_type=2)).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert c.call(1, FindCoordinatorRequest("t", key_type=1)).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert c.call(1, FindCoordinatorRequest("", key_type=1)).error_code == ErrorCode.INVALID_REQUEST


def test_metadata_flags_the_offsets_topic_internal():
    c = ready(cluster())
    response = c.nodes[1].handle(header(MetadataRequest.API_KEY), MetadataRequest(None), now_ms=c.now)
    internal = {t.name: t.is_internal for t in response.topics}
    assert internal == {"t": False, OFFSETS_TOPIC: True}


def test_group_requests_go_only_to_the_coordinator():
    c = cluster()
    assert commit_codes(c.commit(1, "g", {T0: 1})) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    ready(c)
    coordinator = c.coordinator_of("g")
    for other in (i for i in c.ids if i != coordinator):
        assert commit_codes(c.commit(other, "g", {T0: 1})) == [ErrorCode.NOT_COORDINATOR]
        assert c.fetch_offsets(other, "g", [T0]).error_code == ErrorCode.NOT_COORDINATOR
        assert c.call(other, HeartbeatRequest("g", 1, "m")).error_code == ErrorCode.NOT_COORDINATOR


def test_commit_then_fetch_round_trip():
    c = ready(cluster())
    node = c.coordinator_of("g")
    assert commit_codes(c.commit(node, "g", {T0: 5, T1: 7})) == [ErrorCode.NONE, ErrorCode.NONE]
    assert fetched(c.fetch_offsets(node, "g", [T0, T1])) == {T0: 5, T1: 7}
    # the commit is a record of the group's offsets partition, replicated
    tp = c.offsets_tp("g")
    assert all(c.nodes[i].partitions[tp].log.log_end_offset == 2 for i in c.ids)


def test_commit_for_an_unknown_topic_is_refused_by_the_coordinator():
    c = ready(cluster())
    node = c.coordinator_of("g")
    codes = commit_codes(c.commit(node, "g", {TopicPartition("nope", 0): 1, TopicPartition("t", 9): 1}))
    assert codes == [ErrorCode.UNKNOWN_TOPIC, ErrorCode.UNKNOWN_TOPIC]


def test_commit_is_answered_only_once_the_high_watermark_passes_it():
    c = ready(cluster())
    node = c.coordinator_of("g")
    tp = c.offsets_tp("g")
    pending = c.send(node, commit_request("g", {T0: 3}))
    assert isinstance(pending, Pending)
    leader = c.nodes[node].partitions[tp]
    assert leader.log.log_end_offset == 1 and leader.high_watermark == 0
    assert c.answer(node, pending) is None  # the followers have not fetched it yet
    c.settle()
    assert leader.high_watermark == 1
    assert commit_codes(c.answer(node, pending)) == [ErrorCode.NONE]


def test_commit_times_out_when_the_followers_never_fetch():
    c = ready(cluster(**{"offsets.commit.timeout.ms": "500"}))
    node = c.coordinator_of("g")
    for other in c.ids:
        if other != node:
            c.kill(other)
    pending = c.send(node, commit_request("g", {T0: 3}))
    assert isinstance(pending, Pending)
    c.advance(400)
    assert c.answer(node, pending) is None
    c.advance(200)
    assert commit_codes(c.answer(node, pending)) == [ErrorCode.REQUEST_TIMED_OUT]


def test_commit_below_min_insync_replicas_is_refused_as_coordinator_not_available():
    c = ready(cluster())
    tp = TopicPartition(OFFSETS_TOPIC, 0)
    group = next(g for g in (f"g{i}" for i in range(100)) if c.offsets_tp(g) == tp)
    node = c.coordinator_of(group)
    c.publish([ConfigRecord(OFFSETS_TOPIC, "min.insync.replicas", "2"),
               PartitionRecord(OFFSETS_TOPIC, 0, (1, 2, 3), node, 0, (node,), 1)])
    assert commit_codes(c.commit(node, group, {T0: 1})) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]


def test_a_new_leader_reloads_the_partition_and_serves_offsets_and_generation():
    c = ready(cluster())
    old = c.coordinator_of("g")
    joined = c.join(old, "g", ["t"])
    assert joined.error_code == ErrorCode.NONE and joined.generation_id == 1
    member = joined.member_id
    assert commit_codes(c.commit(old, "g", {T0: 4}, generation=1, member_id=member)) == [ErrorCode.NONE]
    new = next(i for i in c.ids if i != old)
    c.elect(c.offsets_tp("g"), new)
    c.settle()
    assert fetched(c.fetch_offsets(new, "g", [T0])) == {T0: 4}
    [described] = c.call(new, DescribeGroupsRequest(["g"])).groups
    assert described.generation_id == 1 and [m.member_id for m in described.members] == [member]
    # the member keeps committing with its generation on the new coordinator
    assert commit_codes(c.commit(new, "g", {T0: 6}, generation=1, member_id=member)) == [ErrorCode.NONE]
    assert c.fetch_offsets(old, "g", [T0]).error_code == ErrorCode.NOT_COORDINATOR
    assert fetched(c.fetch_offsets(new, "g", [T0])) == {T0: 6}


def test_a_parked_join_is_answered_when_the_rebalance_completes():
    c = ready(cluster())
    node = c.coordinator_of("g")
    first = c.join(node, "g", ["t"])
    assert first.error_code == ErrorCode.NONE
    second = c.send(node, join_request("g", ["t"], member_id=c.member_id(node, "g", ["t"])))
    assert isinstance(second, Pending)
    c.settle()
    assert c.answer(node, second) is None  # waits for the first member to rejoin
    rejoin = c.join(node, "g", ["t"], member_id=first.member_id)
    assert rejoin.error_code == ErrorCode.NONE and rejoin.generation_id == first.generation_id + 1
    answer = c.answer(node, second)
    assert answer is not None and answer.error_code == ErrorCode.NONE
    assert answer.generation_id == rejoin.generation_id


def test_losing_leadership_answers_parked_requests_not_coordinator():
    c = ready(cluster())
    node = c.coordinator_of("g")
    first = c.join(node, "g", ["t"])
    parked = c.send(node, join_request("g", ["t"], member_id=c.member_id(node, "g", ["t"])))
    assert isinstance(parked, Pending)
    c.elect(c.offsets_tp("g"), next(i for i in c.ids if i != node))
    c.settle()
    answer = c.answer(node, parked)
    assert answer is not None and answer.error_code == ErrorCode.NOT_COORDINATOR
    assert c.nodes[node].groups.coordinator(c.offsets_tp("g").partition) is None
    assert first.error_code == ErrorCode.NONE


def test_losing_leadership_fails_an_unreplicated_commit_not_coordinator():
    c = ready(cluster())
    node = c.coordinator_of("g")
    others = [i for i in c.ids if i != node]
    c.kill(others[0])
    c.kill(others[1])
    pending = c.send(node, commit_request("g", {T0: 3}))
    c.settle()
    assert c.answer(node, pending) is None
    c.elect(c.offsets_tp("g"), others[0], to=(node,))
    c.settle()
    assert commit_codes(c.answer(node, pending)) == [ErrorCode.NOT_COORDINATOR]


def test_a_large_partition_loads_in_slices_answering_load_in_progress(monkeypatch):
    c = ready(cluster())
    node = c.coordinator_of("g")
    for offset in range(20):
        assert commit_codes(c.commit(node, "g", {T0: offset})) == [ErrorCode.NONE]
    monkeypatch.setattr(group_loader, "LOAD_BYTES_PER_POLL", 1)  # one batch per poll
    new = next(i for i in c.ids if i != node)
    c.elect(c.offsets_tp("g"), new)
    assert c.fetch_offsets(new, "g", [T0]).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    c.run(3000, tick=100)
    assert fetched(c.fetch_offsets(new, "g", [T0])) == {T0: 19}


def test_list_groups_is_the_union_of_this_brokers_shards():
    c = ready(cluster())
    groups = [f"g{i}" for i in range(12)]
    for group in groups:
        assert commit_codes(c.commit(c.coordinator_of(group), group, {T0: 1})) == [ErrorCode.NONE]
    seen = []
    for i in c.ids:
        response = c.call(i, ListGroupsRequest())
        assert response.error_code == ErrorCode.NONE
        listed = [g.group_id for g in response.groups]
        assert listed == sorted(listed)
        assert all(c.coordinator_of(g) == i for g in listed)
        seen += listed
    assert sorted(seen) == sorted(groups)


def test_describe_and_delete_split_by_shard():
    c = ready(cluster())
    groups = [f"g{i}" for i in range(6)]
    node = c.coordinator_of("g0")
    for group in groups:
        c.commit(c.coordinator_of(group), group, {T0: 1})
    response = c.call(node, DescribeGroupsRequest(groups))
    assert [d.group_id for d in response.groups] == groups
    for group, described in zip(groups, response.groups, strict=True):
        expected = ErrorCode.NONE if c.coordinator_of(group) == node else ErrorCode.NOT_COORDINATOR
        assert described.error_code == expected
    deleted = c.call(node, DeleteGroupsRequest(groups))
    assert [r.group_id for r in deleted.results] == groups
    mine = [g for g in groups if c.coordinator_of(g) == node]
    assert [r.error_code for r in deleted.results if r.group_id in mine] == [ErrorCode.NONE] * len(mine)
    assert fetched(c.fetch_offsets(node, mine[0], [T0])) == {T0: -1}


def test_the_cleaner_compacts_the_offsets_partition_and_a_new_leader_loads_what_is_left():
    c = GroupCluster(configs={"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
                              "log.cleaner.backoff.ms": "100"})
    c.create_topic("t", partitions=2)
    c.create_offsets_topic(1)
    c.publish([ConfigRecord(OFFSETS_TOPIC, "segment.bytes", "1024"),
               ConfigRecord(OFFSETS_TOPIC, "min.cleanable.dirty.ratio", "0.1")])
    node = c.coordinator_of("g")
    for offset in range(80):
        assert commit_codes(c.commit(node, "g", {T0: offset, T1: 1000 + offset})) == [ErrorCode.NONE] * 2
    tp = c.offsets_tp("g")
    log = c.nodes[node].partitions[tp].log
    size_before = log.size_bytes
    c.run(1000, tick=250)
    assert c.nodes[node].log_cleaner.cleaner_runs_total >= 1
    assert log.size_bytes < size_before // 4
    new = next(i for i in c.ids if i != node)
    c.run(1000, tick=250)  # the followers compact their copies too
    c.elect(tp, new)
    c.settle()
    assert fetched(c.fetch_offsets(new, "g", [T0, T1])) == {T0: 79, T1: 1079}


def _followers_down(c: GroupCluster, node: int) -> list[int]:
    followers = [i for i in c.ids if i != node]
    for follower in followers:
        c.kill(follower)
    return followers


def test_an_offset_fetch_sees_a_commit_only_once_the_high_watermark_passes_it():
    """Kafka's pendingOffsetCommits: with RF=3 the commit's record sits in the leader's
    log, uncommitted, until the followers fetch it; meanwhile OffsetFetch answers the
    previous offset."""
    c = ready(cluster())
    node = c.coordinator_of("g")
    leader = c.nodes[node].partitions[c.offsets_tp("g")]
    assert commit_codes(c.commit(node, "g", {T0: 5})) == [ErrorCode.NONE]
    followers = _followers_down(c, node)
    pending = c.send(node, commit_request("g", {T0: 9}))
    assert isinstance(pending, Pending)
    c.settle()
    assert (leader.log.log_end_offset, leader.high_watermark) == (2, 1)
    assert c.answer(node, pending) is None
    assert fetched(c.fetch_offsets(node, "g", [T0])) == {T0: 5}
    assert c.nodes[node].groups.snapshot()[0].offsets == {T0: 5}  # metrics see committed offsets only
    for follower in followers:
        c.restart(follower)
    c.advance(10)
    assert leader.high_watermark == 2
    assert commit_codes(c.answer(node, pending)) == [ErrorCode.NONE]
    assert fetched(c.fetch_offsets(node, "g", [T0])) == {T0: 9}


def test_a_commit_lost_with_its_coordinator_was_never_visible():
    """The coordinator dies with the commit's record unreplicated: before, nobody could
    read the new offset; after, the new coordinator (which never had the record)
    answers the old one — the group's offset never went back as seen from outside."""
    c = ready(cluster())
    old = c.coordinator_of("g")
    assert commit_codes(c.commit(old, "g", {T0: 5})) == [ErrorCode.NONE]
    followers = _followers_down(c, old)
    pending = c.send(old, commit_request("g", {T0: 9}))
    c.settle()
    assert fetched(c.fetch_offsets(old, "g", [T0])) == {T0: 5}
    c.kill(old)
    c.elect(c.offsets_tp("g"), followers[0], isr=tuple(followers))
    for follower in followers:
        c.restart(follower)
    c.settle()
    assert c.coordinator_of("g") == followers[0]
    assert fetched(c.fetch_offsets(followers[0], "g", [T0])) == {T0: 5}
    assert c.answer(old, pending) is None  # the old coordinator is gone; its client times out


def test_a_timed_out_commit_stays_invisible():
    c = ready(cluster(**{"offsets.commit.timeout.ms": "500"}))
    node = c.coordinator_of("g")
    assert commit_codes(c.commit(node, "g", {T0: 5})) == [ErrorCode.NONE]
    _followers_down(c, node)
    pending = c.send(node, commit_request("g", {T0: 9}))
    c.advance(600)
    assert commit_codes(c.answer(node, pending)) == [ErrorCode.REQUEST_TIMED_OUT]
    assert fetched(c.fetch_offsets(node, "g", [T0])) == {T0: 5}
    assert not c.nodes[node].groups.coordinator(c.offsets_tp("g").partition).pending_offsets
