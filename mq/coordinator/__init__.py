"""The group coordinator: consumer groups and their committed offsets, sans-IO."""

from mq.coordinator.config import GroupConfig
from mq.coordinator.coordinator import GroupCoordinator
from mq.coordinator.group import GroupState
from mq.coordinator.records import OFFSETS_TOPIC, CoordinatorRecord, group_partition
from mq.coordinator.result import CoordinatorResult

__all__ = [
    "OFFSETS_TOPIC", "CoordinatorRecord", "CoordinatorResult", "GroupConfig", "GroupCoordinator", "GroupState",
    "group_partition",
]
