"""Running mq on a machine: topologies as data, and a launcher for local processes."""

from mq.deploy.launcher import BrokerStatus, DeployError, Launcher, StopResult, UpResult
from mq.deploy.topology import BrokerSpec, Topology

__all__ = ["BrokerSpec", "BrokerStatus", "DeployError", "Launcher", "StopResult", "Topology",
           "UpResult"]
