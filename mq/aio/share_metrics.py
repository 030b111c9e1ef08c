"""``mq_share_*`` metrics: the share groups a broker coordinates (``mq.broker.shares``).

- ``mq_share_group_members`` (labelled ``group``).
- ``mq_share_partition_start_offset`` and ``mq_share_partition_lag_records`` (labelled
  ``group``, ``topic``, ``partition``): the share-partition start offset (every record
  before it is done) and the records never handed out yet (high watermark of the
  coordinator's replica minus the end offset).
- ``mq_share_partition_records`` (also labelled ``state``: ``acquired``, ``available``,
  ``dead_letter``): the in-flight records by state; ``dead_letter`` counts those waiting
  to be written to the dead-letter topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode

_LABELS = ["group", "topic", "partition"]
_STATES = (("acquired", "ACQUIRED"), ("available", "AVAILABLE"), ("dead_letter", "DEAD_LETTER"))


def share_families(node: BrokerNode) -> Iterator:
    members = GaugeMetricFamily("mq_share_group_members", "Members of a share group this broker coordinates",
                                labels=["group"])
    start = GaugeMetricFamily("mq_share_partition_start_offset",
                              "Share-partition start offset: every record before it is acknowledged or archived",
                              labels=_LABELS)
    lag = GaugeMetricFamily("mq_share_partition_lag_records",
                            "Records of a share-partition never handed out yet (high watermark minus end offset)",
                            labels=_LABELS)
    records = GaugeMetricFamily("mq_share_partition_records", "In-flight records of a share-partition, by state",
                                labels=[*_LABELS, "state"])
    seen: set[str] = set()
    for snap in node.shares.snapshot():
        if snap.group_id not in seen:
            seen.add(snap.group_id)
            members.add_metric([snap.group_id], snap.members)
        if snap.tp is None:
            continue
        labels = [snap.group_id, snap.tp.topic, str(snap.tp.partition)]
        start.add_metric(labels, snap.start_offset)
        if snap.high_watermark >= 0:
            lag.add_metric(labels, max(0, snap.high_watermark - snap.end_offset))
        counts = dict(snap.counts)
        for name, key in _STATES:
            records.add_metric([*labels, name], counts.get(key, 0))
    yield members
    yield start
    yield lag
    yield records
