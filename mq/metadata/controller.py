"""The quorum controller: validates admin requests and answers them with records.

Each handler returns ``ControllerResult(records, response)`` and changes nothing; the
caller appends ``records`` to the metadata log and, once they are committed, calls
``replay`` (Kafka's ``QuorumController``/``ControllerResult`` split). With one node a
record is committed as soon as it is appended and fsynced; the next issue puts a Raft
quorum under the same log without touching these handlers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mq.core.config import TOPIC_KEYS_BY_NAME, BrokerConfig, TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.metadata.image import MetadataImage
from mq.metadata.records import (
    METADATA_TOPIC,
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from mq.protocol.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigResourceType,
    CreatableTopic,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

T = TypeVar("T")

MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS_PER_TOPIC = 10_000
"""A guard against one request creating millions of logs (Kafka has none; we would
rather refuse than exhaust file descriptors)."""
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    records: list[MetadataRecord]
    response: T


@dataclass(frozen=True, slots=True)
class AlterConfigsOutcome:
    """AlterConfigs for topics; broker resources are answered by the broker itself."""

    results: list[AlterConfigsResult] = field(default_factory=list)


def validate_topic_name(name: str) -> None:
    """Kafka's rules: [a-zA-Z0-9._-], 1..249 characters, not "." or ".."."""
    if not name:
        raise MqError(ErrorCode.INVALID_TOPIC, "topic name is empty")
    if name in (".", ".."):
        raise MqError(ErrorCode.INVALID_TOPIC, f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise MqError(ErrorCode.INVALID_TOPIC, f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_NAME.fullmatch(name):
        raise MqError(ErrorCode.INVALID_TOPIC, f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")
    if name == METADATA_TOPIC:
        raise MqError(ErrorCode.INVALID_TOPIC, f"{METADATA_TOPIC} is reserved for the metadata log")


class QuorumController:
    """Turns CreateTopics, DeleteTopics and AlterConfigs into metadata records."""

    def __init__(self, config: BrokerConfig, *, rng: Rng, broker_ids: Iterable[int] | None = None) -> None:
        self.config = config
        self.image = MetadataImage()
        self.broker_ids = sorted(broker_ids if broker_ids is not None else [config.node_id])
        self._rng = rng

    def replay(self, records: Iterable[MetadataRecord], *, last_offset: int) -> MetadataImage:
        """The only state change: committed records move the image forward."""
        self.image = self.image.apply(records, last_offset=last_offset)
        return self.image

    # ------------------------------------------------------------ CreateTopics

    def create_topics(self, request: CreateTopicsRequest, *, now_ms: int) -> ControllerResult[CreateTopicsResponse]:
        records: list[MetadataRecord] = []
        results: list[CreatableTopicResult] = []
        names = [t.name for t in request.topics]
        duplicates = {n for n in names if names.count(n) > 1}
        created: set[str] = set()
        for topic in request.topics:
            if topic.name in duplicates:
                results.append(CreatableTopicResult(
                    topic.name, ErrorCode.INVALID_REQUEST, "topic named more than once in the request"))
                continue
            try:
                new_records, partitions, rf = self._create_topic(topic, created)
            except MqError as err:
                results.append(CreatableTopicResult(topic.name, err.code, err.message))
                continue
            created.add(topic.name)
            if not request.validate_only:
                records.extend(new_records)
            results.append(CreatableTopicResult(topic.name, ErrorCode.NONE, "", partitions, rf))
        return ControllerResult(records, CreateTopicsResponse(results))

    def _create_topic(
        self, topic: CreatableTopic, created: set[str]
    ) -> tuple[list[MetadataRecord], int, int]:
        validate_topic_name(topic.name)
        if topic.name in self.image.topics or topic.name in created:
            raise MqError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
        self._check_collision(topic.name, created)
        partitions = self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise MqError(ErrorCode.INVALID_PARTITIONS,
                          f"num_partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {partitions}")
        rf = self.config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        if not 1 <= rf <= len(self.broker_ids):
            raise MqError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"replication factor {rf} must be between 1 and the number of brokers ({len(self.broker_ids)})")
        TopicConfig.from_kafka(topic.configs, base=self.config.topic_defaults())
        topic_id = _uuid_text(self._rng.randbytes(16))
        records: list[MetadataRecord] = [TopicRecord(topic.name, topic_id)]
        for name in sorted(topic.configs):
            records.append(ConfigRecord(topic.name, name, str(topic.configs[name])))
        for p in range(partitions):
            replicas = self._assign_replicas(p, rf)
            records.append(PartitionRecord(topic.name, p, replicas, replicas[0], 0, replicas, 0))
        return records, partitions, rf

    def _check_collision(self, name: str, created: set[str]) -> None:
        """'a.b' and 'a_b' share metric names, so Kafka refuses the second one."""
        normalized = name.replace(".", "_")
        for other in [*self.image.topics, *sorted(created)]:
            if other != name and other.replace(".", "_") == normalized:
                raise MqError(ErrorCode.INVALID_TOPIC, f"topic {name!r} collides with existing topic {other!r}")

    def _assign_replicas(self, partition: int, rf: int) -> tuple[int, ...]:
        """Round-robin: partition p starts at broker p mod n (Kafka's rack-unaware rule)."""
        n = len(self.broker_ids)
        return tuple(self.broker_ids[(partition + i) % n] for i in range(rf))

    # ------------------------------------------------------------ DeleteTopics

    def delete_topics(self, request: DeleteTopicsRequest, *, now_ms: int) -> ControllerResult[DeleteTopicsResponse]:
        records: list[MetadataRecord] = []
        results = []
        seen: set[str] = set()
        for name in request.topic_names:
            topic = self.image.topic(name)
            if topic is None or name in seen:
                results.append(DeletableTopicResult(name, ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}"))
                continue
            seen.add(name)
            records.append(RemoveTopicRecord(name, topic.topic_id))
            results.append(DeletableTopicResult(name, ErrorCode.NONE))
        return ControllerResult(records, DeleteTopicsResponse(results))

    # ------------------------------------------------------------ AlterConfigs

    def alter_topic_configs(
        self, resource: AlterConfigsResource, *, validate_only: bool
    ) -> ControllerResult[AlterConfigsResult]:
        """Incremental: SET or DELETE the named keys; the merged result must validate."""
        name = resource.resource_name
        topic = self.image.topic(name)
        if topic is None:
            return _config_error(resource, ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        overrides = dict(topic.configs)
        records: list[MetadataRecord] = []
        try:
            for change in resource.configs:
                records.append(_apply_change(name, change, overrides))
            TopicConfig.from_kafka(overrides, base=self.config.topic_defaults())
        except MqError as err:
            return _config_error(resource, err.code, err.message)
        ok = AlterConfigsResult(ConfigResourceType.TOPIC, name, ErrorCode.NONE)
        return ControllerResult([] if validate_only else records, ok)


def _apply_change(topic: str, change: AlterableConfig, overrides: dict[str, str]) -> ConfigRecord:
    if change.op == AlterConfigOp.SET:
        if change.value is None:
            raise MqError(ErrorCode.INVALID_CONFIG, f"SET {change.name} needs a value")
        overrides[change.name] = change.value
        return ConfigRecord(topic, change.name, change.value)
    if change.op == AlterConfigOp.DELETE:
        if change.name not in TOPIC_KEYS_BY_NAME:
            raise MqError(ErrorCode.INVALID_CONFIG, f"unknown topic config {change.name!r}")
        overrides.pop(change.name, None)
        return ConfigRecord(topic, change.name, None)
    raise MqError(ErrorCode.INVALID_REQUEST, f"unknown config operation {change.op}")


def _config_error(resource: AlterConfigsResource, code: ErrorCode, message: str) -> ControllerResult[AlterConfigsResult]:
    return ControllerResult([], AlterConfigsResult(resource.resource_type, resource.resource_name, code, message))


def _uuid_text(raw: bytes) -> str:
    """A random (version 4) UUID in its usual text form, from the seeded ``Rng``."""
    b = bytearray(raw)
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
