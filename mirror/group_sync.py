"""Group offset sync, decided without I/O (KIP-545's rules, for offset-preserving topics).

Every ``sync.group.offsets.interval.ms`` the mirror reads the committed offsets of the
flow's groups in the source and commits them in the target's ``__consumer_offsets``, so a
group that fails over resumes where it was. Mirror topics keep the source's offsets, so no
translation is needed (MirrorMaker 2 needs offset-syncs and checkpoints for that); two
rules remain:

* never past the mirrored end: a committed offset is clamped to the target partition's
  high watermark, so a consumer in the target never skips records the target does not
  have yet (it re-reads at most what was committed since the last sync);
* never while the group has active members in the target: overwriting a live group's
  offsets would corrupt it (MirrorMaker 2 syncs only EMPTY groups, apache/kafka#11748).

Only partitions the flow mirrors are synced; offsets already equal are not written again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mq.core.types import TopicPartition

INACTIVE_STATES = frozenset({"Empty", "Dead", ""})


@dataclass(frozen=True)
class GroupSync:
    group: str
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)  # to commit in the target
    clamped: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # (source, written)
    skipped: str = ""  # why nothing is written (active in the target)


def plan_group_sync(group: str, source_offsets: Mapping[TopicPartition, int],
                    target_offsets: Mapping[TopicPartition, int],
                    mirrored_ends: Mapping[TopicPartition, int], *, target_state: str = "",
                    target_members: int = 0) -> GroupSync:
    """What to commit for ``group`` in the target (``target_state`` and ``target_members``
    describe the group there; "" and 0 when it does not exist)."""
    if target_members > 0 or target_state not in INACTIVE_STATES:
        return GroupSync(group, skipped=(
            f"group {group} is {target_state or 'active'} with {target_members} member(s) in the "
            f"target: its offsets are not synced while it is active there (KIP-545)"))
    offsets: dict[TopicPartition, int] = {}
    clamped: dict[TopicPartition, tuple[int, int]] = {}
    for tp in sorted(source_offsets):
        end = mirrored_ends.get(tp)
        if end is None:
            continue  # not mirrored by this flow (or its end is not known yet)
        committed = source_offsets[tp]
        offset = min(committed, end)
        if offset != committed:
            clamped[tp] = (committed, offset)
        if target_offsets.get(tp) != offset:
            offsets[tp] = offset
    return GroupSync(group, offsets, clamped)
