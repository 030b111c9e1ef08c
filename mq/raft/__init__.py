"""KRaft-style Raft quorum as a sans-IO core ("epoch" is Raft's "term"); see node.py."""

from mq.raft.log import LogEntry, MemoryReplicatedLog, ReplicatedLog, Snapshot
from mq.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RaftMessage,
    VoteRequest,
    VoteResponse,
)
from mq.raft.node import Persist, RaftNode, Ready
from mq.raft.quorum import ElectionState, IllegalTransition, QuorumState, RaftConfig
from mq.raft.replication import TruncationBelowHighWatermark
from mq.raft.states import Candidate, Follower, Leader, Prospective, Resigned, Unattached

__all__ = [
    "BeginQuorumEpochRequest", "BeginQuorumEpochResponse", "Candidate", "ElectionState", "FetchRequest", "FetchResponse",
    "FetchSnapshotRequest", "FetchSnapshotResponse", "Follower", "IllegalTransition", "Leader",
    "LogEntry", "MemoryReplicatedLog", "Persist", "Prospective", "QuorumState", "RaftConfig",
    "RaftMessage", "RaftNode", "Ready", "ReplicatedLog", "Resigned", "Snapshot",
    "TruncationBelowHighWatermark", "Unattached", "VoteRequest", "VoteResponse",
]
