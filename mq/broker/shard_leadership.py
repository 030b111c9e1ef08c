"""What a publish means for a coordinator's shards: the group, share-group and transaction
services each keep one shard per partition of their internal topic that this broker
leads, and after every metadata publish walk the partitions it touched the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from mq.broker.partition import Partition
from mq.core.types import TopicPartition

if TYPE_CHECKING:
    from mq.broker.replicas import PublishResult


def republished(result: PublishResult, topic: str, partitions: Mapping[TopicPartition, Partition],
                shards: Mapping[int, Any], *, stale: Callable[[Any, Partition], bool] | None = None,
                ) -> Iterator[tuple[TopicPartition, Partition | None, bool]]:
    """For each partition of ``topic`` the publish removed, took the leadership of, or
    changed (removed ones first): ``(tp, the partition if this broker leads it, else
    None, whether its shard must be unloaded)``. A shard goes when this broker no longer
    leads its partition, when the partition object was replaced, or when ``stale`` says
    so. Read lazily: the caller's unloads and loads in between are seen."""
    for tp in [*result.removed, *result.leadership_lost, *result.changed]:
        if tp.topic != topic:
            continue
        partition = partitions.get(tp)
        led = partition if partition is not None and partition.leader is not None else None
        shard = shards.get(tp.partition)
        unload = shard is not None and (led is None or shard.partition is not led
                                        or (stale is not None and stale(shard, led)))
        yield tp, led, unload
