"""Cluster metadata: records, the image they build, the controller and its log."""

from mq.metadata.controller import ControllerResult, QuorumController, validate_topic_name
from mq.metadata.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from mq.metadata.records import (
    NO_LEADER,
    ConfigRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    decode_records,
    encode_records,
)

__all__ = [
    "NO_LEADER", "BrokerImage", "ConfigRecord", "ControllerResult", "FenceBrokerRecord", "MetadataImage",
    "PartitionChangeRecord", "PartitionImage", "PartitionRecord", "QuorumController",
    "RegisterBrokerRecord", "RemoveTopicRecord", "TopicImage", "TopicRecord", "UnfenceBrokerRecord",
    "decode_records", "encode_records", "validate_topic_name",
]
