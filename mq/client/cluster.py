"""ClusterClient: connections by broker, metadata refresh, request routing (Kafka's
``NetworkClient`` + ``Metadata`` updater), shared by Producer, Consumer and Admin.

Connections are keyed by address and *lane*: one per broker for everything, plus a
consumer's ``FETCH_LANE`` connection that carries only fetches. Responses come back in
request order, so a ListOffsets or Metadata request queued behind a long-poll fetch
would wait up to ``fetch_max_wait_ms``; on their own lane they never do, and the fetch
lane can be dropped (``abandon``) to discard a long-poll nobody wants any more.
A failed connect puts the address in
exponential backoff (``reconnect_backoff_ms`` doubling up to ``reconnect_backoff_max_ms``).
Metadata is asked of known brokers first, then of the bootstrap addresses in a seeded
rotation, moving on after each failure; only one refresh runs at a time and everyone
waiting for it shares its result.

``address_map`` (``{"advertised host:port": "host:port to dial"}``) is applied to the
bootstrap addresses and to every broker address learned from metadata or a
FindCoordinator answer: a mirror in another region reaches each source broker only
through its link proxy, while the brokers keep advertising their own addresses.
Addresses not in the map are dialled as they are.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping

from mq.client.connection import BrokerConnection
from mq.client.internals.metadata import Metadata, parse_address_map, parse_bootstrap
from mq.core.clock import Clock, SystemClock
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.protocol.messages import MetadataRequest, Request, Response

log = logging.getLogger("mq.client")

Address = tuple[str, int]
Key = tuple[Address, str]  # (address, lane)

FETCH_LANE = "fetch"


METADATA_ATTEMPT_TIMEOUT_MS = 3_000


class ClusterClient:
    def __init__(self, bootstrap: str, *, client_id: str, request_timeout_ms: int = 30_000,
                 connect_timeout_ms: int = 10_000, retry_backoff_ms: int = 100,
                 reconnect_backoff_ms: int = 50, reconnect_backoff_max_ms: int = 1000,
                 metadata_max_age_ms: int = 300_000, clock: Clock | None = None,
                 seed: int | None = None, address_map: Mapping[str, str] | None = None) -> None:
        self.clock = clock or SystemClock()
        self.rng = Rng(seed if seed is not None else int.from_bytes(os.urandom(8), "big"))
        try:
            addresses = parse_bootstrap(bootstrap)
            self.address_map = parse_address_map(address_map)
        except ValueError as exc:
            raise MqError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        self.metadata = Metadata(addresses, self.rng.fork("bootstrap"),
                                 retry_backoff_ms=retry_backoff_ms,
                                 metadata_max_age_ms=metadata_max_age_ms)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self._connections: dict[Key, BrokerConnection] = {}
        self._connecting: dict[Key, asyncio.Task] = {}
        self._backoff: dict[Address, tuple[int, int]] = {}  # address -> (retry at ms, backoff ms)
        self._refresh: asyncio.Task | None = None
        self._soon: asyncio.Task | None = None  # a refresh waiting out the backoff
        self.listeners: list[Callable[[], None]] = []  # called on metadata change / connect
        # Nodes learned outside metadata (FindCoordinator answers with the coordinator's
        # address, which may be newer than this client's metadata).
        self.extra_nodes: dict[int, Address] = {}
        # lane -> request timeout (a JoinGroup parks at the coordinator for up to the
        # rebalance timeout, far longer than request_timeout_ms)
        self.lane_timeouts_ms: dict[str, int] = {}
        self.closed = False

    def now_ms(self) -> int:
        return self.clock.monotonic_ms()

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()

    # ------------------------------------------------------------------ connections

    def dial(self, address: Address) -> Address:
        """Where to connect for an advertised ``address`` (``address_map``)."""
        return self.address_map.get(address, address)

    def address_of(self, node_id: int) -> Address | None:
        node = self.metadata.node(node_id)
        if node is not None:
            return self.dial((node.host, node.port))
        extra = self.extra_nodes.get(node_id)
        return None if extra is None else self.dial(extra)

    def add_node(self, node_id: int, host: str, port: int) -> None:
        """Make ``node_id`` reachable before metadata lists it (a FindCoordinator answer)."""
        self.extra_nodes[node_id] = (host, port)

    def backoff_remaining_ms(self, address: Address) -> int:
        entry = self._backoff.get(address)
        return max(0, entry[0] - self.now_ms()) if entry else 0

    def ready_connection(self, node_id: int, *, lane: str = "") -> BrokerConnection | None:
        """The node's connection if usable now; otherwise start connecting (unless in
        backoff) and return None. Listeners are told when the connect finishes."""
        address = self.address_of(node_id)
        if address is None:
            return None
        key = (address, lane)
        conn = self._connections.get(key)
        if conn is not None and conn.connected:
            conn.node_id = node_id  # first opened for bootstrap (-1) before ids were known
            return conn
        if key not in self._connecting and not self.backoff_remaining_ms(address):
            task = asyncio.get_running_loop().create_task(self._connect_quietly(node_id, key))
            self._connecting[key] = task
        return None

    def abandon(self, node_id: int, *, lane: str) -> None:
        """Close ``node_id``'s connection on ``lane``, failing what is in flight on it
        (deliberately: not a broker fault, so no backoff and no metadata refresh)."""
        address = self.address_of(node_id)
        conn = self._connections.pop((address, lane), None) if address is not None else None
        if conn is not None:
            conn.close(MqError(ErrorCode.NETWORK_EXCEPTION, "abandoned by the client"))

    async def _connect_quietly(self, node_id: int, key: Key) -> None:
        try:
            await self._connect(node_id, key)
        except MqError as exc:
            log.info("event=connect_failed node=%s address=%s:%s error=%s", node_id, *key[0], exc)
            self.metadata.request_update()
        finally:
            self._notify()

    async def _connect(self, node_id: int, key: Key) -> BrokerConnection:
        conn = self._connections.get(key)
        if conn is not None and conn.connected:
            return conn
        address = key[0]
        try:
            conn = await BrokerConnection.open(
                node_id, address[0], address[1], client_id=self.client_id,
                request_timeout_ms=self.lane_timeouts_ms.get(key[1], self.request_timeout_ms),
                connect_timeout_ms=self.connect_timeout_ms)
        except MqError:
            previous = self._backoff.get(address, (0, self.reconnect_backoff_ms // 2))[1]
            backoff = min(self.reconnect_backoff_max_ms, max(self.reconnect_backoff_ms, previous * 2))
            self._backoff[address] = (self.now_ms() + backoff, backoff)
            raise
        finally:
            self._connecting.pop(key, None)
        if self.closed:
            conn.close()
            raise MqError(ErrorCode.NETWORK_EXCEPTION, "client closed")
        self._backoff.pop(address, None)
        self._connections[key] = conn
        return conn

    async def connection(self, node_id: int, *, lane: str = "") -> BrokerConnection:
        """A connection to ``node_id``, waiting out a backoff if needed."""
        address = self.address_of(node_id)
        if address is None:
            await self.refresh_metadata()
            address = self.address_of(node_id)
            if address is None:
                raise MqError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} is not in the cluster")
        key = (address, lane)
        wait = self.backoff_remaining_ms(address)
        if wait:
            await asyncio.sleep(wait / 1000)
        pending = self._connecting.get(key)
        if pending is not None:
            await asyncio.shield(pending)
            conn = self._connections.get(key)
            if conn is not None and conn.connected:
                return conn
        return await self._connect(node_id, key)

    # ------------------------------------------------------------------ metadata

    def refresh_in_background(self) -> None:
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self._do_refresh()
        except MqError as exc:
            log.info("event=metadata_refresh_failed error=%s", exc)

    def update_metadata_soon(self) -> None:
        """Ask for a refresh, sent as soon as the refresh backoff allows (at once for a
        new topic); listeners are told when it answers. Idempotent while one is pending."""
        self.metadata.request_update()
        if self._soon is None or self._soon.done():
            self._soon = asyncio.get_running_loop().create_task(self._update_soon())

    async def _update_soon(self) -> None:
        wait = self.metadata.time_to_next_update_ms(self.now_ms())
        if wait:
            await asyncio.sleep(wait / 1000)
        try:
            await self.refresh_metadata()
        except MqError as exc:
            log.info("event=metadata_refresh_failed error=%s", exc)

    async def update_metadata(self) -> None:
        """Refresh after the refresh backoff (at once for a new topic); raises if no
        broker answers."""
        self.metadata.request_update()
        wait = self.metadata.time_to_next_update_ms(self.now_ms())
        if wait:
            await asyncio.sleep(wait / 1000)
        await self.refresh_metadata()

    async def refresh_metadata(self) -> None:
        """Refresh now (joining a refresh already running); raises if no broker answers."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self._do_refresh())
        await asyncio.shield(self._refresh)

    async def _do_refresh(self) -> None:
        md = self.metadata
        md.attempt_started(self.now_ms())
        errors = []
        candidates = list(dict.fromkeys(self.dial(a) for a in md.metadata_candidates()))
        # Addresses in backoff go last, not away: with every broker down we still try.
        candidates.sort(key=lambda a: self.backoff_remaining_ms(a) > 0)
        for address in candidates:
            try:
                conn = self._connections.get((address, ""))
                if conn is None or not conn.connected:
                    conn = await self._connect(-1, (address, ""))
                response = await self._metadata_attempt(conn)
            except MqError as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            md.update(response, self.now_ms())  # type: ignore[arg-type]
            self._notify()
            return
        md.update_failed(self.now_ms())
        self._notify()
        raise MqError(ErrorCode.NETWORK_EXCEPTION,
                      "no broker answered a metadata request (" + "; ".join(errors) + ")")

    async def _metadata_attempt(self, conn: BrokerConnection) -> Response:
        """One metadata request, given up after ``METADATA_ATTEMPT_TIMEOUT_MS``: a broker
        answers it in a millisecond, so one that stays silent is paused or overloaded.
        Its connection is closed and the next address is tried, instead of the whole
        client waiting ``request_timeout_ms`` on it."""
        timeout_s = min(self.request_timeout_ms, METADATA_ATTEMPT_TIMEOUT_MS) / 1000
        try:
            return await asyncio.wait_for(conn.request(MetadataRequest(topics=self.metadata.request_topics())),
                                          timeout_s)
        except TimeoutError:
            error = MqError(ErrorCode.REQUEST_TIMED_OUT,
                            f"{conn.host}:{conn.port} did not answer a metadata request within "
                            f"{timeout_s * 1000:.0f} ms (paused or overloaded?)")
            conn.close(error)
            raise error from None

    async def wait_for_topic(self, topic: str, deadline_ms: int) -> int:
        """Partition count of ``topic``, refreshing metadata until it is known or the deadline."""
        md = self.metadata
        md.add_topics(topic)
        last_error: MqError | None = None
        while True:
            count = md.partition_count(topic)
            if count:
                return count
            if self.now_ms() >= deadline_ms:
                err = md.topic_error(topic)
                if err is not None:
                    raise MqError(err, f"topic {topic!r}: {err.description}")
                raise last_error or MqError(ErrorCode.UNKNOWN_TOPIC,
                                            f"topic {topic!r} not in metadata in time")
            md.request_update()
            wait = md.time_to_next_update_ms(self.now_ms())  # the refresh backoff
            if wait:
                await asyncio.sleep(min(wait, max(1, deadline_ms - self.now_ms())) / 1000)
                continue
            try:
                await self.refresh_metadata()
            except MqError as exc:
                last_error = exc

    # ------------------------------------------------------------------ requests

    async def request(self, node_id: int, request: Request, *, lane: str = "") -> Response:
        conn = await self.connection(node_id, lane=lane)
        return await conn.request(request)

    async def request_any(self, request: Request) -> Response:
        """Send to any broker (a connected one first): for cluster-wide admin requests."""
        for (_, lane), conn in list(self._connections.items()):
            if conn.connected and lane == "":
                try:
                    return await conn.request(request)
                except MqError as exc:
                    if exc.code not in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                        raise
        await self.refresh_metadata()
        for (_, lane), conn in list(self._connections.items()):
            if conn.connected and lane == "":
                return await conn.request(request)
        raise MqError(ErrorCode.NETWORK_EXCEPTION, "no broker reachable")

    async def close(self) -> None:
        self.closed = True
        for conn in list(self._connections.values()):
            conn.close()
        self._connections.clear()
        await cancel_tasks([self._refresh, self._soon, *self._connecting.values()])


async def cancel_tasks(tasks: Iterable[asyncio.Task | None], *, timeout_s: float = 5.0) -> None:
    """Cancel ``tasks`` and wait until they finished (the calling task itself excluded);
    their outcomes are consumed, so no "exception was never retrieved" warning follows."""
    current = asyncio.current_task()
    pending = {t for t in tasks if t is not None and t is not current and not t.done()}
    for task in pending:
        task.cancel()
    if not pending:
        return
    done, still = await asyncio.wait(pending, timeout=timeout_s)
    for task in done:
        if not task.cancelled():
            task.exception()
    for task in still:
        log.warning("event=task_not_cancelled task=%r", task)
