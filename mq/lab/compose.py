"""Regions in Docker containers as a handle a notebook holds: ``ComposeLab``.

The same questions and faults as ``GeoLab`` and ``Cluster`` (processes), asked of a
compose cluster written by ``mq docker compose``: clients per region, partition leaders,
the link between regions, the mirror's status; brokers killed (``docker kill``), paused
(``docker pause``), stopped gracefully (``docker stop``: SIGTERM, a controlled shutdown)
and started again. ``start`` writes the compose file for a region file and brings it up;
``attach`` takes one that already runs (``docker compose -f docker/compose.yaml up -d``).

    with ComposeLab.start("regions/default.yaml", port_offset=12000, project="mqlab") as lab:
        lab.admin("east").create_topic("orders", partitions=3, replication_factor=3)
        leader = lab.leader_of("east", "orders", 0)
        lab.broker("east", leader).kill()
        lab.wait_for_leader("east", "orders", 0, not_in=[leader])
        lab.cut_link(); lab.heal_link()
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from mq.client import blocking
from mq.core.types import LATEST_TIMESTAMP, TopicPartition
from mq.deploy import Links, LinkStatus, load_topology
from mq.deploy import state as cluster_state
from mq.deploy.compose import ComposeOptions, render_compose
from mq.deploy.compose_runtime import (
    Containers,
    ContainerState,
    attach,
    compose_command,
    mirror_status,
)
from mq.deploy.topology import BrokerSpec
from mq.lab import observe
from mq.lab.clients import LabClients
from mq.lab.process import wait_until

UP_TIMEOUT_S = 180.0


class ContainerBroker:
    """One broker's container: ``kill()``, ``pause()``, ``resume()``, ``stop()``, ``start()``."""

    def __init__(self, lab: ComposeLab, region: str, spec: BrokerSpec) -> None:
        self.lab = lab
        self.region = region
        self.spec = spec
        self.node_id = spec.node_id
        self.service = f"{region}-{spec.node_id}"

    @property
    def bootstrap(self) -> str:
        return self.spec.listen

    @property
    def metrics_url(self) -> str:
        return f"http://{self.spec.metrics_endpoint}/metrics"

    @property
    def container(self) -> str:
        return self.lab.containers.container(self.service)

    def container_state(self) -> ContainerState:
        return self.lab.containers.states([self.service])[self.service]

    @property
    def state(self) -> str:
        """``up``, ``paused`` or ``down`` (what ``mq.lab.observe`` asks of a broker)."""
        st = self.container_state()
        return "paused" if st.paused else "up" if st.running else "down"

    def kill(self) -> None:
        self.lab.containers.kill(self.service)

    def pause(self) -> None:
        self.lab.containers.pause(self.service)

    def resume(self) -> None:
        self.lab.containers.unpause(self.service)

    def stop(self, *, timeout_s: float = 30.0) -> int | None:
        """``docker stop``: SIGTERM, a controlled shutdown; the container's exit code."""
        self.lab.containers.stop(self.service, timeout_s=timeout_s)
        return self.container_state().exit_code

    def start(self, *, ready_timeout_s: float = 60.0) -> None:
        """``docker start``, then wait until it serves (registered, unfenced, caught up)."""
        from mq.deploy.compose_runtime import wait_serving

        self.lab.containers.start(self.service)
        region = self.lab.deployment.region(self.region)
        assert region is not None
        wait_serving(region, self.spec, timeout_s=ready_timeout_s, name=self.container,
                     logs=lambda: self.logs())

    def logs(self, tail: int = 50) -> str:
        return self.lab.containers.logs(self.service, tail=tail)

    def __repr__(self) -> str:
        return f"ContainerBroker({self.container}, {self.spec.listen})"


class ComposeLab(LabClients):
    """A compose cluster seen from this host (see the module docstring)."""

    def __init__(self, compose_file: Path, root: Path, *, project: str, owned: bool) -> None:
        self.compose_file = Path(compose_file)
        self.root = Path(root)
        self.project = project
        self.data_dir = str(self.root / ".mq")
        _, self.deployment = attach(str(self.compose_file), self.data_dir)
        state = cluster_state.read_state(self.data_dir)
        self.containers = Containers.of(state or {})
        self.links = Links(self.data_dir)
        self._owned = owned
        self._closed = False
        self._clients: list[Any] = []
        self.timings: dict[str, float] = {}

    @classmethod
    def start(cls, region_file: str | os.PathLike, *, port_offset: int = 10_000, project: str = "mqlab",
              image: str = "mq:dev", root: str | Path | None = None,
              up_timeout_s: float = UP_TIMEOUT_S) -> ComposeLab:
        """Write the compose file of ``region_file`` under ``root`` (a temporary directory
        by default) and ``docker compose up -d`` it; return once every healthcheck passed."""
        owned = root is None
        root = Path(tempfile.mkdtemp(prefix="mq-composelab-") if owned else root).resolve()
        root.mkdir(parents=True, exist_ok=True)
        options = ComposeOptions(image=image, project=project, port_offset=port_offset, source=str(region_file))
        compose_file = root / "compose.yaml"
        compose_file.write_text(render_compose(load_topology(region_file), options), encoding="utf-8")
        started = time.monotonic()
        try:
            _compose(compose_file, project, "up", "-d", timeout_s=up_timeout_s)
        except BaseException:
            _compose(compose_file, project, "down", "-v", "--timeout", "5", timeout_s=120, check=False)
            if owned:
                shutil.rmtree(root, ignore_errors=True)
            raise
        lab = cls(compose_file, root, project=project, owned=True)
        lab.timings["up_s"] = time.monotonic() - started
        atexit.register(lab.close)  # containers outlive a notebook kernel unless brought down
        return lab

    @classmethod
    def attach(cls, compose_file: str | os.PathLike, *, project: str, root: str | Path | None = None) -> ComposeLab:
        """A cluster already running from ``compose_file`` (started with ``-p project``);
        ``close()`` leaves it running."""
        root = Path(root or tempfile.mkdtemp(prefix="mq-composelab-")).resolve()
        return cls(Path(compose_file), root, project=project, owned=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the clients; bring the cluster down (containers, networks, volumes) when
        ``start`` brought it up."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._close_clients()
        if self._owned:
            started = time.monotonic()
            _compose(self.compose_file, self.project, "down", "-v", "--timeout", "10", timeout_s=180)
            self.timings["down_s"] = time.monotonic() - started
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ clients (closed by close())

    def bootstrap(self, region: str) -> str:
        topology = self.deployment.region(region)
        if topology is None:
            raise ValueError(f"no region {region!r} (regions: {', '.join(self.deployment.region_names)})")
        return topology.bootstrap

    def ends(self, region: str, topic: str) -> dict[int, int]:
        """High watermark of every partition of ``topic`` in ``region``."""
        admin = self._region_admin(region)
        partitions = admin.describe_topic(topic).partitions
        found = admin.list_offsets({TopicPartition(topic, p.partition): LATEST_TIMESTAMP for p in partitions})
        return {tp.partition: info.offset for tp, info in sorted(found.items())}

    def _region_admin(self, region: str) -> blocking.Admin:
        cache = self.__dict__.setdefault("_admins", {})
        if region not in cache:
            cache[region] = self.admin(region)
        return cache[region]

    def wait_mirrored(self, topic: str, *, source: str = "east", target: str = "west",
                      timeout_s: float = 60.0) -> dict[int, int]:
        """Until every partition of ``topic`` in ``target`` ends where ``source``'s does."""
        admin = self._region_admin(target)
        wait_until(lambda: topic in admin.list_topics(), timeout_s=timeout_s, interval_s=0.2,
                   what=f"topic {topic} in {target}")

        def caught_up() -> dict[int, int] | None:
            goal, have = self.ends(source, topic), self.ends(target, topic)
            return have if all(have.get(p, -1) >= end for p, end in goal.items()) else None

        return wait_until(caught_up, timeout_s=timeout_s, interval_s=0.2, what=f"{topic} mirrored into {target}")

    # ------------------------------------------------------------------ brokers and partitions

    def broker(self, region: str, node_id: int) -> ContainerBroker:
        topology = self.deployment.region(region)
        spec = topology.broker(node_id) if topology is not None else None
        if spec is None:
            raise ValueError(f"no broker {node_id} in region {region!r}")
        return ContainerBroker(self, region, spec)

    def brokers(self, region: str) -> list[ContainerBroker]:
        topology = self.deployment.region(region)
        return [ContainerBroker(self, region, b) for b in (topology.brokers if topology else ())]

    def partition_view(self, region: str, topic: str, partition: int = 0) -> observe.PartitionView | None:
        return observe.partition_view(self.brokers(region), topic, partition)

    def leader_of(self, region: str, topic: str, partition: int = 0) -> int:
        view = self.partition_view(region, topic, partition)
        return view.leader if view is not None else -1

    def wait_for_leader(self, region: str, topic: str, partition: int = 0, *, not_in: Sequence[int] = (),
                        timeout_s: float = 30.0) -> int:
        """Until the partition has a leader outside ``not_in``; returns it."""
        def check() -> int | None:
            leader = self.leader_of(region, topic, partition)
            return leader if leader >= 0 and leader not in not_in else None

        return wait_until(check, timeout_s=timeout_s, interval_s=0.1,
                          what=f"a leader of {topic}-{partition} in {region} outside {list(not_in)}")

    # ------------------------------------------------------------------ the links and the mirror

    def link_status(self) -> list[LinkStatus]:
        return self.links.list()

    def set_link(self, source: str = "east", target: str = "west", *, both: bool = True,
                 **settings: Any) -> list[LinkStatus]:
        return self.links.set(source, target, both=both, **settings)

    def cut_link(self, source: str = "east", target: str = "west", *, both: bool = True,
                 mode: str = "blackhole") -> list[LinkStatus]:
        return self.links.cut(source, target, both=both, mode=mode)

    def heal_link(self) -> list[LinkStatus]:
        return self.links.heal()

    def mirror_status(self, flow: str = "east-to-west") -> dict[str, Any] | None:
        """The flow's status.json, read in its container (what ``mq mirror status`` shows)."""
        return mirror_status(self.data_dir, flow)


def _compose(compose_file: Path, project: str, *args: str, timeout_s: float, check: bool = True) -> str:
    command = [*compose_command(), "-f", str(compose_file), "-p", project, *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"`{' '.join(command)}` did not finish within {timeout_s:g} s") from exc
    if check and done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout + done.stderr


__all__ = ["ComposeLab", "ContainerBroker"]
