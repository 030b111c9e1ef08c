"""What runs where, as data: regions of brokers, the WAN links between them, mirror flows.

A ``Topology`` is one region: its brokers (``BrokerSpec``), controller voters and data
directory. A ``Deployment`` is everything ``mq up`` starts: one or more regions, the
directed ``LinkSpec``s between them, the link processes that carry them (``LinkPair``:
one per pair of regions, one proxy listener per broker of each side) and the mirror
flows (``FlowSpec``). ``mq.deploy.region`` and ``mq.deploy.regions_file`` read
``regions/*.yaml`` into this shape; ``mq up --single`` builds a one-broker region.

The deployment is also what ``<data-dir>/cluster.json`` records (``Deployment.to_json``,
schema in docs/reference/regions.md), so ``mq status``, ``mq down``, ``mq link`` and the
mirror processes know what was started without guessing; ``load_cluster`` reads it back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any

from mq.deploy.shaping import LinkSettings

DEFAULT_LISTEN = "127.0.0.1:9092"
METRICS_PORT_OFFSET = 10_000  # the broker's default: /metrics on the native port + 10000


def split_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``("host", port)``; raises ValueError with a readable message."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT (for example 127.0.0.1:9092)")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class BrokerSpec:
    """One broker process: its id, where it listens and where its log lives."""

    node_id: int
    listen: str
    data_dir: str
    metrics_listen: str = ""
    configs: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"broker-{self.node_id}"

    @property
    def metrics_endpoint(self) -> str:
        if self.metrics_listen:
            return self.metrics_listen
        host, port = split_host_port(self.listen)
        return f"{host}:{port + METRICS_PORT_OFFSET}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.data_dir, "broker.log")

    @property
    def pid_path(self) -> str:
        return os.path.join(self.data_dir, "broker.pid")

    def broker_args(self) -> list[str]:
        """Arguments of ``mq broker`` (and ``python -m mq.aio.runner``) that start this broker."""
        args = ["--node-id", str(self.node_id), "--data-dir", self.data_dir, "--listen", self.listen]
        if self.metrics_listen:
            args += ["--metrics-listen", self.metrics_listen]
        for key, value in self.configs:
            args += ["--config", f"{key}={value}"]
        return args

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id, "listen": self.listen, "data_dir": self.data_dir,
            "metrics_listen": self.metrics_listen, "metrics": self.metrics_endpoint,
            "configs": [list(kv) for kv in self.configs],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerSpec:
        return cls(
            node_id=int(data["node_id"]), listen=str(data["listen"]), data_dir=str(data["data_dir"]),
            metrics_listen=str(data.get("metrics_listen", "")),
            configs=tuple((str(k), str(v)) for k, v in data.get("configs", [])),
        )


@dataclass(frozen=True)
class Topology:
    """One region: a named set of brokers sharing one data directory.

    ``voters`` are the node ids of the metadata quorum (``controller.quorum.voters``);
    empty for a single broker started without a quorum configuration (it is its own
    quorum).
    """

    name: str
    data_dir: str
    brokers: tuple[BrokerSpec, ...] = field(default_factory=tuple)
    voters: tuple[int, ...] = ()

    @classmethod
    def single_broker(
        cls, data_dir: str, *, listen: str = DEFAULT_LISTEN, metrics_listen: str = "",
        configs: tuple[tuple[str, str], ...] = (),
    ) -> Topology:
        """The topology of ``mq up`` today: node 1 under ``<data_dir>/broker-1``."""
        split_host_port(listen)
        if metrics_listen:
            split_host_port(metrics_listen)
        root = os.path.abspath(data_dir)
        broker = BrokerSpec(
            node_id=1, listen=listen, data_dir=os.path.join(root, "broker-1"),
            metrics_listen=metrics_listen, configs=configs,
        )
        return cls(name="local", data_dir=root, brokers=(broker,))

    def broker(self, node_id: int) -> BrokerSpec | None:
        for spec in self.brokers:
            if spec.node_id == node_id:
                return spec
        return None

    @property
    def quorum_voters(self) -> str:
        """``controller.quorum.voters`` for these voters: ``1@127.0.0.1:9092,2@...``."""
        return voters_config([b for v in self.voters if (b := self.broker(v)) is not None])

    @property
    def bootstrap(self) -> str:
        """The ``--bootstrap`` value a client should use for this topology."""
        return ",".join(b.listen for b in self.brokers)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "data_dir": self.data_dir, "bootstrap": self.bootstrap,
                "brokers": [b.to_json() for b in self.brokers], "voters": list(self.voters)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Topology:
        return cls(
            name=str(data["name"]), data_dir=str(data["data_dir"]),
            brokers=tuple(BrokerSpec.from_json(b) for b in data["brokers"]),
            voters=tuple(int(v) for v in data.get("voters", [])),
        )


def voters_config(brokers: list[BrokerSpec]) -> str:
    """``controller.quorum.voters`` naming ``brokers`` at their native listeners."""
    return ",".join(f"{b.node_id}@{b.listen}" for b in brokers)


# ---------------------------------------------------------------------- several regions

CLUSTER_FILE = "cluster.json"
CLUSTER_FORMAT = 2
FLOW_MODES = ("active-passive", "active-active")


@dataclass(frozen=True)
class LinkSpec:
    """One direction of the WAN between two regions: bytes flowing ``source -> target``
    (on any connection between them, whoever opened it) get ``settings``. ``cut_mode``
    is the state ``mq link cut`` left it in (None: up). ``declared`` is False for the
    reverse direction a file did not write (it copies the declared one)."""

    source: str
    target: str
    settings: LinkSettings = field(default_factory=LinkSettings)
    cut_mode: str | None = None
    declared: bool = True

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"


@dataclass(frozen=True)
class ProxyRoute:
    """One listener of a link process: clients of the other region dial ``listen`` to
    reach broker ``node_id`` of ``region``, which listens (and is advertised) at ``target``."""

    region: str
    node_id: int
    target: str
    listen: str

    def to_json(self) -> dict[str, Any]:
        return {"region": self.region, "node_id": self.node_id, "target": self.target, "listen": self.listen}


@dataclass(frozen=True)
class LinkPair:
    """The link process between two regions: both directions, one proxy listener per
    broker of each side, and a JSON-lines control port (``mq.deploy.link``)."""

    regions: tuple[str, str]
    control: str
    routes: tuple[ProxyRoute, ...]
    data_dir: str

    @property
    def name(self) -> str:
        return f"{self.regions[0]}-{self.regions[1]}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.data_dir, "link.log")

    @property
    def pid_path(self) -> str:
        return os.path.join(self.data_dir, "link.pid")

    def address_map(self, region: str) -> dict[str, str]:
        """``{broker address: proxy address}`` for reaching ``region``'s brokers from the other side."""
        return {r.target: r.listen for r in self.routes if r.region == region}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "regions": list(self.regions), "control": self.control,
                "data_dir": self.data_dir, "log": self.log_path, "routes": [r.to_json() for r in self.routes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LinkPair:
        a, b = data["regions"]
        return cls((str(a), str(b)), str(data["control"]),
                   tuple(ProxyRoute(str(r["region"]), int(r["node_id"]), str(r["target"]), str(r["listen"]))
                         for r in data["routes"]), str(data["data_dir"]))


@dataclass(frozen=True)
class FlowSpec:
    """A mirror flow: topics (and group offsets) of ``source`` copied into ``target`` by
    one mirror process beside the target region. Patterns are Python regular expressions
    matched against whole names; ``configs`` are passed to the mirror as they are."""

    name: str
    source: str
    target: str
    mode: str = "active-passive"
    forward: bool = False  # active-active: copy records that came from other regions onward
    topics_include: tuple[str, ...] = (".*",)
    topics_exclude: tuple[str, ...] = ("__.*",)
    groups_include: tuple[str, ...] = (".*",)
    groups_exclude: tuple[str, ...] = ()
    sync_group_offsets_enabled: bool = True
    sync_group_offsets_interval_ms: int = 5000
    refresh_topics_interval_ms: int = 1000
    emit_heartbeats_interval_ms: int = 1000
    configs: tuple[tuple[str, str], ...] = ()
    data_dir: str = ""

    @property
    def log_path(self) -> str:
        return os.path.join(self.data_dir, "mirror.log")

    @property
    def pid_path(self) -> str:
        return os.path.join(self.data_dir, "mirror.pid")

    @property
    def status_path(self) -> str:
        return os.path.join(self.data_dir, "status.json")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "source": self.source, "target": self.target, "mode": self.mode,
            "forward": self.forward, "topics": {"include": list(self.topics_include), "exclude": list(self.topics_exclude)},
            "groups": {"include": list(self.groups_include), "exclude": list(self.groups_exclude)},
            "sync.group.offsets.enabled": self.sync_group_offsets_enabled,
            "sync.group.offsets.interval.ms": self.sync_group_offsets_interval_ms,
            "refresh.topics.interval.ms": self.refresh_topics_interval_ms,
            "emit.heartbeats.interval.ms": self.emit_heartbeats_interval_ms,
            "configs": dict(self.configs), "data_dir": self.data_dir, "log": self.log_path,
            "pid_file": self.pid_path, "status_file": self.status_path,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FlowSpec:
        topics, groups = data.get("topics", {}), data.get("groups", {})
        return cls(
            name=str(data["name"]), source=str(data["source"]), target=str(data["target"]),
            mode=str(data.get("mode", "active-passive")), forward=bool(data.get("forward", False)),
            topics_include=tuple(topics.get("include", (".*",))), topics_exclude=tuple(topics.get("exclude", ())),
            groups_include=tuple(groups.get("include", (".*",))), groups_exclude=tuple(groups.get("exclude", ())),
            sync_group_offsets_enabled=bool(data.get("sync.group.offsets.enabled", True)),
            sync_group_offsets_interval_ms=int(data.get("sync.group.offsets.interval.ms", 5000)),
            refresh_topics_interval_ms=int(data.get("refresh.topics.interval.ms", 5000)),
            emit_heartbeats_interval_ms=int(data.get("emit.heartbeats.interval.ms", 1000)),
            configs=tuple((str(k), str(v)) for k, v in data.get("configs", {}).items()),
            data_dir=str(data.get("data_dir", "")))


@dataclass(frozen=True)
class Deployment:
    """Everything ``mq up`` starts under one data directory (see the module docstring)."""

    data_dir: str
    regions: tuple[Topology, ...]
    links: tuple[LinkSpec, ...] = ()
    pairs: tuple[LinkPair, ...] = ()
    flows: tuple[FlowSpec, ...] = ()
    source: str = ""  # the region file it was read from ("" for `mq up --single`)

    @classmethod
    def of_region(cls, topology: Topology, *, source: str = "") -> Deployment:
        return cls(data_dir=topology.data_dir, regions=(topology,), source=source)

    @property
    def region_names(self) -> list[str]:
        return [r.name for r in self.regions]

    def region(self, name: str) -> Topology | None:
        return next((r for r in self.regions if r.name == name), None)

    def link(self, source: str, target: str) -> LinkSpec | None:
        return next((x for x in self.links if x.source == source and x.target == target), None)

    def pair(self, a: str, b: str) -> LinkPair | None:
        return next((p for p in self.pairs if set(p.regions) == {a, b}), None)

    def flow(self, name: str) -> FlowSpec | None:
        return next((f for f in self.flows if f.name == name), None)

    def with_link(self, link: LinkSpec) -> Deployment:
        return replace(self, links=tuple(link if x.name == link.name else x for x in self.links))

    def address_map(self, source: str, target: str) -> dict[str, str]:
        """How a client in ``target`` reaches ``source``'s brokers: every advertised broker
        address of ``source`` -> its proxy listener on the link between them."""
        pair = self.pair(source, target)
        return pair.address_map(source) if pair is not None else {}

    def flow_json(self, flow: FlowSpec) -> dict[str, Any]:
        """A flow as the mirror reads it: its settings plus where both regions are."""
        address_map = self.address_map(flow.source, flow.target)
        source, target = self.region(flow.source), self.region(flow.target)
        doc = flow.to_json()
        doc["source_bootstrap"] = ",".join(address_map[b.listen] for b in source.brokers) if source else ""
        doc["source_address_map"] = address_map
        doc["target_bootstrap"] = target.bootstrap if target else ""
        return doc

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": CLUSTER_FORMAT, "data_dir": self.data_dir, "source": self.source,
            "regions": [r.to_json() for r in self.regions],
            "links": [self._link_json(x) for x in self.links],
            "link_pairs": [p.to_json() for p in self.pairs],
            "flows": [self.flow_json(f) for f in self.flows],
        }
        if len(self.regions) == 1:
            doc["bootstrap"] = self.regions[0].bootstrap  # what clients of the one region use
        return doc

    def _link_json(self, link: LinkSpec) -> dict[str, Any]:
        pair = self.pair(link.source, link.target)
        return {"name": link.name, "source": link.source, "target": link.target, **link.settings.to_json(),
                "state": "up" if link.cut_mode is None else "cut", "cut_mode": link.cut_mode,
                "declared": link.declared, "pair": pair.name if pair else None,
                "control": pair.control if pair else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Deployment:
        if data.get("format") == 1:  # written by mq before regions: one region under "topology"
            return cls.of_region(Topology.from_json(data["topology"]))
        return cls(
            data_dir=str(data["data_dir"]),
            regions=tuple(Topology.from_json(r) for r in data["regions"]),
            links=tuple(LinkSpec(str(x["source"]), str(x["target"]), LinkSettings.from_json(x),
                                 x.get("cut_mode"), bool(x.get("declared", True))) for x in data.get("links", [])),
            pairs=tuple(LinkPair.from_json(p) for p in data.get("link_pairs", [])),
            flows=tuple(FlowSpec.from_json(f) for f in data.get("flows", [])),
            source=str(data.get("source", "")))


def load_cluster(path: str | os.PathLike) -> Deployment:
    """Read ``cluster.json`` (a file, or the data directory holding it) into a Deployment.
    Raises OSError when it is missing and ValueError when it is not a cluster file."""
    if os.path.isdir(path):
        path = os.path.join(path, CLUSTER_FILE)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("format") not in (1, CLUSTER_FORMAT):
        raise ValueError(f"{path} is not a cluster file of this mq (format {CLUSTER_FORMAT})")
    try:
        return Deployment.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: malformed ({exc.__class__.__name__}: {exc})") from None
