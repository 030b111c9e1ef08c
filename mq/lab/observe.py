"""What a region thinks, asked from outside: Metadata from each broker, /metrics gauges.

A broker that was paused or cut off keeps an old view, so every answer is weighed by
its epochs: the partition view with the highest leader epoch wins, the controller
named with the highest controller epoch wins (as the chaos harness does). An ISR
change keeps the leader epoch (Metadata carries no partition epoch), so on a tie the
active controller's own answer wins: it applies every change first. The per-
replica numbers (log end offset, high watermark) come from each broker's own
``/metrics`` (``mq.aio.metrics``): only the broker holding a replica knows its log end.

Brokers that are down or paused are not asked (a paused process would only time us
out); their rows say so.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mq.deploy import probe
from mq.protocol.messages import MetadataResponse

QUERY_TIMEOUT_S = 0.5
_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_REPLICA_GAUGES = {  # /metrics name -> row key
    "mq_log_end_offset": "log_end_offset",
    "mq_high_watermark": "high_watermark",
    "mq_log_start_offset": "log_start_offset",
}


class Broker(Protocol):  # what observe needs of mq.lab.BrokerHandle
    node_id: int
    metrics_url: str
    bootstrap: str

    @property
    def state(self) -> str: ...


@dataclass(frozen=True)
class PartitionView:
    """One broker's Metadata view of a partition (``leader`` -1: none)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    source: int  # the broker that answered


def metadata(brokers: Iterable[Broker], *, timeout_s: float = QUERY_TIMEOUT_S) -> dict[int, MetadataResponse]:
    """Metadata from every broker that is up and answers, by node id."""
    answers = {}
    for broker in brokers:
        if broker.state != "up":
            continue
        try:
            answers[broker.node_id] = probe.metadata(broker.bootstrap, timeout_s=timeout_s)
        except probe.ProbeError:
            continue
    return answers


def _views(answers: dict[int, MetadataResponse], topic: str, partition: int) -> list[PartitionView]:
    views = []
    for source in sorted(answers):
        for t in answers[source].topics:
            if t.name != topic or t.error_code:
                continue
            for p in t.partitions:
                if p.partition == partition:
                    views.append(PartitionView(topic, partition, p.leader_id, p.leader_epoch,
                                               tuple(p.isr), tuple(p.replicas), source))
    return views


def freshest(views: Iterable[PartitionView], *, prefer: int = -1) -> PartitionView | None:
    """The view with the highest leader epoch. ISR changes keep the leader epoch, so on
    a tie the view of broker ``prefer`` (the active controller: it publishes every
    change first) wins, then one naming a leader, then the lowest source id — never
    an answer's arrival order."""
    best = None
    best_key = None
    for view in views:
        key = (view.leader_epoch, view.source == prefer, view.leader >= 0, -view.source)
        if best_key is None or key > best_key:
            best, best_key = view, key
    return best


def active_controller(answers: dict[int, MetadataResponse]) -> tuple[int, int]:
    """``(controller id, controller epoch)`` named with the highest epoch; (-1, -1): none."""
    best = (-1, -1)
    for source in sorted(answers):
        answer = answers[source]
        if answer.controller_id >= 0 and answer.controller_epoch > best[1]:
            best = (answer.controller_id, answer.controller_epoch)
    return best


def partition_view(brokers: Sequence[Broker], topic: str, partition: int) -> PartitionView | None:
    answers = metadata(brokers)
    return freshest(_views(answers, topic, partition), prefer=active_controller(answers)[0])


def controller(brokers: Sequence[Broker]) -> tuple[int, int]:
    """``(controller id, controller epoch)`` named with the highest epoch; (-1, -1): none."""
    return active_controller(metadata(brokers))


def fenced_brokers(answers: dict[int, MetadataResponse]) -> set[int]:
    """Brokers the active controller's own answer (else the one with the highest
    controller epoch) lists as fenced."""
    if not answers:
        return set()
    controller_id, _ = active_controller(answers)
    source = controller_id if controller_id in answers else \
        max(sorted(answers), key=lambda n: answers[n].controller_epoch)
    return {b.node_id for b in answers[source].brokers if b.fenced}


def scrape(url: str, *, timeout_s: float = QUERY_TIMEOUT_S) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``/metrics`` as ``{sample name: {sorted labels: value}}`` ({} when it does not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    return parse_metrics(text)


def parse_metrics(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The Prometheus text format (what ``/metrics`` serves), the small part of it we
    need: ``name{label="value",...} number`` lines; comments skipped."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        key = tuple(sorted((k, v.replace('\\"', '"').replace("\\\\", "\\"))
                           for k, v in _LABEL.findall(labels or "")))
        try:
            out.setdefault(name, {})[key] = float(value)
        except ValueError:
            continue
    return out


def gauge(samples: dict, name: str, **labels: Any) -> float | None:
    """One value out of ``scrape``'s result (labels as keyword arguments)."""
    key = tuple(sorted((k, str(v)) for k, v in labels.items()))
    return samples.get(name, {}).get(key)


def partition_state(brokers: Sequence[Broker], topic: str, partition: int) -> list[dict[str, Any]]:
    """One row per replica of the partition (or per broker, before the topic exists)."""
    answers = metadata(brokers)
    view = freshest(_views(answers, topic, partition), prefer=active_controller(answers)[0])
    by_id = {b.node_id: b for b in brokers}
    replica_ids = list(view.replicas) if view is not None else sorted(by_id)
    scraped = {n: scrape(by_id[n].metrics_url) if by_id[n].state == "up" else {}
               for n in replica_ids if n in by_id}
    leader = view.leader if view is not None else -1
    fenced = fenced_brokers(answers)
    rows = []
    for n in replica_ids:
        samples = scraped.get(n, {})
        row: dict[str, Any] = {"broker": n, "state": by_id[n].state if n in by_id else "unknown"}
        for metric, key in _REPLICA_GAUGES.items():
            value = gauge(samples, metric, topic=topic, partition=partition)
            row[key] = int(value) if value is not None else None
        lag = gauge(scraped.get(leader, {}), "mq_replica_lag_offsets", topic=topic, partition=partition,
                    replica=n)
        row.update(
            in_isr=view is not None and n in view.isr,
            is_leader=n == leader,
            fenced=n in fenced,
            leader_epoch=view.leader_epoch if view is not None else -1,
            lag=0 if n == leader else (int(lag) if lag is not None else None),
        )
        rows.append(row)
    return rows
