"""WriteTxnMarkers goes to a partition leader on a connection of its own, never on a
replica fetch lane. The leader answers a connection's requests in order and answers
WriteTxnMarkers only once the markers are replicated; a fetch of this broker queued
behind it on the same connection carries the very progress that replication waits
for. Sharing lane 0 stalled each transaction of the R19 chaos test until the ISR
shrank this broker away (replica.lag.time.max.ms), then let it back in: the ISR
flapped every few seconds and the copier crawled (Kafka sends markers from a
channel manager of its own too)."""

from __future__ import annotations

from itertools import count

from mq.broker.follower_fetch import MAX_FETCH_LANES
from mq.broker.outbound import TXN_MARKER_LANE
from mq.broker.txn_service import TxnShard
from mq.coordinator.txn_coordinator import TransactionCoordinator
from mq.core.types import TopicPartition
from mq.protocol.messages import FetchRequest
from mq.protocol.txn_messages import WriteTxnMarkersRequest

from .broker_cluster import Cluster

OUT = TopicPartition("out", 0)


def _coordinator_owing_a_commit_marker() -> TransactionCoordinator:
    coordinator = TransactionCoordinator(0)
    ids = count(1000)
    coordinator.replay_all(coordinator.init_producer_id("tx", 1000, now_ms=0, new_producer_id=lambda: next(ids)).records)
    coordinator.replay_all(coordinator.add_partitions("tx", 1000, 0, [OUT], now_ms=1).records)
    coordinator.replay_all(coordinator.end_txn("tx", 1000, 0, True, now_ms=2).records)
    [job] = coordinator.pending_markers()
    assert job.partitions == (OUT,)
    return coordinator


def test_markers_to_a_leader_this_broker_fetches_from_use_their_own_lane() -> None:
    cluster = Cluster(ids=(1, 2))
    cluster.create_topic("out", replicas=(2, 1))  # led by 2; broker 1 follows it
    node = cluster.nodes[1]
    node.txns.shards[0] = TxnShard(node.partitions[OUT], _coordinator_owing_a_commit_marker())
    node.txns._send_markers(cluster.now)
    out = node.take_outbound()
    fetches = [o for o in out if isinstance(o.request, FetchRequest) and o.destination == 2]
    [markers] = [o for o in out if isinstance(o.request, WriteTxnMarkersRequest)]
    assert fetches and markers.destination == 2
    assert {f.lane for f in fetches} <= set(range(MAX_FETCH_LANES))
    assert markers.lane == TXN_MARKER_LANE and TXN_MARKER_LANE not in range(MAX_FETCH_LANES)
