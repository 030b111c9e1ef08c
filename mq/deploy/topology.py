"""What runs where: a ``Topology`` of brokers, as data.

``mq up FILE`` reads a region file (``regions/default.yaml``: three brokers, each a
controller voter) into this shape with ``mq.deploy.region``; ``mq up --single`` builds a
one-broker topology from its options; a later issue adds regions, links and mirror flows.
The ``Launcher`` starts whatever a topology names. The topology is also what
``<data-dir>/cluster.json`` records, so ``mq status`` and ``mq down`` know what was
started without guessing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

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
            "metrics_listen": self.metrics_listen, "configs": [list(kv) for kv in self.configs],
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
    """A named set of brokers sharing one data directory (one region, later several).

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
        return {"name": self.name, "data_dir": self.data_dir,
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
