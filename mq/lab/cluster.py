"""Brokers as objects a notebook can hold: start, stop, crash, restart, look inside.

``BrokerHandle`` runs one ``python -m mq.aio.runner`` process on free loopback ports
with its own data directory (a fresh temporary one unless you give a path), and
knows where its partitions and segment files live. ``Cluster`` groups the brokers
of one region and hands out blocking clients that it closes for you. Today a
region has one broker; replication adds more behind the same surface.

    with Cluster.start(config={"log.retention.check.interval.ms": "200"}) as cluster:
        admin = cluster.admin()
        admin.create_topic("orders", configs={"segment.bytes": "65536"})
        producer = cluster.producer(linger_ms=5)
        ...
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from mq.client import blocking
from mq.deploy import probe
from mq.lab.process import ChildProcess, free_port, rss_mb, wait_until
from mq.lab.segments import Segment, list_segments


class BrokerHandle:
    """One broker process: ``bootstrap``, ``data_dir``, ``stop()/kill()/restart()``."""

    def __init__(self, *, node_id: int, data_dir: Path, host: str, port: int, metrics_port: int,
                 config: Mapping[str, str], log_path: Path) -> None:
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.metrics_port = metrics_port
        self.config = dict(config)
        self.log_path = Path(log_path)
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

    def _spawn(self, ready_timeout_s: float) -> BrokerHandle:
        self._child = ChildProcess(
            f"broker {self.node_id}", self._argv(), host=self.host, port=self.port,
            log_path=self.log_path,
        )
        self._child.start(ready_timeout_s=ready_timeout_s, ready=self._answers)
        return self

    def _answers(self) -> bool:
        """Ready means it answers ApiVersions, not merely that the port is bound."""
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

    def stop(self, *, timeout_s: float = 10.0) -> int | None:
        """Graceful stop (SIGTERM: flush and checkpoint). Returns the exit code."""
        return self._child.stop(timeout_s=timeout_s) if self._child else None

    def kill(self) -> int | None:
        """Crash it (SIGKILL): no flush, no checkpoint; restart runs recovery."""
        return self._child.kill() if self._child else None

    def close(self) -> None:
        """Stop, and delete the data directory if ``start()`` made it (a directory you
        passed is kept)."""
        self.stop()
        if self._owned_root is not None:
            shutil.rmtree(self._owned_root, ignore_errors=True)
            self._owned_root = None

    def restart(self, *, ready_timeout_s: float = 30.0) -> BrokerHandle:
        """Start again on the same port and data directory (stopping it first if it runs)."""
        if self.running:
            self.stop()
        return self._spawn(ready_timeout_s)

    # ------------------------------------------------------------ files

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        """``<data dir>/<topic>-<partition>/``: Kafka's layout."""
        return self.data_dir / f"{topic}-{partition}"

    def segments(self, topic: str, partition: int = 0) -> list[Segment]:
        """The partition's segments, oldest first (the last one is the active segment)."""
        return list_segments(self.partition_dir(topic, partition))

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
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

    @property
    def broker(self) -> BrokerHandle:
        return self.brokers[0]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

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
        """Close the clients, then stop every broker gracefully."""
        self.close_clients()
        for broker in self.brokers:
            broker.stop()

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
