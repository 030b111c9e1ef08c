"""Connection limits and graceful shutdown, over real sockets."""

from __future__ import annotations

from mq.protocol.messages import FetchPartition, FetchRequest, FetchTopic, MetadataRequest

from .raw import RawClient


def test_idle_connection_closed_but_not_while_a_request_is_parked(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": "300", "max.connections": "3"})
    with RawClient.to(broker) as idle, RawClient.to(broker) as waiting:
        waiting.create_topic("quiet", 1)
        # A long-poll longer than the idle timeout: the connection is busy, not idle.
        cid = waiting.send(FetchRequest([FetchTopic("quiet", [FetchPartition(0, 0)])], max_wait_ms=1500))
        assert idle.is_closed_by_peer(timeout_s=5)
        got, response = waiting.recv(FetchRequest)
        assert got == cid and response.topics[0].partitions[0].error_code == 0
        # ... and once it has been idle long enough it goes too.
        assert waiting.is_closed_by_peer(timeout_s=5)
    assert "Traceback" not in broker.stderr_text()


def test_connections_beyond_max_connections_are_refused(broker_factory):
    broker = broker_factory({"max.connections": "2"})
    with RawClient.to(broker) as a, RawClient.to(broker) as b:
        assert a.request(MetadataRequest([])).controller_id == 1
        assert b.request(MetadataRequest([])).controller_id == 1
        with RawClient.to(broker) as c:
            assert c.is_closed_by_peer()
    with RawClient.to(broker) as again:  # slots free up when clients leave
        assert again.request(MetadataRequest([])).controller_id == 1
    assert "max.connections=2" in broker.stderr_text()


def test_sigterm_answers_parked_fetches_then_exits_cleanly(broker):
    with RawClient.to(broker) as c:
        c.create_topic("bye", 1)
        cid = c.send(FetchRequest([FetchTopic("bye", [FetchPartition(0, 0)])], max_wait_ms=30_000))
        broker.proc.terminate()  # SIGTERM
        got, response = c.recv(FetchRequest)
        assert got == cid and response.topics[0].partitions[0].error_code == 0
        assert c.is_closed_by_peer()
    assert broker.proc.wait(timeout=15) == 0
    assert "broker_stopped" in broker.stderr_text() and "Traceback" not in broker.stderr_text()
