"""The simulator itself: ordering, filters, partitions, crashes, determinism, replay."""

from __future__ import annotations

import pytest

from mq.core.rng import Rng
from mq.sim import (
    Delay,
    Drop,
    Duplicate,
    EventScheduler,
    InvariantViolation,
    RaftCluster,
    Reorder,
    SimNetwork,
    SimulationFailure,
    replay_command,
    run_seeds,
    seeds,
)
from mq.sim.raft_scenarios import random_schedule


class Msg:
    def __init__(self, source_id: int, destination_id: int, n: int) -> None:
        self.source_id, self.destination_id, self.n = source_id, destination_id, n


def network(**kwargs: object) -> tuple[EventScheduler, SimNetwork, list[tuple[int, int]]]:
    scheduler = EventScheduler()
    got: list[tuple[int, int]] = []
    net = SimNetwork(scheduler, Rng(1), lambda m: got.append((scheduler.now_ms, m.n)), **kwargs)
    return scheduler, net, got


def test_events_at_the_same_time_run_in_scheduling_order_and_invariants_after_each() -> None:
    scheduler = EventScheduler()
    order: list[str] = []
    checks: list[int] = []
    scheduler.invariants.append(lambda: checks.append(len(order)))
    scheduler.schedule(5, lambda: order.append("b"))
    scheduler.schedule(5, lambda: order.append("c"))
    scheduler.schedule(1, lambda: order.append("a"))
    assert scheduler.run_until(lambda: len(order) == 2, until_ms=100)
    assert order == ["a", "b"] and checks == [1, 2] and scheduler.now_ms == 5
    scheduler.run_for(10)
    assert order == ["a", "b", "c"] and scheduler.now_ms == 15


def test_invariant_failure_stops_the_run() -> None:
    scheduler = EventScheduler()

    def broken() -> None:
        raise InvariantViolation("always")

    scheduler.invariants.append(broken)
    scheduler.schedule(1, lambda: None)
    with pytest.raises(InvariantViolation):
        scheduler.run_for(10)


def test_delay_drop_duplicate_and_per_link_filters() -> None:
    scheduler, net, got = network(base_delay_ms=2)
    net.add_filter(Delay(10, 10), source=1, destination=2)
    net.add_filter(Drop(1.0), source=3)
    net.add_filter(Duplicate(1.0, max_extra_ms=0), destination=4)
    for n, (src, dst) in enumerate([(1, 2), (2, 1), (3, 1), (1, 4)]):
        net.send(Msg(src, dst, n))
    scheduler.run_for(100)
    assert sorted(got) == [(2, 1), (2, 3), (2, 3), (12, 0)]
    assert net.stats.dropped == 1 and net.stats.delivered == 4


def test_reorder_lets_later_messages_overtake() -> None:
    scheduler, net, got = network()
    net.add_filter(Reorder(0.5, 100))
    for n in range(50):
        net.send(Msg(1, 2, n))
    scheduler.run_for(1000)
    order = [n for _, n in got]
    assert sorted(order) == list(range(50)) and order != list(range(50))


def test_partition_drops_at_send_and_in_flight_and_heal_restores() -> None:
    scheduler, net, got = network(base_delay_ms=10)
    net.send(Msg(1, 2, 0))
    net.partition((1,), (2, 3))
    net.send(Msg(1, 3, 1))
    net.send(Msg(2, 3, 2))  # inside one side
    scheduler.run_for(50)
    assert [n for _, n in got] == [2]
    net.heal()
    net.send(Msg(1, 2, 3))
    net.cut(2, 1)
    net.send(Msg(2, 1, 4))  # one-way cut
    scheduler.run_for(50)
    assert [n for _, n in got] == [2, 3]


def test_crash_keeps_persisted_state_and_loses_volatile_state() -> None:
    cluster = RaftCluster(3, voters=3)
    assert cluster.run_until(lambda: cluster.leader() is not None, within_ms=10_000)
    for i in range(5):
        cluster.propose(b"%d" % i)
    cluster.run_for(1000)
    leader = cluster.leader()
    assert leader is not None
    follower = next(v for v in cluster.voters if v != leader.node_id)
    node = cluster.nodes[follower]
    end, election, applied = node.log.end_offset, node.election_state, node.machine.next_offset  # type: ignore[union-attr]
    assert applied == end == 6
    cluster.crash(follower)
    assert node.raft is None and node.machine is None
    cluster.start(follower)
    assert node.raft is not None and node.machine is not None
    assert node.log.end_offset == end and node.election_state == election
    assert node.raft.high_watermark == 0 and node.machine.next_offset == 0  # rebuilt by replay
    assert cluster.run_until(lambda: node.machine.next_offset == end, within_ms=5000)  # type: ignore[union-attr]


def test_same_seed_same_run_different_seed_different_run() -> None:
    assert random_schedule(11, steps=10) == random_schedule(11, steps=10)
    assert random_schedule(11, steps=10) != random_schedule(12, steps=10)


def test_a_failing_seed_prints_the_command_that_replays_it(capsys: pytest.CaptureFixture[str]) -> None:
    def scenario(seed: int) -> int:
        if seed == 3:
            raise InvariantViolation("two leaders in epoch 7")
        return seed

    test_id = "tests/sim/test_x.py::test_y"
    with pytest.raises(SimulationFailure) as failure:
        run_seeds(scenario, range(10), test_id=test_id)
    command = "MQ_SEED=3 .venv/bin/pytest tests/sim/test_x.py::test_y"
    assert replay_command(3, test_id) == command
    assert command in str(failure.value) and "two leaders in epoch 7" in str(failure.value)
    assert command in capsys.readouterr().out


def test_seed_selection_from_the_environment() -> None:
    assert seeds(5, env={}) == [0, 1, 2, 3, 4]
    assert seeds(5, first=100, env={"MQ_SIM_ITERATIONS": "2"}) == [100, 101]
    assert seeds(5, env={"MQ_SEED": "42", "MQ_SIM_ITERATIONS": "9"}) == [42]


def test_node_invariants_catch_two_leaders_and_a_watermark_going_back() -> None:
    cluster = RaftCluster(5, voters=3)
    assert cluster.run_until(lambda: cluster.leader() is not None, within_ms=10_000)
    leader = cluster.leader()
    assert leader is not None
    single, monotonic = cluster.node_invariants
    other = next(n for n in cluster.nodes.values() if n.node_id != leader.node_id)
    single.leaders[leader.epoch] = other.node_id  # as if another node had led this epoch
    with pytest.raises(InvariantViolation, match="two leaders in epoch"):
        single.check(cluster.nodes[leader.node_id], cluster.now_ms)
    node = cluster.nodes[leader.node_id]
    node.high_watermark_seen = leader.high_watermark + 1
    with pytest.raises(InvariantViolation, match="went back"):
        monotonic.check(node, cluster.now_ms)


def test_committed_prefix_catches_an_applied_index_mismatch() -> None:
    from mq.sim import CommittedPrefix

    prefix = CommittedPrefix()
    prefix.check(1, 0, b"a")
    prefix.check(2, 0, b"a")
    with pytest.raises(InvariantViolation, match="applied-index mismatch at offset 0"):
        prefix.check(3, 0, b"b")
    assert prefix.checks == 3
