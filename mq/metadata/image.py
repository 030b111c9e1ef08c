"""The metadata image: what the cluster looks like after replaying the metadata log.

Immutable: ``apply(records)`` returns a new image and leaves the old one intact, so a
broker can compare the image before and after a batch of records (which partitions
appeared, which topics went away, which configs changed) and act on the difference,
like Kafka's ``MetadataImage``/``MetadataDelta``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from mq.core.types import TopicPartition
from mq.metadata.records import (
    ConfigRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)


@dataclass(frozen=True, slots=True)
class PartitionImage:
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: str
    partitions: Mapping[int, PartitionImage] = field(default_factory=lambda: MappingProxyType({}))
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Topic-level overrides only (Kafka names → strings); defaults come from the broker."""


@dataclass(frozen=True, slots=True)
class BrokerImage:
    """A registered broker. ``broker_epoch`` fences requests of older incarnations; a
    fenced broker leads nothing and is in no ISR (except as a partition's last member)."""

    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None
    fenced: bool


@dataclass(frozen=True, slots=True)
class MetadataImage:
    topics: Mapping[str, TopicImage] = field(default_factory=lambda: MappingProxyType({}))
    offset: int = -1
    """Offset of the last metadata record replayed (-1: none)."""
    brokers: Mapping[int, BrokerImage] = field(default_factory=lambda: MappingProxyType({}))
    """Registered brokers by id, sorted."""

    def broker(self, broker_id: int) -> BrokerImage | None:
        return self.brokers.get(broker_id)

    def live_broker_ids(self) -> list[int]:
        """Registered and unfenced brokers, sorted."""
        return [b.broker_id for b in self.brokers.values() if not b.fenced]

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def partition(self, tp: TopicPartition) -> PartitionImage | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def topic_partitions(self) -> list[TopicPartition]:
        """Every partition, sorted (never hash order)."""
        return sorted(
            TopicPartition(t.name, p) for t in self.topics.values() for p in t.partitions
        )

    def replay(self, record: MetadataRecord) -> MetadataImage:
        return self.apply([record])

    def apply(self, records: Iterable[MetadataRecord], *, last_offset: int | None = None) -> MetadataImage:
        """The image after ``records``; each touched topic is copied once per call, so
        replaying a 10,000-partition topic stays linear."""
        builder = _ImageBuilder(self.topics, self.brokers)
        for record in records:
            builder.replay(record)
        offset = self.offset if last_offset is None else last_offset
        return replace(self, topics=builder.build(), offset=offset, brokers=builder.build_brokers())


class _ImageBuilder:
    """Mutable scratch copy of the touched topics while a batch of records replays."""

    def __init__(self, topics: Mapping[str, TopicImage], brokers: Mapping[int, BrokerImage]) -> None:
        self.topics = dict(topics)
        self.partitions: dict[str, dict[int, PartitionImage]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.original_brokers = brokers
        self.brokers: dict[int, BrokerImage] | None = None  # copied on the first broker change

    def replay(self, record: MetadataRecord) -> None:
        if isinstance(record, TopicRecord):
            self.topics[record.name] = TopicImage(record.name, record.topic_id)
            self.partitions[record.name] = {}
            self.configs[record.name] = {}
        elif isinstance(record, PartitionRecord):
            self._partitions(record.topic)[record.partition] = PartitionImage(
                record.replicas, record.leader, record.leader_epoch, record.isr,
                record.partition_epoch,
            )
        elif isinstance(record, ConfigRecord):
            configs = self._configs(record.topic)
            if record.value is None:
                configs.pop(record.name, None)
            else:
                configs[record.name] = record.value
        elif isinstance(record, RemoveTopicRecord):
            self.topics.pop(record.name, None)
            self.partitions.pop(record.name, None)
            self.configs.pop(record.name, None)
        elif isinstance(record, PartitionChangeRecord):
            self._change_partition(record)
        elif isinstance(record, RegisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord):
            self._replay_broker(record)
        else:  # pragma: no cover - the record union is closed
            raise TypeError(f"not a metadata record: {record!r}")

    def _change_partition(self, record: PartitionChangeRecord) -> None:
        """Replace leader and ISR; a change for a partition deleted meanwhile is dropped."""
        if record.topic not in self.topics:
            return
        parts = self._partitions(record.topic)
        current = parts.get(record.partition)
        if current is None:
            return
        parts[record.partition] = PartitionImage(
            current.replicas, record.leader, record.leader_epoch, tuple(record.isr),
            record.partition_epoch,
        )

    def _replay_broker(self, record: RegisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord) -> None:
        """Idempotent: a registration older than (or equal to) the current one and a
        fence/unfence for another broker epoch change nothing."""
        if self.brokers is None:
            self.brokers = dict(self.original_brokers)
        current = self.brokers.get(record.broker_id)
        if isinstance(record, RegisterBrokerRecord):
            if current is None or record.broker_epoch > current.broker_epoch:
                self.brokers[record.broker_id] = BrokerImage(
                    record.broker_id, record.broker_epoch, record.incarnation_id, record.host,
                    record.port, record.rack, fenced=True,
                )
        elif current is not None and current.broker_epoch == record.broker_epoch:
            self.brokers[record.broker_id] = replace(current, fenced=isinstance(record, FenceBrokerRecord))

    def build_brokers(self) -> Mapping[int, BrokerImage]:
        if self.brokers is None:
            return self.original_brokers
        return MappingProxyType({b: self.brokers[b] for b in sorted(self.brokers)})

    def _partitions(self, topic: str) -> dict[int, PartitionImage]:
        if topic not in self.partitions:
            self.partitions[topic] = dict(self.topics[topic].partitions)
        return self.partitions[topic]

    def _configs(self, topic: str) -> dict[str, str]:
        if topic not in self.configs:
            self.configs[topic] = dict(self.topics[topic].configs)
        return self.configs[topic]

    def build(self) -> Mapping[str, TopicImage]:
        for name, parts in self.partitions.items():
            if name in self.topics:
                ordered = {p: parts[p] for p in sorted(parts)}
                self.topics[name] = replace(self.topics[name], partitions=MappingProxyType(ordered))
        for name, configs in self.configs.items():
            if name in self.topics:
                ordered_c = dict(sorted(configs.items()))
                self.topics[name] = replace(self.topics[name], configs=MappingProxyType(ordered_c))
        return MappingProxyType({name: self.topics[name] for name in sorted(self.topics)})
