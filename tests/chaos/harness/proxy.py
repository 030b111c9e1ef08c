"""The link proxy: network partitions between broker processes on one host.

There is no ``netem`` here and no root by default (TOOLCHAIN.md), so partitions come
from a TCP proxy. Brokers reach each other only through the addresses of
``controller.quorum.voters`` (Raft, replica fetches, controller requests), so each
broker gets its *own* voters string in which every other voter's address is the
proxy's port for the directed link ``this broker -> that broker``
(``voters_for(node)``). Clients use the brokers' real listen addresses and are never
proxied: "the client is still connected to the isolated leader" comes for free.

A link is a direction: ``cut(1, 2)`` breaks the connections broker 1 opens to
broker 2 (requests from 1 and their answers), while broker 2 can still open its
own connections to broker 1. Raft messages travel one way each (a reply is a
message in the other direction), so cutting only ``2 -> 1`` leaves 1 able to send
to 2 and deaf to 2's messages — the asymmetric partitions Raft's pre-vote exists for.
``isolate``, ``partition`` and ``cut_both`` cut both directions.

Cutting a link aborts its open connections (both ends see a reset) and then, for new
connections, either

- ``blackhole`` (default): accept and never forward (the bytes are read and dropped),
  so the sender sees timeouts, as behind a real partition; or
- ``refuse``: accept and reset at once (a fast failure, like a closed port).

Healing a link aborts the blackholed connections, so a sender that never times out
(one-way Raft messages need no answer) reconnects instead of writing into the void.

The forwarding is the product's link proxy (``mq.deploy.link_proxy``, what ``mq up``
runs between regions): one ``LinkListener`` per directed link whose one ``Direction``
carries both ways, unshaped. The harness's cut is the product's cut plus an abort of
what is open, and its heal aborts the held connections first, as described above.

The proxy runs an asyncio loop in its own daemon thread; every public method is
called from the test's thread and returns once the change is in effect (existing
connections already aborted).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from mq.deploy.link_proxy import CUT_MODES, Direction, LinkListener, ListenerStats

MODES = CUT_MODES
CALL_TIMEOUT_S = 10.0

Link = tuple[int, int]
LinkStats = ListenerStats  # accepted, forwarded_bytes, refused, blackholed, aborted, upstream_failures


class LinkProxy:
    """One listening port per directed link between the nodes of ``targets``
    (``{node_id: (host, port)}``, the real addresses); see the module docstring."""

    def __init__(self, targets: Mapping[int, tuple[str, int]], *, host: str = "127.0.0.1",
                 mode: str = "blackhole") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.host = host
        self.mode = mode
        self.targets = {int(n): (str(h), int(p)) for n, (h, p) in sorted(targets.items())}
        self._links: dict[Link, LinkListener] = {}
        for src, dst in itertools.permutations(sorted(self.targets), 2):
            direction = Direction(f"{src}->{dst}")
            self._links[(src, dst)] = LinkListener(self.targets[dst], direction, direction, host=host)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LinkProxy:
        if self._loop is not None:
            raise RuntimeError("the proxy is already started")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-link-proxy",
                                        daemon=True)
        self._thread.start()
        try:
            self._call(self._bind_all())
        except BaseException:
            self.close()
            raise
        return self

    async def _bind_all(self) -> None:
        for listener in self._links.values():
            await listener.start()

    def close(self) -> None:
        """Stop listening, abort every connection, stop the thread. Idempotent."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            try:
                future.result(CALL_TIMEOUT_S)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                assert self._thread is not None
                self._thread.join(CALL_TIMEOUT_S)
        loop.close()

    async def _shutdown(self) -> None:
        await asyncio.gather(*(listener.close() for listener in self._links.values()))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Any) -> Any:
        if self._loop is None:
            coro.close()
            raise RuntimeError("the proxy is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT_S)

    # ------------------------------------------------------------------ addresses

    @property
    def nodes(self) -> list[int]:
        return list(self.targets)

    def links(self) -> list[Link]:
        return sorted(self._links)

    def port(self, src: int, dst: int) -> int:
        return self._state(src, dst).port

    def address(self, src: int, dst: int) -> tuple[str, int]:
        return self.host, self.port(src, dst)

    def voters_for(self, node: int) -> str:
        """``controller.quorum.voters`` for ``node``: its own real address, and for every
        other voter the proxy port of the link ``node -> voter``."""
        parts = []
        for other, (host, port) in self.targets.items():
            if other != node:
                host, port = self.address(node, other)
            parts.append(f"{other}@{host}:{port}")
        return ",".join(parts)

    def _state(self, src: int, dst: int) -> LinkListener:
        try:
            return self._links[(src, dst)]
        except KeyError:
            raise KeyError(f"no link {src}->{dst} (nodes {self.nodes})") from None

    # ------------------------------------------------------------------ faults

    def cut(self, src: int, dst: int, *, mode: str | None = None) -> None:
        """Break the directed link ``src -> dst`` (see the module docstring)."""
        self._cut([(src, dst)], mode)

    def cut_both(self, a: int, b: int, *, mode: str | None = None) -> None:
        self._cut([(a, b), (b, a)], mode)

    def heal(self, src: int, dst: int) -> None:
        self._heal([(src, dst)])

    def heal_both(self, a: int, b: int) -> None:
        self._heal([(a, b), (b, a)])

    def isolate(self, node: int, *, mode: str | None = None) -> None:
        """Cut every link from and to ``node``; the others still reach each other."""
        self._state(node, next(n for n in self.nodes if n != node))  # validates node
        self._cut([link for link in self._links if node in link], mode)

    def partition(self, groups: Sequence[Iterable[int]], *, mode: str | None = None) -> None:
        """Cut every link between nodes of different ``groups`` (both directions); a node
        in no group is alone. Links inside a group are left as they are."""
        group_of: dict[int, int] = {}
        for number, group in enumerate(groups):
            for node in group:
                if node not in self.targets or node in group_of:
                    raise ValueError(f"bad partition {groups!r}: node {node} unknown or twice")
                group_of[node] = number
        alone = itertools.count(len(groups))
        for node in self.nodes:
            group_of.setdefault(node, next(alone))
        self._cut([(s, d) for s, d in self._links if group_of[s] != group_of[d]], mode)

    def heal_all(self) -> None:
        self._heal(list(self._links))

    def is_cut(self, src: int, dst: int) -> bool:
        return not self._state(src, dst).forward.is_up

    def cut_links(self) -> list[Link]:
        return [link for link, listener in sorted(self._links.items()) if not listener.forward.is_up]

    def stats(self, src: int, dst: int) -> LinkStats:
        """A copy of the link's counters."""
        return self._state(src, dst).stats.copy()

    def _cut(self, links: list[Link], mode: str | None) -> None:
        mode = mode or self.mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        for link in links:
            self._state(*link)
        self._call(self._apply(links, mode))

    def _heal(self, links: list[Link]) -> None:
        for link in links:
            self._state(*link)
        self._call(self._apply(links, None))

    async def _apply(self, links: list[Link], mode: str | None) -> None:
        for link in sorted(links):
            listener = self._links[link]
            if listener.forward.cut_mode == mode:
                continue
            # Up -> cut: abort what was forwarded. Cut -> up: abort what was held, so a
            # sender that never times out reconnects instead of writing into the void.
            if mode is None:
                listener.abort_connections()
                listener.forward.heal()
            else:
                listener.forward.cut(mode)
                listener.abort_connections()
