"""The Sender's round (``Sender._run_once``) against a fake cluster: no sockets."""

from __future__ import annotations

from mq.client.internals.accumulator import RecordAccumulator
from mq.client.internals.metadata import Metadata
from mq.client.internals.sender import RetryPolicy
from mq.client.sender_loop import Sender
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol.messages import BrokerInfo, MetadataResponse, PartitionMetadata, TopicMetadata

TP0 = TopicPartition("t", 0)
RETRY_BACKOFF_MS = 100


class FakeCluster:
    """The surface of ClusterClient the Sender uses; every broker unreachable, in backoff."""

    def __init__(self, reconnect_backoff_ms: int) -> None:
        self.metadata = Metadata([("127.0.0.1", 9092)], Rng(1), retry_backoff_ms=RETRY_BACKOFF_MS)
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.now = 10_000
        self.refreshes = 0
        self.listeners: list = []

    def now_ms(self) -> int:
        return self.now

    def refresh_in_background(self) -> None:
        self.refreshes += 1
        self.metadata.attempt_started(self.now)

    def ready_connection(self, node_id: int, *, lane: str = "") -> None:
        return None

    def address_of(self, node_id: int) -> tuple[str, int]:
        return ("127.0.0.1", 9092 + node_id)

    def backoff_remaining_ms(self, address: tuple[str, int]) -> int:
        return self.reconnect_backoff_ms


def test_unreachable_leader_makes_the_sender_ask_for_metadata_every_retry_backoff() -> None:
    """A killed leader: reconnects back off up to 1 s, but the new leader must be looked
    up every retry_backoff_ms (fail-over takes ~100 ms longer than the election, not ~1 s)."""
    cluster = FakeCluster(reconnect_backoff_ms=800)
    md = cluster.metadata
    md.add_topics("t")
    md.update(MetadataResponse(
        brokers=[BrokerInfo(1, "127.0.0.1", 9093), BrokerInfo(2, "127.0.0.1", 9094)], controller_id=1,
        topics=[TopicMetadata("t", 0, [PartitionMetadata(0, 0, 1, 0, [1, 2], [1, 2])])]), cluster.now)
    acc = RecordAccumulator(batch_size=1 << 16, linger_ms=0, buffer_memory=1 << 20)
    queue = acc.queue_for(TP0)
    acc.open_batch(queue, cluster.now)
    acc.append(queue, 1, None, b"v", ())
    sender = Sender(cluster, acc, RetryPolicy(retries=10, delivery_timeout_ms=120_000),  # type: ignore[arg-type]
                    acks=-1, max_in_flight=5, max_request_size=1 << 20, request_timeout_ms=30_000,
                    on_memory_freed=lambda: None)
    cluster.now += RETRY_BACKOFF_MS  # the last refresh is a retry backoff old
    sleep_ms = sender._run_once()
    assert md.need_update and sleep_ms is not None and sleep_ms <= RETRY_BACKOFF_MS
    cluster.now += sleep_ms
    sender._run_once()
    assert cluster.refreshes >= 1  # the next round sends the refresh, not one reconnect backoff later
