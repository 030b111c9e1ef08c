"""Brokers as objects a notebook can hold: start, stop, crash, restart, look inside.

``BrokerHandle`` runs one ``python -m mq.aio.runner`` process on free loopback ports
with its own data directory (a fresh temporary one unless you give a path), and
knows where its partitions and segment files live; it can also be paused
(SIGSTOP), resumed and, when started with a FileIO journal, lose power (SIGKILL, then
every file cut back to its last fsync). ``Cluster`` groups the brokers of one region
and hands out blocking clients that it closes for you: ``Cluster.start()`` runs one
broker, ``Cluster.region(brokers=3)`` a region of brokers that are all voters of the
Raft metadata quorum, on free ports (never 9092-9094, where ``mq up`` runs).

    with Cluster.region(brokers=3, config={"replica.lag.time.max.ms": 3000}) as cluster:
        cluster.admin().create_topic("orders", partitions=1, replication_factor=3)
        leader = cluster.leader_of("orders", 0)
        cluster.broker(leader).kill()
        print(cluster.partition_state("orders", 0))   # per replica: offsets, ISR, leader
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from mq.client import blocking
from mq.core.rng import Rng
from mq.deploy import probe
from mq.lab import observe
from mq.lab.process import ChildProcess, free_port, rss_mb, wait_until
from mq.lab.segments import Segment, list_segments
from mq.lab.timeline import Timeline
from mq.storage.fileio import power_loss as truncate_to_durable

# What a broker logs once it is registered, unfenced and caught up (mq.aio.runner).
READY_LINE = re.compile(r"broker node_id=\d+ listening=")
CONTROLLED_SHUTDOWN_GRACE_S = 2.0


class BrokerHandle:
    """One broker process: ``bootstrap``, ``data_dir``, ``stop()/kill()/restart()``."""

    def __init__(self, *, node_id: int, data_dir: Path, host: str, port: int, metrics_port: int,
                 config: Mapping[str, str], log_path: Path, journal_path: Path | None = None,
                 wait_for_ready_line: bool = False) -> None:
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.metrics_port = metrics_port
        self.config = dict(config)
        self.log_path = Path(log_path)
        # MQ_FILEIO_JOURNAL: the broker notes every fsync there, so power_loss() can
        # cut each file back to what was durable (None: power_loss is not possible).
        self.journal_path = Path(journal_path) if journal_path else None
        # A region broker is ready once it logs its ready line (registered, unfenced,
        # caught up), not merely when it answers ApiVersions.
        self.wait_for_ready_line = wait_for_ready_line
        self.paused = False
        self._stopping = False  # begin_stop sent SIGTERM; stop only waits
        self._child: ChildProcess | None = None
        self._owned_root: Path | None = None  # a temporary directory start() made

    @classmethod
    def start(cls, *, node_id: int = 1, data_dir: str | Path | None = None,
              config: Mapping[str, Any] | None = None, host: str = "127.0.0.1",
              port: int | None = None, log_path: str | Path | None = None,
              ready_timeout_s: float = 30.0) -> BrokerHandle:
        """Start a broker and return once it accepts connections.

        ``config`` takes broker settings by their Kafka names (``log.segment.bytes``,
        ``log.retention.check.interval.ms``...), passed as ``--config k=v``.
        """
        owned_root = None
        if data_dir is None:
            owned_root = Path(tempfile.mkdtemp(prefix=f"mq-broker-{node_id}-"))
            data_dir = owned_root / "data"
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        log = Path(log_path) if log_path else data_dir.parent / f"{data_dir.name}.broker.log"
        settings = {k: str(v) for k, v in (config or {}).items()}
        # A port picked for us can be taken by someone else between the pick and the
        # bind; try fresh ports a few times before giving up.
        attempts = 1 if port is not None else 3
        for attempt in range(attempts):
            handle = cls(
                node_id=node_id, data_dir=data_dir, host=host, port=port or free_port(host),
                metrics_port=free_port(host), config=settings, log_path=log,
            )
            handle._owned_root = owned_root
            try:
                return handle._spawn(ready_timeout_s)
            except RuntimeError:
                if attempt == attempts - 1:
                    if owned_root is not None:
                        shutil.rmtree(owned_root, ignore_errors=True)
                    raise
        raise AssertionError("unreachable")

    def _argv(self) -> list[str]:
        argv = [
            sys.executable, "-m", "mq.aio.runner",
            "--node-id", str(self.node_id),
            "--data-dir", str(self.data_dir),
            "--listen", f"{self.host}:{self.port}",
            "--metrics-listen", f"{self.host}:{self.metrics_port}",
        ]
        for key, value in self.config.items():
            argv += ["--config", f"{key}={value}"]
        return argv

    def _spawn(self, ready_timeout_s: float, *, wait: bool = True) -> BrokerHandle:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.journal_path is not None:
            env["MQ_FILEIO_JOURNAL"] = str(self.journal_path)
        self._child = ChildProcess(
            f"broker {self.node_id}", self._argv(), host=self.host, port=self.port,
            log_path=self.log_path, env=env,
        )
        self.paused = False
        self._child.spawn()
        if wait:
            self.wait_ready(ready_timeout_s=ready_timeout_s)
        return self

    def wait_ready(self, *, ready_timeout_s: float = 30.0) -> BrokerHandle:
        """Wait until the broker started last is ready (``RuntimeError`` with its log if not)."""
        assert self._child is not None, "start the broker first"
        self._child.wait_ready(ready_timeout_s=ready_timeout_s, ready=self._answers)
        return self

    def _answers(self) -> bool:
        """Ready means it answers ApiVersions, not merely that the port is bound (and,
        in a region, that it logged its ready line)."""
        if self.wait_for_ready_line and (
                self._child is None or not READY_LINE.search(self._child.log_since_spawn())):
            return False
        try:
            probe.api_versions(self.bootstrap, timeout_s=1.0)
        except probe.ProbeError:
            return False
        return True

    # ------------------------------------------------------------ state

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    @property
    def running(self) -> bool:
        return bool(self._child and self._child.running)

    def rss_mb(self) -> float | None:
        """Resident memory of the broker process, MiB."""
        return rss_mb(self.pid) if self.running else None

    def log_tail(self, lines: int = 30) -> str:
        return self._child.log_tail(lines) if self._child else "(never started)"

    # ------------------------------------------------------------ lifecycle

    def stop(self, *, timeout_s: float = 10.0, hurry_after_s: float | None = None) -> int | None:
        """Graceful stop (SIGTERM: a controlled shutdown in a region, then flush and
        checkpoint). A paused broker is resumed first. ``hurry_after_s``: a second SIGTERM
        then cuts the controlled shutdown short. Returns the exit code."""
        if self._child is None:
            return None
        if self.paused:
            self.resume()
        signal_sent, self._stopping = self._stopping, False
        return self._child.stop(timeout_s=timeout_s, signal_sent=signal_sent and self.running,
                                hurry_after_s=hurry_after_s)

    def begin_stop(self) -> None:
        """Send SIGTERM (resuming a paused broker) without waiting; ``stop`` waits."""
        if self._child is not None and self.running:
            self.resume()
            self._child.send_signal(signal.SIGTERM)
            self._stopping = True

    def kill(self) -> int | None:
        """Crash it (SIGKILL): no flush, no checkpoint; restart runs recovery. Unsynced
        data survives in the page cache; ``power_loss`` is the fault that loses it."""
        self.paused = False
        return self._child.kill() if self._child else None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing, heartbeats to
        nobody and fetches nothing (a long GC pause or a hung disk, as peers see it)."""
        if not self.running or self.paused:
            raise RuntimeError(f"broker {self.node_id} is {'paused' if self.paused else 'not running'}")
        assert self._child is not None
        self._child.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT a paused broker."""
        if self._child is not None and self.paused:
            self._child.send_signal(signal.SIGCONT)
        self.paused = False

    def power_loss(self, *, rng: Rng | None = None) -> dict[str, int]:
        """SIGKILL, then cut every file the broker wrote back to its last fsynced length
        (``mq.storage.fileio.power_loss`` over the journal): what a power cut does to
        the page cache. With ``rng`` a random part of the unsynced tail survives (a torn
        write). Returns ``{path: new length}``. Needs a broker started with a journal."""
        if self.journal_path is None:
            raise RuntimeError(f"broker {self.node_id} has no FileIO journal: start the region with "
                               "Cluster.region(..., power_loss=True)")
        self.kill()
        return self.truncate_to_durable(rng=rng)

    def truncate_to_durable(self, *, rng: Rng | None = None) -> dict[str, int]:
        """The second half of ``power_loss`` for a broker already killed."""
        if self.running:
            raise RuntimeError(f"broker {self.node_id} still runs: kill it first")
        if self.journal_path is None or not self.journal_path.exists():
            return {}
        return truncate_to_durable(str(self.journal_path), rng=rng)

    def close(self) -> None:
        """Stop, and delete the data directory if ``start()`` made it (a directory you
        passed is kept)."""
        self.stop()
        if self._owned_root is not None:
            shutil.rmtree(self._owned_root, ignore_errors=True)
            self._owned_root = None

    def restart(self, *, ready_timeout_s: float = 30.0, wait: bool = True) -> BrokerHandle:
        """Start again on the same ports and data directory (stopping it gracefully first
        if it runs; a killed broker just starts). ``wait=False`` returns at once: call
        ``wait_ready`` later (brokers that need each other to form a quorum)."""
        if self.running:
            self.stop()
        return self._spawn(ready_timeout_s, wait=wait)

    # ------------------------------------------------------------ files

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        """``<data dir>/<topic>-<partition>/``: Kafka's layout."""
        return self.data_dir / f"{topic}-{partition}"

    def segments(self, topic: str, partition: int = 0) -> list[Segment]:
        """The partition's segments, oldest first (the last one is the active segment)."""
        return list_segments(self.partition_dir(topic, partition))

    @property
    def state(self) -> str:
        """``up``, ``paused`` or ``down``."""
        return "paused" if self.paused and self.running else "up" if self.running else "down"

    def __repr__(self) -> str:
        state = (f"pid={self.pid}" + (" paused" if self.paused else "")) if self.running else "stopped"
        return f"BrokerHandle(node_id={self.node_id}, {self.bootstrap}, {state}, data_dir={self.data_dir})"


class Cluster:
    """The brokers of one region plus the clients a lab opened on them."""

    def __init__(self, brokers: Sequence[BrokerHandle], *, owned_dirs: Sequence[Path] = ()) -> None:
        self.brokers = list(brokers)
        self._owned_dirs = list(owned_dirs)
        self._clients: list[Any] = []

    @classmethod
    def start(cls, *, data_dir: str | Path | None = None, config: Mapping[str, Any] | None = None,
              ready_timeout_s: float = 30.0) -> Cluster:
        """Start a one-broker region. Without ``data_dir`` the data goes to a temporary
        directory that ``close()`` removes; with one, the data stays for you to inspect."""
        owned: list[Path] = []
        if data_dir is None:
            root = Path(tempfile.mkdtemp(prefix="mq-lab-"))
            owned.append(root)
            data_dir = root / "broker-1"
        broker = BrokerHandle.start(node_id=1, data_dir=data_dir, config=config,
                                    ready_timeout_s=ready_timeout_s)
        return cls([broker], owned_dirs=owned)

    @classmethod
    def region(cls, brokers: int = 3, *, config: Mapping[str, Any] | None = None,
               broker_configs: Mapping[int, Mapping[str, Any]] | None = None,
               data_dir: str | Path | None = None, power_loss: bool = False,
               host: str = "127.0.0.1", ready_timeout_s: float = 60.0) -> Cluster:
        """Start ``brokers`` brokers (node ids 1..n), every one a voter of the Raft
        metadata quorum, as child processes on free loopback ports, and return once
        each is registered, unfenced and caught up.

        ``config`` applies to every broker (Kafka names), ``broker_configs[id]`` to one.
        Data goes to ``<data_dir>/broker-<id>`` (a temporary directory ``close()``
        removes when ``data_dir`` is None). ``power_loss=True`` gives every broker a
        FileIO journal so ``broker(i).power_loss()`` can drop what was never fsynced.
        """
        owned: list[Path] = []
        if data_dir is None:
            root = Path(tempfile.mkdtemp(prefix="mq-region-"))
            owned.append(root)
        else:
            root = Path(data_dir)
            root.mkdir(parents=True, exist_ok=True)
        ids = list(range(1, brokers + 1))
        ports = {n: free_port(host) for n in ids}
        voters = ",".join(f"{n}@{host}:{ports[n]}" for n in ids)
        handles = []
        for n in ids:
            settings = {**(config or {}), **((broker_configs or {}).get(n, {})),
                        "controller.quorum.voters": voters}
            handles.append(BrokerHandle(
                node_id=n, data_dir=root / f"broker-{n}", host=host, port=ports[n],
                metrics_port=free_port(host), config={k: str(v) for k, v in settings.items()},
                log_path=root / f"broker-{n}.log",
                journal_path=root / f"broker-{n}.fileio-journal" if power_loss else None,
                wait_for_ready_line=True,
            ))
        cluster = cls(handles, owned_dirs=owned)
        try:
            cluster.start_brokers(ids, ready_timeout_s=ready_timeout_s)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def start_brokers(self, node_ids: Sequence[int] | None = None, *,
                      ready_timeout_s: float = 60.0) -> None:
        """Start the given stopped brokers (default: every stopped one) all at once, then
        wait for each: after a power loss of the whole region none can be ready before a
        quorum of them runs."""
        chosen = [self.broker(n) for n in (node_ids or [b.node_id for b in self.brokers if not b.running])]
        for broker in chosen:
            broker.data_dir.mkdir(parents=True, exist_ok=True)
            broker.restart(wait=False)
        for broker in chosen:
            broker.wait_ready(ready_timeout_s=ready_timeout_s)

    def broker(self, node_id: int | None = None) -> BrokerHandle:
        """The broker with ``node_id`` (without one: the only broker of a one-broker cluster)."""
        if node_id is None:
            if len(self.brokers) != 1:
                raise ValueError(f"this cluster has {len(self.brokers)} brokers: name one, broker(node_id)")
            return self.brokers[0]
        for broker in self.brokers:
            if broker.node_id == node_id:
                return broker
        raise KeyError(f"no broker {node_id} (brokers: {[b.node_id for b in self.brokers]})")

    @property
    def node_ids(self) -> list[int]:
        return [b.node_id for b in self.brokers]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    # ------------------------------------------------------------ what the region thinks

    def controller(self) -> tuple[int, int]:
        """``(active controller id, controller epoch)`` from the freshest answer (-1: none known)."""
        return observe.controller(self.brokers)

    def partition_view(self, topic: str, partition: int = 0) -> observe.PartitionView | None:
        """Leader, leader epoch, ISR and replicas of a partition: the Metadata answer with
        the highest leader epoch among the brokers that can answer."""
        return observe.partition_view(self.brokers, topic, partition)

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The partition's leader as the freshest metadata names it (-1: none)."""
        view = self.partition_view(topic, partition)
        return view.leader if view is not None else -1

    def partition_state(self, topic: str, partition: int = 0) -> list[dict[str, Any]]:
        """One row per replica: ``broker``, ``state`` (up/paused/down), ``log_end_offset``,
        ``high_watermark``, ``log_start_offset`` (from that broker's /metrics; None when
        it cannot answer), ``in_isr``, ``is_leader``, ``leader_epoch`` (Metadata) and
        ``lag`` (records behind, as the leader sees it)."""
        return observe.partition_state(self.brokers, topic, partition)

    def wait_for_leader(self, topic: str, partition: int = 0, *, not_in: Sequence[int] = (),
                        timeout_s: float = 30.0) -> int:
        """Poll until the partition has a leader outside ``not_in``; return it."""
        def check() -> int | None:
            leader = self.leader_of(topic, partition)
            return leader if leader >= 0 and leader not in not_in else None
        return wait_until(check, timeout_s=timeout_s, what=f"a leader of {topic}-{partition} outside {list(not_in)}")

    def wait_for_isr(self, topic: str, partition: int = 0, *, size: int | None = None,
                     timeout_s: float = 30.0) -> tuple[int, ...]:
        """Poll until the ISR has ``size`` members (default: every replica); return it."""
        def check() -> tuple[int, ...] | None:
            view = self.partition_view(topic, partition)
            if view is None:
                return None
            want = len(view.replicas) if size is None else size
            return view.isr if len(view.isr) == want else None
        return wait_until(check, timeout_s=timeout_s, what=f"the ISR of {topic}-{partition} to reach {size or 'all'}")

    def timeline(self, topic: str, partition: int = 0, *, interval_s: float = 0.1,
                 origin: float | None = None) -> Timeline:
        """A ``Timeline`` sampling ``partition_state`` every ``interval_s`` (start it, or
        use it as a context manager)."""
        return Timeline(lambda: self.partition_state(topic, partition), topic=topic, partition=partition,
                        interval_s=interval_s, origin=origin)

    # ------------------------------------------------------------ faults on every broker

    def power_loss(self, *, rng: Rng | None = None) -> dict[int, int]:
        """Power loss of the whole region: SIGKILL every broker, then cut each one's
        files back to what it fsynced. Returns bytes dropped per broker."""
        before = {b.node_id: _bytes_under(b.data_dir) for b in self.brokers}
        for broker in self.brokers:
            broker.kill()
        for broker in self.brokers:
            broker.truncate_to_durable(rng=rng)
        return {b.node_id: before[b.node_id] - _bytes_under(b.data_dir) for b in self.brokers}

    # ------------------------------------------------------------ clients

    def producer(self, **options: Any) -> blocking.Producer:
        """A blocking producer on this cluster (keyword options as ``mq.client.Producer``)."""
        return self._track(blocking.Producer(self.bootstrap, **options))

    def consumer(self, **options: Any) -> blocking.Consumer:
        return self._track(blocking.Consumer(self.bootstrap, **options))

    def admin(self, **options: Any) -> blocking.Admin:
        return self._track(blocking.Admin(self.bootstrap, **options))

    def _track(self, client: Any) -> Any:
        self._clients.append(client)
        return client

    def close_clients(self) -> None:
        while self._clients:
            client = self._clients.pop()
            try:
                client.close()
            except Exception as error:  # noqa: BLE001 - closing must go on for the others
                print(f"closing {type(client).__name__}: {error}", file=sys.stderr)

    # ------------------------------------------------------------ files

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        """The directory of a partition on the broker that hosts it."""
        for broker in self.brokers:
            path = broker.partition_dir(topic, partition)
            if path.is_dir():
                return path
        raise FileNotFoundError(f"no broker of this cluster has a directory for {topic}-{partition}")

    def segments(self, topic: str, partition: int = 0) -> list[Segment]:
        return list_segments(self.partition_dir(topic, partition))

    def wait_for_segments(self, topic: str, condition: Callable[[list[Segment]], bool], *,
                          partition: int = 0, timeout_s: float = 15.0,
                          what: str = "the segments to change") -> list[Segment]:
        """Poll the partition's segments until ``condition(segments)`` holds (a roll,
        retention...) and return them; ``TimeoutError`` after ``timeout_s``."""
        def check() -> list[Segment] | None:
            segments = self.segments(topic, partition)
            return segments if segments and condition(segments) else None

        return wait_until(check, timeout_s=timeout_s, what=what)

    # ------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Close the clients, then stop every broker gracefully (all at once: in a region
        each one's controlled shutdown needs the others)."""
        self.close_clients()
        for broker in self.brokers:
            broker.begin_stop()
        # The last brokers of a region stopping together have no quorum left to move
        # leadership: after a moment, tell them to skip the rest of the controlled shutdown.
        deadline = time.monotonic() + CONTROLLED_SHUTDOWN_GRACE_S
        for broker in self.brokers:
            broker.stop(hurry_after_s=max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Stop, and delete the temporary data directory if this cluster made it."""
        self.stop()
        for path in self._owned_dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._owned_dirs.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Cluster({', '.join(map(repr, self.brokers))})"


def _bytes_under(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
