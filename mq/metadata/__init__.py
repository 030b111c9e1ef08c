"""Cluster metadata: records, the image they build, the controller and its log."""

from mq.metadata.controller import ControllerResult, QuorumController, validate_topic_name
from mq.metadata.image import MetadataImage, PartitionImage, TopicImage
from mq.metadata.log import MetadataLog
from mq.metadata.records import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord

__all__ = [
    "ConfigRecord", "ControllerResult", "MetadataImage", "MetadataLog", "PartitionImage",
    "PartitionRecord", "QuorumController", "RemoveTopicRecord", "TopicImage", "TopicRecord",
    "validate_topic_name",
]
