"""The sockets of an emulated WAN link: a TCP proxy that shapes what it forwards.

A ``Direction`` is one direction of a link (east->west): a ``Shaper``
(``mq.deploy.shaping``: latency, jitter, bandwidth, loss as stalls) and whether the
direction is cut. A ``LinkListener`` listens on one port and forwards every
connection to one target address; bytes from the client to the target cross its
``forward`` direction, the answers cross ``backward``. In the link process of the
region pair east-west (``mq.deploy.link``), the listener standing for east's broker 1,
dialed by clients in west, has forward = west->east and backward = east->west; the
chaos harness gives each listener one direction for both ways.

Each connection's direction is two tasks: a reader that takes chunks (at most
``CHUNK`` bytes) and asks the shaper when each may be delivered, and a writer that
writes each chunk at its time, so chunks pipeline (a 40 ms link carries many chunks at
once) and never reorder. At most ``MAX_QUEUED_BYTES`` wait per connection and
direction; beyond that the reader stops reading and TCP's own flow control slows the
sender, as a full window would.

A cut direction, in one of two modes:

- ``blackhole`` (a WAN outage): open connections go silent in that direction — the
  reader stops reading and the writer holds what it has, so nothing is lost or
  reordered and it flows again on heal, as TCP's retransmissions would deliver it.
  A new connection needing the direction is accepted (a proxy cannot refuse a SYN it
  never sees) and held: nothing reaches the target until both directions are up; if
  the client gives up and closes first, it is dropped, never replayed.
- ``refuse`` (a firewall REJECT): open connections crossing it are aborted (both ends
  see a reset) and new ones are reset at once.

``abort_connections`` resets every open connection of a listener (``mq link reset``).
Everything here runs on one event loop; call it only from that loop.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import deque
from dataclasses import dataclass, field, fields

from mq.core.rng import Rng
from mq.deploy.shaping import LinkSettings, Shaper, Stream

CUT_MODES = ("blackhole", "refuse")
CHUNK = 64 * 1024
MAX_QUEUED_BYTES = 8 * 1024 * 1024
HOLD_BYTES = 1024 * 1024  # what a held connection may send before it is no longer read
CONNECT_TIMEOUT_S = 5.0


@dataclass
class ListenerStats:
    """What one listener did."""

    accepted: int = 0  # connections forwarded to the target
    forwarded_bytes: int = 0  # both directions
    refused: int = 0  # connections reset at once (a direction cut in refuse mode)
    blackholed: int = 0  # connections held at accept (a direction cut in blackhole mode)
    aborted: int = 0  # open connections reset by a cut or `abort_connections`
    upstream_failures: int = 0  # the target did not accept (down, or a paused backlog)

    def copy(self) -> ListenerStats:
        return ListenerStats(**{f.name: getattr(self, f.name) for f in fields(self)})


class Direction:
    """One direction of a link, shared by every listener and connection crossing it."""

    def __init__(self, name: str, settings: LinkSettings | None = None, *, rng: Rng | None = None) -> None:
        self.name = name
        self.shaper = Shaper(settings or LinkSettings(), rng or Rng(0).fork("link", name))
        self.cut_mode: str | None = None
        self._up = asyncio.Event()
        self._up.set()
        self._listeners: list[LinkListener] = []

    @property
    def is_up(self) -> bool:
        return self.cut_mode is None

    async def wait_up(self) -> None:
        await self._up.wait()

    def cut(self, mode: str = "blackhole") -> int:
        """Cut the direction; in ``refuse`` mode reset the open connections crossing it.
        Returns how many connections were reset."""
        if mode not in CUT_MODES:
            raise ValueError(f"a cut mode is one of {', '.join(CUT_MODES)}, not {mode!r}")
        self.cut_mode = mode
        self._up.clear()
        if mode != "refuse":
            return 0
        return sum(listener.abort_connections() for listener in self._listeners)

    def heal(self) -> None:
        self.cut_mode = None
        self._up.set()

    def open_connections(self) -> int:
        return sum(listener.open_connections() for listener in self._listeners)


def _abort(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:  # SO_LINGER 0: close() sends a RST, the peer sees "connection reset"
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    held: bool = False
    aborted: bool = False
    tasks: list[asyncio.Task] = field(default_factory=list)

    def abort(self) -> None:
        self.aborted = True
        for writer in (self.client, self.upstream):
            if writer is not None:
                _abort(writer)
        for task in self.tasks:
            task.cancel()

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()


class LinkListener:
    """Listens on ``host:port`` (0: any free port) and forwards to ``target``; see the
    module docstring."""

    def __init__(self, target: tuple[str, int], forward: Direction, backward: Direction, *,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = (str(target[0]), int(target[1]))
        self.forward = forward
        self.backward = backward
        self.host = host
        self.port = port
        self.stats = ListenerStats()
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task] = set()
        for direction in {id(forward): forward, id(backward): backward}.values():
            direction._listeners.append(self)

    async def start(self) -> LinkListener:
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        """Stop listening and reset every connection."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.abort()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def open_connections(self) -> int:
        return len(self._conns)

    def abort_connections(self) -> int:
        """Reset every open connection (held ones too); returns how many."""
        conns = [c for c in self._conns if not c.aborted]
        for conn in conns:
            conn.abort()
        self.stats.aborted += len(conns)
        return len(conns)

    def _blocking_mode(self) -> str | None:
        modes = {self.forward.cut_mode, self.backward.cut_mode}
        return "refuse" if "refuse" in modes else "blackhole" if "blackhole" in modes else None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(conn)
        self._tasks.add(task)
        try:
            mode = self._blocking_mode()
            held = b""
            if mode == "refuse":
                self.stats.refused += 1
                conn.abort()
                return
            if mode == "blackhole":
                self.stats.blackholed += 1
                conn.held = True
                kept = await self._hold(conn, reader)
                if kept is None:
                    return
                held, conn.held = kept, False
            self.stats.accepted += 1
            await self._forward(conn, reader, held)
        except (OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Only close() cancels this task; end it quietly (asyncio's stream server logs a
            # traceback for a connection task that ends cancelled).
            conn.abort()
        finally:
            self._conns.discard(conn)
            self._tasks.discard(task)
            if not conn.aborted:
                conn.close()  # ended by the peers, not by a cut: flush and FIN

    async def _both_up(self) -> None:
        while not (self.forward.is_up and self.backward.is_up):
            await self.forward.wait_up()
            await self.backward.wait_up()

    async def _hold(self, conn: _Conn, reader: asyncio.StreamReader) -> bytes | None:
        """Wait until both directions are up, keeping what the client sends (up to
        HOLD_BYTES); None when the client left first or the connection was reset."""
        buffer = bytearray()

        async def read_until_eof() -> None:
            while True:
                if len(buffer) >= HOLD_BYTES:
                    await asyncio.get_running_loop().create_future()  # stop reading: back-pressure
                data = await reader.read(HOLD_BYTES - len(buffer))
                if not data:
                    return
                buffer.extend(data)

        reading = asyncio.ensure_future(read_until_eof())
        opened = asyncio.ensure_future(self._both_up())
        try:
            await asyncio.wait([reading, opened], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (reading, opened):
                t.cancel()
            await asyncio.gather(reading, opened, return_exceptions=True)
        if conn.aborted or (reading.done() and not reading.cancelled()) or opened.cancelled():
            return None  # reset, or the client left (closed or failed) before the link came back
        return bytes(buffer)

    async def _forward(self, conn: _Conn, reader: asyncio.StreamReader, held: bytes) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError):
            self.stats.upstream_failures += 1
            if not conn.aborted:
                conn.abort()  # the client sees a reset, as from a refused connection
            return
        conn.upstream = up_writer
        if conn.aborted:  # reset while connecting
            _abort(up_writer)
            return
        _no_delay(conn.client)
        _no_delay(up_writer)
        out = _Pipe(reader, up_writer, self.forward, self.stats, held)
        back = _Pipe(up_reader, conn.client, self.backward, self.stats)
        conn.tasks = [asyncio.ensure_future(coro) for coro in
                      (out.read_loop(), out.write_loop(), back.read_loop(), back.write_loop())]
        try:
            done, _ = await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_EXCEPTION)
            if any(not t.cancelled() and t.exception() is not None for t in done) and not conn.aborted:
                conn.abort()  # a reset on one side: reset the other
        finally:
            for t in conn.tasks:
                t.cancel()
            await asyncio.gather(*conn.tasks, return_exceptions=True)


class _Pipe:
    """One direction of one connection: read, schedule on the direction's shaper, write
    each chunk at its time (see the module docstring)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: Direction,
                 stats: ListenerStats, initial: bytes = b"") -> None:
        self.reader = reader
        self.writer = writer
        self.direction = direction
        self.stats = stats
        self.stream = Stream()
        self.queue: deque[tuple[float, bytes]] = deque()
        self.queued_bytes = 0
        self.eof = False
        self.initial = initial
        self._wake = asyncio.Event()
        self._space = asyncio.Event()

    @staticmethod
    def _now_ms() -> float:
        return asyncio.get_running_loop().time() * 1000.0

    async def read_loop(self) -> None:
        if self.initial:
            self._take(self.initial)
        while True:
            await self.direction.wait_up()
            while self.queued_bytes >= MAX_QUEUED_BYTES:
                self._space.clear()
                await self._space.wait()
            data = await self.reader.read(CHUNK)
            if not data:
                break
            self._take(data)
        self.eof = True
        self._wake.set()

    def _take(self, data: bytes) -> None:
        self.queue.append((self.direction.shaper.schedule(self.stream, len(data), self._now_ms()), data))
        self.queued_bytes += len(data)
        self._wake.set()

    async def write_loop(self) -> None:
        shaper = self.direction.shaper
        while True:
            while not self.queue:
                if self.eof:
                    if self.writer.can_write_eof() and not self.writer.is_closing():
                        self.writer.write_eof()  # pass the half-close on
                    return
                self._wake.clear()
                await self._wake.wait()
            at, data = self.queue[0]
            while (wait_ms := max(at, shaper.stalled_until_ms) - self._now_ms()) > 0 or not self.direction.is_up:
                if wait_ms > 0:
                    await asyncio.sleep(wait_ms / 1000.0)
                else:
                    await self.direction.wait_up()  # cut after it was scheduled: held, not lost
            self.queue.popleft()
            self.writer.write(data)
            self.stats.forwarded_bytes += len(data)
            await self.writer.drain()
            self.queued_bytes -= len(data)
            self._space.set()
