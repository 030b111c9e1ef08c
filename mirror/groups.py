"""Group offset sync, the I/O half: read the source's committed offsets and the target's
group state, decide with ``mirror.group_sync.plan_group_sync``, commit in the target.
Used every sync interval by the running flow and once more by fail-over."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from mirror.flow_config import FlowConfig
from mirror.group_sync import GroupSync, plan_group_sync
from mirror.topics import matching_groups
from mq.client import Admin
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

log = logging.getLogger("mirror")


async def flow_groups(source: Admin, flow: FlowConfig, extra: Iterable[str] = ()) -> list[str]:
    """The flow's groups in ``source`` (its include/exclude patterns) and ``extra`` ones."""
    listed = [g.group_id for g in await source.list_groups()]
    return sorted(set(matching_groups(listed, flow.groups, flow.groups_exclude)) | set(extra))


async def sync_group(source: Admin, target: Admin, group: str,
                     mirrored_ends: Mapping[TopicPartition, int]) -> GroupSync:
    source_offsets = {tp: om.offset for tp, om in (await source.list_group_offsets(group)).items()}
    state, members = "", 0
    try:
        desc = await target.describe_group(group)
        state, members = desc.state, len(desc.members)
    except MqError as exc:
        if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise
    target_offsets = {tp: om.offset for tp, om in (await target.list_group_offsets(group)).items()}
    plan = plan_group_sync(group, source_offsets, target_offsets, mirrored_ends,
                           target_state=state, target_members=members)
    if plan.offsets:
        try:
            await target.alter_group_offsets(group, dict(plan.offsets))
        except MqError as exc:
            if exc.code not in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.NON_EMPTY_GROUP,
                                ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                raise
            # A member joined between the check and the commit: the next sync decides again.
            return GroupSync(group, skipped=f"group {group} became active in the target: {exc.message}")
        log.info("event=group_offsets_synced group=%s partitions=%d clamped=%d", group,
                 len(plan.offsets), len(plan.clamped))
    return plan


async def sync_groups(source: Admin, target: Admin, groups: Iterable[str],
                      mirrored_ends: Mapping[TopicPartition, int]) -> dict[str, GroupSync]:
    return {g: await sync_group(source, target, g, mirrored_ends) for g in groups}
