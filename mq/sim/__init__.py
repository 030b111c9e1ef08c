"""Deterministic simulation: the real cores on virtual time, a seeded network and disk."""

from mq.sim.invariants import (
    CommittedPrefix,
    LeaderLiveness,
    MonotonicHighWatermark,
    SingleLeaderPerEpoch,
)
from mq.sim.network import Delay, Drop, Duplicate, NetworkFilter, Reorder, SimNetwork
from mq.sim.raft_cluster import DigestMachine, RaftCluster, SimNode
from mq.sim.scheduler import EventScheduler, InvariantViolation
from mq.sim.seeds import SimulationFailure, replay_command, run_seeds, seeds

__all__ = [
    "CommittedPrefix", "Delay", "DigestMachine", "Drop", "Duplicate", "EventScheduler",
    "InvariantViolation", "LeaderLiveness", "MonotonicHighWatermark", "NetworkFilter",
    "RaftCluster", "Reorder", "SimNetwork", "SimNode", "SimulationFailure",
    "SingleLeaderPerEpoch", "replay_command", "run_seeds", "seeds",
]
