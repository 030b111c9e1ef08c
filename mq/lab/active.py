"""Active-active on this machine for lab 06: two regions that both take writes, a flow each
way in ``mode: active-active`` (the layout of regions/active-active.yaml with free ports and
short intervals), table views per region, and concurrent writers with skewed clocks.

``start_active_active()`` returns a ``GeoLab`` (same handles: admin, producer, links, mirror
status per flow). ``TableWatch`` is a table view (``mq.client.TableView``) kept reading in
the background on the blocking clients' loop thread; ``digest()`` and ``stats()`` read it
there, so a notebook can poll two regions until their digests agree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mq.client import TableView, blocking
from mq.client.internals.table import TableStats
from mq.core.clock import SystemClock
from mq.lab.geo import LAB_CONFIGS, GeoLab, free_port, free_port_block

REGIONS = ("east", "west")
FLOWS = ("east-to-west", "west-to-east")


def active_active_file(root: str, *, latency_ms: float = 40.0, refresh_interval_ms: int = 500,
                       configs: Mapping[str, Any] | None = None, host: str = "127.0.0.1", brokers: int = 1,
                       mirror_configs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The region file (a dict) of two regions of ``brokers`` brokers each (every one a
    voter) with a flow each way, forward off (two regions: every region gets every record
    directly); ``configs`` for every broker, ``mirror_configs`` for both flows."""
    def region(name: str) -> dict[str, Any]:
        return {"name": name, "voters": list(range(1, brokers + 1)), "brokers": [
            {"id": i, "listen": f"{host}:{free_port(host)}", "metrics_listen": f"{host}:{free_port(host)}"}
            for i in range(1, brokers + 1)]}

    def flow(source: str, target: str) -> dict[str, Any]:
        return {"name": f"{source}-to-{target}", "source": source, "target": target, "mode": "active-active",
                "forward": False, "topics": {"include": [".*"], "exclude": ["__.*"]},
                "refresh.topics.interval.ms": refresh_interval_ms, "emit.heartbeats.interval.ms": 500,
                "sync.group.offsets.interval.ms": 1000,
                "configs": {"offset.lag.max": 100, "offset.sync.interval.ms": 500,
                            **{k: str(v) for k, v in (mirror_configs or {}).items()}}}

    return {
        "data_dir": root,
        "link_port_base": free_port_block(2 * brokers + 1, host=host),
        "configs": {**LAB_CONFIGS, **{k: str(v) for k, v in (configs or {}).items()}},
        "regions": [region(r) for r in REGIONS],
        "links": [{"source": "east", "target": "west", "latency_ms": latency_ms},
                  {"source": "west", "target": "east", "latency_ms": latency_ms}],
        "mirrors": [flow("east", "west"), flow("west", "east")],
    }


def start_active_active(*, latency_ms: float = 40.0, refresh_interval_ms: int = 500,
                        ready_timeout_s: float = 60.0, brokers: int = 1, configs: Mapping[str, Any] | None = None,
                        mirror_configs: Mapping[str, Any] | None = None) -> GeoLab:
    """Start east and west (``brokers`` each) with a flow each way; return once both flows run."""
    root, owned = GeoLab._root(None)
    doc = active_active_file(str(root), latency_ms=latency_ms, refresh_interval_ms=refresh_interval_ms,
                             brokers=brokers, configs=configs, mirror_configs=mirror_configs)
    return GeoLab.launch(doc, root, owned=owned, flows=FLOWS, ready_timeout_s=ready_timeout_s)


class SkewedClock:
    """The system clock with its wall time off by ``skew_ms`` (a ``Clock``): a producer
    whose machine's clock is wrong, for timestamps and HLC stamps."""

    def __init__(self, skew_ms: int) -> None:
        self.skew_ms = skew_ms
        self._system = SystemClock()

    def wall_ms(self) -> int:
        return self._system.wall_ms() + self.skew_ms

    def monotonic_ms(self) -> int:
        return self._system.monotonic_ms()


class TableWatch:
    """A ``TableView`` of ``topic`` in one region, reading in the background."""

    def __init__(self, bootstrap: str, topic: str, *, region: str | None = None,
                 discover_interval_ms: int = 500) -> None:
        self._runner = blocking._LoopThread.shared()
        self.view = TableView(bootstrap, topic, region=region, discover_interval_ms=discover_interval_ms,
                              fetch_max_wait_ms=50)
        self._runner.run(self.view.start(), timeout_s=60)
        self._closed = False

    def digest(self) -> str:
        return self._runner.call(self.view.digest)

    def stats(self) -> TableStats:
        return self._runner.call(lambda: TableStats(**vars(self.view.stats)))

    def rows(self) -> int:
        return self._runner.call(len, self.view)

    def sources(self) -> dict[str, str]:
        return self._runner.call(lambda: dict(self.view.sources))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._runner.run(self.view.close(), timeout_s=30)


def table_watch(lab: GeoLab, region: str, topic: str) -> TableWatch:
    """A ``TableWatch`` of ``topic`` in ``region``, closed by ``lab.close()``."""
    return lab._keep(TableWatch(lab.bootstrap(region), topic, region=region))


@dataclass(frozen=True)
class Written:
    region: str
    records: int
    started_s: float  # time.monotonic()
    ended_s: float


def write_concurrently(producers: Mapping[str, Any], topic: str, keys: Sequence[bytes], *,
                       value_of: Any = None) -> dict[str, Written]:
    """Every producer writes every key at once, one thread per region (they start together);
    ``value_of(region, key)`` is the value (default ``b"<region>:<key>"``)."""
    value_of = value_of or (lambda region, key: region.encode() + b":" + key)
    start = threading.Barrier(len(producers))
    out: dict[str, Written] = {}
    errors: list[BaseException] = []

    def run(region: str, producer: Any) -> None:
        try:
            start.wait(timeout=30)
            began = time.monotonic()
            producer.send_many(topic, [(k, value_of(region, k)) for k in keys])
            out[region] = Written(region, len(keys), began, time.monotonic())
        except BaseException as error:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=item, name=f"writer-{item[0]}") for item in producers.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out
