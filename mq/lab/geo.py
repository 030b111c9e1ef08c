"""Two regions, the WAN link between them and the mirror flow, as a handle a notebook holds.

``GeoLab.start()`` writes a region file with two regions (``east`` and ``west``), a link
pair and one active-passive flow ``east-to-west`` on free loopback ports in a temporary
directory (never the 9092-9094 of ``mq up``), and starts it with ``mq.deploy``'s
launcher: the very processes ``mq up`` starts (brokers, the link process, the mirror).
The mirror is driven only as its users drive it: through ``python -m mirror ...`` and its
status file (``mq`` never imports ``mirror``).

    with GeoLab.start(brokers=1, latency_ms=20) as lab:
        lab.admin("east").create_topic("orders", partitions=3)
        lab.wait_mirrored("orders")
        lab.set_link(latency_ms=100)            # both directions
        lab.cut_link()                          # the WAN is down
        report = lab.failover(to="west", groups=["billing"])
        lab.heal_link(); lab.failback(to="east")
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import yaml

from mq.client import blocking
from mq.core.types import LATEST_TIMESTAMP, TopicPartition
from mq.deploy import Deployment, Launcher, Links, LinkStatus, parse_topology
from mq.deploy import process as deploy_process
from mq.deploy import services as deploy_services
from mq.lab.clients import LabClients
from mq.lab.process import free_port, wait_until

SOURCE, TARGET = "east", "west"
FLOW = "east-to-west"
REGION_FILE = "regions.yaml"
# a mirror log line: "2026-11-26 14:36:27,223 INFO mirror event=group_offsets_synced group=g ..."
_EVENT_LINE = re.compile(r"^(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ mirror "
                         r"event=(?P<event>\S+)(?P<rest>.*)$")
# Small clusters that react fast: a group forms at once, short sessions are allowed, the
# offsets topic is small (its partitions are created at the first commit).
LAB_CONFIGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500",
               "offsets.topic.num.partitions": "3"}


def free_port_block(count: int, *, host: str = "127.0.0.1", attempts: int = 200) -> int:
    """The first of ``count`` consecutive ports that are all free right now (the link
    process takes ``2 x brokers + 1`` ports from ``link_port_base``)."""
    for _ in range(attempts):
        base = free_port(host)
        if base + count >= 65536:
            continue
        socks = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports found on {host}")


def two_region_file(root: str, *, brokers: int = 1, latency_ms: float = 40.0, jitter_ms: float = 0.0,
                    sync_interval_ms: int = 1000, refresh_interval_ms: int = 1000,
                    heartbeat_interval_ms: int = 500, configs: Mapping[str, Any] | None = None,
                    mirror_configs: Mapping[str, Any] | None = None, host: str = "127.0.0.1") -> dict[str, Any]:
    """The region file of a two-region lab (as a dict, written as YAML by ``GeoLab``): the
    layout of regions/default.yaml with every port free and the intervals short;
    ``configs`` for every broker, ``mirror_configs`` for the flow (e.g. ``buffer.max.bytes``)."""
    def region(name: str) -> dict[str, Any]:
        return {"name": name, "voters": list(range(1, brokers + 1)),
                "brokers": [{"id": i, "listen": f"{host}:{free_port(host)}",
                             "metrics_listen": f"{host}:{free_port(host)}"} for i in range(1, brokers + 1)]}

    return {
        "data_dir": root,
        "link_port_base": free_port_block(2 * brokers + 1, host=host),
        "configs": {**LAB_CONFIGS, **{k: str(v) for k, v in (configs or {}).items()}},
        "regions": [region(SOURCE), region(TARGET)],
        "links": [{"source": SOURCE, "target": TARGET, "latency_ms": latency_ms, "jitter_ms": jitter_ms}],
        "mirrors": [{"name": FLOW, "source": SOURCE, "target": TARGET, "mode": "active-passive",
                     "topics": {"include": [".*"], "exclude": ["__.*"]},
                     "sync.group.offsets.interval.ms": sync_interval_ms,
                     "refresh.topics.interval.ms": refresh_interval_ms,
                     "emit.heartbeats.interval.ms": heartbeat_interval_ms,
                     "configs": {k: str(v) for k, v in (mirror_configs or {}).items()}}],
    }


@dataclass(frozen=True)
class MirrorRun:
    """One ``python -m mirror ...`` command: its exit code, how long it took, the JSON it
    printed (``--json``), the steps it reported on stderr and when each came (seconds from
    the start)."""

    args: tuple[str, ...]
    returncode: int
    seconds: float
    report: Any
    steps: tuple[str, ...]
    stdout: str
    stderr: str
    step_times: tuple[float, ...] = ()

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check(self) -> MirrorRun:
        if not self.ok:
            raise RuntimeError(f"python -m mirror {' '.join(self.args)} exited {self.returncode}:\n"
                               f"{self.stderr or self.stdout}")
        return self


class GeoLab(LabClients):
    """A running two-region deployment (see the module docstring)."""

    def __init__(self, root: Path, deployment: Deployment, launcher: Launcher, *, owned: bool) -> None:
        self.root = root
        self.deployment = deployment
        self.launcher = launcher
        self.links = Links(str(root))
        self._owned = owned
        self._closed = False
        self._clients: list[Any] = []

    @classmethod
    def start(cls, *, brokers: int = 1, latency_ms: float = 40.0, jitter_ms: float = 0.0,
              sync_interval_ms: int = 1000, refresh_interval_ms: int = 1000, heartbeat_interval_ms: int = 500,
              configs: Mapping[str, Any] | None = None, mirror_configs: Mapping[str, Any] | None = None,
              data_dir: str | Path | None = None, ready_timeout_s: float = 60.0) -> GeoLab:
        """Start east and west (``brokers`` each, every one a voter), the link pair and the
        mirror flow east -> west; return once both regions are ready and the mirror runs."""
        root, owned = cls._root(data_dir)
        doc = two_region_file(str(root), brokers=brokers, latency_ms=latency_ms, jitter_ms=jitter_ms,
                              sync_interval_ms=sync_interval_ms, refresh_interval_ms=refresh_interval_ms,
                              heartbeat_interval_ms=heartbeat_interval_ms, configs=configs,
                              mirror_configs=mirror_configs)
        return cls.launch(doc, root, owned=owned, flows=(FLOW,), ready_timeout_s=ready_timeout_s)

    @staticmethod
    def _root(data_dir: str | Path | None) -> tuple[Path, bool]:
        owned = data_dir is None
        root = Path(tempfile.mkdtemp(prefix="mq-geolab-") if owned else data_dir).resolve()
        root.mkdir(parents=True, exist_ok=True)
        return root, owned

    @classmethod
    def launch(cls, doc: Mapping[str, Any], root: Path, *, owned: bool, flows: Sequence[str],
               ready_timeout_s: float = 60.0) -> GeoLab:
        """Write the region file ``doc`` under ``root``, start it as ``mq up`` does and return
        once the regions are ready and every mirror flow in ``flows`` runs."""
        path = root / REGION_FILE
        path.write_text(yaml.safe_dump(dict(doc), sort_keys=False), encoding="utf-8")
        deployment = parse_topology(path.read_text(encoding="utf-8"), source=str(path), path=str(path))
        launcher = Launcher(str(root))
        try:
            launcher.up(deployment, ready_timeout_s=ready_timeout_s)
        except BaseException:
            launcher.down(timeout_s=5)
            if owned:
                shutil.rmtree(root, ignore_errors=True)
            raise
        lab = cls(root, deployment, launcher, owned=owned)
        # the processes are detached (as `mq up` starts them): a notebook whose cell failed
        # before lab.close() must not leave them running once its kernel exits
        atexit.register(lab.close)
        try:
            for flow in flows:
                lab.wait_mirror_running(flow=flow, timeout_s=ready_timeout_s)
        except BaseException:
            lab.close()
            raise
        return lab

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the clients, stop every process (mirrors first), remove a temporary root.
        Runs once (again at interpreter exit, a no-op then)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._close_clients()
        # mirrors started here or by fail-back (the reverse flow) may not be in cluster.json
        running = [(d.name, self.mirror_pid(d.name.removeprefix("mirror-"))) for d in self.root.glob("mirror-*")]
        deploy_services.stop_all([(name, pid) for name, pid in running if pid is not None], 5.0)
        self.launcher.down(timeout_s=5)
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ where things are

    @property
    def cluster_path(self) -> str:
        return str(self.root / "cluster.json")

    @property
    def region_file(self) -> Path:
        return self.root / REGION_FILE

    def bootstrap(self, region: str) -> str:
        topology = self.deployment.region(region)
        if topology is None:
            raise ValueError(f"no region {region!r} (regions: {', '.join(self.deployment.region_names)})")
        return topology.bootstrap

    def flow_dir(self, flow: str = FLOW) -> Path:
        return self.root / f"mirror-{flow}"

    # ------------------------------------------------------------------ clients (closed by close())

    def ends(self, region: str, topic: str, *, admin: Any = None) -> dict[int, int]:
        """High watermark of every partition of ``topic`` in ``region``."""
        admin = admin or self._region_admin(region)
        partitions = admin.describe_topic(topic).partitions
        found = admin.list_offsets({TopicPartition(topic, p.partition): LATEST_TIMESTAMP for p in partitions})
        return {tp.partition: info.offset for tp, info in sorted(found.items())}

    def _region_admin(self, region: str) -> blocking.Admin:
        cache = self.__dict__.setdefault("_admins", {})
        if region not in cache:
            cache[region] = self.admin(region)
        return cache[region]

    def wait_topic(self, region: str, topic: str, *, timeout_s: float = 30.0) -> None:
        admin = self._region_admin(region)
        wait_until(lambda: topic in admin.list_topics(), timeout_s=timeout_s, interval_s=0.1,
                   what=f"topic {topic} in {region}")

    def wait_mirrored(self, topic: str, *, timeout_s: float = 60.0) -> dict[int, int]:
        """Until ``topic`` exists in west and each partition's end equals east's (read once
        at the start, or again while the source still grows); returns west's ends."""
        self.wait_topic(TARGET, topic, timeout_s=timeout_s)
        deadline = time.monotonic() + timeout_s

        def caught_up() -> dict[int, int] | None:
            goal = self.ends(SOURCE, topic)
            have = self.ends(TARGET, topic)
            return have if all(have.get(p, -1) >= end for p, end in goal.items()) else None

        return wait_until(caught_up, timeout_s=max(0.1, deadline - time.monotonic()), interval_s=0.1,
                          what=f"{topic} mirrored into {TARGET}")

    # ------------------------------------------------------------------ the link

    def link_status(self) -> list[LinkStatus]:
        return self.links.list()

    def set_link(self, *, both: bool = True, **settings: Any) -> list[LinkStatus]:
        """``latency_ms``, ``jitter_ms``, ``bandwidth_mbit``, ``loss``, ``loss_stall_ms`` (``mq link set``)."""
        return self.links.set(SOURCE, TARGET, both=both, **settings)

    def cut_link(self, *, both: bool = True, mode: str = "blackhole") -> list[LinkStatus]:
        return self.links.cut(SOURCE, TARGET, both=both, mode=mode)

    def heal_link(self) -> list[LinkStatus]:
        return self.links.heal()

    # ------------------------------------------------------------------ the mirror, through its CLI

    def mirror(self, *args: str, timeout_s: float = 120.0, json_out: bool = False) -> MirrorRun:
        """``python -m mirror ARGS --cluster <cluster.json>`` (``--json`` when ``json_out``)."""
        argv = (*args, "--cluster", self.cluster_path, *(("--json",) if json_out else ()))
        # The mirrors `up` started are this process's children: one the command stops must be
        # reaped here, or it lingers as a zombie that the command takes for a live process.
        ours = [pid for d in self.root.glob("mirror-*") if (pid := self.mirror_pid(d.name[len("mirror-"):]))]
        finished = threading.Event()

        def reap() -> None:
            while not finished.wait(0.02):
                for pid in ours:
                    deploy_process.reap(pid)

        reaper = threading.Thread(target=reap, name="mirror-reaper", daemon=True)
        reaper.start()
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "mirror", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=self.root,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        steps: list[tuple[float, str]] = []  # each stderr line with when it came
        out: list[str] = []

        def read_steps() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                steps.append((time.monotonic() - started, line.rstrip("\n")))

        def read_out() -> None:
            assert proc.stdout is not None
            out.append(proc.stdout.read())

        readers = [threading.Thread(target=f, name=f"mirror-{f.__name__}", daemon=True) for f in (read_steps, read_out)]
        for reader in readers:
            reader.start()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        finally:
            seconds = time.monotonic() - started
            finished.set()
            reaper.join()
            for reader in readers:
                reader.join(5)
        stdout = "".join(out)
        report = None
        if json_out and proc.returncode == 0 and stdout.strip():
            report = json.loads(stdout)
        lines = [(t, line) for t, line in steps if line.strip()]
        return MirrorRun(tuple(argv), proc.returncode, seconds, report, tuple(line for _, line in lines),
                         stdout, "\n".join(line for _, line in steps), tuple(round(t, 3) for t, _ in lines))

    def failover(self, *, to: str = TARGET, groups: Sequence[str] = (), topics: Sequence[str] = (),
                 translate: bool = False, timeout_s: float = 120.0) -> MirrorRun:
        """``mq mirror failover --to REGION``; ``report`` holds its JSON (records at risk,
        promotion ends, the groups' offsets in REGION). ``translate``: ``--translate``, for
        active-active flows: each group's translated offsets on the remote topics, with the
        re-read bound per partition (a list of reports when there are several)."""
        args = ["failover", "--to", to, *(x for g in groups for x in ("--group", g)),
                *(x for t in topics for x in ("--topic", t)), *(["--translate"] if translate else [])]
        return self.mirror(*args, timeout_s=timeout_s, json_out=True).check()

    def failback(self, *, to: str = SOURCE, catch_up_timeout_s: float = 120.0) -> MirrorRun:
        """``mq mirror failback --to REGION``: the diverged tail to ``<topic>.diverged``,
        the reverse flow until caught up, then the original direction again."""
        return self.mirror("failback", "--to", to, "--catch-up-timeout-s", str(catch_up_timeout_s),
                           timeout_s=catch_up_timeout_s + 60, json_out=True).check()

    def mirror_status(self, flow: str = FLOW) -> dict[str, Any] | None:
        """The flow's status file (what ``mq mirror status --json`` prints), None before the first."""
        try:
            doc = json.loads((self.flow_dir(flow) / "status.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def mirror_events(self, event: str, *, flow: str = FLOW, since_s: float = 0.0) -> list[dict[str, Any]]:
        """The ``event=NAME key=value ...`` lines of the flow's log (what an operator greps),
        each with its wall-clock time ``t`` (seconds since the epoch), from ``since_s`` on."""
        try:
            text = (self.flow_dir(flow) / "mirror.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            found = _EVENT_LINE.match(line)
            if not found or found.group("event") != event:
                continue
            stamp = datetime.datetime.strptime(found.group("time"), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if stamp >= since_s:
                fields = dict(kv.split("=", 1) for kv in found.group("rest").split() if "=" in kv)
                out.append({"t": stamp, **fields})
        return out

    def mirror_pid(self, flow: str = FLOW) -> int | None:
        pid = deploy_services.read_pid(str(self.flow_dir(flow) / "mirror.pid"))
        return pid if pid is not None and deploy_process.runs(pid, "mirror", "run") else None

    def wait_mirror_running(self, *, flow: str = FLOW, timeout_s: float = 30.0) -> dict[str, Any]:
        """Until the flow's status file is fresh and written by a live process."""
        def fresh() -> dict[str, Any] | None:
            doc = self.mirror_status(flow)
            pid = self.mirror_pid(flow)
            if doc and pid and doc.get("pid") == pid and doc.get("state") not in ("stopped", "failed-over"):
                return doc
            return None

        return wait_until(fresh, timeout_s=timeout_s, interval_s=0.1, what=f"mirror flow {flow} running")

    def stop_mirror(self, flow: str = FLOW, *, timeout_s: float = 15.0) -> None:
        """SIGTERM the flow's process (as ``mq down`` does) and wait for it to exit."""
        pid = self.mirror_pid(flow)
        if pid is not None:
            deploy_services.stop_all([(flow, pid)], timeout_s)

    def start_mirror(self, *extra: str, flow: str = FLOW, timeout_s: float = 30.0) -> int:
        """Start the flow again: as ``mq up`` does with no ``extra`` arguments, else as
        ``python -m mirror run --cluster ... --flow FLOW EXTRA...`` (e.g.
        ``--sync-group-offsets-interval-ms 500``), detached, with its pid file where
        fail-over and ``mq down`` look. Returns the pid once its status is fresh."""
        if self.mirror_pid(flow) is not None:
            raise RuntimeError(f"the mirror of flow {flow} already runs (pid {self.mirror_pid(flow)})")
        directory = self.flow_dir(flow)
        command = [sys.executable, "-m", "mirror", "run", "--cluster", self.cluster_path, "--flow", flow, *extra]
        deploy_services.spawn(command, log_path=str(directory / "mirror.log"),
                              pid_path=str(directory / "mirror.pid"), cwd=str(directory), reason="mq.lab")
        return int(self.wait_mirror_running(flow=flow, timeout_s=timeout_s)["pid"])


__all__ = ["FLOW", "SOURCE", "TARGET", "GeoLab", "MirrorRun", "free_port_block", "two_region_file"]
