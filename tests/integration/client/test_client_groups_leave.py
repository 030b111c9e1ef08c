"""KIP-394 end to end: a consumer closed while its first JoinGroup is parked leaves.

The broker waits ``group.initial.rebalance.delay.ms`` (3 s) before a new group's first
generation. Consumer A joins and is closed while its JoinGroup waits: it learned its
member id from MEMBER_ID_REQUIRED, so it sends LeaveGroup and the coordinator forgets
it. Consumer B then gets every partition once the delay B's own join restarted ends,
not after A's session or rebalance timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mq.client import Admin
from mq.client.internals.group_membership import MemberState
from mq.core.types import TopicPartition
from tests.integration.client.test_client_groups import Member, create, until
from tests.integration.conftest import BrokerProcess, free_port

DELAY_S = 3.0
CONFIGS = {"group.initial.rebalance.delay.ms": str(int(DELAY_S * 1000)), "group.min.session.timeout.ms": "500",
           "offsets.topic.num.partitions": "1"}


@pytest.fixture(scope="module")
def delayed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("groups-delayed") / "broker", free_port(), configs=dict(CONFIGS))
    proc.start()
    yield proc
    proc.stop()


async def test_a_consumer_closed_while_its_join_is_parked_leaves_the_group(delayed_broker, topic_name):
    bootstrap = delayed_broker.bootstrap
    group = f"g-{topic_name}"
    await create(bootstrap, topic_name, 4)
    everything = {TopicPartition(topic_name, p) for p in range(4)}
    async with Admin(bootstrap) as admin:
        assert (await admin.describe_group(group)).members == []  # the offsets topic and coordinator exist

        # A long session: without a LeaveGroup, A would hold half the partitions for 60 s.
        a = await Member(bootstrap, group, [topic_name], session_timeout_ms=60_000).start()
        core = a.consumer._group.core  # type: ignore[union-attr]
        await until(lambda: core.member_id != "" and core.state == MemberState.REBALANCING, timeout_s=10,
                    what="A's JoinGroup parked with the member id of MEMBER_ID_REQUIRED")
        parked_at = time.monotonic()
        await a.stop()
        assert time.monotonic() - parked_at < DELAY_S / 2, "A closed while its join was parked"
        assert a.kinds("assign") == [] and a.records == []

        b_started = time.monotonic()
        b = await Member(bootstrap, group, [topic_name], session_timeout_ms=60_000).start()
        await until(lambda: b.assignment == everything, timeout_s=15, what="B owns every partition")
        took = time.monotonic() - b_started
        assert took < DELAY_S + 1.5, f"B waited {took:.1f} s: A's parked join held the rebalance"
        assert b.kinds("assign") == [sorted(everything)]  # one generation, B alone

        described = await admin.describe_group(group)
        b_id = b.consumer.group_metadata().member_id
        assert [m.member_id for m in described.members] == [b_id]
        assert described.state == "Stable" and described.members[0].assignment == sorted(everything)
        await b.stop()
