"""The control plane of three brokers in one process: the metadata quorum elects a
controller, brokers register and are unfenced, admin requests are forwarded to the
controller and answered once committed, and a dead broker is fenced and its
leaderships move."""

from __future__ import annotations

from mq.broker.outbound import Pending
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol.messages import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from tests.unit.broker.control_harness import ControlCluster


def _controller(cluster: ControlCluster) -> int | None:
    leaders = {cluster.plane(i).controller_id for i in cluster.live()}
    return leaders.pop() if len(leaders) == 1 else None


def _all_ready(cluster: ControlCluster) -> bool:
    return all(cluster.plane(i).is_ready for i in cluster.live())


def _create(cluster: ControlCluster, via: int, name: str, partitions: int, rf: int) -> CreateTopicsResponse:
    outcome = cluster.request(via, CreateTopicsRequest([CreatableTopic(name, partitions, rf)]))
    if isinstance(outcome, Pending):
        cluster.run_until(lambda: (via, outcome.op_id) in cluster.answers, timeout_ms=5000)
        outcome = cluster.answers[(via, outcome.op_id)]
    assert isinstance(outcome, CreateTopicsResponse)
    return outcome


def test_three_voters_elect_one_controller_and_every_broker_becomes_ready() -> None:
    cluster = ControlCluster()
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    controller = _controller(cluster)
    image = cluster.plane(controller).image
    assert sorted(image.brokers) == [1, 2, 3]
    assert image.live_broker_ids() == [1, 2, 3]
    epochs = {cluster.plane(i).broker_epoch for i in cluster.ids}
    assert len(epochs) == 3 and min(epochs) >= 0


def test_create_topics_on_a_follower_is_forwarded_and_answered_after_commit() -> None:
    cluster = ControlCluster()
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    follower = next(i for i in cluster.ids if i != _controller(cluster))
    response = _create(cluster, follower, "payments", 6, 3)
    assert response.topics[0].error_code == ErrorCode.NONE, response
    cluster.run(200)
    for i in cluster.ids:
        topic = cluster.plane(i).image.topic("payments")
        assert topic is not None and len(topic.partitions) == 6
    leaders = [cluster.plane(1).image.partition(TopicPartition("payments", p)).leader for p in range(6)]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]  # leaders spread evenly


def test_create_partitions_on_a_follower_is_forwarded_and_every_broker_sees_the_new_partitions() -> None:
    cluster = ControlCluster()
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    follower = next(i for i in cluster.ids if i != _controller(cluster))
    assert _create(cluster, follower, "payments", 2, 3).topics[0].error_code == ErrorCode.NONE

    def grow(count: int) -> CreatePartitionsResponse:
        outcome = cluster.request(follower, CreatePartitionsRequest([CreatePartitionsTopic("payments", count)]))
        if isinstance(outcome, Pending):
            cluster.run_until(lambda: (follower, outcome.op_id) in cluster.answers, timeout_ms=5000)
            outcome = cluster.answers[(follower, outcome.op_id)]
        assert isinstance(outcome, CreatePartitionsResponse)
        return outcome

    assert grow(5).results[0].error_code == ErrorCode.NONE
    cluster.run(200)
    for i in cluster.ids:
        topic = cluster.plane(i).image.topic("payments")
        assert topic is not None and list(topic.partitions) == [0, 1, 2, 3, 4]
    shrink = grow(3).results[0]
    assert shrink.error_code == ErrorCode.INVALID_PARTITIONS
    assert "topic payments has 5 partitions; the count can only grow" in shrink.error_message


def test_a_crashed_broker_is_fenced_and_its_partitions_get_new_leaders() -> None:
    cluster = ControlCluster()
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    assert _create(cluster, 1, "t", 3, 3).topics[0].error_code == ErrorCode.NONE
    cluster.run(200)
    victim = next(i for i in cluster.ids if i != _controller(cluster))
    led = [p for p in range(3) if cluster.plane(1).image.partition(TopicPartition("t", p)).leader == victim]
    epochs = {p: cluster.plane(1).image.partition(TopicPartition("t", p)).leader_epoch for p in led}
    cluster.crash(victim)
    survivor = cluster.live()[0]
    cluster.run_until(lambda: cluster.plane(survivor).image.broker(victim).fenced, timeout_ms=15_000)
    for p in led:
        state = cluster.plane(survivor).image.partition(TopicPartition("t", p))
        assert state.leader not in (victim, -1)
        assert state.leader_epoch == epochs[p] + 1
        assert victim not in state.isr


def test_the_controller_crashing_elects_another_and_a_restarted_broker_gets_a_new_epoch() -> None:
    cluster = ControlCluster()
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    old = _controller(cluster)
    old_epoch = cluster.plane(old).broker_epoch
    cluster.crash(old)
    cluster.run_until(lambda: _controller(cluster) not in (None, old), timeout_ms=15_000)
    cluster.start(old)
    cluster.run_until(lambda: _all_ready(cluster), timeout_ms=15_000)
    assert cluster.plane(old).broker_epoch > old_epoch
    assert _create(cluster, old, "after", 2, 3).topics[0].error_code == ErrorCode.NONE


def test_a_single_voter_is_ready_at_once() -> None:
    cluster = ControlCluster(node_ids=(1,))
    cluster.run_until(lambda: _all_ready(cluster), timeout_ms=200)
    assert cluster.plane(1).is_active_controller
    assert _create(cluster, 1, "solo", 1, 1).topics[0].error_code == ErrorCode.NONE


def test_metadata_survives_a_crash_of_every_voter() -> None:
    cluster = ControlCluster(seed=7)
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    assert _create(cluster, 2, "durable", 4, 3).topics[0].error_code == ErrorCode.NONE
    for i in cluster.ids:
        cluster.crash(i)
    for i in cluster.ids:
        cluster.start(i)
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster), timeout_ms=30_000)
    for i in cluster.ids:
        assert len(cluster.plane(i).image.topic("durable").partitions) == 4


def test_controlled_shutdown_moves_leadership_before_the_broker_may_exit() -> None:
    cluster = ControlCluster(seed=3)
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    assert _create(cluster, 1, "t", 3, 3).topics[0].error_code == ErrorCode.NONE
    cluster.run(100)
    leaving = 2
    cluster.plane(leaving).begin_shutdown(now_ms=cluster.now_ms)
    cluster.run_until(lambda: cluster.plane(leaving).shutdown_complete, timeout_ms=5000)
    image = cluster.plane(leaving).image
    for p in range(3):
        state = image.partition(TopicPartition("t", p))
        assert state.leader != leaving and leaving not in state.isr


def test_a_voter_that_dies_before_persisting_its_vote_rejoins_and_one_controller_is_elected() -> None:
    """raft.before_persist fires before a vote or entries are durable: the voter that
    dies there restarts from its disk (without them) and the quorum still converges."""
    import pytest

    from mq.core.failpoints import FailpointPanic, Failpoints, installed
    cluster = ControlCluster(seed=5)
    with installed(Failpoints.parse("raft.before_persist@node-2=1*panic")):
        with pytest.raises(FailpointPanic):
            cluster.run(5_000)
    cluster.crash(2)
    cluster.start(2)
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    assert _create(cluster, 2, "after-panic", 1, 3).topics[0].error_code == ErrorCode.NONE


def test_a_metadata_log_from_before_the_quorum_is_refused_with_a_way_out() -> None:
    import pytest

    from mq.broker.control import ControlPlane
    from mq.core.config import BrokerConfig
    from mq.core.errors import MqError
    from mq.core.rng import Rng
    from mq.metadata.log import METADATA_LOG_CONFIG
    from mq.metadata.records import TopicRecord, encode_batch
    from mq.storage.fileio import MemoryFileIO
    from mq.storage.log import Log

    fileio = MemoryFileIO()
    old = Log.open(fileio, "/data/__cluster_metadata-0", METADATA_LOG_CONFIG, now_ms=0)
    old.append_as_leader(encode_batch([TopicRecord("orders", "id")], now_ms=0), leader_epoch=0, now_ms=0)
    old.close()
    plane = ControlPlane(BrokerConfig(node_id=1, log_dirs="/data"), fileio, rng=Rng(1),
                         advertised_host="h", advertised_port=1, new_op_id=iter(range(1, 99)).__next__)
    with pytest.raises(MqError, match="before the Raft quorum.*move /data aside"):
        plane.start(now_ms=0)


def test_leadership_goes_back_to_the_preferred_replica_once_it_is_in_sync() -> None:
    cluster = ControlCluster(seed=11, configs={"leader_imbalance_check_interval_seconds": 2})
    cluster.run_until(lambda: _controller(cluster) is not None and _all_ready(cluster))
    assert _create(cluster, 1, "t", 3, 3).topics[0].error_code == ErrorCode.NONE
    cluster.run(100)
    controller = _controller(cluster)
    victim = next(i for i in cluster.ids if i != controller)
    prefers = [p for p in range(3)
               if cluster.plane(controller).image.partition(TopicPartition("t", p)).replicas[0] == victim]
    assert prefers
    cluster.crash(victim)
    cluster.run_until(lambda: cluster.plane(controller).image.broker(victim).fenced, timeout_ms=15_000)
    cluster.start(victim)
    cluster.run_until(lambda: _all_ready(cluster), timeout_ms=15_000)
    image = lambda: cluster.plane(controller).image  # noqa: E731
    # No data plane here: put the victim back in the ISRs as its leaders would.
    for p in prefers:
        part = image().partition(TopicPartition("t", p))
        assert part.leader != victim
        from mq.protocol import inter_broker as ib
        leader_epoch = cluster.plane(part.leader).broker_epoch
        request = ib.AlterPartitionRequest(part.leader, leader_epoch, [ib.AlterPartitionTopic("t", [
            ib.AlterPartitionPartition(p, part.leader_epoch, [*part.isr, victim], part.partition_epoch,
                                       [ib.BrokerState(b, cluster.plane(b).broker_epoch) for b in [*part.isr, victim]])])])
        cluster.request(controller, request)
        cluster.run(50)
    cluster.run_until(lambda: all(image().partition(TopicPartition("t", p)).leader == victim for p in prefers),
                      timeout_ms=10_000)
