"""Random interleavings of produces, fetches (split into send / serve / deliver, so
answers arrive after leader changes), clean elections, metadata propagation, ISR
shrinks and follower restarts among three replicas. After every step:

- a replica's high watermark never goes back (a restart reloads a checkpoint);
- every replica holds, below its own high watermark, exactly the committed records
  (the same offset, epoch and value everywhere): no divergence below the HW;
- the current leader, once it knows it leads, holds every committed record.

After healing, all three logs are identical and fully committed.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replication_harness import Cluster, InFlight

from mq.core.types import Acks

IDS = (1, 2, 3)
broker = st.sampled_from(IDS)
op = st.one_of(
    st.tuples(st.just("produce"), broker, st.integers(1, 3)),
    st.tuples(st.just("fetch"), broker, st.just(0)),
    st.tuples(st.just("send"), broker, st.just(0)),
    st.tuples(st.just("serve"), broker, st.just(0)),
    st.tuples(st.just("deliver"), broker, st.just(0)),
    st.tuples(st.just("elect"), broker, st.integers(0, 2)),
    st.tuples(st.just("fail"), broker, st.integers(0, 2)),
    st.tuples(st.just("learn"), broker, st.just(0)),
    st.tuples(st.just("tick"), broker, st.sampled_from([1_000, 6_000, 11_000])),
    st.tuples(st.just("restart"), broker, st.integers(0, 3)),
    st.tuples(st.just("alter"), broker, st.just(0)),
    # An election and the new leader's first writes before anyone fetches: the
    # back-to-back reigns of KIP-279.
    st.tuples(st.just("reign"), broker, st.integers(0, 2)),
)


class Checker:
    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.committed: dict[int, tuple[int, bytes | None]] = {}
        self.last_hw = {b: 0 for b in IDS}

    def forget_hw(self, broker_id: int) -> None:
        self.last_hw[broker_id] = self.c.brokers[broker_id].high_watermark

    def check(self, step: object) -> None:
        c = self.c
        for broker_id in IDS:
            b = c.brokers[broker_id]
            hw = b.high_watermark
            assert hw >= self.last_hw[broker_id], f"{step}: HW of {broker_id} went back"
            self.last_hw[broker_id] = hw
            assert hw <= b.log.log_end_offset, f"{step}: HW of {broker_id} above its log end"
            for offset, epoch, value in b.log.entries():
                if offset >= hw:
                    break
                seen = self.committed.setdefault(offset, (epoch, value))
                assert seen == (epoch, value), f"{step}: {broker_id} diverges at {offset} < HW {hw}"
        leader = c.leader_broker()
        if leader.leader is not None and leader.leader.leader_epoch == c.state.leader_epoch:
            held = {o: (e, v) for o, e, v in leader.log.entries()}
            for offset, entry in self.committed.items():
                assert held.get(offset) == entry, f"{step}: leader {leader.broker_id} lost offset {offset}"


def run(ops: list[tuple[str, int, int]], *, async_alter: bool = False) -> Cluster:
    c = Cluster(IDS)
    c.async_alter = async_alter
    checker = Checker(c)
    flights: dict[int, InFlight] = {}
    seq = 0
    for step in ops:
        kind, b, arg = step
        if kind == "produce":
            for _ in range(arg):
                seq += 1
                c.produce(b, f"v{seq}", acks=Acks.LEADER)
        elif kind == "fetch":
            c.fetch(b)
        elif kind == "send":
            flight = c.send_fetch(b)
            if flight is not None:
                flights[b] = flight
        elif kind == "serve" and b in flights and flights[b].response is None:
            c.serve(flights[b])
        elif kind == "deliver" and b in flights and flights[b].response is not None:
            c.deliver(flights.pop(b))
        elif kind == "elect":
            c.elect(c.state.isr[arg % len(c.state.isr)])
        elif kind == "fail":
            others = [r for r in c.state.isr if r != c.state.leader]
            if others:
                c.elect(others[arg % len(others)], remove_old=True)
        elif kind == "alter":
            c.process_alter()
        elif kind == "reign":
            new = c.state.isr[arg % len(c.state.isr)]
            c.elect(new)
            c.learn(new)
            for _ in range(b):
                seq += 1
                c.produce(new, f"v{seq}", acks=Acks.LEADER)
        elif kind == "learn":
            c.learn(b)
        elif kind == "tick":
            c.tick(arg)
        elif kind == "restart" and c.brokers[b].leader is None:
            flights.pop(b, None)
            stale = max(0, c.brokers[b].high_watermark - arg)
            c.restart(b, hw_checkpoint=stale)
            checker.forget_hw(b)
        checker.check(step)
    c.heal()
    checker.check("heal")
    leader = c.leader_broker()
    for broker_id in IDS:
        b = c.brokers[broker_id]
        assert b.log.entries() == leader.log.entries(), f"{broker_id} differs after healing"
        assert b.high_watermark == leader.log.log_end_offset
    return c


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=60), st.booleans())
def test_random_leader_changes_never_diverge_below_the_high_watermark(
    ops: list[tuple[str, int, int]], async_alter: bool
) -> None:
    run(ops, async_alter=async_alter)


def test_rapid_elections_with_fetches_in_flight() -> None:
    """R11's shape, by hand: three elections while a fetch is in the air."""
    ops = [
        ("produce", 1, 3), ("fetch", 2, 0), ("fetch", 3, 0), ("fetch", 2, 0), ("fetch", 3, 0),
        ("produce", 1, 2), ("send", 2, 0), ("serve", 2, 0),
        ("fail", 0, 0), ("learn", 2, 0), ("produce", 2, 2),
        ("elect", 0, 1), ("learn", 3, 0), ("produce", 3, 1),
        ("elect", 0, 0), ("learn", 2, 0), ("deliver", 2, 0), ("produce", 2, 1),
        ("learn", 1, 0), ("fetch", 1, 0), ("fetch", 3, 0),
    ]
    c = run(ops)
    assert c.state.leader_epoch == 3


@pytest.mark.nightly
@settings(max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=150), st.booleans())
def test_random_leader_changes_long_histories(ops: list[tuple[str, int, int]], async_alter: bool) -> None:
    run(ops, async_alter=async_alter)
