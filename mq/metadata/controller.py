"""The quorum controller: validates requests and answers them with records.

Each handler returns ``ControllerResult(records, response)`` and changes no metadata;
the shell proposes ``records`` to the Raft log and answers once they are committed
(Kafka's ``QuorumController``/``ControllerResult`` split). Only ``replay`` moves the
image. The active controller replays its own proposals at once (speculatively), so two
requests handled before a commit see each other; when it stops being active the shell
calls ``reset(committed_image)``.

Besides the image, the active controller keeps broker sessions in memory
(``mq.metadata.brokers``): heartbeats refresh them, ``tick`` fences brokers whose
session expired and elects new leaders for their partitions (``mq.metadata.election``).
Handlers read state only from ``self.image`` and that session table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from mq.core.config import TOPIC_KEYS_BY_NAME, BrokerConfig, TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.metadata import election
from mq.metadata.alter_partition import alter_partition
from mq.metadata.brokers import BrokerSessions
from mq.metadata.create_partitions import create_partitions
from mq.metadata.image import MetadataImage
from mq.metadata.placement import assign_replicas
from mq.metadata.records import (
    METADATA_TOPIC,
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
from mq.metadata.result import ControllerResult
from mq.protocol.inter_broker import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from mq.protocol.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigResourceType,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

__all__ = ["AlterConfigsOutcome", "ControllerResult", "QuorumController", "validate_topic_name"]

MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS_PER_TOPIC = 10_000
"""A guard against one request creating millions of logs (Kafka has none; we would
rather refuse than exhaust file descriptors)."""
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


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
    """Turns admin and broker life-cycle requests into metadata records."""

    def __init__(self, config: BrokerConfig, *, rng: Rng) -> None:
        self.config = config
        self.image = MetadataImage()
        self.sessions = BrokerSessions(config.broker_session_timeout_ms)
        self.active = False
        self._next_rebalance_ms = 0
        self._rng = rng

    def replay(self, records: Iterable[MetadataRecord], *, last_offset: int | None = None) -> MetadataImage:
        """The only change to the image: committed records, or (on the active
        controller) its own proposals right after proposing them."""
        self.image = self.image.apply(records, last_offset=last_offset)
        return self.image

    def activate(self, now_ms: int) -> None:
        """This controller became active: every registered broker gets a fresh session."""
        self.active = True
        # A new controller waits one interval before rebalancing: brokers that were
        # restarting meanwhile get the time to rejoin their ISRs first.
        self._next_rebalance_ms = now_ms + self.config.leader_imbalance_check_interval_seconds * 1000
        self.sessions.clear()
        for broker_id in self.image.brokers:
            self.sessions.start(broker_id, now_ms)

    def reset(self, image: MetadataImage) -> None:
        """No longer active: drop speculative state and go back to ``image`` (committed)."""
        self.active = False
        self.image = image
        self.sessions.clear()

    def _eligible(self, image: MetadataImage) -> election.Eligible:
        return election.eligible_in(image, self.sessions.is_shutting_down)

    # ------------------------------------------------------------ broker life cycle

    def register_broker(
        self, request: BrokerRegistrationRequest, *, next_offset: int, now_ms: int
    ) -> ControllerResult[BrokerRegistrationResponse]:
        """``next_offset``: the metadata offset the proposed records will get; it becomes
        the broker epoch. A retry from the same incarnation gets its current epoch."""
        if request.broker_id < 0 or not request.listeners:
            return ControllerResult([], BrokerRegistrationResponse(ErrorCode.INVALID_REQUEST))
        existing = self.image.broker(request.broker_id)
        if existing is not None and existing.incarnation_id == request.incarnation_id:
            self.sessions.touch(request.broker_id, now_ms)
            return ControllerResult([], BrokerRegistrationResponse(ErrorCode.NONE, existing.broker_epoch))
        listener = request.listeners[0]
        record = RegisterBrokerRecord(request.broker_id, next_offset, request.incarnation_id,
                                      listener.host, listener.port, request.rack)
        records: list[MetadataRecord] = [record]
        self.sessions.start(request.broker_id, now_ms)
        if existing is not None:  # the old incarnation's leadership and ISR seats go
            after = self.image.apply(records)
            records.extend(election.remove_broker(after, request.broker_id, eligible=self._eligible(after)))
        return ControllerResult(records, BrokerRegistrationResponse(ErrorCode.NONE, next_offset))

    def broker_heartbeat(
        self, request: BrokerHeartbeatRequest, *, now_ms: int
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        """Refresh the session; unfence a caught-up broker (and let it lead partitions
        that have no leader), fence one that asks, or run a controlled shutdown step:
        move leadership off it first, then (nothing left to move) answer
        ``should_shutdown``."""
        broker_id = request.broker_id
        broker = self.image.broker(broker_id)
        if broker is None or broker.broker_epoch != request.broker_epoch:
            return ControllerResult([], BrokerHeartbeatResponse(ErrorCode.STALE_BROKER_EPOCH))
        self.sessions.touch(broker_id, now_ms)
        was_shutting_down = self.sessions.is_shutting_down(broker_id)
        self.sessions.set_shutting_down(broker_id, request.want_shutdown)
        caught_up = request.current_metadata_offset >= broker.broker_epoch
        records: list[MetadataRecord] = []
        should_shutdown = False
        if request.want_shutdown:
            # Leadership moves first; once nothing is left to move the broker may exit.
            # It is not fenced here: partitions nobody else can lead keep their leader
            # until it is gone, and its session running out fences it then.
            if not broker.fenced:
                records = election.controlled_shutdown(self.image, broker_id, eligible=self._eligible(self.image))
            should_shutdown = not any(self._moves_leadership(r) for r in records)
        elif request.want_fence:
            if not broker.fenced:
                records = self._fence(self.image, broker_id, broker.broker_epoch)
        elif broker.fenced and caught_up:
            records = [UnfenceBrokerRecord(broker_id, broker.broker_epoch)]
            after = self.image.apply(records)
            records.extend(election.elect_leaderless(after, eligible=self._eligible(after), broker_id=broker_id))
        elif was_shutting_down and not broker.fenced:  # shutdown called off: it may lead again
            records.extend(election.elect_leaderless(self.image, eligible=self._eligible(self.image),
                                                     broker_id=broker_id))
        after_broker = self.image.apply(records).broker(broker_id)
        fenced = after_broker is None or after_broker.fenced
        return ControllerResult(records, BrokerHeartbeatResponse(
            ErrorCode.NONE, is_caught_up=caught_up, is_fenced=fenced, should_shutdown=should_shutdown))

    def _moves_leadership(self, record: MetadataRecord) -> bool:
        if not isinstance(record, PartitionChangeRecord):
            return False
        part = self.image.topics[record.topic].partitions[record.partition]
        return record.leader != part.leader

    def _fence(self, image: MetadataImage, broker_id: int, broker_epoch: int) -> list[MetadataRecord]:
        """FenceBrokerRecord, then the broker leaves every ISR (but a last seat) and its
        partitions get new leaders."""
        records: list[MetadataRecord] = [FenceBrokerRecord(broker_id, broker_epoch)]
        after = image.apply(records)
        records.extend(election.remove_broker(after, broker_id, eligible=self._eligible(after)))
        return records

    def tick(self, now_ms: int) -> list[MetadataRecord]:
        """Fence every unfenced broker whose session expired, and now and then move
        leadership back to preferred replicas (active controller only)."""
        if not self.active:
            return []
        records: list[MetadataRecord] = []
        image = self.image
        for broker_id in self.sessions.expired(image.live_broker_ids(), now_ms):
            broker = image.brokers[broker_id]
            fenced = self._fence(image, broker_id, broker.broker_epoch)
            records.extend(fenced)
            image = image.apply(fenced)
        if self.config.auto_leader_rebalance_enable and now_ms >= self._next_rebalance_ms:
            self._next_rebalance_ms = now_ms + self.config.leader_imbalance_check_interval_seconds * 1000
            records.extend(election.preferred_leaders(
                image, eligible=self._eligible(image),
                imbalance_percentage=self.config.leader_imbalance_per_broker_percentage))
        return records

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has something to do (None: nothing scheduled)."""
        if not self.active:
            return None
        deadline = self.sessions.next_deadline_ms(self.image.live_broker_ids())
        if self.config.auto_leader_rebalance_enable:
            deadline = self._next_rebalance_ms if deadline is None else min(deadline, self._next_rebalance_ms)
        return deadline

    def alter_partition(
        self, request: AlterPartitionRequest, *, now_ms: int
    ) -> ControllerResult[AlterPartitionResponse]:
        return alter_partition(self.image, request, shutting_down=self.sessions.is_shutting_down)

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
        live = self.image.live_broker_ids()
        if not 1 <= rf <= len(live):
            raise MqError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"replication factor {rf} must be between 1 and the number of live brokers "
                          f"({len(live)} alive: {live})")
        TopicConfig.from_kafka(topic.configs, base=self.config.topic_defaults())
        topic_id = _uuid_text(self._rng.randbytes(16))
        records: list[MetadataRecord] = [TopicRecord(topic.name, topic_id)]
        for name in sorted(topic.configs):
            records.append(ConfigRecord(topic.name, name, str(topic.configs[name])))
        start = self._rng.randint(0, len(live) - 1)
        shift = self._rng.randint(0, max(0, len(live) - 2))
        for p, replicas in enumerate(assign_replicas(live, partitions, rf, start_index=start, shift=shift)):
            records.append(PartitionRecord(topic.name, p, replicas, replicas[0], 0, replicas, 0))
        return records, partitions, rf

    def _check_collision(self, name: str, created: set[str]) -> None:
        """'a.b' and 'a_b' share metric names, so Kafka refuses the second one."""
        normalized = name.replace(".", "_")
        for other in [*self.image.topics, *sorted(created)]:
            if other != name and other.replace(".", "_") == normalized:
                raise MqError(ErrorCode.INVALID_TOPIC, f"topic {name!r} collides with existing topic {other!r}")

    # ------------------------------------------------------------ CreatePartitions

    def create_partitions(
        self, request: CreatePartitionsRequest, *, now_ms: int
    ) -> ControllerResult[CreatePartitionsResponse]:
        """Grow topics; the rules are in ``mq.metadata.create_partitions``."""
        return create_partitions(self.image, request, rng=self._rng, max_partitions=MAX_PARTITIONS_PER_TOPIC)

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
        if validate_only:
            return ControllerResult([], ok)
        after = self.image.apply(records)
        if self.active and election.unclean_enabled(after.topics[name]):
            # Kafka elects at once where unclean election was just allowed.
            records.extend(election.elect_leaderless(after, eligible=self._eligible(after), topic_name=name))
        return ControllerResult(records, ok)


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
