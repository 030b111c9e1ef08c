"""Client workloads that write a history: unique sends, concurrent readers, a drain.

``Workload`` runs its own event loop in a thread, so the test's thread stays free to
inject faults. Each logical process sends one unique value (``"<process>-<seq>"``)
at a time through an ``mq.client.Producer`` and records ``invoke`` then:

- ``ok`` with the acknowledged partition and offset;
- ``fail`` only for errors decided by the record's content or raised before it left
  the client (``DEFINITE_FAILURES``): a retry of the same bytes would have been
  refused the same way, so no earlier attempt can have been written;
- ``info`` for everything else (timeouts, lost connections, retries exhausted,
  ``op_timeout_ms`` passing): the write may or may not be in the log.

Readers (``readers > 0``) ``assign`` every partition from offset 0 and record one
``read`` per record. ``drain`` is the final phase: after the faults are healed, a
fresh consumer reads every partition from offset 0 to the end offsets it looked up.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from mq.client import Consumer, Producer
from mq.client.internals.fetcher import OffsetGap
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

from .history import History

DEFINITE_FAILURES = frozenset({
    ErrorCode.RECORD_TOO_LARGE, ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.BUFFER_EXHAUSTED, ErrorCode.INVALID_CONFIG,
})

DEFAULT_PRODUCER: Mapping[str, Any] = MappingProxyType({
    "linger_ms": 2, "request_timeout_ms": 2_000, "delivery_timeout_ms": 12_000,
    "retry_backoff_ms": 50, "max_block_ms": 5_000,
})


@dataclass(frozen=True)
class WorkloadConfig:
    topic: str
    partitions: int = 1
    processes: int = 8  # logical clients, one operation at a time each
    producers: int = 2  # Producer instances, shared round-robin by the processes
    acks: int | str = 1
    rate_per_s: float | None = None  # total send rate; None = as fast as acks come
    op_timeout_ms: int = 15_000
    readers: int = 0
    producer: Mapping[str, Any] = field(default_factory=lambda: DEFAULT_PRODUCER)
    seed: int = 0
    value_prefix: str = ""  # several workloads in one history: values and processes stay unique


class Workload:
    """``start()`` / ``stop()`` around the fault schedule; see the module docstring."""

    def __init__(self, bootstrap: str, history: History, config: WorkloadConfig) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.config = config
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> Workload:
        self._thread = threading.Thread(target=self._run, name="chaos-workload", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, timeout_s: float = 60.0) -> None:
        """Ask every process to finish its current operation, then wait for them."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise TimeoutError(f"workload did not stop within {timeout_s}s")
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop() on the test's thread
            self._error = exc

    async def _main(self) -> None:
        cfg = self.config
        settings = {**DEFAULT_PRODUCER, **cfg.producer}
        producers = [Producer(self.bootstrap, acks=cfg.acks, client_id=f"chaos-{i}",
                              seed=cfg.seed + i, **settings)
                     for i in range(cfg.producers)]
        try:
            tasks = [asyncio.create_task(self._sender(p, producers[p % len(producers)]))
                     for p in range(cfg.processes)]
            tasks += [asyncio.create_task(self._reader(r)) for r in range(cfg.readers)]
            await asyncio.gather(*tasks)
        finally:
            for producer in producers:
                try:
                    await asyncio.wait_for(producer.close(timeout_ms=1_000), 5)
                except (MqError, OSError, TimeoutError):
                    pass  # unfinished sends are already recorded as info

    async def _sender(self, process: int, producer: Producer) -> None:
        cfg = self.config
        rng = random.Random(cfg.seed * 1_000_003 + process)
        loop = asyncio.get_running_loop()
        interval = cfg.processes / cfg.rate_per_s if cfg.rate_per_s else 0.0
        next_at = loop.time() + rng.uniform(0, interval)
        seq = 0
        while not self._stop.is_set():
            if interval:
                await asyncio.sleep(max(0.0, next_at - loop.time()))  # pacing, not waiting
                next_at += interval
            value = f"{cfg.value_prefix}{process}-{seq}"
            seq += 1
            partition = rng.randrange(cfg.partitions)
            name: int | str = f"{cfg.value_prefix}{process}" if cfg.value_prefix else process
            self.history.record("invoke", "send", value, partition=partition, process=name)
            await self._send_one(producer, name, value, partition)

    async def _send_one(self, producer: Producer, process: int | str, value: str,
                        partition: int) -> None:
        record = self.history.record
        try:
            future = producer.send(self.config.topic, value.encode(), partition=partition)
            meta = await asyncio.wait_for(_delivered(future), self.config.op_timeout_ms / 1000)
        except MqError as err:
            kind = "fail" if err.code in DEFINITE_FAILURES else "info"
            record(kind, "send", value, partition=partition, process=process)
        except (TimeoutError, OSError):
            record("info", "send", value, partition=partition, process=process)
        except asyncio.CancelledError:
            # Python 3.11's wait_for can raise the inner cancellation instead of TimeoutError
            # when the timeout and the answer meet; only a cancel aimed at this task stops it.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            record("info", "send", value, partition=partition, process=process)
        else:
            record("ok", "send", value, partition=meta.partition, offset=meta.offset, process=process)

    async def _reader(self, number: int) -> None:
        """Read every partition from 0 while the faults happen; a reader that errors is
        replaced by a new one (a new process name) continuing where it stopped."""
        positions = dict.fromkeys(range(self.config.partitions), 0)
        incarnation = 0
        while not self._stop.is_set():
            name = f"r{number}.{incarnation}"
            incarnation += 1
            try:
                await self._read_until_stopped(name, positions)
            except (MqError, OSError, TimeoutError) as err:
                self.history.record("info", "read", f"error: {err}", process=name)
                await asyncio.sleep(0.1)  # back off before reconnecting

    async def _read_until_stopped(self, name: str, positions: dict[int, int]) -> None:
        cfg = self.config
        async with Consumer(self.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=100,
                            request_timeout_ms=2_000, retry_backoff_ms=50,
                            client_id=name, seed=cfg.seed) as consumer:
            tps = [TopicPartition(cfg.topic, p) for p in range(cfg.partitions)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, positions[tp.partition])
            while not self._stop.is_set():
                for r in await consumer.poll(200):
                    positions[r.partition] = r.offset + 1
                    self.history.record("ok", "read", _text(r.value), partition=r.partition,
                                        offset=r.offset, process=name)


async def _delivered(future: Any) -> Any:
    return await future


def _text(value: bytes | None) -> str:
    return value.decode(errors="replace") if value is not None else ""


@dataclass(frozen=True)
class DrainResult:
    end_offsets: Mapping[int, int]
    records: int
    gaps: tuple[OffsetGap, ...]

    def allowed_gaps(self) -> dict[int, list[tuple[int, int]]]:
        """The consumer's reported gaps, in the checker's ``allowed_gaps`` shape."""
        out: dict[int, list[tuple[int, int]]] = {}
        for gap in self.gaps:
            out.setdefault(gap.topic_partition.partition, []).append(
                (gap.expected_offset, gap.next_offset))
        return out


def drain(bootstrap: str, history: History, topic: str, partitions: int, *,
          process: str = "drain", timeout_s: float = 30.0) -> DrainResult:
    """Blocking: read every partition from offset 0 up to its end offset (looked up
    first, retried until the cluster answers), recording one ``read`` per record."""
    return asyncio.run(_drain(bootstrap, history, topic, partitions, process, timeout_s))


async def _drain(bootstrap: str, history: History, topic: str, partitions: int, process: str,
                 timeout_s: float) -> DrainResult:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                        request_timeout_ms=2_000, retry_backoff_ms=50, client_id=process) as consumer:
        ends: dict[TopicPartition, int] | None = None
        while ends is None:
            try:
                ends = await consumer.end_offsets(tps)
            except (MqError, OSError, TimeoutError):
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)  # the broker may still be loading its logs
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        count = 0
        remaining = [tp for tp in tps if ends[tp] > 0]
        while remaining:
            if loop.time() > deadline:
                raise TimeoutError(f"drain did not reach {ends} within {timeout_s}s")
            for r in await consumer.poll(500):
                count += 1
                history.record("ok", "read", _text(r.value), partition=r.partition,
                               offset=r.offset, process=process)
            # The position, not the last record read, decides: it also moves over
            # offsets that hold no readable record (gaps, markers).
            remaining = [tp for tp in remaining if await consumer.position(tp) < ends[tp]]
        return DrainResult(MappingProxyType({tp.partition: ends[tp] for tp in tps}), count,
                           tuple(consumer.gaps))
