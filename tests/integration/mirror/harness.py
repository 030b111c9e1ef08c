"""Two regions on loopback for the mirror's real-process tests.

A region here is one broker process (``tests/integration/conftest.py``). The source is
reached by the mirror only through a WAN link: ``mq.deploy.link_proxy`` (the product's
link proxy) on an event loop in a thread of the test, one listener per source broker,
its address given to the mirror as ``--source-address-map`` (or in cluster.json). The
mirror runs as ``python -m mirror run ...`` in its own process, killed and restarted at
will; its status file and log are read like an operator would.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mq.client import blocking
from mq.core.types import TopicPartition
from mq.deploy.link_proxy import Direction, LinkListener
from mq.deploy.shaping import LinkSettings
from mq.deploy.topology import BrokerSpec, Deployment, FlowSpec, LinkPair, ProxyRoute, Topology
from mq.protocol.record_batch import iter_batches

REPO = Path(__file__).resolve().parents[3]
READY = re.compile(r"mirror flow=\S+ source=\S+ target=\S+ metrics=(\S+)")
EPOCH = slice(12, 16)  # partition_leader_epoch: the one header field each region stamps itself


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, *, every_s: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned), or fail saying ``what``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every_s)  # polling a condition, with a deadline
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


class Link:
    """An emulated WAN link in front of one broker, on its own event loop thread."""

    def __init__(self, target: tuple[str, int], settings: LinkSettings | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="test-wan-link")
        self.thread.start()
        self.to_target = Direction("to-target", settings)
        self.from_target = Direction("from-target", settings)
        self.listener = LinkListener(target, self.to_target, self.from_target)
        self._call(self.listener.start())
        self.target = target

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def _do(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()
        return self._call(run())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listener.port}"

    @property
    def address_map(self) -> dict[str, str]:
        return {f"{self.target[0]}:{self.target[1]}": self.address}

    def cut(self, mode: str = "blackhole") -> None:
        self._do(lambda: (self.to_target.cut(mode), self.from_target.cut(mode)))

    def heal(self) -> None:
        self._do(lambda: (self.to_target.heal(), self.from_target.heal()))

    def forwarded_bytes(self) -> int:
        return self._do(lambda: self.listener.stats.forwarded_bytes)

    def close(self) -> None:
        self._call(self.listener.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@dataclass
class MirrorProcess:
    """``python -m mirror run ARGS`` as a child process of the test."""

    args: list[str]
    state_dir: Path
    proc: subprocess.Popen | None = None
    starts: int = 0
    metrics: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.state_dir.parent / f"{self.state_dir.name}.test-log"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout_s: float = 20.0) -> MirrorProcess:
        self.starts += 1
        offset = len(self.log_text())
        with open(self.log_path, "ab") as log:
            env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
            self.proc = subprocess.Popen([sys.executable, "-m", "mirror", "run", *self.args], cwd=REPO,
                                         stdout=log, stderr=log, env=env)

        def ready() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"mirror exited with {self.proc.returncode}:\n{self.log_text()[offset:]}")
            match = READY.search(self.log_text()[offset:])
            return match.group(1) if match else None

        self.metrics = wait_for(ready, timeout_s, "the mirror's ready line")
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def status(self) -> dict | None:
        try:
            return json.loads((self.state_dir / "status.json").read_text())
        except (OSError, ValueError):
            return None

    def partition(self, topic: str, partition: int) -> dict | None:
        doc = self.status() or {}
        return next((p for p in doc.get("partitions", [])
                     if p["topic"] == topic and p["partition"] == partition), None)


def mirror_args(flow: str, source: str, target: str, state_dir: Path, *, address_map: dict[str, str],
                interval_ms: int = 300, extra: tuple[str, ...] = ()) -> list[str]:
    return ["--flow", flow, "--source-bootstrap", source, "--target-bootstrap", target,
            "--source-region", "east", "--target-region", "west", "--state-dir", str(state_dir),
            "--source-address-map", ",".join(f"{k}={v}" for k, v in address_map.items()),
            "--refresh-topics-interval-ms", str(interval_ms),
            "--sync-group-offsets-interval-ms", str(interval_ms),
            "--emit-heartbeats-interval-ms", "200", *extra]


def write_cluster(path: Path, east: str, west: str, *, east_link: dict[str, str],
                  west_link: dict[str, str], interval_ms: int = 300, groups: tuple[str, ...] = (".*",)) -> Path:
    """cluster.json as ``mq up`` writes it (``mq.deploy.topology.Deployment``), for two
    one-broker regions, the link pair between them (our ``Link`` listeners as its routes)
    and the flow east->west."""
    data_dir = str(path.parent)

    def region(name: str, listen: str) -> Topology:
        return Topology(name, os.path.join(data_dir, name),
                        (BrokerSpec(1, listen, os.path.join(data_dir, name, "broker-1")),))

    routes = tuple(ProxyRoute(r, 1, target, listen) for r, amap in (("east", east_link), ("west", west_link))
                   for target, listen in amap.items())
    flow = FlowSpec("east->west", "east", "west", groups_include=groups,
                    sync_group_offsets_interval_ms=interval_ms, refresh_topics_interval_ms=interval_ms,
                    emit_heartbeats_interval_ms=200, data_dir=os.path.join(data_dir, "mirror-east->west"))
    deployment = Deployment(data_dir, (region("east", east), region("west", west)),
                            pairs=(LinkPair(("east", "west"), "127.0.0.1:1", routes, os.path.join(data_dir, "links")),),
                            flows=(flow,))
    path.write_text(json.dumps(deployment.to_json(), indent=1))
    return path


def run_cli(*args: str, cwd: Path | None = None, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mirror", *args], cwd=cwd or REPO, check=False,
                          capture_output=True, text=True, timeout=timeout_s,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


# ---------------------------------------------------------------- reading the logs back


def raw_batches(bootstrap: str, tp: TopicPartition, *, start: int = 0, end: int | None = None
                ) -> list[tuple[int, bytes]]:
    """Every batch of ``tp`` from ``start`` below ``end`` (default: the high watermark) as
    (base offset, bytes with the leader epoch zeroed): what must be identical across regions."""
    out: list[tuple[int, bytes]] = []
    with blocking.Admin(bootstrap) as admin:
        offset = start
        while True:
            raw = admin.fetch_raw(tp, offset, 1024 * 1024)
            stop = raw.high_watermark if end is None else end
            if offset >= stop or not raw.records:
                return out
            view = memoryview(raw.records)
            for pos, header in iter_batches(view):
                if header.next_offset <= offset:
                    continue
                if header.base_offset >= stop:
                    return out
                data = bytearray(view[pos:pos + header.size])
                data[EPOCH] = b"\0\0\0\0"
                out.append((header.base_offset, bytes(data)))
                offset = header.next_offset


def high_watermarks(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    with blocking.Admin(bootstrap) as admin:
        return {tp: info.offset for tp, info in admin.list_offsets({tp: -1 for tp in tps}).items()}


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    with blocking.Admin(bootstrap) as admin:
        return {e.name: e.value for e in admin.describe_configs(topic) if not e.is_default}


def produce(bootstrap: str, topic: str, count: int, *, prefix: str = "r", batch: int = 500,
            partition: int | None = None, **config: Any) -> None:
    with blocking.Producer(bootstrap, acks="all", **config) as producer:
        for start in range(0, count, batch):
            n = min(batch, count - start)
            producer.send_many(topic, [(b"k%d" % ((start + i) % 7), f"{prefix}-{start + i:06d}".encode() + b"." * 90)
                                       for i in range(n)], partition=partition)
