"""The partitions this broker hosts, kept in step with the metadata image.

``publish(before, after)`` is the only way partitions appear, change config or go
away (Kafka's ``BrokerMetadataPublisher`` → ``ReplicaManager.applyDelta``): a new
PartitionRecord opens a log, a ConfigRecord updates the live log's config, a
RemoveTopicRecord deletes the partition directories.
"""

from __future__ import annotations

import os.path
import re

from mq.broker.partition import Partition
from mq.core.config import BrokerConfig, TopicConfig
from mq.core.types import FlushPolicy, TopicPartition
from mq.metadata.image import MetadataImage, TopicImage
from mq.metadata.records import METADATA_TOPIC
from mq.storage.fileio import FileIO
from mq.storage.log import Log

_PARTITION_DIR = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)")


class ReplicaManager:
    def __init__(self, fileio: FileIO, config: BrokerConfig) -> None:
        self.fileio = fileio
        self.config = config
        self.partitions: dict[TopicPartition, Partition] = {}

    def directory(self, tp: TopicPartition) -> str:
        return os.path.join(self.config.log_dirs, f"{tp.topic}-{tp.partition}")

    def topic_config(self, topic: TopicImage) -> TopicConfig:
        return TopicConfig.from_kafka(dict(topic.configs), base=self.config.topic_defaults())

    def publish(self, before: MetadataImage, after: MetadataImage, *, now_ms: int) -> list[TopicPartition]:
        """Apply the difference between two images; returns the partitions removed."""
        removed = []
        for name, topic in before.topics.items():
            gone = after.topic(name)
            if gone is None or gone.topic_id != topic.topic_id:
                for p in topic.partitions:
                    removed.append(self._delete(TopicPartition(name, p)))
        for name, topic in after.topics.items():
            old = before.topic(name)
            config = None
            for p, image in topic.partitions.items():
                tp = TopicPartition(name, p)
                partition = self.partitions.get(tp)
                if partition is None:
                    config = config or self.topic_config(topic)
                    self._open(tp, config, image.leader_epoch, now_ms)
                else:
                    partition.leader_epoch = image.leader_epoch
            if old is not None and old.topic_id == topic.topic_id and old.configs != topic.configs:
                config = self.topic_config(topic)
                for p in topic.partitions:
                    self.partitions[TopicPartition(name, p)].log.update_config(config)
        return [tp for tp in removed if tp is not None]

    def _open(self, tp: TopicPartition, config: TopicConfig, leader_epoch: int, now_ms: int) -> None:
        # recovery_point=None: the log reads its own recovery-point checkpoint.
        log = Log.open(self.fileio, self.directory(tp), config, now_ms=now_ms)
        partition = Partition(tp, log, leader_epoch=leader_epoch, flush_policy=self.config.log_flush_policy)
        self.partitions[tp] = partition
        if partition.needs_flush and self.config.log_flush_policy == FlushPolicy.ALWAYS:
            # Bytes that survived a crash in the page cache but were never fsynced:
            # make them durable before they count as committed.
            partition.flush()

    def _delete(self, tp: TopicPartition) -> TopicPartition | None:
        partition = self.partitions.pop(tp, None)
        if partition is None:
            return None
        partition.log.delete()
        return tp

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
                self.fileio.rmtree(os.path.join(self.config.log_dirs, entry))
                removed.append(entry)
        return removed

    def close_all(self) -> None:
        for partition in self.partitions.values():
            partition.log.close()
