"""Running mq on a machine: topologies as data (region files), and a launcher for local processes."""

from mq.deploy.errors import DeployError, RegionError
from mq.deploy.launcher import (
    BrokerAction,
    BrokerStatus,
    Launcher,
    StopResult,
    UpResult,
)
from mq.deploy.region import default_region_file, load_region, parse_region
from mq.deploy.topology import BrokerSpec, Topology

__all__ = ["BrokerAction", "BrokerSpec", "BrokerStatus", "DeployError", "Launcher", "RegionError", "StopResult",
           "Topology", "UpResult", "default_region_file", "load_region", "parse_region"]
