"""A three-broker region for the benchmarks: started on free loopback ports in a
temporary directory with ``mq.deploy``'s launcher (the same processes ``mq up``
starts), every broker a controller voter, and stopped by its pids afterwards.

    with BenchRegion.start(flush_policy="always") as region:
        region.bootstrap            # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        region.leader("topic", 0)   # node id, from a broker's Metadata
        region.kill(2); region.restart(2)

``MQ_BENCH_BROKER_PROFILE=DIR`` (loadtests only): every broker runs under cProfile
and writes ``DIR/broker-<id>.prof`` when it stops cleanly (SIGTERM), for when py-spy
is not installed; ``py-spy record --pid`` on ``region.pids()`` is the first choice.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from mq.deploy import probe
from mq.deploy.launcher import Launcher
from mq.deploy.topology import BrokerSpec, Topology, voters_config
from mq.lab.process import free_port, rss_mb
from mq.protocol.messages import MetadataResponse, PartitionMetadata

BROKERS = 3
PROFILE_ENV = "MQ_BENCH_BROKER_PROFILE"


def _profiling_python(root: Path, out_dir: str) -> str:
    """A wrapper standing in for the interpreter: runs the broker under cProfile."""
    wrapper = root / "python-cprofile"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# mq bench: run `python -m mq.aio.runner ...` under cProfile\n"
        'node=""; prev=""\n'
        'for a in "$@"; do [ "$prev" = "--node-id" ] && node="$a"; prev="$a"; done\n'
        'shift 2  # drop "-m mq.aio.runner"\n'
        f'exec "{sys.executable}" -m cProfile -o "{out_dir}/broker-$node.prof" '
        '-m mq.aio.runner "$@"\n', encoding="utf-8")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


class BenchRegion:
    """Three brokers of one region on this machine (see the module docstring)."""

    def __init__(self, root: Path, topology: Topology, launcher: Launcher, flush_policy: str) -> None:
        self.root = root
        self.topology = topology
        self.launcher = launcher
        self.flush_policy = flush_policy

    @classmethod
    def start(cls, *, flush_policy: str = "replicated", configs: Mapping[str, str] | None = None,
              brokers: int = BROKERS, ready_timeout_s: float = 60.0) -> BenchRegion:
        root = Path(tempfile.mkdtemp(prefix="mq-bench-region-"))
        listens = [f"127.0.0.1:{free_port()}" for _ in range(brokers)]
        quorum = voters_config([BrokerSpec(i + 1, listen, "") for i, listen in enumerate(listens)])
        settings = {"log.flush.policy": flush_policy, **dict(configs or {})}
        specs = tuple(
            BrokerSpec(node_id=i + 1, listen=listen, data_dir=str(root / f"broker-{i + 1}"),
                       metrics_listen=f"127.0.0.1:{free_port()}",
                       configs=(*sorted(settings.items()), ("controller.quorum.voters", quorum)))
            for i, listen in enumerate(listens))
        topology = Topology(name="bench", data_dir=str(root), brokers=specs,
                            voters=tuple(range(1, brokers + 1)))
        profile_dir = os.environ.get(PROFILE_ENV)
        python = sys.executable
        if profile_dir:
            os.makedirs(profile_dir, exist_ok=True)
            python = _profiling_python(root, os.path.abspath(profile_dir))
        launcher = Launcher(str(root), python=python)
        try:
            launcher.up(topology, ready_timeout_s=ready_timeout_s)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cls(root, topology, launcher, flush_policy)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGKILL every broker (the data is thrown away: a controlled shutdown of all three
        at once only waits out its timeout), or SIGTERM when profiling (cProfile writes its
        file on a clean exit)."""
        try:
            if not os.environ.get(PROFILE_ENV):
                for node_id in self.pids():
                    self.launcher.kill(node_id)
            self.launcher.down()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ addresses and state

    @property
    def bootstrap(self) -> str:
        return self.topology.bootstrap

    def listen(self, node_id: int) -> str:
        spec = self.topology.broker(node_id)
        assert spec is not None, f"no broker {node_id}"
        return spec.listen

    def pids(self) -> dict[int, int]:
        return {s.spec.node_id: s.pid for s in self.launcher.status() if s.pid is not None}

    def rss_mb(self) -> float | None:
        """The largest resident memory of the running brokers."""
        sizes = [rss_mb(pid) for pid in self.pids().values()]
        return max((s for s in sizes if s is not None), default=None)

    def metadata(self, *, exclude: tuple[int, ...] = (), timeout_s: float = 1.0) -> MetadataResponse | None:
        """Metadata from the first broker (not in ``exclude``) that answers."""
        for spec in self.topology.brokers:
            if spec.node_id in exclude:
                continue
            try:
                return probe.metadata(spec.listen, timeout_s=timeout_s)
            except probe.ProbeError:
                continue
        return None

    def partition(self, topic: str, partition: int, *,
                  exclude: tuple[int, ...] = ()) -> PartitionMetadata | None:
        meta = self.metadata(exclude=exclude)
        for t in meta.topics if meta else ():
            if t.name == topic:
                for p in t.partitions:
                    if p.partition == partition:
                        return p
        return None

    def leader(self, topic: str, partition: int, *, exclude: tuple[int, ...] = ()) -> int:
        p = self.partition(topic, partition, exclude=exclude)
        return p.leader_id if p is not None else -1

    def controller(self, *, exclude: tuple[int, ...] = ()) -> int:
        meta = self.metadata(exclude=exclude)
        return meta.controller_id if meta else -1

    def wait_full_isr(self, topic: str, partitions: int, *, timeout_s: float = 60.0) -> None:
        """Until every partition has a leader and all replicas in its ISR, as every broker sees it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self._full_isr(spec.listen, topic, partitions) for spec in self.topology.brokers):
                return
            time.sleep(0.05)
        raise TimeoutError(f"{topic}: ISR not full on every broker within {timeout_s:g} s")

    @staticmethod
    def _full_isr(listen: str, topic: str, partitions: int) -> bool:
        try:
            meta = probe.metadata(listen, timeout_s=1.0)
        except probe.ProbeError:
            return False
        for t in meta.topics:
            if t.name == topic:
                return len(t.partitions) == partitions and all(
                    p.leader_id >= 0 and sorted(p.isr) == sorted(p.replicas) for p in t.partitions)
        return False

    # ------------------------------------------------------------ faults

    def kill(self, node_id: int) -> None:
        """SIGKILL (returns once the process is gone)."""
        self.launcher.kill(node_id)

    def restart(self, node_id: int, *, ready_timeout_s: float = 60.0) -> None:
        self.launcher.restart(node_id, ready_timeout_s=ready_timeout_s)
