"""The per-partition gauges of /metrics and mq.lab's region handles, against real brokers.

One broker first (every gauge on a partition it leads alone), then a region of three:
follower and leader gauges, a paused follower leaving the ISR (under-replicated, lag),
a killed leader replaced with a new leader epoch, power loss on a follower.
"""

from __future__ import annotations

import pytest

from mq.lab import Cluster, scrape, wait_until
from mq.lab.observe import gauge

TOPIC = "lab"
FAST = {"replica.lag.time.max.ms": 1000, "replica.fetch.wait.max.ms": 200, "replica.fetch.backoff.ms": 200}


def _gauges(url: str, name_labels: dict[str, dict]) -> dict[str, float | None]:
    samples = scrape(url, timeout_s=2.0)
    return {name: gauge(samples, name, **labels) for name, labels in name_labels.items()}


def _partition(url: str, topic: str = TOPIC, partition: int = 0) -> dict[str, float | None]:
    labels = {"topic": topic, "partition": partition}
    names = ("mq_log_end_offset", "mq_high_watermark", "mq_log_start_offset", "mq_partition_is_leader",
             "mq_partition_leader_epoch", "mq_partition_replicas", "mq_partition_isr_size",
             "mq_partition_under_replicated", "mq_partition_under_min_isr")
    return _gauges(url, {name: labels for name in names})


def test_one_broker_reports_every_partition_gauge() -> None:
    with Cluster.start() as cluster:
        cluster.admin().create_topic(TOPIC, partitions=2)
        cluster.producer().send_many(TOPIC, [(None, b"x")] * 5, partition=0)
        values = _partition(cluster.broker().metrics_url)
        assert values == {
            "mq_log_end_offset": 5, "mq_high_watermark": 5, "mq_log_start_offset": 0,
            "mq_partition_is_leader": 1, "mq_partition_leader_epoch": 0, "mq_partition_replicas": 1,
            "mq_partition_isr_size": 1, "mq_partition_under_replicated": 0, "mq_partition_under_min_isr": 0,
        }
        assert _partition(cluster.broker().metrics_url, partition=1)["mq_log_end_offset"] == 0
        assert "mq_replica_lag_offsets" not in scrape(cluster.broker().metrics_url)  # no followers


@pytest.fixture(scope="module")
def region():
    cluster = Cluster.region(brokers=3, power_loss=True, config=FAST)
    try:
        yield cluster
    finally:
        cluster.close()


def _state(cluster: Cluster) -> dict[int, dict]:
    return {row["broker"]: row for row in cluster.partition_state(TOPIC, 0)}


def test_region_gauges_partition_state_and_a_lagging_follower(region: Cluster) -> None:
    region.admin().create_topic(TOPIC, partitions=1, replication_factor=3,
                                configs={"min.insync.replicas": "2"})
    assert sorted(region.wait_for_isr(TOPIC, 0)) == [1, 2, 3]
    controller, epoch = region.controller()
    assert controller in (1, 2, 3) and epoch >= 1
    producer = region.producer(acks="all", linger_ms=1)
    producer.send_many(TOPIC, [(None, b"a")] * 200, partition=0)
    leader = region.leader_of(TOPIC, 0)
    # followers learn the high watermark from their next fetch response
    def all_at_200() -> dict[int, dict] | None:
        state = _state(region)
        return state if all(r["high_watermark"] == 200 for r in state.values()) else None

    rows = wait_until(all_at_200, timeout_s=10, what="every replica at high watermark 200")
    assert {b: (r["log_end_offset"], r["in_isr"], r["is_leader"], r["lag"], r["state"]) for b, r in rows.items()} == \
        {b: (200, True, b == leader, 0, "up") for b in (1, 2, 3)}

    lead = _partition(region.broker(leader).metrics_url)
    assert (lead["mq_partition_is_leader"], lead["mq_partition_replicas"], lead["mq_partition_isr_size"],
            lead["mq_partition_under_replicated"]) == (1, 3, 3, 0)
    followers = [n for n in region.node_ids if n != leader]
    for n in followers:
        values = _partition(region.broker(n).metrics_url)
        assert (values["mq_partition_is_leader"], values["mq_partition_isr_size"],
                values["mq_partition_under_replicated"], values["mq_log_end_offset"]) == (0, 3, 0, 200)
        labels = {"topic": TOPIC, "partition": 0, "replica": n}
        lag = _gauges(region.broker(leader).metrics_url, {"mq_replica_lag_offsets": labels,
                                                          "mq_replica_last_caught_up_age_ms": labels})
        assert lag["mq_replica_lag_offsets"] == 0 and lag["mq_replica_last_caught_up_age_ms"] >= 0

    # a paused follower falls behind and leaves the ISR after replica.lag.time.max.ms
    victim = next((n for n in followers if n != controller), followers[0])
    writer = region.producer(acks=1)  # made before the pause: a paused bootstrap server stalls a new client
    writer.send_many(TOPIC, [(None, b"b")], partition=0)
    region.broker(victim).pause()
    try:
        writer.send_many(TOPIC, [(None, b"b")] * 99, partition=0)
        assert victim not in region.wait_for_isr(TOPIC, 0, size=2, timeout_s=15)
        rows = _state(region)
        assert rows[victim]["state"] == "paused" and rows[victim]["log_end_offset"] is None
        assert rows[victim]["lag"] >= 99 and not rows[victim]["in_isr"]
        lead = _partition(region.broker(leader).metrics_url)
        assert (lead["mq_partition_isr_size"], lead["mq_partition_under_replicated"],
                lead["mq_partition_under_min_isr"]) == (2, 1, 0)
    finally:
        region.broker(victim).resume()
    region.wait_for_isr(TOPIC, 0, timeout_s=20)
    assert _state(region)[victim]["log_end_offset"] >= 300  # back in the ISR: it has all of it


def test_region_kill_the_leader_then_power_loss_on_a_follower(region: Cluster) -> None:
    topic = "failover"
    region.admin().create_topic(topic, partitions=1, replication_factor=3)
    region.wait_for_isr(topic, 0)
    old = region.leader_of(topic, 0)
    region.broker(old).kill()
    assert region.broker(old).state == "down"
    new = region.wait_for_leader(topic, 0, not_in=[old], timeout_s=20)
    view = region.partition_view(topic, 0)
    assert view.leader == new and view.leader_epoch >= 1 and old not in view.isr
    rows = {r["broker"]: r for r in region.partition_state(topic, 0)}
    assert rows[old]["state"] == "down" and rows[new]["is_leader"]
    wait_until(lambda: _partition(region.broker(new).metrics_url, topic)["mq_partition_leader_epoch"] >= 1,
               timeout_s=10, what="the new leader's epoch on its /metrics")
    region.broker(old).restart()
    region.wait_for_isr(topic, 0, timeout_s=30)

    producer = region.producer(acks="all")
    producer.send_many(topic, [(None, b"c")] * 50, partition=0)
    follower = next(n for n in region.node_ids if n != region.leader_of(topic, 0))
    cut = region.broker(follower).power_loss()
    assert cut and not region.broker(follower).running
    region.broker(follower).restart()
    region.wait_for_isr(topic, 0, timeout_s=30)
    wait_until(lambda: _state_of(region, topic)[follower]["log_end_offset"] == 50, timeout_s=15,
               what="the follower to fetch back what it lost")


def _state_of(cluster: Cluster, topic: str) -> dict[int, dict]:
    return {row["broker"]: row for row in cluster.partition_state(topic, 0)}


def test_power_loss_needs_a_journal() -> None:
    with Cluster.start() as cluster, pytest.raises(RuntimeError, match="power_loss=True"):
        cluster.broker().power_loss()
