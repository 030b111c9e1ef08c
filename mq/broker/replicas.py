"""The partitions this broker hosts, kept in step with the metadata image.

``publish(before, after)`` is the only way partitions appear, change role or config or
go away (Kafka's ``BrokerMetadataPublisher`` → ``ReplicaManager.applyDelta``): a
partition whose replicas name this broker gets a log; the image's leader makes it the
leader (``mq.replication.PartitionState``), a follower of another broker (a
``FollowerPartition`` in that leader's ``ReplicaFetcher``) or neither (no leader
elected, or this broker not a replica); a ConfigRecord updates the live log's config;
a RemoveTopicRecord deletes the partition directories.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mq.broker.follower_fetch import FetcherManager
from mq.broker.partition import Partition, partition_directory
from mq.core.config import BrokerConfig, TopicConfig
from mq.core.types import FlushPolicy, TopicPartition
from mq.metadata.image import MetadataImage, PartitionImage, TopicImage
from mq.metadata.records import METADATA_TOPIC
from mq.replication import LeaderAndIsr, PartitionState
from mq.storage.fileio import FileIO
from mq.storage.segment import LogCorruptedError

NO_LEADER = -1

_PARTITION_DIR = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)")


@dataclass(slots=True)
class PublishResult:
    removed: list[TopicPartition] = field(default_factory=list)
    leadership_lost: list[TopicPartition] = field(default_factory=list)
    changed: list[TopicPartition] = field(default_factory=list)
    """Partitions whose role, leader or ISR changed (their waiters are re-checked)."""
    cut_damage: list[tuple[TopicPartition, int, LogCorruptedError]] = field(default_factory=list)
    """Followers whose log was cut at damage found on open: (partition, offset, damage)."""


class ReplicaManager:
    def __init__(self, fileio: FileIO, config: BrokerConfig) -> None:
        self.fileio = fileio
        self.config = config
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetchers = FetcherManager(config)

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def directory(self, tp: TopicPartition) -> str:
        return partition_directory(self.config.log_dirs, tp)

    def topic_config(self, topic: TopicImage) -> TopicConfig:
        return TopicConfig.from_kafka(dict(topic.configs), base=self.config.topic_defaults())

    def leaders(self) -> list[Partition]:
        return [p for p in self.partitions.values() if p.leader is not None]

    def publish(self, before: MetadataImage, after: MetadataImage, *, now_ms: int) -> PublishResult:
        """Apply the difference between two images."""
        result = PublishResult()
        for name, topic in before.topics.items():
            gone = after.topic(name)
            if gone is None or gone.topic_id != topic.topic_id:
                for p in topic.partitions:
                    tp = TopicPartition(name, p)
                    if self._delete(tp, result):
                        result.removed.append(tp)
        for name, topic in after.topics.items():
            old = before.topic(name)
            same = old is not None and old.topic_id == topic.topic_id
            config = None
            if same and old is not None and old.configs != topic.configs:
                config = self.topic_config(topic)
            for p, image in topic.partitions.items():
                tp = TopicPartition(name, p)
                partition = self.partitions.get(tp)
                if partition is None:
                    if self.node_id not in image.replicas:
                        continue
                    config = config or self.topic_config(topic)
                    partition = self._open(tp, config, image.leader_epoch, now_ms)
                    self._become(partition, image, now_ms, result)
                    continue
                if config is not None:
                    partition.log.update_config(config)
                    if partition.leader is not None:
                        partition.leader.update_config(min_insync_replicas=config.min_insync_replicas)
                old_image = old.partitions.get(p) if same and old is not None else None
                if old_image != image or (partition.leader is None and partition.follower is None):
                    self._become(partition, image, now_ms, result)
        return result

    def _become(self, partition: Partition, image: PartitionImage, now_ms: int, result: PublishResult) -> None:
        """Make the partition leader, follower or neither, as ``image`` says."""
        tp = partition.tp
        partition.leader_epoch = image.leader_epoch
        partition.leader_id = image.leader
        me = self.node_id
        hosted = me in image.replicas
        if hosted and image.leader == me:
            state = LeaderAndIsr(image.leader, image.leader_epoch, tuple(image.isr),
                                 image.partition_epoch, tuple(image.replicas))
            if partition.leader is not None:
                partition.leader.apply(state, now_ms=now_ms)
            else:
                high_watermark = partition.high_watermark
                self.fetchers.unfollow(partition)
                always = self.config.log_flush_policy == FlushPolicy.ALWAYS
                partition.leader = PartitionState(
                    tp, local_id=me, state=state, log=partition.log, epoch_cache=partition.epoch_cache,
                    high_watermark=high_watermark, now_ms=now_ms,
                    min_insync_replicas=partition.config.min_insync_replicas,
                    replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
                    flushed_offset=partition.log.recovery_point if always else None,
                )
        else:
            self._resign(partition, result)
            if hosted and image.leader != NO_LEADER:
                cut = partition.cut_damage()  # re-fetched from the leader, never served
                if cut is not None:
                    result.cut_damage.append((tp, *cut))
                self.fetchers.follow(partition, image.leader, image.leader_epoch)
            else:
                self.fetchers.unfollow(partition)
        result.changed.append(tp)

    def _resign(self, partition: Partition, result: PublishResult) -> None:
        if partition.leader is not None:
            partition.remember_high_watermark()
            partition.leader = None
            result.leadership_lost.append(partition.tp)

    def _open(self, tp: TopicPartition, config: TopicConfig, leader_epoch: int, now_ms: int) -> Partition:
        partition = Partition.open(
            self.fileio, self.directory(tp), tp, config, leader_epoch=leader_epoch,
            flush_policy=self.config.log_flush_policy, now_ms=now_ms,
        )
        self.partitions[tp] = partition
        return partition

    def _delete(self, tp: TopicPartition, result: PublishResult) -> bool:
        partition = self.partitions.pop(tp, None)
        if partition is None:
            return False
        self._resign(partition, result)
        self.fetchers.unfollow(partition)
        partition.log.delete()
        return True

    def remove_orphans(self, image: MetadataImage) -> list[str]:
        """Delete partition directories of topics the metadata log no longer has (a
        crash between committing RemoveTopicRecord and deleting the files)."""
        removed = []
        for entry in sorted(self.fileio.listdir(self.config.log_dirs)):
            match = _PARTITION_DIR.fullmatch(entry)
            if match is None or match["topic"] == METADATA_TOPIC:
                continue
            tp = TopicPartition(match["topic"], int(match["partition"]))
            if image.partition(tp) is None:
                self.fileio.rmtree(partition_directory(self.config.log_dirs, tp))
                removed.append(entry)
        return removed

    def close_all(self) -> None:
        for partition in self.partitions.values():
            partition.log.close()
