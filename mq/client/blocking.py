"""Blocking Producer, Consumer and Admin: the asyncio clients run on a private event loop
in a real OS thread, and each call waits for its result.

For notebooks, scripts, the CLI and locust. The loop never belongs to the caller, so
these work whether or not the calling thread runs an event loop of its own. Under
gevent (locust monkey-patches ``threading``) the loop thread is started with the
*original* thread primitive, so it is a real OS thread, and the loop is uvloop (libuv
does its own I/O, untouched by the patched ``select``/``socket``). No lock is shared
across the two threads then: the loop thread wakes the caller's gevent hub through an
``async_`` watcher and the result is handed over on the caller's side.

All clients of a process share one loop thread (a locust run may hold thousands of
clients). ``send`` blocks until the record is acknowledged; ``send_nowait`` returns a
``concurrent.futures.Future`` instead; ``send_many`` is the fast path from sync code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from mq.client import admin as _admin
from mq.client import consumer as _consumer
from mq.client import producer as _producer
from mq.client import share_consumer as _share
from mq.client.internals.fetcher import ConsumerRecord
from mq.client.results import GroupMetadata, OffsetAndMetadata, RecordMetadataList
from mq.core.errors import ErrorCode, MqError
from mq.core.types import RecordMetadata, TopicPartition

T = TypeVar("T")

__all__ = ["Admin", "Consumer", "ConsumerRecord", "GroupMetadata", "OffsetAndMetadata", "Producer",
           "RecordMetadata", "ShareConsumer"]


def _start_real_thread(target: Callable[[], None], name: str) -> None:
    """Start ``target`` on a real OS thread, even when gevent patched ``threading``."""
    if _gevent_patched():
        start_new_thread = sys.modules["gevent.monkey"].get_original("_thread", "start_new_thread")
        start_new_thread(target, ())
        return
    threading.Thread(target=target, name=name, daemon=True).start()


def _gevent_patched() -> bool:
    gevent_monkey = sys.modules.get("gevent.monkey")
    return gevent_monkey is not None and gevent_monkey.is_module_patched("threading")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _LoopThread:
    """One event loop running forever in a daemon OS thread."""

    _shared: _LoopThread | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = _new_loop()
        self.thread_id: int | None = None
        _start_real_thread(self._run, "mq-client-loop")

    def _run(self) -> None:
        self.thread_id = threading.get_ident()
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @classmethod
    def shared(cls) -> _LoopThread:
        with cls._shared_lock:
            if cls._shared is None or cls._shared.loop.is_closed():
                cls._shared = cls()
            return cls._shared

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future:
        """Run ``coro`` on the loop; a ``concurrent.futures.Future`` of its result."""
        if not _gevent_patched():
            return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        return self._submit_gevent(coro)

    def _submit_gevent(self, coro: Awaitable[T]) -> concurrent.futures.Future:
        """Under gevent no lock may be shared with the loop thread (patched locks are
        greenlet locks). The loop thread only ``send()``s an ``async_`` watcher of the
        caller's hub; the result is copied into the future on the caller's thread. The
        active watcher also keeps the hub from deciding that a waiter waits forever."""
        import gevent

        out: concurrent.futures.Future = concurrent.futures.Future()
        watcher = gevent.get_hub().loop.async_()
        box: list[asyncio.Task] = []

        def deliver() -> None:  # on the caller's thread, from its hub
            watcher.close()
            task = box[0]
            if task.cancelled():
                if not out.cancelled():
                    out.cancel()
            elif not out.done():
                if task.exception() is not None:
                    out.set_exception(task.exception())  # type: ignore[arg-type]
                else:
                    out.set_result(task.result())

        def start() -> None:  # on the loop thread
            task = self.loop.create_task(coro)  # type: ignore[arg-type]
            box.append(task)
            task.add_done_callback(lambda _: watcher.send())

        def cancel_task() -> None:  # on the loop thread
            if box:
                box[0].cancel()

        watcher.start(deliver)
        out.add_done_callback(
            lambda f: self.loop.call_soon_threadsafe(cancel_task) if f.cancelled() else None)
        self.loop.call_soon_threadsafe(start)
        return out

    def run(self, coro: Awaitable[T], timeout_s: float | None = None) -> T:
        if self.thread_id is not None and threading.get_ident() == self.thread_id:
            raise MqError(ErrorCode.INVALID_REQUEST,
                          "a blocking mq client was called from its own event loop thread; "
                          "use the asyncio client (mq.client) there")
        fut = self.submit(coro)
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise MqError(ErrorCode.REQUEST_TIMED_OUT, "blocking call timed out") from None

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a plain function on the loop thread (the async clients are not thread-safe)."""
        async def run() -> T:
            return fn(*args, **kwargs)

        return self.run(run())


class _Blocking:
    """Common plumbing: construct the async client on the loop, start it, close it."""

    _client: Any

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._runner = _LoopThread.shared()

        async def make() -> Any:
            client = factory()
            await client.start()
            return client

        self._client = self._runner.run(make())
        self._closed = False

    def _run(self, coro: Awaitable[T]) -> T:
        return self._runner.run(coro)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._run(self._client.close())

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Producer(_Blocking):
    """Blocking twin of ``mq.client.Producer`` (same keyword arguments)."""

    def __init__(self, bootstrap: str = "localhost:9092", **config: Any) -> None:
        super().__init__(lambda: _producer.Producer(bootstrap, **config))

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Mapping[str, bytes] | Iterable[tuple[str, bytes]] | None = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> RecordMetadata:
        """Send one record and wait until it is acknowledged."""
        async def send() -> RecordMetadata:
            return await self._client.send(topic, value, key, headers, partition, timestamp_ms)

        return self._run(send())

    def send_nowait(self, topic: str, value: bytes | None, key: bytes | None = None,
                    headers: Mapping[str, bytes] | Iterable[tuple[str, bytes]] | None = None,
                    partition: int | None = None, timestamp_ms: int | None = None
                    ) -> concurrent.futures.Future:
        """Queue one record; returns a ``concurrent.futures.Future`` of its RecordMetadata
        (waits for buffer space like the async ``send``)."""
        async def send() -> RecordMetadata:
            return await self._client.send(topic, value, key, headers, partition, timestamp_ms)

        return self._runner.submit(send())

    def send_many(self, topic: str, records: Iterable[tuple], partition: int | None = None
                  ) -> RecordMetadataList:
        return self._run(self._client.send_many(topic, records, partition))

    def flush(self, timeout_ms: int | None = None) -> None:
        self._run(self._client.flush(timeout_ms))

    def partitions_for(self, topic: str) -> list[int]:
        return self._run(self._client.partitions_for(topic))

    @property
    def metrics(self) -> dict[str, Any]:
        return self._runner.call(lambda: self._client.metrics)


class Consumer(_Blocking):
    """Blocking twin of ``mq.client.Consumer`` (same keyword arguments)."""

    def __init__(self, bootstrap: str = "localhost:9092", **config: Any) -> None:
        super().__init__(lambda: _consumer.Consumer(bootstrap, **config))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = list(partitions)
        self._runner.call(self._client.assign, partitions)

    def assignment(self) -> list[TopicPartition]:
        return self._runner.call(self._client.assignment)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._runner.call(self._client.seek, tp, offset)

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self._runner.call(self._client.seek_to_beginning, *tps)

    def seek_to_end(self, *tps: TopicPartition) -> None:
        self._runner.call(self._client.seek_to_end, *tps)

    def seek_to_timestamp(self, timestamp_ms: int, *tps: TopicPartition) -> None:
        self._runner.call(self._client.seek_to_timestamp, timestamp_ms, *tps)

    def position(self, tp: TopicPartition) -> int:
        return self._run(self._client.position(tp))

    def poll(self, timeout_ms: int = 1000, *, max_records: int | None = None) -> list[ConsumerRecord]:
        return self._run(self._client.poll(timeout_ms, max_records=max_records))

    def pause(self, *tps: TopicPartition) -> None:
        self._runner.call(self._client.pause, *tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._runner.call(self._client.resume, *tps)

    def paused(self) -> list[TopicPartition]:
        return self._runner.call(self._client.paused)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._runner.call(self._client.highwater, tp)

    # consumer groups (rebalance callbacks run on the loop thread, inside poll/close: they
    # must not call this blocking consumer; use the asyncio one passed around instead)

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None) -> None:
        topics = None if topics is None else [topics] if isinstance(topics, str) else list(topics)
        self._runner.call(self._client.subscribe, topics, pattern=pattern)

    def subscription(self) -> list[str] | str | None:
        return self._runner.call(self._client.subscription)

    def unsubscribe(self) -> None:
        self._runner.call(self._client.unsubscribe)

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
               *, timeout_ms: int | None = None) -> None:
        offsets = dict(offsets) if offsets is not None else None
        self._run(self._client.commit(offsets, timeout_ms=timeout_ms))

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     *, callback: Callable[..., Any] | None = None) -> concurrent.futures.Future:
        """Returns a ``concurrent.futures.Future``; ``callback(offsets, error)`` runs on the
        loop thread."""
        offsets = dict(offsets) if offsets is not None else None

        async def commit() -> None:
            await self._client.commit_async(offsets, callback=callback)

        return self._runner.submit(commit())

    def committed(self, tps: Iterable[TopicPartition], *, timeout_ms: int | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._run(self._client.committed(list(tps), timeout_ms=timeout_ms))

    def group_metadata(self) -> GroupMetadata:
        return self._runner.call(self._client.group_metadata)

    def metrics(self) -> dict[str, Any]:
        return self._runner.call(self._client.metrics)

    @property
    def gaps(self) -> list[_consumer.OffsetGap]:
        return self._runner.call(lambda: self._client.gaps)

    def partitions_for(self, topic: str) -> list[int]:
        return self._run(self._client.partitions_for(topic))

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._client.beginning_offsets(list(tps)))

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._client.end_offsets(list(tps)))


class ShareConsumer(_Blocking):
    """Blocking twin of ``mq.client.ShareConsumer`` (same keyword arguments)."""

    def __init__(self, bootstrap: str = "localhost:9092", **config: Any) -> None:
        super().__init__(lambda: _share.ShareConsumer(bootstrap, **config))

    def poll(self, timeout_ms: int = 1000) -> list[_share.ShareRecord]:
        return self._run(self._client.poll(timeout_ms))

    def acknowledge(self, record: _share.ShareRecord, ack_type: str = "accept") -> None:
        self._runner.call(self._client.acknowledge, record, ack_type)

    def commit(self) -> list:
        return self._run(self._client.commit())

    @property
    def member_id(self) -> str:
        return self._runner.call(lambda: self._client.member_id)


class Admin(_Blocking):
    """Blocking twin of ``mq.client.Admin``."""

    def __init__(self, bootstrap: str = "localhost:9092", **config: Any) -> None:
        super().__init__(lambda: _admin.Admin(bootstrap, **config))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # Every public Admin method is a coroutine function: wrap it to block.
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._client, name)
        if not asyncio.iscoroutinefunction(method):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._run(method(*args, **kwargs))

        call.__name__ = name
        call.__doc__ = method.__doc__
        return call

    def __dir__(self) -> list[str]:
        names = [n for n in dir(_admin.Admin) if not n.startswith("_")
                 and asyncio.iscoroutinefunction(getattr(_admin.Admin, n))]
        return sorted(set(names) | set(super().__dir__()))
