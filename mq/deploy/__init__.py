"""Running mq on a machine: topologies as data (region files), a launcher for local
processes, and the WAN links between regions."""

from mq.deploy.errors import DeployError, RegionError
from mq.deploy.launcher import (
    BrokerAction,
    BrokerStatus,
    Launcher,
    ServiceStatus,
    StopResult,
    UpResult,
)
from mq.deploy.links import LinkError, Links, LinkStatus
from mq.deploy.region import default_region_file, load_region, parse_region
from mq.deploy.regions_file import load_topology, parse_topology
from mq.deploy.shaping import LinkSettings
from mq.deploy.topology import BrokerSpec, Deployment, FlowSpec, LinkSpec, Topology, load_cluster

__all__ = ["BrokerAction", "BrokerSpec", "BrokerStatus", "DeployError", "Deployment", "FlowSpec", "Launcher",
           "LinkError", "LinkSettings", "LinkSpec", "LinkStatus", "Links", "RegionError", "ServiceStatus",
           "StopResult", "Topology", "UpResult", "default_region_file", "load_cluster", "load_region",
           "load_topology", "parse_region", "parse_topology"]
