"""Configuration with Kafka's names.

Each setting is declared once as a ``ConfigKey`` (Kafka name, type, default,
validator, documentation). ``TopicConfig`` and ``BrokerConfig`` are frozen
dataclasses whose field names are the Kafka names with dots turned into
underscores (``segment.bytes`` -> ``segment_bytes``); the reference page is
generated from these declarations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any, Callable, Mapping

from mq.core.conflict import (
    POLICY_CHOICES,
    ConflictPolicy,
    ConflictRules,
    check_rules,
    home_map_ok,
    normalize_list,
    parse_home_map,
    parse_policy,
    parse_regions,
    regions_ok,
)
from mq.core.errors import ErrorCode, MqError
from mq.core.types import CleanupPolicy, CompressionType, FlushPolicy, TimestampType

DAY_MS = 24 * 60 * 60 * 1000
MIB = 1024 * 1024


@dataclass(frozen=True)
class ConfigKey:
    name: str  # Kafka's dotted name
    type: Callable[[Any], Any]
    default: Any
    doc: str
    validator: Callable[[Any], bool] = lambda v: True
    valid: str = ""  # human-readable form of the validator

    @property
    def field(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, raw: Any) -> Any:
        """Turn a string (from the CLI, the wire or a file) into a checked value."""
        try:
            if self.type is bool and isinstance(raw, str):
                if raw.lower() not in ("true", "false"):
                    raise ValueError(raw)
                value: Any = raw.lower() == "true"
            elif self.type is int and isinstance(raw, str):
                value = int(raw)
            elif isinstance(self.type, type) and isinstance(raw, self.type) and not (
                self.type is int and isinstance(raw, bool)
            ):
                value = raw
            else:
                value = self.type(raw)
        except (ValueError, TypeError, KeyError):
            raise MqError(
                ErrorCode.INVALID_CONFIG, f"{self.name}={raw!r} is not a valid {self.type.__name__}"
            ) from None
        if not self.validator(value):
            raise MqError(ErrorCode.INVALID_CONFIG, f"{self.name}={raw!r}: must be {self.valid}")
        return value


def _at_least(n: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v >= n), f">= {n}"


def _key(name: str, type_: type, default: Any, doc: str, check=None) -> ConfigKey:
    validator, valid = check if check else ((lambda v: True), "")
    return ConfigKey(name, type_, default, doc, validator, valid)


def _enum_check(enum: type) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: True), "one of " + ", ".join(str(m.value) for m in enum)  # type: ignore


def _timestamp_type(raw: Any) -> TimestampType:
    if isinstance(raw, TimestampType):
        return raw
    names = {"createtime": TimestampType.CREATE_TIME, "logappendtime": TimestampType.LOG_APPEND_TIME}
    return names[str(raw).replace("_", "").lower()]


def _compression(raw: Any) -> str:
    value = str(raw).lower()
    if value != "producer":
        CompressionType.parse(value)
    return value


def parse_quorum_voters(raw: str) -> tuple[tuple[int, str, int], ...]:
    """``"1@h:9093,2@h:9094"`` -> ``((1, "h", 9093), (2, "h", 9094))``; ValueError if
    malformed or if a node id repeats."""
    voters: list[tuple[int, str, int]] = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        node, _, address = item.partition("@")
        host, _, port = address.rpartition(":")
        if not host or not node.isdigit() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} is not id@host:port")
        voters.append((int(node), host, int(port)))
    if len({node for node, _, _ in voters}) != len(voters):
        raise ValueError(f"{raw!r} names a node id twice")
    return tuple(voters)


def _quorum_voters(raw: Any) -> str:
    return str(raw).strip()


def _voters_ok(value: str) -> bool:
    try:
        parse_quorum_voters(value)
    except ValueError:
        return False
    return True


_REGION_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
REGION_NAME_CHECK = (
    (lambda v: v == "" or _REGION_NAME.fullmatch(v) is not None),
    "empty, or a region name (1 to 64 of [A-Za-z0-9._-], as in regions/*.yaml)",
)


def _parse_changes(keys: Mapping[str, ConfigKey], values: Mapping[str, Any], kind: str) -> dict:
    """``{kafka_name: raw}`` -> ``{field: checked value}``; unknown names are refused."""
    changes = {}
    for name, raw in values.items():
        key = keys.get(name)
        if key is None:
            raise MqError(ErrorCode.INVALID_CONFIG, f"unknown {kind} config {name!r}")
        changes[key.field] = key.parse(raw)
    return changes

TOPIC_KEYS: tuple[ConfigKey, ...] = (
    _key("segment.bytes", int, 1024 * MIB, "Roll a new segment when the active one reaches this size.", _at_least(1024)),
    _key("segment.ms", int, 7 * DAY_MS, "Roll a new segment when the active one is this old.", _at_least(1)),
    _key("segment.index.bytes", int, 10 * MIB, "Maximum size of an offset or time index file.", _at_least(64)),
    _key("retention.ms", int, 7 * DAY_MS, "Delete segments whose newest record is older than this (-1: keep).", _at_least(-1)),
    _key("retention.bytes", int, -1, "Delete oldest segments while the partition is larger than this (-1: no limit).", _at_least(-1)),
    _key("max.message.bytes", int, 1024 * 1024 + 12, "Largest record batch the topic accepts.", _at_least(64)),
    _key("cleanup.policy", CleanupPolicy, CleanupPolicy.DELETE, "delete, compact, or compact,delete.", _enum_check(CleanupPolicy)),
    _key("message.timestamp.type", _timestamp_type, TimestampType.CREATE_TIME, "CreateTime (producer's clock) or LogAppendTime (broker's)."),
    _key("index.interval.bytes", int, 4096, "Bytes of log between two offset-index entries.", _at_least(0)),
    _key("flush.messages", int, -1, "Fsync after this many records (-1: leave it to flush policy).", _at_least(-1)),
    _key("flush.ms", int, -1, "Fsync when the oldest unflushed record is this old (-1: never by time).", _at_least(-1)),
    _key("compression.type", _compression, "producer", "Codec the broker stores with; producer keeps the producer's bytes."),
    _key("min.insync.replicas", int, 1, "acks=all needs at least this many in-sync replicas.", _at_least(1)),
    _key("unclean.leader.election.enable", bool, False, "Allow a replica outside the ISR to become leader (may lose data)."),
    _key("delete.retention.ms", int, DAY_MS, "How long tombstones stay readable on compacted topics.", _at_least(0)),
    _key("min.cleanable.dirty.ratio", float, 0.5, "Compact when this share of the log is uncleaned.", ((lambda v: 0 <= v <= 1), "between 0 and 1")),
    _key("min.compaction.lag.ms", int, 0, "A record stays uncompacted at least this long.", _at_least(0)),
    _key("max.compaction.lag.ms", int, 2**63 - 1, "A record becomes eligible for compaction by this age.", _at_least(1)),
    _key("message.timestamp.difference.max.ms", int, 2**63 - 1, "Reject CreateTime timestamps further than this from the broker's clock.", _at_least(0)),
    _key("conflict.policy", parse_policy, ConflictPolicy.NONE, "How regions that all write this topic agree on a key's value: none (each region keeps what it applied last: views diverge), home-region (a key is written only in its home region; elsewhere produce is refused with NOT_HOME_REGION) or last-writer-wins (producers stamp keyed records with a hybrid logical clock, header mq.hlc; a table keeps the greatest stamp, ties broken by region name; a keyed record without a valid stamp is refused with INVALID_HLC). See docs/explanation/conflicts.md.", ((lambda v: isinstance(v, ConflictPolicy)), f"one of {POLICY_CHOICES}")),
    _key("conflict.home.regions", normalize_list, "", "The regions a key's home is chosen from, in a fixed order (east,west,south): home = regions[toPositive(murmur2(key)) % count] unless conflict.home.map names it. Required by conflict.policy=home-region; also the regions whose remote copies (<region>.<topic>) a table view reads.", (regions_ok, "comma-separated distinct region names (1 to 64 of [A-Za-z0-9._-] each)")),
    _key("conflict.home.map", normalize_list, "", "Explicit homes by key prefix, before the hash: PREFIX:REGION,... (eu-:west,us-:east); the longest matching prefix wins; every region must be in conflict.home.regions.", (home_map_ok, "comma-separated PREFIX:REGION pairs, each prefix once")),
    _key("mirror.source.region", str, "", "Set: the topic is a read-only mirror of this region's topic of the same name, written only by the mirror (MirrorAppend); produce is refused with MIRROR_TOPIC_READ_ONLY. Delete it to promote the topic (fail-over), set it to demote (fail-back).", REGION_NAME_CHECK),
)
TOPIC_KEYS_BY_NAME = {k.name: k for k in TOPIC_KEYS}


@dataclass(frozen=True)
class TopicConfig:
    segment_bytes: int = 1024 * MIB
    segment_ms: int = 7 * DAY_MS
    segment_index_bytes: int = 10 * MIB
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    max_message_bytes: int = 1024 * 1024 + 12
    cleanup_policy: CleanupPolicy = CleanupPolicy.DELETE
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    index_interval_bytes: int = 4096
    flush_messages: int = -1
    flush_ms: int = -1
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    delete_retention_ms: int = DAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    message_timestamp_difference_max_ms: int = 2**63 - 1
    conflict_policy: ConflictPolicy = ConflictPolicy.NONE
    conflict_home_regions: str = ""
    conflict_home_map: str = ""
    mirror_source_region: str = ""

    def __post_init__(self) -> None:
        """Conflict settings valid alone may not fit together (a map naming a region the
        list lacks): refused, so a bad combination is never written to the metadata log."""
        if self.conflict_policy is not ConflictPolicy.NONE or self.conflict_home_regions \
                or self.conflict_home_map:
            check_rules(self.conflict_rules)

    @cached_property
    def conflict_rules(self) -> ConflictRules:
        """``conflict.*`` parsed (the values were validated when the config was built);
        computed once per config (the broker asks on every produce to the topic)."""
        return ConflictRules(self.conflict_policy, parse_regions(self.conflict_home_regions),
                             parse_home_map(self.conflict_home_map))

    @classmethod
    def from_kafka(cls, values: Mapping[str, Any], base: "TopicConfig | None" = None) -> "TopicConfig":
        """Build from ``{"segment.bytes": "1048576", ...}``; unknown names are refused."""
        return replace(base or cls(), **_parse_changes(TOPIC_KEYS_BY_NAME, values, "topic"))

    def to_kafka(self) -> dict[str, str]:
        """Every setting as ``{kafka_name: string}`` (for DescribeConfigs)."""
        out = {}
        for key in TOPIC_KEYS:
            value = getattr(self, key.field)
            if isinstance(value, TimestampType):
                value = "CreateTime" if value == TimestampType.CREATE_TIME else "LogAppendTime"
            elif isinstance(value, (CleanupPolicy, ConflictPolicy)):
                value = value.value
            elif isinstance(value, bool):
                value = str(value).lower()
            out[key.name] = str(value)
        return out

    def overrides(self) -> dict[str, str]:
        """Only the settings that differ from the defaults."""
        default = TopicConfig().to_kafka()
        return {k: v for k, v in self.to_kafka().items() if default[k] != v}


assert {k.field for k in TOPIC_KEYS} == {f.name for f in fields(TopicConfig)}


BROKER_KEYS: tuple[ConfigKey, ...] = (
    _key("node.id", int, 1, "This broker's id, unique in its region.", _at_least(0)),
    _key("region.name", str, "", "The region this broker serves (mq up sets it from the region file). Clients learn it from Metadata; topics with conflict.policy=home-region accept here only keys whose home is this region (a broker without a region refuses them).", REGION_NAME_CHECK),
    _key("log.dirs", str, ".mq/broker-1", "Directory holding this broker's partitions and metadata log."),
    _key("listeners", str, "127.0.0.1:9092", "host:port the native protocol listens on."),
    _key("advertised.listeners", str, "", "host:port this broker gives clients and peers to dial (empty: listeners); set it when listening on 0.0.0.0, as in a container."),
    _key("metrics.listener", str, "", "host:port of the Prometheus /metrics endpoint (empty: port + 10000)."),
    _key("num.partitions", int, 1, "Partitions of a topic created without --partitions.", _at_least(1)),
    _key("default.replication.factor", int, 1, "Replicas of a topic created without a replication factor.", _at_least(1)),
    _key("log.flush.policy", FlushPolicy, FlushPolicy.REPLICATED, "replicated (no fsync before ack) or always (group-commit fsync before ack).", _enum_check(FlushPolicy)),
    _key("log.retention.check.interval.ms", int, 5 * 60 * 1000, "How often retention runs.", _at_least(1)),
    _key("log.flush.offset.checkpoint.interval.ms", int, 60 * 1000, "How often the recovery point is checkpointed.", _at_least(1)),
    _key("producer.id.expiration.ms", int, DAY_MS, "A partition forgets an idempotent producer that wrote nothing to it for this long (by the batches' timestamps); its next batch must then start at sequence 0 (else UNKNOWN_PRODUCER_ID, and the producer bumps its epoch).", _at_least(1)),
    _key("producer.id.expiration.check.interval.ms", int, 10 * 60 * 1000, "How often partitions drop expired producer ids.", _at_least(1)),
    _key("socket.request.max.bytes", int, 100 * MIB, "Largest frame accepted from an authenticated client.", _at_least(1024)),
    _key("socket.request.max.bytes.preauth", int, 512 * 1024, "Largest frame before authentication.", _at_least(1024)),
    _key("connections.max.idle.ms", int, 10 * 60 * 1000, "Close a connection idle this long.", _at_least(1)),
    _key("request.read.timeout.ms", int, 30 * 1000, "Close a connection that takes longer than this to send one frame.", _at_least(1)),
    _key("max.connections", int, 10_000, "Refuse connections beyond this many.", _at_least(1)),
    _key("queued.max.requests", int, 500, "Pipelined requests read ahead per connection before reading pauses.", _at_least(1)),
    _key("fetch.max.bytes", int, 55 * MIB, "Largest fetch response.", _at_least(1024)),
    _key("message.max.bytes", int, 1024 * 1024 + 12, "Default max.message.bytes for new topics.", _at_least(64)),
    _key("log.segment.bytes", int, 1024 * MIB, "Default segment.bytes for new topics.", _at_least(1024)),
    _key("log.retention.ms", int, 7 * DAY_MS, "Default retention.ms for new topics.", _at_least(-1)),
    _key("log.retention.bytes", int, -1, "Default retention.bytes for new topics.", _at_least(-1)),
    _key("replica.lag.time.max.ms", int, 30_000, "A follower that has not caught up to the leader's log end for this long leaves the ISR.", _at_least(1)),
    _key("replica.fetch.backoff.ms", int, 1000, "A follower waits this long after a failed fetch before retrying.", _at_least(0)),
    _key("replica.fetch.max.bytes", int, MIB, "Bytes a follower asks for per partition (at least one batch is returned).", _at_least(1)),
    _key("replica.fetch.wait.max.ms", int, 500, "Longest a follower's fetch waits on the leader for data; must be below replica.lag.time.max.ms.", _at_least(0)),
    _key("replica.fetch.min.bytes", int, 1, "The leader answers a follower's fetch once this many bytes are available.", _at_least(0)),
    _key("broker.heartbeat.interval.ms", int, 500, "How often a broker heartbeats to the active controller (Kafka: 2000; shorter here so a dead leader is replaced within about 2 s).", _at_least(1)),
    _key("broker.session.timeout.ms", int, 2000, "The controller fences a broker silent for this long (Kafka: 9000); must exceed the heartbeat interval.", _at_least(1)),
    _key("auto.leader.rebalance.enable", bool, True, "The controller moves leadership back to each partition's preferred replica (the first in its list) once it is in sync again.", None),
    _key("leader.imbalance.check.interval.seconds", int, 300, "How often the controller looks for partitions not led by their preferred replica.", _at_least(1)),
    _key("leader.imbalance.per.broker.percentage", int, 10, "A broker's leaderships are moved back only when more than this share of the partitions it prefers are led elsewhere.", ((lambda v: 0 <= v <= 100), "between 0 and 100")),
    _key("group.min.session.timeout.ms", int, 6000, "Shortest session.timeout.ms a consumer may ask for.", _at_least(1)),
    _key("group.max.session.timeout.ms", int, 1_800_000, "Longest session.timeout.ms a consumer may ask for.", _at_least(1)),
    _key("group.initial.rebalance.delay.ms", int, 3000, "An empty group waits this long (extended by each join, up to the rebalance timeout) before its first rebalance completes, so members starting together land in one generation.", _at_least(0)),
    _key("group.max.size", int, 2**31 - 1, "Members a consumer group may hold.", _at_least(1)),
    _key("offsets.topic.num.partitions", int, 50, "Partitions of __consumer_offsets (fixed once the topic exists).", _at_least(1)),
    _key("offsets.topic.replication.factor", int, 3, "Replicas of __consumer_offsets; capped at the number of registered brokers when it is created.", _at_least(1)),
    _key("offsets.topic.segment.bytes", int, 100 * MIB, "segment.bytes of __consumer_offsets (small, so the cleaner can compact it).", _at_least(1024)),
    _key("offsets.retention.minutes", int, 7 * 24 * 60, "Committed offsets of a group that has been empty this long are deleted.", _at_least(1)),
    _key("offsets.retention.check.interval.ms", int, 600_000, "How often the coordinator looks for expired offsets.", _at_least(1)),
    _key("offset.metadata.max.bytes", int, 4096, "Longest metadata string an offset commit may carry.", _at_least(0)),
    _key("offsets.commit.timeout.ms", int, 5000, "An offset commit waits this long for the offsets topic's replicas.", _at_least(1)),
    _key("share.record.lock.duration.ms", int, 30_000, "A share group member holds an acquired record this long; unacknowledged, it is released for redelivery.", _at_least(1)),
    _key("share.delivery.attempt.limit", int, 5, "Deliveries of a record to a share group before it is archived and sent to the dead-letter topic.", _at_least(1)),
    _key("share.partition.max.record.locks", int, 2000, "In-flight (not yet acknowledged) records a share-partition holds at most.", _at_least(1)),
    _key("share.session.timeout.ms", int, 45_000, "A share group member silent this long is removed and its locks released (Kafka: group.share.session.timeout.ms).", _at_least(1)),
    _key("share.heartbeat.interval.ms", int, 5000, "How often share group members heartbeat (Kafka: group.share.heartbeat.interval.ms).", _at_least(1)),
    _key("share.auto.offset.reset", str, "latest", "Where a new share group's partitions start, unless its first member asks otherwise.", ((lambda v: v in ("earliest", "latest")), "earliest or latest")),
    _key("share.coordinator.state.topic.num.partitions", int, 50, "Partitions of __share_group_state (fixed once the topic exists).", _at_least(1)),
    _key("share.coordinator.state.topic.replication.factor", int, 3, "Replicas of __share_group_state; capped at the number of registered brokers when it is created.", _at_least(1)),
    _key("transaction.state.log.num.partitions", int, 50, "Partitions of __transaction_state (created on the first FindCoordinator for a transactional id); a transactional id lives in abs(hash(id)) % n.", _at_least(1)),
    _key("transaction.state.log.replication.factor", int, 3, "Replication factor of __transaction_state (capped at the registered brokers).", _at_least(1)),
    _key("transaction.max.timeout.ms", int, 15 * 60 * 1000, "The largest transaction.timeout.ms a transactional producer may ask for (INVALID_TRANSACTION_TIMEOUT above it).", _at_least(1)),
    _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10_000, "How often the transaction coordinator aborts transactions open longer than their timeout.", _at_least(1)),
    _key("log.cleaner.enable", bool, True, "Run the log cleaner (compaction of cleanup.policy=compact topics).", None),
    _key("log.cleaner.backoff.ms", int, 15_000, "How long the cleaner sleeps when no log is cleanable.", _at_least(0)),
    _key("log.cleaner.io.max.bytes.per.poll", int, MIB, "Bytes the cleaner reads per step, so one step never holds up produce for long.", _at_least(1024)),
    _key("controller.quorum.voters", _quorum_voters, "", "The metadata quorum's voters (empty: single node).", (_voters_ok, "id@host:port, comma-separated")),
    _key("controller.quorum.election.timeout.ms", int, 1000, "Base Raft election timeout; each node randomizes within [t, 2t).", _at_least(1)),
    _key("controller.quorum.fetch.timeout.ms", int, 2000, "A follower that hears nothing from the leader this long starts an election; a leader without fetches from a majority this long resigns.", _at_least(1)),
)
BROKER_KEYS_BY_NAME = {k.name: k for k in BROKER_KEYS}


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int = 1
    region_name: str = ""
    log_dirs: str = ".mq/broker-1"
    listeners: str = "127.0.0.1:9092"
    advertised_listeners: str = ""
    metrics_listener: str = ""
    num_partitions: int = 1
    default_replication_factor: int = 1
    log_flush_policy: FlushPolicy = FlushPolicy.REPLICATED
    log_retention_check_interval_ms: int = 5 * 60 * 1000
    log_flush_offset_checkpoint_interval_ms: int = 60 * 1000
    producer_id_expiration_ms: int = DAY_MS
    producer_id_expiration_check_interval_ms: int = 10 * 60 * 1000
    socket_request_max_bytes: int = 100 * MIB
    socket_request_max_bytes_preauth: int = 512 * 1024
    connections_max_idle_ms: int = 10 * 60 * 1000
    request_read_timeout_ms: int = 30 * 1000
    max_connections: int = 10_000
    queued_max_requests: int = 500
    fetch_max_bytes: int = 55 * MIB
    message_max_bytes: int = 1024 * 1024 + 12
    log_segment_bytes: int = 1024 * MIB
    log_retention_ms: int = 7 * DAY_MS
    log_retention_bytes: int = -1
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_backoff_ms: int = 1000
    replica_fetch_max_bytes: int = MIB
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    broker_heartbeat_interval_ms: int = 500
    broker_session_timeout_ms: int = 2000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * MIB
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    offsets_commit_timeout_ms: int = 5000
    share_record_lock_duration_ms: int = 30_000
    share_delivery_attempt_limit: int = 5
    share_partition_max_record_locks: int = 2000
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5000
    share_auto_offset_reset: str = "latest"
    share_coordinator_state_topic_num_partitions: int = 50
    share_coordinator_state_topic_replication_factor: int = 3
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_max_timeout_ms: int = 15 * 60 * 1000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_io_max_bytes_per_poll: int = MIB
    controller_quorum_voters: str = ""
    controller_quorum_election_timeout_ms: int = 1000
    controller_quorum_fetch_timeout_ms: int = 2000

    def __post_init__(self) -> None:
        """Settings that only make sense together (Kafka refuses the same at start-up)."""
        if self.replica_fetch_wait_max_ms >= self.replica_lag_time_max_ms:
            raise MqError(ErrorCode.INVALID_CONFIG, "replica.fetch.wait.max.ms must be below "
                          "replica.lag.time.max.ms, or every follower would drop out of the ISR")
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise MqError(ErrorCode.INVALID_CONFIG, "broker.heartbeat.interval.ms must be below "
                          "broker.session.timeout.ms, or live brokers would be fenced")

    @property
    def quorum_voters(self) -> tuple[tuple[int, str, int], ...]:
        """``controller.quorum.voters`` as ``(node_id, host, port)``, in the given order."""
        return parse_quorum_voters(self.controller_quorum_voters)

    @classmethod
    def from_kafka(cls, values: Mapping[str, Any], base: "BrokerConfig | None" = None) -> "BrokerConfig":
        return replace(base or cls(), **_parse_changes(BROKER_KEYS_BY_NAME, values, "broker"))

    def topic_defaults(self) -> TopicConfig:
        """The topic config a new topic starts from, before its own overrides."""
        return TopicConfig(
            segment_bytes=self.log_segment_bytes,
            retention_ms=self.log_retention_ms,
            retention_bytes=self.log_retention_bytes,
            max_message_bytes=self.message_max_bytes,
        )


assert {k.field for k in BROKER_KEYS} == {f.name for f in fields(BrokerConfig)}
