"""Which requests this broker may serve for a partition: only its leader's.

A request naming a partition this broker does not lead is answered NOT_LEADER with
the leader it knows (the client refreshes metadata and retries there). A request
that names a leader epoch is fenced first, in Kafka's order: older than the image's →
FENCED_LEADER_EPOCH (stale metadata, or a zombie), newer → UNKNOWN_LEADER_EPOCH (this
broker's metadata is behind; retry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mq.broker.partition import Partition
from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.replication import check_leader_epoch

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode


def not_leader(node: BrokerNode, tp: TopicPartition) -> tuple[ErrorCode, str]:
    """NOT_LEADER naming the leader this broker knows (UNKNOWN_TOPIC if none)."""
    image = node.image.partition(tp)
    if image is None:
        return ErrorCode.UNKNOWN_TOPIC, f"unknown topic-partition {tp}"
    if image.leader < 0:
        return ErrorCode.NOT_LEADER, f"{tp} has no leader (epoch {image.leader_epoch}); this is broker {node.node_id}"
    return ErrorCode.NOT_LEADER, (
        f"broker {node.node_id} is not the leader of {tp}: leader is {image.leader} (epoch {image.leader_epoch})")


def find_leader(node: BrokerNode, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition | tuple[ErrorCode, str]:
    """The partition if this broker leads it, else the error code and message."""
    partition = node.partitions.get(tp)
    image = node.image.partition(tp)
    if partition is None and image is None:
        return ErrorCode.UNKNOWN_TOPIC, f"unknown topic-partition {tp}"
    epoch = image.leader_epoch if image is not None else partition.leader_epoch  # type: ignore[union-attr]
    code = check_leader_epoch(current_leader_epoch, epoch)
    if code != ErrorCode.NONE:
        return code, f"{tp}: request leader epoch {current_leader_epoch}, broker {node.node_id} knows {epoch}"
    if partition is None or partition.leader is None:
        return not_leader(node, tp)
    return partition
