"""``mq produce TOPIC``: one record per stdin line, like Kafka's console producer.

Lines are sent through the async ``Producer`` with a sliding window of records in
flight (``--window``): the producer batches them per partition (``linger_ms``,
``batch_size``) while more lines are read, and results are collected oldest first,
so a report lists records in input order.

With ``--key-separator S`` a line ``k<S>v`` becomes key ``k`` and value ``v``. A line
without the separator is sent whole as the value with no key (Kafka's console
producer does this with ``ignore.error=true``; by default it stops with "No key
separator found"): a note on stderr counts such lines, and ``--require-key`` restores
Kafka's strict default.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, BinaryIO

from mq.cli.common import CliError, add_bootstrap, check_partition, explain, topic_partitions
from mq.cli.records import bytes_to_json

READ_CHUNK = 256 * 1024
ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "produce", help="send stdin lines as records",
        description="Send each line of stdin (without its newline) as one record.\n"
                    "Exits 0 only if every record was acknowledged.",
    )
    p.add_argument("topic", metavar="TOPIC", help="topic name")
    add_bootstrap(p)
    p.add_argument("--key-separator", metavar="S",
                   help="split each line at the first S into key and value "
                        "(a line without S is sent whole as the value, with no key)")
    p.add_argument("--require-key", action="store_true",
                   help="with --key-separator: stop at the first line without S (Kafka's default)")
    p.add_argument("--acks", choices=["0", "1", "all"], default="1",
                   help="0: don't wait, 1: leader appended, all: in-sync replicas (default: 1)")
    p.add_argument("--partition", type=int, metavar="P", help="send every record to partition P "
                   "(default: by key hash, sticky for records without a key)")
    p.add_argument("--compression", choices=["none", "gzip", "lz4", "zstd"], default="none",
                   help="batch compression codec (default: none)")
    p.add_argument("--linger-ms", type=int, default=5, metavar="MS",
                   help="how long a batch waits for more records (default: 5)")
    p.add_argument("--batch-size", type=int, default=64 * 1024, metavar="BYTES",
                   help="target batch size per partition (default: 65536)")
    p.add_argument("--delivery-timeout-ms", type=int, default=30_000, metavar="MS",
                   help="give up on a record not acknowledged within this (default: 30000)")
    p.add_argument("--window", type=int, default=20_000, metavar="N",
                   help="records in flight before waiting for the oldest (default: 20000)")
    p.add_argument("--report", metavar="FILE",
                   help='write one JSON line per acknowledged record: {"partition","offset","key","value"}')
    p.set_defaults(func=run_produce)


def run_produce(args: argparse.Namespace) -> int:
    if args.require_key and args.key_separator is None:
        raise CliError("--require-key needs --key-separator", "add --key-separator S")
    if args.key_separator == "":
        raise CliError("--key-separator must not be empty", "pass a separator such as ':' or a tab")
    if args.window < 1:
        raise CliError("--window must be at least 1", "use the default or a positive number")
    partitions = topic_partitions(args.bootstrap, args.topic)
    check_partition(args.topic, args.partition, partitions)
    if sys.stdin.isatty():
        print(f"type records for {args.topic}, one per line; Ctrl-D to finish", file=sys.stderr)
    report = open(args.report, "w", encoding="utf-8") if args.report else None  # noqa: SIM115
    try:
        stats = asyncio.run(_produce(args, sys.stdin.buffer, report))
    finally:
        if report is not None:
            report.close()
    return _summarize(args, stats)


class _Stats:
    def __init__(self) -> None:
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.no_separator = 0
        self.started = time.monotonic()


async def _produce(args: argparse.Namespace, stdin: BinaryIO, report: Any) -> _Stats:
    from mq.client import Producer

    stats = _Stats()
    sep = args.key_separator.encode() if args.key_separator is not None else None
    producer = Producer(
        args.bootstrap, acks=ACKS[args.acks], linger_ms=args.linger_ms, batch_size=args.batch_size,
        compression=None if args.compression == "none" else args.compression,
        delivery_timeout_ms=args.delivery_timeout_ms,
        request_timeout_ms=min(30_000, args.delivery_timeout_ms), client_id="mq-console-producer",
    )
    async with producer:
        await producer.partitions_for(args.topic)  # routes known before the first record
        window = _Window(args.window, stats, report)
        settler = asyncio.create_task(window.settle_forever())
        try:
            async for line_no, line in _lines(stdin):
                key, value = _split(line, sep, line_no, args, stats)
                # send() returns at once with an awaitable RecordFuture (it queues the record
                # itself when buffer_memory is full), so reading never waits for a round trip.
                await window.add(producer.send(args.topic, value, key=key, partition=args.partition),
                                 key, value)
        except BaseException:
            settler.cancel()
            raise
        window.close()
        await producer.flush()
        await settler
    return stats


class _Window:
    """Records sent but not yet settled, oldest first, at most ``size`` of them.

    The reader adds records; ``settle_forever`` (a task) waits for the oldest, writes
    its report line and counts it, so reports keep input order and appear as soon as
    records are acknowledged, even while stdin waits for the next line.
    """

    def __init__(self, size: int, stats: _Stats, report: Any) -> None:
        self.size = size
        self.stats = stats
        self.report = report
        self.pending: collections.deque = collections.deque()
        self.changed = asyncio.Event()  # a record was added, or the input ended
        self.room = asyncio.Event()
        self.room.set()
        self.closed = False

    async def add(self, future: Any, key: bytes | None, value: bytes) -> None:
        self.pending.append((future, key, value))
        self.stats.sent += 1
        self.changed.set()
        if len(self.pending) >= self.size:
            self.room.clear()
            await self.room.wait()

    def close(self) -> None:
        self.closed = True
        self.changed.set()

    async def settle_forever(self) -> None:
        while self.pending or not self.closed:
            if not self.pending:
                self.changed.clear()
                await self.changed.wait()
                continue
            with contextlib.suppress(Exception):  # the outcome is read (and counted) below
                await self.pending[0][0]
            _settle(self.pending, self.stats, self.report)
            if len(self.pending) < self.size:
                self.room.set()
            if not self.pending and self.report is not None:
                self.report.flush()


def _split(line: bytes, sep: bytes | None, line_no: int, args: argparse.Namespace,
           stats: _Stats) -> tuple[bytes | None, bytes]:
    if sep is None:
        return None, line
    key, found, value = line.partition(sep)
    if found:
        return key, value
    if args.require_key:
        raise CliError(f"no key separator {args.key_separator!r} found on line {line_no}: {line[:80]!r}",
                       "fix the input, or drop --require-key to send such lines without a key")
    stats.no_separator += 1
    return None, line


def _settle(pending: collections.deque, stats: _Stats, report: Any) -> None:
    """Collect every finished record at the head of the window, oldest first."""
    while pending and pending[0][0].done():
        future, key, value = pending.popleft()
        error = future.exception()
        if error is not None:
            stats.failed += 1
            stats.first_error = stats.first_error or error
            continue
        stats.acked += 1
        if report is not None:
            meta = future.result()
            report.write(json.dumps({"partition": meta.partition, "offset": meta.offset,
                                     "key": bytes_to_json(key), "value": bytes_to_json(value)}))
            report.write("\n")


async def _lines(stdin: BinaryIO):
    """Yield ``(line_number, line)`` from stdin without blocking the event loop.

    A daemon thread reads chunks with ``os.read`` on the file descriptor (it returns
    what is available, so typed lines go out at once and piped input comes in large
    chunks) into a small bounded queue. Daemon, because a read blocked on a terminal
    must not keep Ctrl-C from exiting; ``os.read`` rather than the buffered ``stdin``,
    whose lock a daemon thread must not hold while the interpreter shuts down.
    """
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=8)

    def pump() -> None:
        fd = stdin.fileno()
        while True:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except (OSError, ValueError):
                chunk = b""
            try:
                asyncio.run_coroutine_threadsafe(chunks.put(chunk), loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):
                return  # the loop is gone
            if not chunk:
                return

    threading.Thread(target=pump, name="mq-produce-stdin", daemon=True).start()
    rest = b""
    line_no = 0
    while chunk := await chunks.get():
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        for part in parts:
            line_no += 1
            yield line_no, part[:-1] if part.endswith(b"\r") else part
    if rest:
        yield line_no + 1, rest[:-1] if rest.endswith(b"\r") else rest


def _summarize(args: argparse.Namespace, stats: _Stats) -> int:
    elapsed = time.monotonic() - stats.started
    if stats.no_separator:
        print(f"note: {stats.no_separator} line(s) had no key separator {args.key_separator!r}; "
              "sent them whole as the value, with no key", file=sys.stderr)
    if stats.failed:
        err = explain(stats.first_error, args.bootstrap) if stats.first_error else None
        first = f"{err.what} — {err.todo}" if err else "unknown"
        print(f"error: {stats.failed} of {stats.sent} records were not acknowledged; first error: {first}",
              file=sys.stderr)
        return 1
    rate = stats.acked / elapsed if elapsed > 0 else 0.0
    print(f"produced {stats.acked} records to {args.topic} in {elapsed:.2f} s ({rate:,.0f} records/s)",
          file=sys.stderr)
    return 0
