"""Group offset sync between two real regions: never past the mirrored end, never while
the group has active members in the target (KIP-545)."""

from __future__ import annotations

import time

from mq.client import blocking
from mq.core.types import TopicPartition
from mq.deploy.shaping import LinkSettings
from tests.integration.mirror.harness import (
    Link,
    MirrorProcess,
    high_watermarks,
    mirror_args,
    produce,
    wait_for,
)


def committed(bootstrap: str, group: str) -> dict[TopicPartition, int]:
    with blocking.Admin(bootstrap) as admin:
        return {tp: om.offset for tp, om in admin.list_group_offsets(group).items()}


def test_group_offsets_follow_the_source_clamped_to_the_mirrored_end_and_not_while_active(
        regions, mirrors) -> None:
    tps = [TopicPartition("orders", p) for p in range(2)]
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 2, 1)
    produce(regions.east.bootstrap, "orders", 20_000, batch=200)
    east_ends = high_watermarks(regions.east.bootstrap, tps)
    goal = {tp: end - 10 for tp, end in east_ends.items()}
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.alter_group_offsets("billing", goal)

    slow = Link((regions.east.host, regions.east.port), LinkSettings(bandwidth_mbit=4))  # ~5 s to copy
    try:
        state_dir = regions.tmp / "mirror-east->west"
        mirror = MirrorProcess(mirror_args("east->west", regions.east.bootstrap, regions.west.bootstrap,
                                           state_dir, address_map=slow.address_map, interval_ms=200,
                                           extra=("--groups", "billing")), state_dir)
        mirrors.append(mirror)
        mirror.start()
        clamped_seen = 0
        while True:  # poll through the catch-up: every synced offset is at most the mirrored end
            synced = committed(regions.west.bootstrap, "billing")
            ends = high_watermarks(regions.west.bootstrap, tps) if synced else {}
            for tp, offset in synced.items():
                assert offset <= ends[tp], f"{tp}: synced offset {offset} past the mirrored end {ends[tp]}"
                clamped_seen += offset < goal[tp]
            if synced == goal:
                break
            time.sleep(0.1)  # polling the catch-up (it ends at the break above)
            assert mirror.running
        assert clamped_seen > 0, "the sync never ran while west was behind: the clamp was not exercised"
        assert high_watermarks(regions.west.bootstrap, tps) == east_ends

        with blocking.Consumer(regions.west.bootstrap, group_id="billing", enable_auto_commit=False) as member:
            member.subscribe(["orders"])
            wait_for(lambda: member.poll(200) is not None and member.assignment(), 20, "an active member in west")
            with blocking.Admin(regions.east.bootstrap) as admin:
                admin.alter_group_offsets("billing", {tp: 100 for tp in tps})
            wait_for(lambda: "KIP-545" in ((mirror.status() or {}).get("groups", {})
                                           .get("billing", {}).get("skipped", "")),
                     10, "the sync to skip the active group")
            assert committed(regions.west.bootstrap, "billing") == goal
        wait_for(lambda: committed(regions.west.bootstrap, "billing") == {tp: 100 for tp in tps},
                 20, "the sync after the member left")
    finally:
        slow.close()
