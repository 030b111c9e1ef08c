"""The chaos harness: broker processes under faults, a JSON-lines history of client
operations, and the checkers of TESTING.md. See docs/how-to/run-the-chaos-suite.md.

- ``processes``: ``Processes`` / ``BrokerNode`` — children of the test, SIGKILL,
  SIGTERM, SIGSTOP/SIGCONT, restart, ``power_loss``, ``MQ_FAILPOINTS`` plumbing.
- ``history``: ``History`` (writer), ``Op``, ``read_history``.
- ``workload``: ``Workload`` (unique sends + readers), ``drain``.
- ``faults``: ``Nemesis`` (faults with their windows in the history), ``schedule``.
- ``checker``: ``check`` / ``check_file`` -> ``CheckResult.assert_ok``.
- ``replicas``: ``compare_replicas`` (byte-identical batches below a bound).
- ``proxy``: ``LinkProxy`` — one TCP proxy port per directed broker link; ``cut``,
  ``heal``, ``isolate``, ``partition``, ``heal_all`` (blackhole or refuse).
- ``region``: ``Region`` — N brokers, each a metadata-quorum voter reaching the others
  through the proxy; per-node faults by id, freshest-view ``leader_of`` /
  ``controller``, ``wait_*`` helpers, ``replica_check``; ``RegionMonitor``.
"""

from .checker import ANOMALIES, CheckResult, check, check_file
from .faults import Nemesis, PlannedFault, schedule
from .history import History, Op, read_history, write_history
from .processes import BrokerNode, Processes, format_failpoints, parse_failpoints, power_loss
from .proxy import LinkProxy, LinkStats
from .region import PartitionView, Region, RegionMonitor, RegionView, poll_until
from .replicas import ReplicaCheck, compare_replicas, read_batches
from .workload import DrainResult, Workload, WorkloadConfig, drain

__all__ = [
    "ANOMALIES",
    "BrokerNode",
    "CheckResult",
    "DrainResult",
    "History",
    "LinkProxy",
    "LinkStats",
    "Nemesis",
    "Op",
    "PartitionView",
    "PlannedFault",
    "Processes",
    "Region",
    "RegionMonitor",
    "RegionView",
    "ReplicaCheck",
    "Workload",
    "WorkloadConfig",
    "check",
    "check_file",
    "compare_replicas",
    "drain",
    "format_failpoints",
    "parse_failpoints",
    "poll_until",
    "power_loss",
    "read_batches",
    "read_history",
    "schedule",
    "write_history",
]
