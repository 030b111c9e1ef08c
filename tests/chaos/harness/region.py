"""A region of broker processes for chaos tests: every broker a Raft voter of the
metadata quorum, each with its own ``controller.quorum.voters`` string through the
link proxy (``proxy.py``), so the test can partition the brokers from each other
while clients keep using the real listen addresses.

``Region(root, size=3, configs={...})`` -> ``start()`` spawns every broker first and
then waits for each ready line (a broker is ready only once it is registered and
unfenced, which needs a quorum of them running). Per node: ``kill``, ``terminate``,
``pause``, ``resume``, ``power_loss``, ``start_node``, ``restart`` (the
``BrokerNode`` of ``processes.py`` does the work; nodes are addressed by node id).

What the region thinks is asked with raw Metadata requests to each broker that can
answer (running, not paused), and the freshest answer wins: the highest leader epoch
for a partition, the highest controller epoch for the controller. A minority
broker keeps a stale view; the majority's newer epochs outrank it. ``wait_*``
helpers poll with deadlines. ``RegionMonitor`` samples those views in a thread for
the time-based pass criteria (leaderless time, split brain, time to a new leader).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

from mq.core.rng import Rng
from mq.protocol import messages as m
from mq.protocol.inter_broker import (
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
    OffsetsForLeaderEpochRequest,
)

from ...integration.broker.raw import RawClient
from .processes import START_TIMEOUT_S, BrokerNode, format_failpoints, listen_port
from .proxy import LinkProxy
from .replicas import ReplicaCheck, compare_replicas

T = TypeVar("T")
QUERY_TIMEOUT_S = 1.0
POLL_S = 0.05
NO_LEADER = -1

# Short timeouts so a fault plays out within a CI run (the defaults are Kafka's).
FAST_FAILOVER: Mapping[str, str] = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
}


@dataclass(frozen=True)
class PartitionView:
    """One broker's view of one partition (``leader`` -1: none)."""

    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    source: int  # the node that answered
    error_code: int = 0


@dataclass(frozen=True)
class RegionView:
    """One broker's Metadata answer, reduced to what the tests look at."""

    source: int
    controller_id: int
    controller_epoch: int
    fenced: tuple[int, ...]
    brokers: tuple[int, ...]
    partitions: Mapping[int, PartitionView]


def _view(source: int, response: m.MetadataResponse, topic: str | None) -> RegionView:
    parts: dict[int, PartitionView] = {}
    for t in response.topics:
        if topic is not None and t.name == topic and not t.error_code:
            for p in t.partitions:
                parts[p.partition] = PartitionView(p.partition, p.leader_id, p.leader_epoch,
                                                   tuple(p.isr), tuple(p.replicas), source,
                                                   p.error_code)
    return RegionView(source, response.controller_id, response.controller_epoch,
                      tuple(sorted(b.node_id for b in response.brokers if b.fenced)),
                      tuple(sorted(b.node_id for b in response.brokers)), parts)


def freshest(views: Iterable[RegionView], partition: int) -> PartitionView | None:
    """The view of ``partition`` with the highest leader epoch (ties: a view that names
    a leader, then the lowest source id, so the choice never depends on timing)."""
    best: PartitionView | None = None
    for view in views:
        p = view.partitions.get(partition)
        if p is None:
            continue
        key = (p.leader_epoch, p.leader >= 0, -p.source)
        if best is None or key > (best.leader_epoch, best.leader >= 0, -best.source):
            best = p
    return best


def poll_until(condition: Callable[[], T | None], *, timeout_s: float, what: str,
               describe: Callable[[], str] | None = None) -> T:
    """Call ``condition`` until it returns something truthy; TimeoutError naming
    ``what`` (and ``describe()``, the state seen last) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            detail = f": {describe()}" if describe is not None else ""
            raise TimeoutError(f"{what} not within {timeout_s}s{detail}")
        time.sleep(POLL_S)  # polling a condition, with a deadline


class Region:
    """``size`` brokers (node ids 1..size) under ``root``; see the module docstring."""

    def __init__(self, root: str | Path, *, size: int = 3, configs: Mapping[str, str] | None = None,
                 node_configs: Mapping[int, Mapping[str, str]] | None = None,
                 failpoints: Mapping[int, Mapping[str, str] | str] | None = None,
                 proxy: bool = True, proxy_mode: str = "blackhole") -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        ids = list(range(1, size + 1))
        ports: dict[int, int] = {}
        for n in ids:
            while (port := listen_port()) in ports.values():
                pass
            ports[n] = port
        self.proxy: LinkProxy | None = None
        if proxy:
            self.proxy = LinkProxy({n: ("127.0.0.1", ports[n]) for n in ids}, mode=proxy_mode).start()
        direct = ",".join(f"{n}@127.0.0.1:{ports[n]}" for n in ids)
        self.nodes: dict[int, BrokerNode] = {}
        for n in ids:
            voters = self.proxy.voters_for(n) if self.proxy is not None else direct
            node_cfg = {**FAST_FAILOVER, **(configs or {}), **((node_configs or {}).get(n, {})),
                        "controller.quorum.voters": voters}
            fp = (failpoints or {}).get(n, "")
            self.nodes[n] = BrokerNode(f"n{n}", self.root, ports[n], node_id=n, configs=node_cfg,
                                       failpoints=fp if isinstance(fp, str) else format_failpoints(fp))

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, timeout_s: float = START_TIMEOUT_S * 2) -> Region:
        """Spawn every broker, then wait until each is ready."""
        return self.start_nodes(self.ids, timeout_s=timeout_s)

    def start_nodes(self, ids: Iterable[int], *, timeout_s: float = START_TIMEOUT_S * 2) -> Region:
        """Spawn the given (stopped) nodes together, then wait for each: after a power
        loss of every node none can be ready before a quorum of them runs."""
        ids = sorted(ids)
        for n in ids:
            self.nodes[n].spawn()
        deadline = time.monotonic() + timeout_s
        for n in ids:
            self.nodes[n].wait_ready(timeout_s=max(0.1, deadline - time.monotonic()))
        return self

    def close(self) -> None:
        """Stop every broker (resumed first if paused) and the proxy, whatever state a
        failing test left them in."""
        try:
            for node in self.nodes.values():
                if node.paused:
                    node.resume()
            for node in self.nodes.values():
                if node.running:
                    node.terminate(timeout_s=5.0)
        finally:
            if self.proxy is not None:
                self.proxy.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ids(self) -> list[int]:
        return sorted(self.nodes)

    def node(self, node_id: int) -> BrokerNode:
        return self.nodes[node_id]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.nodes[n].bootstrap for n in self.ids)

    def live_ids(self) -> list[int]:
        """Running and not paused: the nodes that can answer."""
        return [n for n in self.ids if self.nodes[n].running and not self.nodes[n].paused]

    # per-node faults, by node id
    def kill(self, n: int) -> None:
        self.nodes[n].kill()

    def terminate(self, n: int, *, timeout_s: float = 15.0) -> int | None:
        return self.nodes[n].terminate(timeout_s=timeout_s)

    def pause(self, n: int) -> None:
        self.nodes[n].pause()

    def resume(self, n: int) -> None:
        self.nodes[n].resume()

    def power_loss(self, n: int, *, rng: Rng | None = None) -> dict[str, int]:
        return self.nodes[n].power_loss(rng=rng)

    def start_node(self, n: int, *, timeout_s: float = START_TIMEOUT_S * 2) -> BrokerNode:
        return self.nodes[n].start(timeout_s=timeout_s)

    def restart(self, n: int, *, timeout_s: float = START_TIMEOUT_S * 2) -> BrokerNode:
        self.nodes[n].terminate()
        return self.nodes[n].start(timeout_s=timeout_s)

    def stderr_tracebacks(self) -> dict[int, str]:
        """Nodes whose stderr holds a Python traceback, with the last 3,000 characters."""
        return {n: node.stderr_text()[-3000:] for n, node in self.nodes.items()
                if "Traceback" in node.stderr_text()}

    # ------------------------------------------------------------------ raw requests

    def client(self, n: int, *, timeout_s: float = QUERY_TIMEOUT_S) -> RawClient:
        node = self.nodes[n]
        return RawClient(node.host, node.port, timeout_s=timeout_s)

    def ask(self, n: int, request: m.Request, *, timeout_s: float = QUERY_TIMEOUT_S) -> Any:
        """One request to node ``n``; None when it cannot answer in time."""
        if n not in self.live_ids():
            return None
        try:
            with self.client(n, timeout_s=timeout_s) as c:
                return c.request(request)
        except (OSError, ConnectionError, AssertionError):
            return None

    def view(self, n: int, topic: str | None = None) -> RegionView | None:
        response = self.ask(n, m.MetadataRequest(topics=[topic] if topic else []))
        return None if response is None else _view(n, response, topic)

    def views(self, topic: str | None = None, *, nodes: Iterable[int] | None = None) -> list[RegionView]:
        out = []
        for n in sorted(nodes) if nodes is not None else self.live_ids():
            v = self.view(n, topic)
            if v is not None:
                out.append(v)
        return out

    def partition_state(self, topic: str, partition: int, *,
                        nodes: Iterable[int] | None = None) -> PartitionView | None:
        return freshest(self.views(topic, nodes=nodes), partition)

    def leader_of(self, topic: str, partition: int, *, nodes: Iterable[int] | None = None) -> int | None:
        """The partition's leader in the freshest view (None: no leader known)."""
        p = self.partition_state(topic, partition, nodes=nodes)
        return p.leader if p is not None and p.leader >= 0 else None

    def controller(self, *, nodes: Iterable[int] | None = None) -> tuple[int, int] | None:
        """``(controller_id, controller_epoch)`` of the freshest view that names one."""
        known = [(v.controller_epoch, v.controller_id) for v in self.views(nodes=nodes)
                 if v.controller_id >= 0]
        if not known:
            return None
        epoch, cid = max(known)
        return cid, epoch

    def end_offsets(self, topic: str, partitions: int, *, timestamp: int = -1) -> dict[int, int]:
        """Each partition's high watermark (``-1``) from its current leader."""
        out: dict[int, int] = {}
        for p in range(partitions):
            leader = self.leader_of(topic, p)
            if leader is None:
                raise RuntimeError(f"{topic}-{p} has no leader")
            request = m.ListOffsetsRequest([m.ListOffsetsTopic(topic, [m.ListOffsetsPartition(p, timestamp)])])
            response = self.ask(leader, request)
            if response is None or response.topics[0].partitions[0].error_code:
                raise RuntimeError(f"ListOffsets {topic}-{p} on {leader}: {response}")
            out[p] = response.topics[0].partitions[0].offset
        return out

    def epoch_end_offset(self, n: int, topic: str, partition: int, leader_epoch: int,
                         *, current_leader_epoch: int = -1) -> tuple[int, int, int] | None:
        """OffsetsForLeaderEpoch on node ``n``: ``(error_code, leader_epoch, end_offset)``
        — what a consumer asks after a leader change to detect truncation (KIP-320)."""
        request = OffsetsForLeaderEpochRequest([OffsetForLeaderTopic(topic, [
            OffsetForLeaderPartition(partition, leader_epoch, current_leader_epoch=current_leader_epoch)])])
        response = self.ask(n, request)
        if response is None:
            return None
        r = response.topics[0].partitions[0]
        return r.error_code, r.leader_epoch, r.end_offset

    # ------------------------------------------------------------------ waiting

    def wait_controller(self, *, timeout_s: float = 20.0, nodes: Iterable[int] | None = None
                        ) -> tuple[int, int]:
        nodes = list(nodes) if nodes is not None else None
        return poll_until(lambda: self.controller(nodes=nodes), timeout_s=timeout_s,
                          what="an active controller")

    def wait_registered(self, *, timeout_s: float = 20.0) -> None:
        """Every running broker registered and unfenced in the freshest broker list."""
        def ok() -> bool:
            views = self.views()
            if not views:
                return False
            latest = max(views, key=lambda v: v.controller_epoch)
            return set(self.live_ids()) <= set(latest.brokers) and not (set(self.live_ids()) & set(latest.fenced))
        poll_until(ok, timeout_s=timeout_s, what="every broker registered and unfenced",
                   describe=lambda: repr(self.views()))

    def wait_leader(self, topic: str, partition: int, *, among: Iterable[int] | None = None,
                    not_in: Iterable[int] = (), min_epoch: int = -1, nodes: Iterable[int] | None = None,
                    timeout_s: float = 20.0) -> PartitionView:
        """A leader in ``among`` (default: any), not in ``not_in``, at ``min_epoch`` or later,
        as seen by ``nodes`` (default: every node that answers)."""
        among = set(among) if among is not None else None
        excluded = set(not_in)
        nodes = list(nodes) if nodes is not None else None

        def found() -> PartitionView | None:
            p = self.partition_state(topic, partition, nodes=nodes)
            if p is None or p.leader < 0 or p.leader in excluded or p.leader_epoch < min_epoch:
                return None
            return p if among is None or p.leader in among else None
        return poll_until(found, timeout_s=timeout_s, what=f"a new leader of {topic}-{partition}",
                          describe=lambda: repr(self.partition_state(topic, partition, nodes=nodes)))

    def wait_isr(self, topic: str, partition: int, isr: Callable[[tuple[int, ...]], bool] | Iterable[int],
                 *, timeout_s: float = 20.0, nodes: Iterable[int] | None = None) -> PartitionView:
        """The ISR matches ``isr`` (a set of node ids, or a predicate on the ISR)."""
        pred = isr if callable(isr) else (lambda got, want=frozenset(isr): set(got) == want)
        nodes = list(nodes) if nodes is not None else None

        def found() -> PartitionView | None:
            p = self.partition_state(topic, partition, nodes=nodes)
            return p if p is not None and p.leader >= 0 and pred(p.isr) else None
        return poll_until(found, timeout_s=timeout_s, what=f"ISR of {topic}-{partition}",
                          describe=lambda: repr(self.partition_state(topic, partition, nodes=nodes)))

    def wait_healthy(self, topic: str, partitions: int, *, timeout_s: float = 30.0) -> dict[int, PartitionView]:
        """Every partition led by a live broker with every replica in the ISR."""
        def ok() -> dict[int, PartitionView] | None:
            views = self.views(topic)
            out = {}
            for p in range(partitions):
                state = freshest(views, p)
                if state is None or state.leader not in self.live_ids() \
                        or set(state.isr) != set(state.replicas) or not state.replicas:
                    return None
                out[p] = state
            return out
        return poll_until(ok, timeout_s=timeout_s, what=f"{topic}: every partition led with a full ISR",
                          describe=lambda: repr([freshest(self.views(topic), p) for p in range(partitions)]))

    def replica_check(self, topic: str, partitions: int, *, timeout_s: float = 30.0) -> ReplicaCheck:
        """Wait for full ISRs, then compare every replica's batches below the high
        watermark (byte-identical, TESTING.md's replica check)."""
        self.wait_healthy(topic, partitions, timeout_s=timeout_s)
        hws = self.end_offsets(topic, partitions)
        dirs = [self.nodes[n].data_dir for n in self.ids]
        return compare_replicas(dirs, below={f"{topic}-{p}": hw for p, hw in hws.items()},
                                partitions=[f"{topic}-{p}" for p in range(partitions)])


# ---------------------------------------------------------------------- monitor


@dataclass(frozen=True)
class Sample:
    """One monitoring round: every answering node's view at ``time_ms``."""

    time_ms: int
    live: tuple[int, ...]  # running and not paused when the round started
    views: tuple[RegionView, ...]

    def best(self, partition: int, *, nodes: Iterable[int] | None = None) -> PartitionView | None:
        wanted = set(nodes) if nodes is not None else None
        return freshest((v for v in self.views if wanted is None or v.source in wanted), partition)


@dataclass
class RegionMonitor:
    """Samples every answering broker's view of ``topic`` about every ``interval_s``
    in a thread; times are the ``clock``'s (pass ``history.now_ms`` to line samples up
    with the history). The analyses read ``samples`` after ``stop()``."""

    region: Region
    topic: str
    partitions: int
    clock: Callable[[], int]
    interval_s: float = 0.1
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-monitor", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> RegionMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():  # not started when the region failed to start
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            t = self.clock()
            live = tuple(self.region.live_ids())
            views = tuple(self.region.views(self.topic, nodes=live))
            with self._lock:
                self.samples.append(Sample(t, live, views))
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def dump(self, path: str | Path) -> Path:
        """Write the samples as JSON lines: per sample, each answering node's view
        ``{partition: [leader, leader_epoch, isr]}`` and its controller — the timeline
        to read next to the history when a test fails."""
        path = Path(path)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"time_ms": s.time_ms, "live": s.live, "views": {
                    v.source: {"controller": [v.controller_id, v.controller_epoch],
                               "fenced": v.fenced,
                               "partitions": {p.partition: [p.leader, p.leader_epoch, p.isr]
                                              for p in v.partitions.values()}}
                    for v in s.views}}, separators=(",", ":")) + "\n" for s in self.snapshot())
        return path

    # ------------------------------------------------------------------ analyses

    def leaderless_spans(self, partition: int, *, nodes: Iterable[int] | None = None
                         ) -> list[tuple[int, int]]:
        """``[(from_ms, to_ms)]`` while the freshest view named no leader, or a leader
        that was not live (killed, stopped or paused: nobody can write to it)."""
        spans, start = [], None
        for s in self.snapshot():
            best = s.best(partition, nodes=nodes)
            bad = best is None or best.leader < 0 or best.leader not in s.live
            if bad and start is None:
                start = s.time_ms
            elif not bad and start is not None:
                spans.append((start, s.time_ms))
                start = None
        if start is not None:
            spans.append((start, self.snapshot()[-1].time_ms))
        return spans

    def split_brain(self) -> list[str]:
        """Epochs for which two brokers named different leaders (one leader per epoch)."""
        seen: dict[tuple[int, int], set[int]] = {}
        for s in self.snapshot():
            for v in s.views:
                for p in v.partitions.values():
                    if p.leader >= 0:
                        seen.setdefault((p.partition, p.leader_epoch), set()).add(p.leader)
        return [f"p{p} epoch {e}: leaders {sorted(ls)}" for (p, e), ls in sorted(seen.items())
                if len(ls) > 1]

    def first(self, predicate: Callable[[Sample], bool], *, after_ms: int = 0) -> int | None:
        """Time of the first sample at or after ``after_ms`` satisfying ``predicate``."""
        for s in self.snapshot():
            if s.time_ms >= after_ms and predicate(s):
                return s.time_ms
        return None

    def leaders(self, partition: int, *, from_ms: int = 0, to_ms: float = float("inf"),
                nodes: Iterable[int] | None = None) -> list[tuple[int, int, int, tuple[int, ...]]]:
        """``(time_ms, leader, leader_epoch, isr)`` of the freshest view in each sample."""
        out = []
        for s in self.snapshot():
            if from_ms <= s.time_ms <= to_ms:
                b = s.best(partition, nodes=nodes)
                if b is not None:
                    out.append((s.time_ms, b.leader, b.leader_epoch, b.isr))
        return out


def groups_text(groups: Sequence[Iterable[int]]) -> str:
    return " | ".join(",".join(f"n{n}" for n in sorted(g)) for g in groups)
