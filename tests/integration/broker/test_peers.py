"""``PeerNetwork`` (mq.aio.peers) against real brokers on loopback.

The sending side is a small node-like recorder (addresses, outbound queue, every
``on_response`` call); the receiving side is a real broker process.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

from mq.aio.peers import PeerNetwork
from mq.broker.outbound import Outbound
from mq.protocol.inter_broker import RaftRequest
from mq.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    MetadataRequest,
    MetadataResponse,
    Response,
)

from ..conftest import free_port
from .raw import RawClient


class RecordingNode:
    """What PeerNetwork needs from a node, recording every answer."""

    def __init__(self, addresses: dict[int, tuple[str, int]]) -> None:
        self.addresses = dict(addresses)
        self.outbound: list[Outbound] = []
        self.responses: list[tuple[int, Response | None]] = []
        self.resolved: list[int] = []
        self._next_tag = 0

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        self.resolved.append(node_id)
        return self.addresses.get(node_id)

    def take_outbound(self) -> list[Outbound]:
        out, self.outbound = self.outbound, []
        return out

    def on_response(self, tag: int, response: Response | None, *, now_ms: int) -> None:
        assert isinstance(now_ms, int)
        self.responses.append((tag, response))

    def queue(self, destination: int, request, *, one_way: bool = False, lane: int = 0) -> int:
        self._next_tag += 1
        self.outbound.append(Outbound(destination, request, self._next_tag, one_way, lane))
        return self._next_tag

    def answer(self, tag: int) -> Response | None:
        answers = [r for t, r in self.responses if t == tag]
        assert len(answers) == 1, f"tag {tag} answered {len(answers)} times"
        return answers[0]


async def until(condition: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    """Poll ``condition`` with a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def network(node: RecordingNode, **kwargs) -> PeerNetwork:
    return PeerNetwork(node, client_id="broker-9", **kwargs)


async def test_pipelined_requests_to_a_real_broker_are_answered_per_tag(broker):
    node = RecordingNode({1: (broker.host, broker.port)})
    peers = network(node)
    tags = [node.queue(1, ApiVersionsRequest()), node.queue(1, MetadataRequest([])),
            node.queue(1, ApiVersionsRequest()), node.queue(1, MetadataRequest(None))]
    assert peers.pump() == 4
    await until(lambda: len(node.responses) == 4)
    assert isinstance(node.answer(tags[0]), ApiVersionsResponse)
    assert isinstance(node.answer(tags[1]), MetadataResponse)
    assert isinstance(node.answer(tags[2]), ApiVersionsResponse)
    assert node.answer(tags[3]).brokers[0].node_id == 1  # type: ignore[union-attr]
    assert peers.connects(1) == 1 and peers.is_connected(1) and peers.in_flight() == 0
    peers.close()


async def test_dead_port_fails_fast_and_backs_off_without_piling_up():
    node = RecordingNode({2: ("127.0.0.1", free_port())})  # nothing listens there
    peers = network(node, reconnect_backoff_ms=5_000)
    started = time.monotonic()
    first = node.queue(2, ApiVersionsRequest())
    raft = node.queue(2, RaftRequest(b"vote"), one_way=True)
    peers.pump()
    await until(lambda: len(node.responses) == 1, timeout_s=2)
    assert node.answer(first) is None and time.monotonic() - started < 2
    # Backing off: every request fails at once, nothing is queued, no new attempt.
    later = [node.queue(2, ApiVersionsRequest()) for _ in range(500)]
    peers.pump()
    await until(lambda: len(node.responses) == 501, timeout_s=2)
    assert all(node.answer(tag) is None for tag in later)
    assert raft not in [t for t, _ in node.responses]  # one way: dropped, never answered
    assert node.resolved == [2] and peers.connects(2) == 0 and peers.in_flight() == 0
    peers.close()


async def test_unknown_address_fails_the_request():
    node = RecordingNode({})
    peers = network(node)
    tag = node.queue(7, MetadataRequest([]))
    peers.pump()
    await until(lambda: len(node.responses) == 1)
    assert node.answer(tag) is None
    peers.close()


async def test_one_way_raft_request_gets_no_answer_and_keeps_the_connection(broker):
    node = RecordingNode({1: (broker.host, broker.port)})
    peers = network(node)
    node.queue(1, RaftRequest(b"\x00 not a raft message"), one_way=True)
    node.queue(1, RaftRequest(b""), one_way=True)
    after = node.queue(1, ApiVersionsRequest())
    peers.pump()
    await until(lambda: len(node.responses) == 1)
    # Had the broker answered the one-way frames, their unknown correlation ids would
    # have closed the connection and failed ``after``.
    assert isinstance(node.answer(after), ApiVersionsResponse)
    assert peers.is_connected(1) and peers.connects(1) == 1
    assert "Traceback" not in broker.stderr_text()
    peers.close()


async def test_reconnects_after_the_broker_restarts_and_re_resolves_its_address(broker_factory):
    broker = broker_factory()
    node = RecordingNode({1: (broker.host, broker.port)})
    peers = network(node, reconnect_backoff_ms=20, reconnect_backoff_max_ms=100)
    tag = node.queue(1, ApiVersionsRequest())
    peers.pump()
    await until(lambda: len(node.responses) == 1)
    assert isinstance(node.answer(tag), ApiVersionsResponse)
    await asyncio.to_thread(broker.stop)
    await until(lambda: not peers.is_connected(1))
    # While it is down: failures, each answered exactly once.
    down = node.queue(1, ApiVersionsRequest())
    peers.pump()
    await until(lambda: any(t == down for t, _ in node.responses))
    assert node.answer(down) is None
    # It comes back on another port: the next attempt asks the node for the address again.
    broker.port = free_port()
    await asyncio.to_thread(broker.start)
    node.addresses[1] = (broker.host, broker.port)
    answered: list[Response | None] = []

    async def retry() -> bool:
        t = node.queue(1, MetadataRequest([]))
        peers.pump()
        await until(lambda: any(x == t for x, _ in node.responses))
        answered.append(node.answer(t))
        return answered[-1] is not None

    deadline = time.monotonic() + 10
    while not await retry():
        assert time.monotonic() < deadline, "never reconnected"
    assert isinstance(answered[-1], MetadataResponse)
    assert peers.connects(1) == 2 and node.resolved.count(1) >= 2
    peers.close()


async def test_request_timeout_fails_everything_in_flight_and_reconnects():
    # A listener that never accepts: the kernel completes the handshake, nobody answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        node = RecordingNode({3: silent.getsockname()})
        peers = network(node, request_timeout_ms=200, reconnect_backoff_ms=10)
        started = time.monotonic()
        tags = [node.queue(3, ApiVersionsRequest()) for _ in range(3)]
        peers.pump()
        await until(lambda: len(node.responses) == 3, timeout_s=3)
        assert all(node.answer(tag) is None for tag in tags)
        assert 0.15 <= time.monotonic() - started < 3
        assert not peers.is_connected(3) and peers.in_flight() == 0
        # After the back-off the next request opens a new connection (and times out too).
        deadline = time.monotonic() + 3
        while peers.connects(3) < 2:
            assert time.monotonic() < deadline, "no reconnect"
            tags.append(node.queue(3, ApiVersionsRequest()))
            peers.pump()
            await asyncio.sleep(0.005)  # a retry pace, not a wait for the condition
        await until(lambda: len(node.responses) == len(tags), timeout_s=3)
        assert all(node.answer(tag) is None for tag in tags)  # each exactly once
        peers.close()


async def test_replica_fetch_long_polls_beyond_the_request_timeout(broker):
    with RawClient.to(broker) as raw:
        raw.create_topic("quiet", 1)
    node = RecordingNode({1: (broker.host, broker.port)})
    peers = network(node, request_timeout_ms=300)
    started = time.monotonic()
    tag = node.queue(1, FetchRequest([_fetch_topic("quiet")], max_wait_ms=700))
    peers.pump()
    await until(lambda: len(node.responses) == 1, timeout_s=5)
    response = node.answer(tag)
    assert isinstance(response, FetchResponse), response
    assert response.topics[0].partitions[0].error_code == 0
    assert time.monotonic() - started >= 0.6  # it waited on the broker, and was not timed out
    peers.close()


async def test_a_request_on_its_own_lane_is_not_held_behind_a_parked_long_poll(broker):
    """A broker answers a connection's requests in order: a fetch sent while a long poll to
    the same broker is parked must go on another lane (connection) to be answered at once."""
    with RawClient.to(broker) as raw:
        raw.create_topic("parked", 1)
    node = RecordingNode({1: (broker.host, broker.port)})
    peers = network(node)
    parked = node.queue(1, FetchRequest([_fetch_topic("parked")], max_wait_ms=3_000))
    peers.pump()
    await until(lambda: peers.in_flight(1) == 1)
    started = time.monotonic()
    quick = node.queue(1, MetadataRequest(), lane=1)
    peers.pump()
    await until(lambda: len(node.responses) == 1, timeout_s=2)
    assert isinstance(node.answer(quick), MetadataResponse) and time.monotonic() - started < 1.0
    assert peers.connects(1) == 2 and peers.in_flight(1) == 1  # the long poll is still parked
    same_lane = node.queue(1, MetadataRequest())
    peers.pump()
    await asyncio.sleep(0.3)  # a duration: on the parked lane the answer must wait its turn
    assert [t for t, _ in node.responses] == [quick]
    await until(lambda: len(node.responses) == 3, timeout_s=5)
    assert [t for t, _ in node.responses] == [quick, parked, same_lane]
    peers.close()


async def test_close_reports_nothing_more(broker):
    node = RecordingNode({1: (broker.host, broker.port)})
    peers = network(node)
    with RawClient.to(broker) as raw:
        raw.create_topic("parked", 1)
    node.queue(1, FetchRequest([_fetch_topic("parked")], max_wait_ms=5_000))
    peers.pump()
    await until(lambda: peers.in_flight(1) == 1)
    peers.close()
    node.queue(1, ApiVersionsRequest())
    assert peers.pump() == 0
    await asyncio.sleep(0.05)  # a duration: nothing may arrive after close
    assert node.responses == []


def _fetch_topic(name: str) -> FetchTopic:
    return FetchTopic(name, [FetchPartition(0, 0)])
