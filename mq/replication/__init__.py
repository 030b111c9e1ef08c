"""Partition replication, sans-IO: leader epochs, the leader's ISR and high watermark,
the follower's fetch and truncation, and the acks=all and DeleteRecords purgatories."""

from mq.replication.epoch_cache import (
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    format_checkpoint,
    parse_checkpoint,
)
from mq.replication.follower import FetchOutcome, FetchStatus, FollowerPartition, ReplicaFetcher
from mq.replication.leader import FollowerFetchResult, PartitionState, ReplicaState
from mq.replication.purgatory import (
    DeleteRecordsPurgatory,
    ProduceCompletion,
    ProducePurgatory,
    PurgatoryPoll,
)
from mq.replication.types import (
    AlterPartitionRequest,
    LeaderAndIsr,
    ReplicaFetchResponse,
    ReplicaLog,
    check_leader_epoch,
)

__all__ = [
    "AlterPartitionRequest", "DeleteRecordsPurgatory", "EpochEndOffset", "EpochEntry", "FetchOutcome", "FetchStatus",
    "FollowerFetchResult", "FollowerPartition", "LeaderAndIsr", "LeaderEpochCache",
    "LeaderEpochCheckpointFile", "PartitionState", "ProduceCompletion", "ProducePurgatory",
    "PurgatoryPoll", "ReplicaFetchResponse", "ReplicaFetcher", "ReplicaLog", "ReplicaState",
    "check_leader_epoch", "format_checkpoint", "parse_checkpoint",
]
