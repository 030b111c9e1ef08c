"""``PeerNetwork``: a connection reset before ``_connect`` gets to adopt it.

A peer that is restarting (or the chaos link proxy, whose upstream is still down)
accepts a connection and resets it at once; the reset can be processed before the
coroutine that opened the connection resumes. Such a connection must count as a
failed attempt: adopted as ``peer.conn``, it stayed closed for good and every later
message to that peer was dropped (one-way Raft messages silently), so a restarted
broker never heard from the others and never became ready.
"""

from __future__ import annotations

import asyncio

from mq.aio import peers as peers_module
from mq.aio.peers import PeerNetwork
from mq.protocol.inter_broker import RaftRequest

from .test_peers import RecordingNode, until


async def test_a_connection_reset_before_it_is_adopted_is_a_failed_attempt(monkeypatch):
    received: list[bytes] = []
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while data := await reader.read(65536):
            received.append(data)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    address = server.sockets[0].getsockname()[:2]
    original = peers_module._Connection.connection_made
    resets = []

    def reset_the_first(self, transport):
        original(self, transport)
        if not resets:  # the peer's RST, processed before _connect resumes
            resets.append(transport)
            transport.abort()

    monkeypatch.setattr(peers_module._Connection, "connection_made", reset_the_first)
    node = RecordingNode({2: address})
    peers = PeerNetwork(node, client_id="broker-1", reconnect_backoff_ms=20)
    node.queue(2, RaftRequest(b"lost with the reset"), one_way=True)
    peers.pump()
    await until(lambda: bool(resets) and peers._peers[(2, 0)].connecting is None)
    assert not peers.is_connected(2)
    # After the back-off, a new connection carries the next one-way messages.
    while not received:
        node.queue(2, RaftRequest(b"vote"), one_way=True)
        peers.pump()
        await until(lambda: peers._peers[(2, 0)].connecting is None, timeout_s=2)
        if not received:
            await asyncio.sleep(0.01)  # the retry pace (back-off 20 ms), not a condition wait
        assert len(node.outbound) == 0
        if peers.connects(2) >= 1:
            await until(lambda: bool(received), timeout_s=2)
    assert peers.is_connected(2) and peers.connects(2) == 1
    peers.close()
    server.close()
    await server.wait_closed()
