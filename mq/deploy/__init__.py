"""Running mq on a machine: topologies as data, and a launcher for local processes."""

from mq.deploy.launcher import (
    BrokerAction,
    BrokerStatus,
    DeployError,
    Launcher,
    StopResult,
    UpResult,
)
from mq.deploy.topology import BrokerSpec, Topology

__all__ = ["BrokerAction", "BrokerSpec", "BrokerStatus", "DeployError", "Launcher", "StopResult", "Topology",
           "UpResult"]
