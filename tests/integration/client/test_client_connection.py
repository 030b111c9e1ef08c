"""The client's connection handshake against a real broker process."""

from __future__ import annotations

from mq.client import Admin
from mq.client.connection import BrokerConnection
from mq.core.types import Acks
from mq.protocol.messages import ProducePartitionData, ProduceRequest, ProduceTopicData
from mq.protocol.record_batch import build_batch

PREAUTH_LIMIT = 512 * 1024  # socket.request.max.bytes.preauth


async def test_large_produce_as_first_request_on_a_new_connection(shared_broker, topic_name) -> None:
    """A broker limits a connection's first frame to 512 KiB until a request succeeded;
    the client's ApiVersions handshake goes first, so a ~1 MiB produce (send_many to a
    leader the producer had not talked to yet) is accepted instead of dropping the
    connection with FRAME_TOO_LARGE."""
    async with Admin(shared_broker.bootstrap) as admin:
        await admin.create_topic(topic_name)
    batch = build_batch([(None, b"v" * 100, (), 0)] * 8000)
    assert len(batch) > PREAUTH_LIMIT
    host, port = shared_broker.bootstrap.rsplit(":", 1)
    conn = await BrokerConnection.open(1, host, int(port), client_id="t", request_timeout_ms=10_000,
                                       connect_timeout_ms=5_000)
    try:
        response = await conn.send(ProduceRequest(
            acks=int(Acks.LEADER), timeout_ms=5_000,
            topics=[ProduceTopicData(topic_name, [ProducePartitionData(0, batch)])]))
    finally:
        conn.close()
    [partition] = response.topics[0].partitions
    assert (partition.error_code, partition.base_offset) == (0, 0)


async def test_close_waits_for_its_background_tasks(shared_broker) -> None:
    """A refresh still running at close is cancelled and awaited: nothing is left
    pending for the event loop to destroy ("Task was destroyed but it is pending")."""
    import asyncio

    from mq.client.cluster import ClusterClient

    cluster = ClusterClient(shared_broker.bootstrap, client_id="close-test")
    cluster.update_metadata_soon()
    cluster.refresh_in_background()
    tasks = [cluster._refresh, cluster._soon]
    await asyncio.sleep(0)  # let them start
    await cluster.close()
    assert all(task is not None and task.done() for task in tasks)
