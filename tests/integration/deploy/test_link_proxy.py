"""The product link proxy on real sockets in one event loop: shaping measured on the
wire, bytes never reordered under jitter, cuts that hold and release, refuse, reset,
and half-closes passed on. The link process and `mq link` are tested in
tests/integration/cli/test_cli_geo.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from mq.deploy.link_proxy import Direction, LinkListener
from mq.deploy.shaping import LinkSettings

WAIT_S = 5.0


class Echo:
    """An echo server: every byte comes back; EOF is answered with EOF."""

    def __init__(self) -> None:
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.connections = 0

    async def start(self) -> Echo:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()
        except OSError:
            pass

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def link():
    """A listener to an echo server; forward = west->east, backward = east->west."""
    echo = await Echo().start()
    west_east, east_west = Direction("west->east"), Direction("east->west")
    listener = await LinkListener(("127.0.0.1", echo.port), west_east, east_west).start()
    try:
        yield listener, echo
    finally:
        await listener.close()
        await echo.close()


async def dial(listener: LinkListener):
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", listener.port), WAIT_S)


async def rtt_ms(reader, writer, payload: bytes = b"ping") -> float:
    started = time.monotonic()
    writer.write(payload)
    got = await asyncio.wait_for(reader.readexactly(len(payload)), WAIT_S)
    assert got == payload
    return (time.monotonic() - started) * 1000


async def test_transparent_until_shaped_then_latency_adds_up(link):
    listener, _ = link
    reader, writer = await dial(listener)
    assert await rtt_ms(reader, writer) < 20
    listener.forward.shaper.update(LinkSettings(latency_ms=30))
    listener.backward.shaper.update(LinkSettings(latency_ms=50))
    samples = [await rtt_ms(reader, writer) for _ in range(5)]
    assert 80 <= min(samples) and max(samples) < 80 + 60, samples  # 30 there + 50 back
    listener.forward.shaper.update(LinkSettings())
    listener.backward.shaper.update(LinkSettings())
    assert await rtt_ms(reader, writer) < 20
    writer.close()


async def test_bandwidth_limits_throughput(link):
    listener, _ = link
    listener.backward.shaper.update(LinkSettings(bandwidth_mbit=16))  # 2 MB/s back
    reader, writer = await dial(listener)
    payload = bytes(1_000_000)
    started = time.monotonic()
    writer.write(payload)
    await asyncio.wait_for(reader.readexactly(len(payload)), WAIT_S)
    elapsed = time.monotonic() - started
    assert 0.45 <= elapsed < 1.5, elapsed  # 1 MB at 2 MB/s: 0.5 s
    assert listener.backward.shaper.bytes == len(payload)
    writer.close()


async def test_jitter_never_reorders_a_connection(link):
    """Each chunk gets its own draw; the bytes still arrive in order (the shaper never
    schedules a chunk before the previous one, and the writer delivers in order)."""
    listener, _ = link
    for direction in (listener.forward, listener.backward):
        direction.shaper.update(LinkSettings(latency_ms=5, jitter_ms=5))
    reader, writer = await dial(listener)
    sent = b"".join(b"%08d" % i for i in range(20_000))
    for i in range(0, len(sent), 1000):  # many small writes: many chunks, each with its own draw
        writer.write(sent[i:i + 1000])
        await writer.drain()
    got = await asyncio.wait_for(reader.readexactly(len(sent)), WAIT_S * 2)
    assert got == sent
    writer.close()


async def test_blackhole_cut_holds_open_connections_and_heal_releases_them(link):
    listener, _ = link
    reader, writer = await dial(listener)
    assert await rtt_ms(reader, writer) < 50
    listener.backward.cut("blackhole")  # answers stop; requests still arrive
    writer.write(b"held")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(4), 0.3)
    listener.backward.heal()
    assert await asyncio.wait_for(reader.readexactly(4), WAIT_S) == b"held"  # nothing lost
    assert listener.stats.aborted == 0
    writer.close()


async def test_new_connections_are_held_during_a_cut_and_dropped_if_the_client_left(link):
    listener, echo = link
    listener.forward.cut()
    reader, writer = await dial(listener)  # accepted by the proxy, not forwarded
    writer.write(b"waiting")
    _gone_reader, gone_writer = await dial(listener)
    gone_writer.write(b"never replayed")
    await gone_writer.drain()
    gone_writer.close()
    await asyncio.sleep(0.2)  # let the proxy see the second client leave while held
    assert echo.connections == 0 and listener.stats.blackholed == 2
    listener.forward.heal()
    assert await asyncio.wait_for(reader.readexactly(7), WAIT_S) == b"waiting"
    assert echo.connections == 1 and listener.stats.accepted == 1
    writer.close()


async def test_refuse_resets_open_and_new_connections(link):
    listener, _ = link
    reader, writer = await dial(listener)
    assert await rtt_ms(reader, writer) < 50
    assert listener.forward.cut("refuse") == 1
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(1), WAIT_S)
    new_reader, _new_writer = await dial(listener)
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(new_reader.readexactly(1), WAIT_S)
    assert listener.stats.refused == 1 and listener.stats.aborted == 1
    with pytest.raises(ValueError, match="cut mode"):
        listener.forward.cut("drop")


async def test_abort_connections_resets_but_leaves_the_link_up(link):
    listener, _ = link
    reader, writer = await dial(listener)
    assert await rtt_ms(reader, writer) < 50
    assert listener.abort_connections() == 1 and listener.forward.is_up
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(1), WAIT_S)
    again_reader, again_writer = await dial(listener)
    assert await rtt_ms(again_reader, again_writer) < 50
    again_writer.close()


async def test_a_half_close_is_passed_on_after_the_delayed_bytes(link):
    listener, _ = link
    listener.forward.shaper.update(LinkSettings(latency_ms=100))
    reader, writer = await dial(listener)
    writer.write(b"last words")
    writer.write_eof()  # the echo server answers and closes when it sees EOF
    assert await asyncio.wait_for(reader.read(), WAIT_S) == b"last words"
    writer.close()
    deadline = time.monotonic() + WAIT_S
    while listener.open_connections():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


async def test_a_stall_holds_bytes_already_scheduled(link):
    listener, _ = link
    listener.backward.shaper.update(LinkSettings(latency_ms=50))
    reader, writer = await dial(listener)
    writer.write(b"x")
    await asyncio.sleep(0.01)
    listener.backward.shaper.stall(asyncio.get_running_loop().time() * 1000, 300)
    started = time.monotonic()
    assert await asyncio.wait_for(reader.readexactly(1), WAIT_S) == b"x"
    assert time.monotonic() - started >= 0.25
    writer.close()


async def test_a_down_target_resets_the_client():
    west_east, east_west = Direction("a->b"), Direction("b->a")
    listener = await LinkListener(("127.0.0.1", 1), west_east, east_west).start()  # nothing on port 1
    try:
        reader, _ = await dial(listener)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), WAIT_S)
        assert listener.stats.upstream_failures == 1
        assert west_east.open_connections() == 0
    finally:
        await listener.close()
