"""ApiVersions, Metadata, and the admin APIs (topics and configs).

Topic changes (CreateTopics, CreatePartitions, DeleteTopics, AlterConfigs) go to the control plane
(``mq.broker.control``): the active controller commits them to the metadata log, and
logs appear or disappear when the broker publishes the committed image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mq.coordinator import OFFSETS_TOPIC
from mq.coordinator.share_records import SHARE_STATE_TOPIC
from mq.coordinator.txn_state import TRANSACTION_STATE_TOPIC
from mq.core.config import BROKER_KEYS, TOPIC_KEYS_BY_NAME, BrokerConfig, TopicConfig
from mq.core.errors import ErrorCode
from mq.protocol.codec import SUPPORTED_VERSIONS
from mq.protocol.messages import (
    ApiVersionRange,
    ApiVersionsResponse,
    BrokerInfo,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode

BROKER_SOFTWARE = "mq/0.1.0"
CONFLICT_PREFIX = "conflict."  # topic configs Metadata carries to clients
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC})
"""Topics the brokers own (Metadata flags them ``is_internal``; consumer groups'
patterns never match them)."""


def handle_api_versions() -> ApiVersionsResponse:
    keys = [ApiVersionRange(int(k), lo, hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())]
    return ApiVersionsResponse(ErrorCode.NONE, keys, BROKER_SOFTWARE)


def handle_metadata(node: BrokerNode, request: MetadataRequest) -> MetadataResponse:
    """From the published metadata image: each partition's leader (LEADER_NOT_AVAILABLE
    while none is elected), leader epoch, replicas and ISR; the registered brokers
    (fenced ones flagged); the active controller. ``topics=None``: every topic.
    Topics are never created by a Metadata request (Kafka's
    auto.create.topics.enable is not offered): unknown names get UNKNOWN_TOPIC.
    ``__consumer_offsets`` is flagged ``is_internal``. Each topic carries its ``conflict.*``
    configs and the response this broker's region, for producers and table views."""
    image = node.image
    names = list(image.topics) if request.topics is None else request.topics
    topics = []
    for name in names:
        topic = image.topic(name)
        if topic is None:
            topics.append(TopicMetadata(name, ErrorCode.UNKNOWN_TOPIC, []))
            continue
        partitions = [
            PartitionMetadata(
                p, ErrorCode.NONE if pi.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                pi.leader, pi.leader_epoch, list(pi.replicas), list(pi.isr),
            )
            for p, pi in topic.partitions.items()
        ]
        conflict = {k: v for k, v in topic.configs.items() if k.startswith(CONFLICT_PREFIX)}
        topics.append(TopicMetadata(name, ErrorCode.NONE, partitions, name in INTERNAL_TOPICS, topic.topic_id,
                                    conflict))
    return MetadataResponse(broker_infos(node), node.controller_id, topics, node.cluster_id,
                            node.controller_epoch, node.config.region_name)


def broker_infos(node: BrokerNode) -> list[BrokerInfo]:
    brokers = getattr(node.image, "brokers", None) or {}
    infos = [
        BrokerInfo(b.broker_id, b.host, b.port, b.rack, b.fenced)
        for _, b in sorted(brokers.items())
    ]
    if not any(info.node_id == node.node_id for info in infos):
        # Not registered yet (or a standalone node): still name ourselves.
        infos.append(BrokerInfo(node.node_id, node.advertised_host, node.advertised_port))
        infos.sort(key=lambda info: info.node_id)
    return infos


def handle_describe_configs(node: BrokerNode, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    return DescribeConfigsResponse([_describe(node, r) for r in request.resources])


def _describe(node: BrokerNode, resource: ConfigResource) -> DescribeConfigsResult:
    kind, name = resource.resource_type, resource.resource_name
    wanted = None if resource.config_names is None else set(resource.config_names)
    if kind == ConfigResourceType.TOPIC:
        topic = node.image.topic(name)
        if topic is None:
            return DescribeConfigsResult(kind, name, ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        values = node.topic_config(name).to_kafka()
        entries = [
            ConfigEntry(key, value, key not in topic.configs, False, TOPIC_KEYS_BY_NAME[key].doc)
            for key, value in values.items() if wanted is None or key in wanted
        ]
        return DescribeConfigsResult(kind, name, ErrorCode.NONE, "", entries)
    if kind == ConfigResourceType.BROKER:
        if name not in ("", str(node.config.node_id)):
            return DescribeConfigsResult(kind, name, ErrorCode.INVALID_REQUEST,
                                         f"this is broker {node.config.node_id}, not {name!r}")
        entries = [e for e in broker_config_entries(node.config) if wanted is None or e.name in wanted]
        return DescribeConfigsResult(kind, name, ErrorCode.NONE, "", entries)
    return DescribeConfigsResult(kind, name, ErrorCode.INVALID_REQUEST, f"unknown resource type {kind}")


def broker_config_entries(config: BrokerConfig) -> list[ConfigEntry]:
    """Broker settings as read-only entries (they are fixed at start-up)."""
    default = BrokerConfig()
    out = []
    for key in BROKER_KEYS:
        value = getattr(config, key.field)
        text = value.value if hasattr(value, "value") else str(value)
        out.append(ConfigEntry(key.name, str(text), value == getattr(default, key.field), True, key.doc))
    return out


def topic_config(broker: BrokerConfig, overrides: dict[str, str] | None) -> TopicConfig:
    return TopicConfig.from_kafka(overrides or {}, base=broker.topic_defaults())
