"""The peers mq is measured against, run on loopback by the benchmark itself.

- NATS JetStream (``nats-server -js``, file storage), driven by nats-py: async
  publish (``publish_async``: many publishes in flight, acks collected as futures)
  and a pull consumer fetching batches with ``AckPolicy.NONE``.
- Redis streams (``redis-server --appendonly yes --appendfsync everysec``), driven by
  redis-py: pipelined ``XADD`` and ``XREAD`` with a large ``COUNT``.

Both keep data on disk without an fsync per write, like mq's default
``log.flush.policy=replicated``. Each server gets free ports and a temporary
directory and is stopped by its pid afterwards.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

from loadtests.stats import Result, binary_version, latency_summary
from mq.lab.process import ChildProcess, free_port, rss_mb

NATS_BINARY = "nats-server"
REDIS_BINARY = "redis-server"


class PeerServer(ABC):
    """A peer's server process in its own temporary directory."""

    def __init__(self, name: str, binary: str, version_flag: str) -> None:
        self.name = name
        self.binary = shutil.which(binary)
        self.version = binary_version([self.binary, version_flag]) if self.binary else "absent"
        self.root: Path | None = None
        self.child: ChildProcess | None = None

    @property
    def available(self) -> bool:
        return self.binary is not None

    @abstractmethod
    def _argv(self, port: int, directory: Path) -> list[str]:
        """The server's command line for a port and a data directory."""

    def start(self) -> PeerServer:
        assert self.binary, f"{self.name} is not installed"
        self.root = Path(tempfile.mkdtemp(prefix=f"mq-bench-{self.name}-"))
        port = free_port()
        self.child = ChildProcess(self.name, self._argv(port, self.root / "data"), host="127.0.0.1",
                                  port=port, log_path=self.root / "server.log")
        (self.root / "data").mkdir()
        self.child.start(ready_timeout_s=20)
        return self

    @property
    def port(self) -> int:
        assert self.child
        return self.child.port

    def rss_mb(self) -> float | None:
        return rss_mb(self.child.pid) if self.child else None

    def stop(self) -> None:
        if self.child:
            self.child.stop()
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)


class NatsServer(PeerServer):
    def __init__(self) -> None:
        super().__init__("nats-server", NATS_BINARY, "--version")

    def _argv(self, port: int, directory: Path) -> list[str]:
        return [str(self.binary), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(directory)]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


class RedisServer(PeerServer):
    def __init__(self) -> None:
        super().__init__("redis-server", REDIS_BINARY, "--version")

    def _argv(self, port: int, directory: Path) -> list[str]:
        return [str(self.binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                "--protected-mode", "no", "--daemonize", "no"]


# ---------------------------------------------------------------- NATS JetStream


def _stream_name(subject: str) -> str:
    return subject.replace(".", "_")



async def nats_produce(server: NatsServer, subject: str, values: Sequence[bytes], *, run: int,
                       size_bytes: int, latency_every: int) -> Result:
    import nats
    from nats.js.api import StorageType

    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=_stream_name(subject), subjects=[subject],
                            storage=StorageType.FILE)
        samples: list[int] = []
        start = time.perf_counter()
        last = None
        for i, value in enumerate(values):
            sent_ns = time.perf_counter_ns()
            last = await js.publish_async(subject, value)
            if i % latency_every == 0:
                last.add_done_callback(lambda _f, t=sent_ns: samples.append(time.perf_counter_ns() - t))
        await js.publish_async_completed()
        seconds = time.perf_counter() - start
        assert last is not None and last.result().seq == len(values), "every publish acknowledged"
    finally:
        await nc.close()
    return Result("P5", "nats-jetstream", "produce", run, len(values), size_bytes, seconds,
                  latency_summary(samples, of=f"publish_async -> ack, every {latency_every}th record"),
                  server.rss_mb(), {"api": "publish_async", "storage": "file"})


async def nats_consume(server: NatsServer, subject: str, count: int, *, run: int, size_bytes: int,
                       fetch_batch: int = 1000) -> Result:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
        subscription = await js.pull_subscribe(subject, durable=f"bench{run}", config=config)
        start = time.perf_counter()
        received = 0
        while received < count:
            messages = await subscription.fetch(batch=fetch_batch, timeout=5)
            received += len(messages)
        seconds = time.perf_counter() - start
        await js.delete_stream(_stream_name(subject))  # untimed: the next run starts empty
    finally:
        await nc.close()
    return Result("P5", "nats-jetstream", "consume", run, received, size_bytes, seconds, None,
                  server.rss_mb(), {"api": "pull_subscribe.fetch", "batch": fetch_batch,
                                    "ack_policy": "none"})


# ---------------------------------------------------------------- Redis streams


def redis_produce(server: RedisServer, key: str, values: Sequence[bytes], *, run: int,
                  size_bytes: int, pipeline: int = 1000) -> Result:
    import redis

    client = redis.Redis(host="127.0.0.1", port=server.port)
    samples: list[int] = []
    try:
        start = time.perf_counter()
        for begin in range(0, len(values), pipeline):
            sent_ns = time.perf_counter_ns()
            pipe = client.pipeline(transaction=False)
            for value in values[begin:begin + pipeline]:
                pipe.xadd(key, {b"v": value})
            pipe.execute()
            samples.append(time.perf_counter_ns() - sent_ns)
        seconds = time.perf_counter() - start
        assert client.xlen(key) == len(values), "every XADD stored"
    finally:
        client.close()
    return Result("P5", "redis-streams", "produce", run, len(values), size_bytes, seconds,
                  latency_summary(samples, of=f"one pipeline of {pipeline} XADD"),
                  server.rss_mb(), {"api": "pipelined XADD", "pipeline": pipeline,
                                    "appendfsync": "everysec"})


def redis_consume(server: RedisServer, key: str, count: int, *, run: int, size_bytes: int,
                  read_count: int = 10_000) -> Result:
    import redis

    client = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        start = time.perf_counter()
        received, last_id = 0, b"0-0"
        while received < count:
            response = client.xread({key: last_id}, count=read_count)
            entries = response[0][1]
            received += len(entries)
            last_id = entries[-1][0]
        seconds = time.perf_counter() - start
        client.delete(key)  # untimed: the next run starts empty
    finally:
        client.close()
    return Result("P5", "redis-streams", "consume", run, received, size_bytes, seconds, None,
                  server.rss_mb(), {"api": "XREAD", "count": read_count})
