"""``BrokerServer``'s event plumbing, in-process over loopback, with a scripted node.

The node here is a test double speaking the node's contract (handle, poll, outbound,
responses, readiness, controlled shutdown); the sockets, timers and the peer network
are the real ones.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from mq.aio.server import BrokerServer
from mq.broker.outbound import Outbound
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode, MqError
from mq.protocol.codec import RequestHeader
from mq.protocol.inter_broker import RaftRequest
from mq.protocol.messages import ApiKey, ApiVersionsRequest, ApiVersionsResponse, Request, Response

from .raw import RawClient


class ScriptedNode:
    """Answers ApiVersions itself, refuses Raft payloads it cannot read, and records
    every call the shell makes."""

    def __init__(self, *, poll_every_ms: int = 1000) -> None:
        self.poll_every_ms = poll_every_ms
        self.polls: list[int] = []
        self.handled: list[ApiKey] = []
        self.outbound: list[Outbound] = []
        self.responses: list[tuple[int, Response | None]] = []
        self.addresses: dict[int, tuple[str, int]] = {}
        self.ready = False
        self.shutdown_begun_ms: int | None = None
        self.complete_shutdown_on_poll = False
        self.completed_shutdown = False
        self.shut = False

    # requests
    def handle(self, header: RequestHeader, request: Request, *, now_ms: int, client_host: str = "") -> Response | None:
        self.handled.append(header.api_key)
        if header.api_key == ApiKey.RAFT:
            if not request.payload:  # type: ignore[attr-defined]
                raise MqError(ErrorCode.CORRUPT_MESSAGE, "empty raft message")
            return None
        return ApiVersionsResponse(0, [], "scripted")

    def take_completions(self) -> list:
        return []

    def take_corruption_reports(self) -> list:
        return []

    def take_unclean_truncations(self) -> list:
        return []

    def take_storage_errors(self) -> list:
        return []

    needs_group_commit = False

    def group_commit(self, *, now_ms: int, flush_all: bool = False) -> None:
        pass

    def expire(self, op_id: int, *, now_ms: int) -> None:
        pass

    def cancel(self, op_id: int) -> None:
        pass

    def poll(self, *, now_ms: int) -> int:
        self.polls.append(now_ms)
        if self.complete_shutdown_on_poll and self.shutdown_begun_ms is not None:
            self.completed_shutdown = True
        return now_ms + self.poll_every_ms

    # the control-plane contract
    def take_outbound(self) -> list[Outbound]:
        out, self.outbound = self.outbound, []
        return out

    def on_response(self, tag: int, response: Response | None, *, now_ms: int) -> None:
        self.responses.append((tag, response))

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        return self.addresses.get(node_id)

    @property
    def is_ready(self) -> bool:
        return self.ready

    def begin_shutdown(self, *, now_ms: int) -> None:
        self.shutdown_begun_ms = now_ms

    @property
    def shutdown_complete(self) -> bool:
        return self.completed_shutdown

    def shutdown(self, *, now_ms: int) -> None:
        self.shut = True


async def until(condition: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


@pytest.fixture
async def served():
    started: list[BrokerServer] = []

    async def start(node: ScriptedNode) -> BrokerServer:
        server = BrokerServer(node, BrokerConfig(node_id=1))  # type: ignore[arg-type]
        await server.start("127.0.0.1", 0)
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop(drain_timeout_s=1)


async def test_poll_runs_at_the_deadline_the_node_returns(served):
    node = ScriptedNode(poll_every_ms=20)
    await served(node)
    await until(lambda: len(node.polls) >= 10, timeout_s=3)  # the old 1 s sweep would give ~1


async def test_outbound_goes_out_after_poll_and_answers_come_back(served):
    node = ScriptedNode(poll_every_ms=20)
    server = await served(node)
    node.addresses[1] = server.address  # type: ignore[assignment]  # this broker talks to itself
    node.outbound.append(Outbound(1, ApiVersionsRequest(), tag=11))
    node.outbound.append(Outbound(1, RaftRequest(b"hello"), tag=12, one_way=True))
    await until(lambda: len(node.responses) == 1)
    assert node.responses[0][0] == 11 and isinstance(node.responses[0][1], ApiVersionsResponse)
    await until(lambda: ApiKey.RAFT in node.handled)
    assert [t for t, _ in node.responses] == [11]  # the one-way request gets no answer


async def test_one_way_request_the_node_refuses_is_not_answered(served, caplog):
    node = ScriptedNode()
    server = await served(node)
    host, port = server.address  # type: ignore[misc]
    with caplog.at_level(logging.WARNING, logger="mq.aio.server"):
        raw = await asyncio.to_thread(RawClient, host, port)
        try:
            await asyncio.to_thread(raw.send, RaftRequest(b""))
            response = await asyncio.to_thread(raw.request, ApiVersionsRequest())
        finally:
            raw.close()
    assert isinstance(response, ApiVersionsResponse)  # the next answer is the ApiVersions one
    assert any("CORRUPT_MESSAGE" in r.getMessage() for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)


async def test_ready_is_set_once_the_node_is_ready(served):
    node = ScriptedNode(poll_every_ms=10)
    server = await served(node)
    await until(lambda: len(node.polls) >= 2)
    assert not server.ready.is_set()
    node.ready = True
    await asyncio.wait_for(server.ready.wait(), 2)


async def test_controlled_shutdown_waits_for_the_node(served):
    node = ScriptedNode(poll_every_ms=10)
    node.complete_shutdown_on_poll = True
    server = await served(node)
    assert await server.controlled_shutdown(timeout_s=5)
    assert node.shutdown_begun_ms is not None and not node.shut


async def test_controlled_shutdown_is_bounded_and_can_be_interrupted(served):
    node = ScriptedNode(poll_every_ms=10)
    server = await served(node)
    started = time.monotonic()
    assert not await server.controlled_shutdown(timeout_s=0.2)
    assert 0.15 <= time.monotonic() - started < 2
    interrupt = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, interrupt.set)
    started = time.monotonic()
    assert not await server.controlled_shutdown(timeout_s=30, interrupt=interrupt)
    assert time.monotonic() - started < 5
    await server.stop(drain_timeout_s=1)
    assert node.shut
