"""A source topic grown while the mirror runs (issue 10: a mirror topic follows later
changes of its source, partition count included): the flow grows the target mirror topic
with CreatePartitions and mirrors the new partitions, byte-identical at the same offsets."""

from __future__ import annotations

from mq.client import blocking
from mq.core.types import TopicPartition
from tests.integration.mirror.harness import produce, wait_for
from tests.integration.mirror.test_mirror_copy import assert_identical, caught_up, start_mirror


def test_growing_the_source_grows_the_mirror_topic_and_mirrors_the_new_partitions(regions, mirrors) -> None:
    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_topic("orders", 2, 1)
    produce(regions.east.bootstrap, "orders", 400)
    mirror = start_mirror(regions, mirrors)
    two = [TopicPartition("orders", p) for p in range(2)]
    wait_for(lambda: caught_up(regions, two), 30, "west to hold both partitions")

    with blocking.Admin(regions.east.bootstrap) as admin:
        admin.create_partitions("orders", 4)
    four = [TopicPartition("orders", p) for p in range(4)]
    for p in range(4):
        produce(regions.east.bootstrap, "orders", 150, prefix=f"p{p}", partition=p)

    def west_partitions() -> int:
        with blocking.Admin(regions.west.bootstrap) as admin:
            return len(admin.describe_topics(["orders"])[0].partitions)

    wait_for(lambda: west_partitions() == 4, 15, "the mirror topic in west grown to 4 partitions")
    wait_for(lambda: caught_up(regions, four), 30, "west to hold every record of the 4 partitions")
    assert assert_identical(regions, four) >= 4
    doc = wait_for(lambda: (s := mirror.status()) and len([p for p in s["partitions"] if p["topic"] == "orders"]) == 4
                   and s, 10, "the status listing 4 partitions of orders")
    assert "orders" not in doc.get("problems", {})
    assert "event=grow_mirror_topic" in mirror.log_text() and "partitions=4" in mirror.log_text()
