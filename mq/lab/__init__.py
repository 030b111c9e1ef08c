"""Notebook helpers: brokers as handles, seeded workloads, segment files, plots.

Notebooks import these and tell the story; anything a notebook needs twice lives here.
"""

from mq.lab.cluster import BrokerHandle, Cluster
from mq.lab.plots import plot_rates, plot_segments, plot_throughput, table
from mq.lab.process import free_port, wait_until
from mq.lab.segments import Segment, dump, fits_retention_bytes, list_segments
from mq.lab.workloads import (
    ProduceRun,
    ThroughputPoint,
    consume,
    make_values,
    poll_records,
    produce,
)

__all__ = [
    "BrokerHandle", "Cluster", "ProduceRun", "Segment", "ThroughputPoint", "consume", "dump",
    "fits_retention_bytes", "free_port", "list_segments", "make_values", "plot_rates",
    "plot_segments", "plot_throughput", "poll_records", "produce", "table", "wait_until",
]
