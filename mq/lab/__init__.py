"""Notebook helpers: brokers and regions as handles, seeded workloads, segment files,
partition state over time, plots.

Notebooks import these and tell the story; anything a notebook needs twice lives here.
"""

from mq.lab.cluster import BrokerHandle, Cluster
from mq.lab.observe import PartitionView, scrape
from mq.lab.plots import (
    mark_events,
    plot_acks,
    plot_loss,
    plot_rates,
    plot_replicas,
    plot_segments,
    plot_spread,
    plot_throughput,
    table,
)
from mq.lab.process import free_port, wait_until
from mq.lab.segments import Segment, dump, fits_retention_bytes, list_segments
from mq.lab.spread import Spread, compare, spread
from mq.lab.timeline import Timeline
from mq.lab.workloads import (
    AckedChunk,
    ProduceLoad,
    ProduceRun,
    ThroughputPoint,
    consume,
    lost_records,
    make_values,
    poll_records,
    produce,
    read_all,
)

__all__ = [
    "AckedChunk", "BrokerHandle", "Cluster", "PartitionView", "ProduceLoad", "ProduceRun", "Segment", "Spread",
    "ThroughputPoint", "Timeline", "compare", "consume", "dump", "fits_retention_bytes", "free_port",
    "list_segments", "lost_records", "make_values", "mark_events", "plot_acks", "plot_loss", "plot_rates",
    "plot_replicas", "plot_segments", "plot_spread", "plot_throughput", "poll_records", "produce", "read_all",
    "scrape", "spread", "table", "wait_until",
]
