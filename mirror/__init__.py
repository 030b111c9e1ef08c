"""The geo-replication service, a pure client of mq (MirrorMaker 2's shape, Cluster Linking's
mirror topics): ``python -m mirror run|status|failover|failback``.

Sans-IO cores: ``mirror.partition`` (one partition's copy state machine), ``mirror.fetch_plan``
(which partitions to fetch in which requests, within the flow's byte budget), ``mirror.topics``
(which topics, what to create or alter), ``mirror.group_sync`` (which offsets to commit).
The asyncio shell: ``mirror.runner`` (one flow) around ``mirror.copier``, ``mirror.discovery``,
``mirror.groups`` and ``mirror.heartbeats``; commands in ``mirror.failover`` and
``mirror.failback``. docs/explanation/geo-replication.md tells the story.
"""

from mirror.group_sync import GroupSync, plan_group_sync
from mirror.partition import PartitionMirror, PartitionState, PartitionStatus
from mirror.topics import TopicFilter, TopicInfo, TopicPlan, plan_topics

__all__ = ["GroupSync", "PartitionMirror", "PartitionState", "PartitionStatus", "TopicFilter", "TopicInfo",
           "TopicPlan", "plan_group_sync", "plan_topics"]
