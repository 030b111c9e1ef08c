"""``mq produce TOPIC``: one record per stdin line, like Kafka's console producer.

Lines are sent through the async ``Producer`` with a sliding window of records in
flight (``--window``): the producer batches them per partition (``linger_ms``,
``batch_size``) while more lines are read, and results are collected oldest first,
so a report lists records in input order.

A line is parsed by ``mq.cli.line_reader`` (Kafka's ``LineMessageReader``:
``--property parse.key=true``, ``parse.headers=true`` and their separators). The older
shorthand ``--key-separator S`` splits at the first S and sends a line without S whole as
the value with no key (Kafka's ``ignore.error=true``; a note counts such lines), unless
``--require-key``. A line that cannot be parsed is reported on stderr with its line number
and not sent; the rest are sent, and the exit code is 1. With ``--strict`` nothing after
that line is sent (what Kafka's console producer and rpk do: they stop at the first bad
line); the records before it are still flushed and acknowledged.
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

from mq.cli import client_props
from mq.cli.common import (
    CliError,
    add_bootstrap,
    check_partition,
    data_dir_of_env,
    explain,
    key_value,
    recorded_regions,
    topic_partitions,
)
from mq.cli.formatter import FormatError
from mq.cli.line_reader import PROPERTIES, LineError, LineFormat
from mq.cli.records import bytes_to_json
from mq.core.errors import ErrorCode, MqError

READ_CHUNK = 256 * 1024
ACKS = {"0": 0, "1": 1, "all": "all", "-1": "all"}
SHOWN_BAD_LINES = 20  # per-line reports on stderr; the summary counts them all
DEFAULTS = {"acks": 1, "linger_ms": 5, "batch_size": 64 * 1024, "delivery_timeout_ms": 30_000,
            "client_id": "mq-console-producer"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "produce", help="send stdin lines as records",
        description="Send each line of stdin (without its newline) as one record.\n"
                    "Exits 0 only if every line was parsed and every record acknowledged.",
    )
    p.add_argument("topic", nargs="?", metavar="TOPIC", help="topic name")
    p.add_argument("-t", "--topic", dest="topic_option", metavar="TOPIC",
                   help="the topic, as kafka-console-producer and kcat name it (instead of TOPIC)")
    add_bootstrap(p)
    p.add_argument("--property", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka line reader property (repeatable): parse.key, parse.headers, ignore.error "
                        "(true/false), key.separator (default tab), headers.delimiter (tab), headers.separator "
                        "(,), headers.key.separator (:), null.marker (a key or value equal to it is null); "
                        "a line is HEADERS<delimiter>KEY<separator>VALUE; escapes \\t \\n \\xNN are understood")
    p.add_argument("--key-separator", metavar="S",
                   help="split each line at the first S into key and value "
                        "(a line without S is sent whole as the value, with no key)")
    p.add_argument("--require-key", action="store_true",
                   help="with --key-separator: a line without S is a bad line (Kafka's default)")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first line that cannot be parsed: nothing after it is sent "
                        "(default: report it with its line number, send the rest, exit 1)")
    p.add_argument("--delivery", choices=["at-most-once", "at-least-once"], default=None,
                   help="at-most-once: acks=1, no retries (a lost answer loses the record, never doubles it); "
                        "at-least-once: acks=all, idempotent retries (exactly-once needs a transactional "
                        "client: docs/how-to/write-a-transactional-pipeline.md)")
    p.add_argument("--acks", choices=["0", "1", "all", "-1"], default=None,
                   help="0: don't wait, 1: leader appended, all (-1): in-sync replicas (default: 1)")
    p.add_argument("-p", "--partition", type=int, metavar="P", help="send every record to partition P "
                   "(default: by key hash, sticky for records without a key)")
    p.add_argument("-z", "--compression", "--compression-codec", dest="compression",
                   choices=list(client_props.COMPRESSION), default=None,
                   help="batch compression codec (default: none)")
    p.add_argument("--linger-ms", type=int, default=None, metavar="MS",
                   help="how long a batch waits for more records (default: 5)")
    p.add_argument("--batch-size", type=int, default=None, metavar="BYTES",
                   help="target batch size per partition (default: 65536)")
    p.add_argument("--delivery-timeout-ms", type=int, default=None, metavar="MS",
                   help="give up on a record not acknowledged within this (default: 30000)")
    p.add_argument("--producer-property", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka producer config (repeatable): "
                        f"{client_props.names_help(client_props.PRODUCER_PROPERTIES)}")
    p.add_argument("--route-home", action="store_true",
                   help="on a conflict.policy=home-region topic, send each key to its home region (the "
                        "regions `mq up` started here; default: a key of another region is refused with "
                        "NOT_HOME_REGION)")
    p.add_argument("--home-bootstrap", type=key_value, action="append", default=[], metavar="REGION=HOST:PORT",
                   help="where a home region's brokers are, for --route-home (repeatable; "
                        "default: from the topology `mq up` started)")
    p.add_argument("--window", type=int, default=20_000, metavar="N",
                   help="records in flight before waiting for the oldest (default: 20000)")
    p.add_argument("--report", metavar="FILE",
                   help='write one JSON line per acknowledged record: {"partition","offset","key","value"}')
    p.set_defaults(func=run_produce)


def producer_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Producer`` keyword arguments: dedicated flags over ``--producer-property``
    over the console producer's defaults."""
    props = client_props.client_kwargs(args.producer_property, client_props.PRODUCER_PROPERTIES,
                                       "--producer-property")
    flags = {
        "acks": ("--acks", None if args.acks is None else ACKS[args.acks]),
        "compression": ("--compression", args.compression),
        "linger_ms": ("--linger-ms", args.linger_ms),
        "batch_size": ("--batch-size", args.batch_size),
        "delivery_timeout_ms": ("--delivery-timeout-ms", args.delivery_timeout_ms),
        "delivery": ("--delivery", args.delivery),
    }
    kwargs = {**DEFAULTS, **client_props.merge(flags, props, "--producer-property",
                                               client_props.PRODUCER_PROPERTIES)}
    if kwargs.get("compression") == "none":
        kwargs["compression"] = None
    kwargs.setdefault("request_timeout_ms", min(30_000, kwargs["delivery_timeout_ms"]))
    return kwargs


def line_format(args: argparse.Namespace) -> LineFormat:
    if args.require_key and args.key_separator is None:
        raise CliError("--require-key needs --key-separator", "add --key-separator S")
    if args.key_separator == "":
        raise CliError("--key-separator must not be empty", "pass a separator such as ':' or a tab")
    base: dict[str, Any] = {}
    if args.key_separator is not None:
        clash = [k for k, _ in args.property if k in ("parse.key", "key.separator", "ignore.error")]
        if clash:
            raise CliError(f"--key-separator and --property {clash[0]} both say how keys are read",
                           "use one of them", exit_code=2)
        base = {"parse_key": True, "key_separator": args.key_separator.encode(),
                "ignore_error": not args.require_key}
    try:
        return LineFormat.from_properties(args.property, **base)
    except FormatError as exc:
        raise CliError(f"bad --property: {exc}", f"the properties are {', '.join(PROPERTIES)}",
                       exit_code=2) from None


def home_bootstraps(args: argparse.Namespace) -> dict[str, str]:
    """``{region: bootstrap}`` for --route-home: --home-bootstrap over cluster.json."""
    if args.home_bootstrap and not args.route_home:
        raise CliError("--home-bootstrap only says where to route keys", "add --route-home", exit_code=2)
    if not args.route_home:
        return {}
    homes = {**recorded_regions(), **dict(args.home_bootstrap)}
    if not homes:
        raise CliError("--route-home: no region is known here (no topology started by `mq up` under "
                       f"{data_dir_of_env()})", "name them: --home-bootstrap REGION=HOST:PORT (repeatable)",
                       exit_code=2)
    return homes


def run_produce(args: argparse.Namespace) -> int:
    if args.topic is not None and args.topic_option is not None and args.topic != args.topic_option:
        raise CliError(f"two topics: {args.topic} and -t {args.topic_option}", "name one topic", exit_code=2)
    args.topic = args.topic or args.topic_option
    if args.topic is None:
        raise CliError("no topic to produce to", "name it: mq produce TOPIC", exit_code=2)
    reader = line_format(args)
    kwargs = producer_kwargs(args)
    homes = home_bootstraps(args)
    if homes:
        kwargs["home_bootstraps"] = homes
    if args.window < 1:
        raise CliError("--window must be at least 1", "use the default or a positive number")
    partitions = topic_partitions(args.bootstrap, args.topic)
    check_partition(args.topic, args.partition, partitions)
    if sys.stdin.isatty():
        print(f"type records for {args.topic}, one per line; Ctrl-D to finish", file=sys.stderr)
    report = open(args.report, "w", encoding="utf-8") if args.report else None  # noqa: SIM115
    try:
        stats = asyncio.run(_produce(args, kwargs, reader, sys.stdin.buffer, report))
    finally:
        if report is not None:
            report.close()
    return _summarize(args, reader, stats)


class _Stats:
    def __init__(self) -> None:
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.no_separator = 0
        self.bad_lines: list[int] = []
        self.stopped_at: tuple[int, str] | None = None  # --strict: the bad line, and why
        self.started = time.monotonic()

    def refused(self, error: MqError) -> None:
        """A record the producer refused before sending it (its key lives in another region)."""
        self.sent += 1
        self.failed += 1
        self.first_error = self.first_error or error

    def bad_line(self, line_no: int, error: LineError, line: bytes, *, strict: bool) -> None:
        self.bad_lines.append(line_no)
        if strict:
            self.stopped_at = (line_no, f"{error}: {_excerpt(line)}")
        elif len(self.bad_lines) <= SHOWN_BAD_LINES:
            print(f"line {line_no} not sent: {error}: {_excerpt(line)}", file=sys.stderr)


def _excerpt(line: bytes) -> str:
    text = line[:80].decode("utf-8", errors="backslashreplace")
    return repr(text + ("..." if len(line) > 80 else ""))


async def _produce(args: argparse.Namespace, kwargs: dict[str, Any], reader: LineFormat, stdin: BinaryIO,
                   report: Any) -> _Stats:
    from mq.client import Producer

    stats = _Stats()
    producer = Producer(args.bootstrap, **kwargs)
    async with producer:
        await producer.partitions_for(args.topic)  # routes known before the first record
        window = _Window(args.window, stats, report)
        settler = asyncio.create_task(window.settle_forever())
        try:
            async for line_no, line in _lines(stdin):
                try:
                    parsed = reader.parse(line)
                except LineError as exc:
                    stats.bad_line(line_no, exc, line, strict=args.strict)
                    if args.strict:
                        break
                    continue
                stats.no_separator += parsed.no_key_separator
                # send() returns at once with an awaitable RecordFuture (it queues the record
                # itself when buffer_memory is full), so reading never waits for a round trip.
                try:
                    future = producer.send(args.topic, parsed.value, key=parsed.key, headers=parsed.headers,
                                           partition=args.partition)
                except MqError as exc:
                    if exc.code is not ErrorCode.NOT_HOME_REGION:
                        raise
                    stats.refused(exc)  # this key lives in another region: the others go on
                    continue
                await window.add(future, parsed.key, parsed.value)
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


def _summarize(args: argparse.Namespace, reader: LineFormat, stats: _Stats) -> int:
    elapsed = time.monotonic() - stats.started
    if stats.no_separator:
        sep = reader.key_separator.decode("utf-8", errors="backslashreplace")
        print(f"note: {stats.no_separator} line(s) had no key separator {sep!r}; "
              "sent them whole as the value, with no key", file=sys.stderr)
    failed = bool(stats.failed or stats.bad_lines)
    if stats.failed:
        err = explain(stats.first_error, args.bootstrap) if stats.first_error else None
        first = f"{err.what} — {err.todo}" if err else "unknown"
        print(f"error: {stats.failed} of {stats.sent} records were not acknowledged; first error: {first}",
              file=sys.stderr)
    else:
        rate = stats.acked / elapsed if elapsed > 0 else 0.0
        print(f"produced {stats.acked} records to {args.topic} in {elapsed:.2f} s ({rate:,.0f} records/s)",
              file=sys.stderr)
    if stats.stopped_at is not None:
        line_no, why = stats.stopped_at
        print(f"error: line {line_no} cannot be parsed ({why}) — stopped there (--strict): nothing after it "
              f"was sent; the {stats.sent} record(s) before it were sent", file=sys.stderr)
    elif stats.bad_lines:
        lines = ", ".join(map(str, stats.bad_lines[:10])) + (", ..." if len(stats.bad_lines) > 10 else "")
        print(f"error: {len(stats.bad_lines)} line(s) could not be parsed and were not sent (line {lines}) — "
              "fix them and send them again; the other records were sent", file=sys.stderr)
    return 1 if failed else 0
