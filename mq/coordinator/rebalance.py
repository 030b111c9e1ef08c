"""Computing a generation: which assignor, who gets what, and when to rebalance again.

Pure functions of a ``Group`` and the topic metadata (``topics``: name -> partition
count). The coordinator calls ``compute_assignment`` when a rebalance completes and
``needs_rebalance`` when topics change or a shard was just loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mq.coordinator.assignors import MemberSubscription, assign, cooperative_withhold
from mq.coordinator.group import Group, Member
from mq.core.types import TopicPartition


def select_assignor(members: Iterable[Member]) -> str | None:
    """The first assignor in the preference order of the first member (the group's
    leader, in join order) that every member lists; None when there is none."""
    ordered = list(members)
    if not ordered:
        return None
    common = set(ordered[0].assignors)
    for member in ordered[1:]:
        common &= set(member.assignors)
    return next((name for name in ordered[0].assignors if name in common), None)


def compute_assignment(group: Group, assignor: str, topics: Mapping[str, int]
                       ) -> tuple[dict[str, tuple[TopicPartition, ...]], bool]:
    """member_id -> its partitions in the next generation, and whether some partitions
    were withheld (cooperative: another member still owns them; a follow-up rebalance
    hands them over).

    Stickiness starts from the previous generation's assignment (the coordinator's own,
    authoritative and disjoint). The two-phase rule treats a partition as owned by a
    member if the previous generation gave it to that member *or* the member said in
    its JoinGroup that it still owns it (a member that missed a response may hold an
    older generation's partitions)."""
    members = list(group.members.values())
    subscriptions = [
        MemberSubscription(m.member_id, m.group_instance_id, m.resolved_topics(topics),
                           tuple(tp for tp in m.assignment if _exists(tp, topics)))
        for m in members
    ]
    target = assign(assignor, subscriptions, dict(topics))
    if not group_is_cooperative(assignor):
        return {m.member_id: tuple(target[m.member_id]) for m in members}, False
    owned = {m.member_id: sorted(set(m.assignment) | set(m.owned)) for m in members}
    granted = cooperative_withhold(target, owned)
    withheld = any(len(granted[mid]) != len(target[mid]) for mid in target)
    return {m.member_id: tuple(granted[m.member_id]) for m in members}, withheld


def group_is_cooperative(assignor: str) -> bool:
    return assignor == "cooperative-sticky"


def _exists(tp: TopicPartition, topics: Mapping[str, int]) -> bool:
    return 0 <= tp.partition < topics.get(tp.topic, 0)


def needs_rebalance(group: Group, topics: Mapping[str, int]) -> bool:
    """Whether a Stable group's assignment no longer matches its subscriptions: a
    member holds a partition it no longer subscribes to (or that no longer exists), or
    a subscribed partition is assigned to nobody (a new topic matched a pattern, a
    topic grew, or a cooperative hand-off was cut short by a fail-over)."""
    subscribed: set[str] = set()
    assigned: set[TopicPartition] = set()
    for member in group.members.values():
        resolved = member.resolved_topics(topics)
        for tp in member.assignment:
            if tp.topic not in resolved or not _exists(tp, topics):
                return True
        subscribed.update(resolved)
        assigned.update(member.assignment)
    wanted = sum(max(0, topics[t]) for t in subscribed)
    return wanted != len(assigned)
