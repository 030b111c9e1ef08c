"""TableView: a keyed topic and its remote copies, materialized into one key -> value map
under the topic's conflict policy, kept up to date.

``orders`` in region west is read together with ``east.orders``, ``south.orders``...: the
remote topics the active-active mirror writes (``<source region>.<topic>``). The known
regions are ``regions=`` plus the topic's ``conflict.home.regions``; with neither, any
topic named ``<name>.orders`` where ``<name>`` has no dot counts as a remote copy. Every
partition is read from the beginning by a plain consumer (no group, nothing committed),
and records go through the merge core (``mq.client.internals.table``) as they arrive;
remote topics created later are found every ``discover_interval_ms``.

The policy is the topic's ``conflict.policy`` (from Metadata), and this region's name is
the broker's ``region.name``; ``policy=`` and ``region=`` override them (a table of a topic
without a policy, say). ``catch_up()`` waits until everything written before the call has
been applied: then two regions whose mirrors are drained show equal ``digest()``s.

    async with TableView("localhost:9192", "orders") as table:
        await table.catch_up()
        print(len(table), table.get(b"k1"), table.digest())
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Self

from mq.client.consumer import Consumer
from mq.client.internals.table import Entry, TableState, TableStats
from mq.core.conflict import ConflictPolicy, ConflictRules, parse_policy
from mq.core.errors import ErrorCode, MqError
from mq.core.hlc import Hlc
from mq.core.types import TopicPartition
from mq.protocol.messages import MetadataRequest, MetadataResponse

log = logging.getLogger("mq.client.table")

_PLAIN_REGION = re.compile(r"[A-Za-z0-9_-]{1,64}")


def remote_copies(topic: str, names: Iterable[str], regions: Iterable[str], here: str) -> dict[str, str]:
    """``{remote topic: its source region}`` among ``names``: ``<region>.<topic>`` for a known
    region other than ``here`` (any dot-free prefix when no region is known)."""
    known = [r for r in regions if r != here]
    out = {}
    for name in sorted(names):
        prefix, dot, rest = name.partition(".")
        if not dot or rest != topic or prefix == here:
            continue
        if (prefix in known) if known else _PLAIN_REGION.fullmatch(prefix) is not None:
            out[name] = prefix
    return out


class TableView:
    def __init__(self, bootstrap: str, topic: str, *, region: str | None = None,
                 regions: Iterable[str] = (), policy: str | ConflictPolicy | None = None,
                 discover_interval_ms: int = 5_000, fetch_max_wait_ms: int = 100,
                 request_timeout_ms: int = 30_000, client_id: str = "mq-table-view",
                 address_map: Mapping[str, str] | None = None) -> None:
        self.topic = topic
        self.region = region
        self.extra_regions = list(regions)
        self.discover_interval_ms = discover_interval_ms
        self._policy = None if policy is None else parse_policy(policy)
        if self._policy is not None and not isinstance(self._policy, ConflictPolicy):
            raise MqError(ErrorCode.INVALID_CONFIG, f"policy must be one of none, home-region, "
                                                    f"last-writer-wins, not {policy!r}")
        self.consumer = Consumer(bootstrap, auto_offset_reset="earliest", client_id=client_id,
                                 fetch_max_wait_ms=fetch_max_wait_ms,
                                 request_timeout_ms=request_timeout_ms, address_map=address_map)
        self.state: TableState | None = None
        self.sources: dict[str, str] = {}  # topic read -> the region its records come from
        self._task: asyncio.Task | None = None
        self._error: BaseException | None = None
        self._progress = asyncio.Event()
        self._discovering = asyncio.Lock()  # catch_up and the reader both look for sources
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Learn the policy and this region, find the sources, start reading."""
        await self.consumer.start()
        cluster = self.consumer.cluster
        await cluster.wait_for_topic(self.topic, cluster.now_ms() + self.consumer.request_timeout_ms)
        md = cluster.metadata
        rules = md.conflict_rules(self.topic) or ConflictRules()
        if self._policy is not None:
            rules = ConflictRules(self._policy, rules.regions, rules.home_map)
        self.region = self.region if self.region is not None else md.region
        if rules.active and not self.region:
            raise MqError(ErrorCode.INVALID_CONFIG,
                          f"{self.topic} has conflict.policy={rules.policy.value}, which needs this region's "
                          "name, and the broker has no region.name: pass region=NAME")
        self.state = TableState(rules)
        await self._discover()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.consumer.close()

    # ------------------------------------------------------------------ reading

    async def _discover(self) -> None:
        """Add remote copies that appeared since the last look (read from their beginning)."""
        async with self._discovering:
            await self._discover_locked()

    async def _discover_locked(self) -> None:
        cluster = self.consumer.cluster
        response = await cluster.request_any(MetadataRequest(topics=None))
        assert isinstance(response, MetadataResponse)
        names = [t.name for t in response.topics if t.error_code == ErrorCode.NONE]
        regions = [*self.extra_regions, *self.state.rules.regions] if self.state else self.extra_regions
        wanted = {self.topic: self.region or "", **remote_copies(self.topic, names, regions, self.region or "")}
        new = [t for t in wanted if t not in self.sources]
        if not new:
            return
        deadline = cluster.now_ms() + self.consumer.request_timeout_ms
        tps = list(self.consumer.assignment())
        for name in new:
            count = await cluster.wait_for_topic(name, deadline)
            tps += [TopicPartition(name, p) for p in range(count)]
            self.sources[name] = wanted[name]
            log.info("table_source topic=%s region=%s partitions=%d", name, wanted[name] or "-", count)
        self.consumer.assign(tps)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_discovery = loop.time() + self.discover_interval_ms / 1000
        apply, sources = self.state.apply, self.sources  # type: ignore[union-attr]
        try:
            while True:
                for r in await self.consumer.poll(timeout_ms=100):
                    apply(r.key, r.value, r.headers, region=sources[r.topic], timestamp_ms=r.timestamp)
                self._progress.set()
                if loop.time() >= next_discovery:
                    await self._discover()
                    next_discovery = loop.time() + self.discover_interval_ms / 1000
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - kept and raised by catch_up
            self._error = exc
            self._progress.set()
            log.warning("table_view_stopped topic=%s error=%r", self.topic, exc)

    async def catch_up(self, timeout_ms: int = 30_000) -> None:
        """Return once every record written to the sources before this call is applied
        (a new discovery runs first); ``REQUEST_TIMED_OUT`` after ``timeout_ms``."""
        self._check()
        await self._discover()
        tps = self.consumer.assignment()
        ends = await self.consumer.end_offsets(tps)
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while True:
            self._check()
            behind = [tp for tp in tps if (self._position(tp) or 0) < ends[tp]]
            if not behind:
                return
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise MqError(ErrorCode.REQUEST_TIMED_OUT,
                              f"table {self.topic} not caught up within {timeout_ms} ms: {behind[0]} at "
                              f"{self._position(behind[0])}, end {ends[behind[0]]}")
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), min(remaining, 0.5))

    def _position(self, tp: TopicPartition) -> int | None:
        return self.consumer.subscriptions.state(tp).position

    def _check(self) -> None:
        if self.state is None:
            raise MqError(ErrorCode.INVALID_REQUEST, "the table view is not started (use start() or async with)")
        if self._error is not None:
            raise self._error

    # ------------------------------------------------------------------ the table

    @property
    def table(self) -> TableState:
        self._check()
        return self.state  # type: ignore[return-value]

    @property
    def policy(self) -> ConflictPolicy:
        return self.table.rules.policy

    def get(self, key: bytes) -> bytes | None:
        return self.table.get(key)

    def entry(self, key: bytes) -> Entry | None:
        """The row with its stamp and origin region (tombstones included)."""
        return self.table.entries.get(key)

    def items(self) -> dict[bytes, bytes]:
        """The live rows, in key order."""
        return self.table.view()

    def __len__(self) -> int:
        return len(self.table)

    def digest(self) -> str:
        return self.table.digest()

    @property
    def stats(self) -> TableStats:
        return self.table.stats

    @property
    def max_hlc(self) -> Hlc:
        """The greatest stamp applied (feed it to ``producer.observe_hlc`` to write after it)."""
        return self.table.max_hlc
