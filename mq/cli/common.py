"""What every ``mq`` command shares: the argument parser, ``--bootstrap``, and errors
turned into one line that says what was wrong and what to do.

A user error never shows a Python traceback (``MQ_DEBUG=1`` shows it): commands raise
``CliError(what, todo)`` or let an ``MqError`` / ``OSError`` escape, and ``main``
prints ``error: <what> — <what to do>`` on stderr and exits with a non-zero code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import NoReturn

from mq.core.argtypes import duration_ms, regex  # noqa: F401 - argparse types the commands import from here
from mq.core.errors import ErrorCode, MqError

DEFAULT_BOOTSTRAP = "localhost:9092"
EXIT_USAGE = 2


class CliError(Exception):
    """A failure the user can act on: ``what`` went wrong, ``todo`` says what to do."""

    def __init__(self, what: str, todo: str, *, exit_code: int = 1) -> None:
        self.what = what
        self.todo = todo
        self.exit_code = exit_code
        super().__init__(f"{what} — {todo}")


class Parser(argparse.ArgumentParser):
    """argparse with mq's error line instead of a usage dump, and a fixed help width."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise CliError(message, f"see `{self.prog} --help`", exit_code=EXIT_USAGE)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``k=v`` (``--config retention.ms=60000``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (for example retention.ms=60000)")
    return key.strip(), value


def host_port(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (for example 127.0.0.1:9092)")
    return text


def host_port_or_any(text: str) -> str:
    """argparse type for a listen address whose port may be 0 (any free port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (for example 127.0.0.1:9464; port 0: a free one)")
    return text




def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-b", "--bootstrap", "--bootstrap-server", dest="bootstrap", metavar="HOST:PORT[,...]", default=None,
        help=f"broker(s) to contact first (default: $MQ_BOOTSTRAP, else the region `mq up` started here, "
             f"else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument("--region", metavar="NAME", default=None,
                        help="talk to this region of the topology `mq up` started here (default: $MQ_REGION; "
                             "--bootstrap wins)")


def bootstrap_of(args: argparse.Namespace) -> str:
    """--bootstrap, else --region, else $MQ_BOOTSTRAP, else $MQ_REGION, else the one region
    recorded in cluster.json (several: an error naming them), else localhost:9092."""
    value = (getattr(args, "bootstrap", None) or region_bootstrap(getattr(args, "region", None), "--region")
             or os.environ.get("MQ_BOOTSTRAP") or region_bootstrap(os.environ.get("MQ_REGION"), "MQ_REGION")
             or recorded_bootstrap() or DEFAULT_BOOTSTRAP)
    for address in value.split(","):
        try:
            host_port(address.strip())
        except argparse.ArgumentTypeError as exc:
            raise CliError(f"bad --bootstrap: {exc}", "pass --bootstrap HOST:PORT[,HOST:PORT...]",
                           exit_code=EXIT_USAGE) from None
    return value


PAUSED_HINT = ("is it paused or overloaded? check `mq status` (a paused broker shows `paused`; "
               "resume it with `mq broker resume ID`)")
DOWN_HINT = "check it with `mq status` (restart a dead broker with `mq broker restart ID` or `mq up`), or pass --bootstrap"


def no_broker(bootstrap: str) -> CliError:
    """Nothing accepts connections there (refused or unreachable): no broker runs."""
    return CliError(f"no broker at {bootstrap}", "start one with `mq up` or pass --bootstrap")


def not_answering(address: str, timeout_ms: int | None = None) -> CliError:
    """The kernel accepted the connection but the broker said nothing: it is alive but stuck.

    A SIGSTOPped (``mq broker pause``) or overloaded broker looks like this; calling it
    "no broker" would send the user to start a second one on a busy port.
    """
    within = f"within {timeout_ms} ms" if timeout_ms is not None else "in time"
    return CliError(f"broker at {address} accepted the connection but did not answer {within}", PAUSED_HINT)


def probe(bootstrap: str, req, *, timeout_s: float):
    """Send ``req`` to the first address of ``bootstrap`` that answers; say why when none does.

    Refused or unreachable everywhere is "no broker"; an address that accepts TCP but
    stays silent until the deadline is a paused or overloaded broker; one that answers
    at once with something else (closes, garbles) is not an mq broker.
    """
    from mq.deploy.probe import ProbeError, port_in_use, request

    silent: str | None = None
    odd: tuple[str, str] | None = None
    for address in [a.strip() for a in bootstrap.split(",")]:
        started = time.monotonic()
        try:
            return request(address, req, timeout_s=timeout_s)
        except ValueError:  # not HOST:PORT; bootstrap_of has already said so
            continue
        except ProbeError as exc:
            timed_out = time.monotonic() - started >= timeout_s * 0.9
            if not port_in_use(address):
                continue
            if timed_out:
                silent = silent or address
            else:
                odd = odd or (address, str(exc))
    if silent is not None:
        raise not_answering(silent, int(timeout_s * 1000))
    if odd is not None:
        raise CliError(f"{odd[0]} accepted the connection but did not answer as an mq broker ({odd[1]})",
                       "check that --bootstrap points at an mq broker (`mq status` lists them)")
    raise no_broker(bootstrap)


def require_broker(bootstrap: str, *, timeout_s: float = 3.0) -> None:
    """Fail fast, with the right words, when nothing answers at ``bootstrap``.

    The client would retry a refused connection until its timeouts; a command line
    tool should say at once that no broker runs there, or that one runs but is stuck.
    """
    from mq.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

    response = probe(bootstrap, ApiVersionsRequest(client_software="mq-probe"), timeout_s=timeout_s)
    if not isinstance(response, ApiVersionsResponse):
        raise CliError(f"the broker refused ApiVersions: {response}", "see the broker log")


class UnknownTopic(CliError):
    """A named topic that does not exist (yet: a mirror may be about to create it)."""


def unknown_topic(topic: str) -> CliError:
    return UnknownTopic(f"topic {topic!r} does not exist",
                        "list topics with `mq topic list` or create it with `mq topic create`")


_HINTS: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_TOPIC: "list topics with `mq topic list` or create it with `mq topic create`",
    ErrorCode.TOPIC_ALREADY_EXISTS: "pick another name, or look at it with `mq topic describe`",
    ErrorCode.INVALID_CONFIG: "use Kafka's topic config names and values, e.g. --config retention.ms=86400000",
    ErrorCode.INVALID_PARTITIONS: "use --partitions 1 or more",
    ErrorCode.INVALID_REPLICATION_FACTOR: "use a --replication-factor no larger than the number of brokers",
    ErrorCode.INVALID_TOPIC: "use letters, digits, '.', '_' and '-' (at most 249 characters)",
    ErrorCode.RECORD_TOO_LARGE: "send smaller records or raise max.message.bytes with `mq topic alter-config`",
    ErrorCode.OFFSET_OUT_OF_RANGE: "see the valid range with `mq topic describe`",
    ErrorCode.INVALID_TIMESTAMP: "check the record timestamps and the topic's message.timestamp.* configs",
    ErrorCode.UNSUPPORTED_VERSION: "use an mq client and broker from the same release",
    ErrorCode.DELIVERY_TIMEOUT: PAUSED_HINT,
    ErrorCode.REQUEST_TIMED_OUT: PAUSED_HINT,
    ErrorCode.NETWORK_EXCEPTION: DOWN_HINT,
    ErrorCode.MIRROR_TOPIC_READ_ONLY: ("write in the source region, or promote the mirror: `mq mirror failover`, or "
                                       "`mq topic alter-config NAME --delete mirror.source.region`"),
    ErrorCode.NOT_MIRROR_TOPIC: "only mirror topics (config mirror.source.region) take mirrored records",
    ErrorCode.NOT_HOME_REGION: ("produce the key in its home region (--region NAME), or let mq route each key "
                                "home: mq produce --route-home"),
    ErrorCode.INVALID_HLC: ("let the producer stamp mq.hlc (mq's Producer does on last-writer-wins topics), or "
                            "send it as <wall_ms>.<logical>, e.g. mq.hlc:1732528800000.0"),
}


def explain(exc: BaseException, bootstrap: str | None) -> CliError:
    """Turn any exception a command lets escape into a ``CliError``."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, MqError):
        hint = _HINTS.get(exc.code)
        if hint is None:
            hint = ("retry; if it persists, look at the broker log (`mq status` shows where)"
                    if exc.code.retriable else "see `mq --help`")
        what = exc.message if exc.code.name in exc.message else f"{exc.code.name}: {exc.message}"
        return CliError(what, hint)
    if isinstance(exc, ConnectionRefusedError) and bootstrap:
        return no_broker(bootstrap)
    if isinstance(exc, TimeoutError) and bootstrap:
        return not_answering(bootstrap)
    if isinstance(exc, ConnectionError) and bootstrap:
        return CliError(f"lost the connection to the broker at {bootstrap} ({exc.__class__.__name__})", DOWN_HINT)
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return CliError(f"{exc.strerror or exc}{where}", "check the path and its permissions")
    return CliError(f"unexpected {exc.__class__.__name__}: {exc}",
                    "this is a bug in mq; rerun with MQ_DEBUG=1 and report the traceback")


def print_error(err: CliError) -> None:
    print(f"error: {err.what} — {err.todo}", file=sys.stderr)


def debug() -> bool:
    return os.environ.get("MQ_DEBUG", "") not in ("", "0")


def topic_partitions(bootstrap: str, topic: str, *, timeout_s: float = 5.0) -> list[int]:
    """The partition numbers of ``topic``, asked of the first broker that answers.

    Used before producing or consuming so that "no broker" and "no such topic" are
    said at once, in words, rather than after the client's retries time out.
    """
    return topics_partitions(bootstrap, [topic], timeout_s=timeout_s)[topic]


def topics_partitions(bootstrap: str, topics: list[str] | None, *,
                      timeout_s: float = 5.0) -> dict[str, list[int]]:
    """``{topic: partition numbers}`` of ``topics`` (each must exist), or of every topic
    but the internal ones (``__consumer_offsets``...) when ``topics`` is None."""
    from mq.core.errors import ErrorCode as Code
    from mq.protocol.messages import MetadataRequest, MetadataResponse

    response = probe(bootstrap, MetadataRequest(topics=topics), timeout_s=timeout_s)
    if not isinstance(response, MetadataResponse):
        raise CliError(f"the broker refused the metadata request: {response}", "see the broker log")
    found = {t.name: t for t in response.topics}
    if topics is None:
        return {name: sorted(p.partition for p in t.partitions) for name, t in sorted(found.items())
                if t.error_code == Code.NONE and not t.is_internal and not name.startswith("__")}
    out = {}
    for topic in topics:
        t = found.get(topic)
        if t is None or t.error_code == Code.UNKNOWN_TOPIC:
            raise unknown_topic(topic)
        if t.error_code != Code.NONE:
            raise MqError(Code(t.error_code), f"topic {topic!r}")
        out[topic] = sorted(p.partition for p in t.partitions)
    return out


def check_partition(topic: str, partition: int | None, partitions: list[int]) -> None:
    if partition is not None and partition not in partitions:
        raise CliError(f"topic {topic!r} has no partition {partition} (it has {len(partitions)})",
                       f"use --partition 0..{len(partitions) - 1}, or see `mq topic describe {topic}`")


def data_dir_of_env() -> str:
    """Where client commands look for the topology `mq up` started: $MQ_DATA_DIR, else ./.mq."""
    return os.environ.get("MQ_DATA_DIR") or ".mq"


def _recorded_regions(data_dir: str) -> list[tuple[str, str]] | None:
    """``[(region, bootstrap), ...]`` from ``<data_dir>/cluster.json``; None when absent."""
    try:
        with open(os.path.join(data_dir, "cluster.json"), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    if state.get("format") == 1:  # before regions
        return [(str(state.get("topology", {}).get("name", "local")), str(state.get("bootstrap", "")))]
    regions = state.get("regions")
    if not isinstance(regions, list):
        return None
    return [(str(r.get("name")), str(r.get("bootstrap", ""))) for r in regions if isinstance(r, dict)]


def region_bootstrap(name: str | None, flag: str = "--region") -> str | None:
    """The bootstrap list of region ``name`` of the running topology (None when no name)."""
    if not name:
        return None
    data_dir = data_dir_of_env()
    regions = _recorded_regions(data_dir)
    if regions is None:
        raise CliError(f"{flag} {name}: no topology runs under {data_dir} (cluster.json not found)",
                       "start one with `mq up`, set MQ_DATA_DIR to the data directory `mq up` used, "
                       "or pass --bootstrap HOST:PORT", exit_code=EXIT_USAGE)
    for region, bootstrap in regions:
        if region == name:
            return bootstrap
    raise CliError(f"{flag} {name}: no such region under {data_dir} (regions: {', '.join(r for r, _ in regions)})",
                   "pass one of them (see `mq status`)", exit_code=EXIT_USAGE)


def recorded_regions(data_dir: str | None = None) -> dict[str, str]:
    """``{region: bootstrap}`` of the topology `mq up` started (empty when none runs here)."""
    return dict(_recorded_regions(data_dir or data_dir_of_env()) or [])


def recorded_region_names(data_dir: str | None = None) -> list[str]:
    return list(recorded_regions(data_dir))


def recorded_bootstrap(data_dir: str | None = None) -> str | None:
    """The bootstrap list ``mq up`` recorded in ``<data_dir>/cluster.json`` (every broker of
    the region, so commands keep working when the first one is down). With several
    regions there is no default: a CliError names them and asks for --region."""
    data_dir = data_dir or data_dir_of_env()
    regions = _recorded_regions(data_dir)
    if not regions:
        return None
    if len(regions) > 1:
        listed = "; ".join(f"{name} ({bootstrap})" for name, bootstrap in regions)
        names = [name for name, _ in regions]
        raise CliError(f"{len(regions)} regions run under {data_dir}: {listed}",
                       f"say which with --region {' or --region '.join(names)} (or set MQ_REGION), "
                       "or pass --bootstrap HOST:PORT", exit_code=EXIT_USAGE)
    bootstrap = regions[0][1]
    return bootstrap or None
