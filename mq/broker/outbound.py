"""What a sans-IO broker asks its shell to do on the network.

A ``BrokerNode`` never opens a socket. Requests it must send to other nodes (Raft
messages to the other voters, follower fetches to partition leaders, registration,
heartbeats and ISR changes to the active controller, admin requests forwarded to it)
come out of ``take_outbound()`` as ``Outbound`` values; the shell sends each one and
hands the answer back with ``on_response(tag, response)`` (``None`` when the request
failed: no connection, a timeout, a closed socket). ``Pending`` is the other
direction: a request from a client whose answer comes later.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.protocol.messages import Request

TXN_MARKER_LANE = 8
"""The lane of WriteTxnMarkers to a partition leader: never one of the replica fetch
lanes (``mq.broker.follower_fetch.MAX_FETCH_LANES``). The leader answers a connection's
requests in order and answers WriteTxnMarkers only once the markers are replicated; a
fetch of ours queued behind it carries the very progress the replication waits for,
so the answer would wait until the ISR shrank us away (Kafka sends markers from a
channel of their own too)."""


@dataclass(frozen=True, slots=True)
class Outbound:
    destination: int  # a node id; the shell resolves it with ``address_of``
    request: Request
    tag: int  # echoed to ``on_response``; unique among the node's requests in flight
    one_way: bool = False  # a RaftRequest: nothing comes back, ``on_response`` is never called
    lane: int = 0  # the shell's connection to ``destination``: requests on one lane are answered in order


@dataclass(frozen=True, slots=True)
class Pending:
    """The response to this request will come from ``take_completions``.
    ``timeout_ms``: the shell calls ``expire(op_id)`` after this long (None: never)."""

    op_id: int
    timeout_ms: int | None
