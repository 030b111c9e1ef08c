"""Run one broker process: ``python -m mq.aio.runner --node-id N --data-dir DIR --listen HOST:PORT``.

``run_broker(config)`` blocks until SIGTERM or SIGINT, then shuts down gracefully:
first a controlled shutdown (``node.begin_shutdown``: the controller moves leadership
away) until the node reports it complete, ``--shutdown-timeout`` seconds pass (default
10) or a second signal arrives; then stop accepting, answer in-flight requests, flush
every log, write checkpoints.

``--config controller.quorum.voters=1@127.0.0.1:9092,2@...`` names the metadata quorum
(default: this node alone). The broker logs
``broker node_id=N listening=host:port metrics=host:port`` (actual ports, so ``:0``
works) only once ``node.is_ready`` (registered, unfenced, caught up with the metadata
log). If that does not happen within ``--ready-timeout`` seconds (default 60) it logs
``broker_not_ready`` with the reason, shuts down and exits 1.

``MQ_FAILPOINTS`` (see ``mq.core.failpoints``) is read here, and only here: ``main``
parses it (a malformed string exits 2 naming the bad part) and installs the
process-wide registry, whose ``panic`` hook logs one ``failpoint_panic`` line and
calls ``os._exit(PANIC_EXIT_CODE)`` (70) — no cleanup, no flush, like a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from mq.aio.metrics import BrokerMetrics, start_metrics_server
from mq.aio.server import BrokerServer
from mq.broker.node import BrokerNode
from mq.core.clock import SystemClock
from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.failpoints import PANIC_EXIT_CODE, Failpoints, install
from mq.core.rng import Rng
from mq.storage.fileio import OsFileIO

log = logging.getLogger("mq.aio.runner")

DEFAULT_READY_TIMEOUT_S = 60.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0
NOT_READY_EXIT_CODE = 1


class BrokerNotReady(Exception):
    """The node never became ready (the metadata quorum did not form in time)."""


def split_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MqError(ErrorCode.INVALID_CONFIG, f"expected HOST:PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def advertised_address(config: BrokerConfig) -> tuple[str, int]:
    """What this broker registers and clients dial: ``advertised.listeners``, else
    ``listeners``. A broker listening on every interface (``0.0.0.0:9092``, as in a
    container) must advertise an address others can dial."""
    if not config.advertised_listeners:
        return split_host_port(config.listeners)
    host, port = split_host_port(config.advertised_listeners)
    if host in ("0.0.0.0", "::") or port == 0:
        raise MqError(ErrorCode.INVALID_CONFIG, f"advertised.listeners={config.advertised_listeners!r} is not an "
                      "address others can dial: name a host and a port, for example 127.0.0.1:19092")
    return host, port


def metrics_address(config: BrokerConfig) -> tuple[str, int]:
    """``metrics.listener``, else the native port + 10000 (ephemeral if that overflows)."""
    if config.metrics_listener:
        return split_host_port(config.metrics_listener)
    host, port = split_host_port(config.listeners)
    return host, port + 10000 if port and port + 10000 <= 65535 else 0


async def serve(
    config: BrokerConfig, *, stop: asyncio.Event, ready: asyncio.Future[tuple] | None = None,
    force: asyncio.Event | None = None, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
) -> None:
    """Serve until ``stop`` is set (the body of ``run_broker``; tests can await it).

    ``ready`` gets ``(listening, metrics)`` addresses once the node is ready;
    ``BrokerNotReady`` if it is not within ``ready_timeout_s``. After ``stop``: a
    controlled shutdown of at most ``shutdown_timeout_s`` (cut short by ``force``)."""
    clock = SystemClock()
    host, port = split_host_port(config.listeners)
    advertised_host, advertised_port = advertised_address(config)
    # MQ_FILEIO_JOURNAL records every fsync so a chaos test can apply
    # ``mq.storage.fileio.power_loss`` to the data dir after killing the broker.
    fileio = OsFileIO(journal=os.environ.get("MQ_FILEIO_JOURNAL") or None)
    node = BrokerNode(config, fileio, rng=Rng(clock.wall_ms() ^ config.node_id),
                      advertised_host=advertised_host, advertised_port=advertised_port)
    metrics = BrokerMetrics()
    server = BrokerServer(node, config, clock=clock, metrics=metrics)
    metrics.attach(node, server)
    try:
        bound = await server.start(host, port)
        # No await between listening and starting the node: no request is read before
        # it starts, and a ``:0`` listener registers with the port it really got.
        if not config.advertised_listeners:
            node.set_advertised_port(bound[1])
        node.start(now_ms=clock.wall_ms())
        runner, metrics_bound = await start_metrics_server(metrics, *metrics_address(config))
    except BaseException:
        await server.stop()  # flush and close the logs opened above
        raise
    try:
        if await _wait_ready(server, stop, timeout_s=ready_timeout_s):
            log.info("broker node_id=%d listening=%s:%d metrics=%s:%d", config.node_id, bound[0], bound[1],
                     metrics_bound[0], metrics_bound[1])
            if ready is not None:
                ready.set_result((bound, metrics_bound))
            await stop.wait()
        elif not stop.is_set():
            voters = config.controller_quorum_voters or f"{config.node_id} alone"
            reason = (f"not ready after {ready_timeout_s:g}s: the metadata quorum did not form or this broker "
                      f"was not registered and caught up (controller.quorum.voters={voters}; is a majority of "
                      "the voters running and reachable?)")
            log.error("broker_not_ready node_id=%d waited_s=%g voters=%s", config.node_id, ready_timeout_s,
                      voters)
            raise BrokerNotReady(reason)
        log.info("broker_controlled_shutdown node_id=%d timeout_s=%g", config.node_id, shutdown_timeout_s)
        if await server.controlled_shutdown(timeout_s=shutdown_timeout_s, interrupt=force):
            log.info("broker_controlled_shutdown_complete node_id=%d", config.node_id)
        else:
            log.warning("broker_controlled_shutdown_incomplete node_id=%d timeout_s=%g interrupted=%s",
                        config.node_id, shutdown_timeout_s, force is not None and force.is_set())
    finally:
        log.info("broker_stopping node_id=%d", config.node_id)
        await server.stop()
        await runner.cleanup()
        log.info("broker_stopped node_id=%d", config.node_id)


async def _wait_ready(server: BrokerServer, stop: asyncio.Event, *, timeout_s: float) -> bool:
    """True once the node is ready; False on timeout or if ``stop`` comes first."""
    if server.ready.is_set():
        return True
    waits = [asyncio.ensure_future(server.ready.wait()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waits:
            waiter.cancel()
    return server.ready.is_set() and not stop.is_set()


M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def tune_malloc(*, mmap_threshold_bytes: int = 16 << 20, trim_threshold_bytes: int = 64 << 20) -> bool:
    """Keep 1 MiB frame buffers on glibc's heap instead of fresh mmaps.

    By default glibc serves allocations above 128 KiB-32 MiB with mmap and returns them
    on free, so every produce frame and fetch response touches fresh pages (page faults
    measured at ~30% of the broker's produce CPU). Raising the mmap threshold and the
    trim threshold lets those buffers be reused; RSS grows by at most the trim threshold.
    Set ``MQ_MALLOC_TUNING=0`` to keep glibc's defaults. No-op off glibc.
    """
    if os.environ.get("MQ_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold_bytes)) and bool(
            libc.mallopt(M_TRIM_THRESHOLD, trim_threshold_bytes))
    except (OSError, AttributeError):
        return False


def run_broker(config: BrokerConfig, *, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
               shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> None:
    """Blocking: serve until SIGTERM/SIGINT (uvloop when installed). The first signal
    starts the controlled shutdown, a second one cuts it short."""
    tune_malloc()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        uvloop = None  # type: ignore[assignment]

    async def main() -> None:
        stop = asyncio.Event()
        force = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            (force if stop.is_set() else stop).set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        await serve(config, stop=stop, force=force, ready_timeout_s=ready_timeout_s,
                    shutdown_timeout_s=shutdown_timeout_s)

    if uvloop is not None:
        uvloop.run(main())
    else:
        asyncio.run(main())


def failpoint_panic(name: str) -> None:
    """The ``panic`` action in a broker: one log line, then exit at once. ``os._exit``
    skips ``finally`` blocks, atexit and the event loop, so nothing is flushed or
    checkpointed — the process dies at the failpoint as if the power went."""
    log.critical("failpoint_panic name=%s exit_code=%d", name, PANIC_EXIT_CODE)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(PANIC_EXIT_CODE)


def install_failpoints(text: str | None) -> Failpoints:
    """Parse ``MQ_FAILPOINTS`` and install it process-wide (ValueError if malformed)."""
    points = Failpoints.parse(text or "", on_panic=failpoint_panic)
    install(points)
    if points.names:
        log.warning("failpoints_set %s", points)
    return points


@dataclass(frozen=True)
class RunnerOptions:
    """Process options that are not broker settings."""

    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S


def parse_args(argv: Sequence[str] | None) -> BrokerConfig:
    return parse_command_line(argv)[0]


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def parse_command_line(argv: Sequence[str] | None) -> tuple[BrokerConfig, RunnerOptions]:
    parser = argparse.ArgumentParser(prog="mq broker", description="Run one mq broker.")
    parser.add_argument("--node-id", type=int, default=None, help="node.id (default 1)")
    parser.add_argument("--data-dir", default=None, help="log.dirs: partitions and metadata log")
    parser.add_argument("--listen", default=None, help="listeners: HOST:PORT of the native protocol")
    parser.add_argument("--metrics-listen", default=None, help="metrics.listener: HOST:PORT of /metrics")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="any broker setting by its Kafka name (repeatable), e.g. "
                             "controller.quorum.voters=1@127.0.0.1:9092,2@127.0.0.1:9093")
    parser.add_argument("--ready-timeout", type=_positive_seconds, default=DEFAULT_READY_TIMEOUT_S,
                        metavar="SECONDS", help="exit 1 if not ready (quorum formed, registered, "
                        f"caught up) within this long (default {DEFAULT_READY_TIMEOUT_S:g})")
    parser.add_argument("--shutdown-timeout", type=_positive_seconds, default=DEFAULT_SHUTDOWN_TIMEOUT_S,
                        metavar="SECONDS", help="longest controlled shutdown after SIGTERM/SIGINT "
                        f"(default {DEFAULT_SHUTDOWN_TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    values: dict[str, str] = {}
    for item in args.config:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--config expects NAME=VALUE, got {item!r}")
        values[name.strip()] = value.strip()
    for name, value in (("node.id", args.node_id), ("log.dirs", args.data_dir),
                        ("listeners", args.listen), ("metrics.listener", args.metrics_listen)):
        if value is not None:
            values[name] = str(value)
    config = BrokerConfig.from_kafka(values)
    split_host_port(config.listeners)
    advertised_address(config)
    return config, RunnerOptions(ready_timeout_s=args.ready_timeout, shutdown_timeout_s=args.shutdown_timeout)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        install_failpoints(os.environ.get("MQ_FAILPOINTS"))
    except ValueError as err:
        print(f"mq broker: MQ_FAILPOINTS: {err}", file=sys.stderr)
        return 2
    try:
        config, options = parse_command_line(argv)
        run_broker(config, ready_timeout_s=options.ready_timeout_s, shutdown_timeout_s=options.shutdown_timeout_s)
    except BrokerNotReady as err:
        print(f"mq broker: {err}", file=sys.stderr)
        return NOT_READY_EXIT_CODE
    except MqError as err:
        print(f"mq broker: {err.message}", file=sys.stderr)
        return 2
    except OSError as err:
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        print(f"mq broker: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
