"""Seeded scenarios on a simulated region (``SimRegion``) with ``RegionInvariants``.

- ``random_region_schedule``: a producer sends acks=all records while brokers crash
  (losing what they had not fsynced) and restart, get isolated, and the network
  drops and delays messages — one fault at a time, so a majority stays up.
- ``kip101_scenario`` (R10): the follower that acknowledged the last record restarts
  before it learns the new high watermark, then becomes leader. With truncation by
  leader epoch it keeps the record (Kafka before KIP-101 truncated to its high
  watermark and lost it).
- ``rapid_elections_scenario`` (R11): three leader elections inside one replica
  fetch interval, then no divergence below the high watermark anywhere.

Flush policy ``always`` throughout: under ``replicated`` a crash may lose
acknowledged records by design (the chaos suite measures how many).
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.core.errors import ErrorCode
from mq.core.types import FlushPolicy, TopicPartition
from mq.sim.network import Delay, Drop
from mq.sim.region import SimRegion
from mq.sim.region_invariants import RegionInvariants
from mq.sim.scheduler import InvariantViolation

FAST_TIMEOUTS: dict[str, object] = {
    "log_flush_policy": "always",
    "controller_quorum_election_timeout_ms": 150,
    "controller_quorum_fetch_timeout_ms": 400,
    "broker_heartbeat_interval_ms": 50,
    "broker_session_timeout_ms": 250,
    "replica_lag_time_max_ms": 2000,
    "replica_fetch_backoff_ms": 50,
}


@dataclass(frozen=True, slots=True)
class RegionRun:
    seed: int
    acked: int
    faults: int
    events: int
    checks: int


def _ready_region(seed: int, *, partitions: int = 2, configs: dict[str, object] | None = None,
                  min_isr: int = 2, replication_factor: int = 3) -> tuple[SimRegion, RegionInvariants, list[TopicPartition]]:
    settings = {**FAST_TIMEOUTS, **(configs or {})}
    settings["log_flush_policy"] = FlushPolicy(settings["log_flush_policy"])
    region = SimRegion(seed, configs=settings)
    invariants = RegionInvariants(region)
    if not region.run_until(region.is_ready, timeout_ms=20_000):
        raise InvariantViolation("the region never became ready")
    code = region.create_topic("t", partitions, replication_factor, {"min.insync.replicas": str(min_isr)})
    if code != ErrorCode.NONE:
        raise InvariantViolation(f"create topic failed: {code.name}")
    return region, invariants, [TopicPartition("t", p) for p in range(partitions)]


class _Producer:
    """Sends unique values round-robin over partitions, a few in flight at a time."""

    def __init__(self, region: SimRegion, partitions: list[TopicPartition], *, in_flight: int = 4,
                 interval_ms: int = 10) -> None:
        self.region = region
        self.partitions = partitions
        self.in_flight = 0
        self.limit = in_flight
        self.interval_ms = interval_ms
        self.sent = 0
        self.running = True

    def start(self) -> None:
        self.region.scheduler.schedule(self.region.now_ms + self.interval_ms, self._tick)

    def _tick(self) -> None:
        if not self.running:
            return
        while self.in_flight < self.limit:
            tp = self.partitions[self.sent % len(self.partitions)]
            if not self.region.produce(tp, b"v%d" % self.sent, on_done=self._done, timeout_ms=2000):
                break
            self.sent += 1
            self.in_flight += 1
        self.region.scheduler.schedule(self.region.now_ms + self.interval_ms, self._tick)

    def _done(self, code: ErrorCode) -> None:
        self.in_flight -= 1


def _settle(region: SimRegion, partitions: list[TopicPartition], *, timeout_ms: int = 30_000) -> None:
    """Heal, restart everyone, and wait for full ISRs and matching high watermarks."""
    region.network.heal()
    region.network.clear_filters()
    for node_id in region.ids:
        region.start(node_id)

    def settled() -> bool:
        if not region.is_ready():
            return False
        offsets = {region.node(i).control.image.offset for i in region.live()}
        if len(offsets) != 1:  # metadata still on its way to someone
            return False
        for tp in partitions:
            leader = region.leader_of(tp)
            if leader is None:
                return False
            partition = region.node(leader).partitions[tp]
            state = partition.leader  # the leader's own view: ahead of any image
            if state is None or len(state.isr) != len(state.replicas) or state.pending_alter_partition:
                return False
            if state.high_watermark != partition.log.log_end_offset:
                return False
        return True
    if not region.run_until(settled, timeout_ms=timeout_ms):
        states = {str(tp): region.node(region.live()[0]).image.partition(tp) for tp in partitions}
        raise InvariantViolation(f"the region did not settle after healing: {states}")


def random_region_schedule(seed: int, *, duration_ms: int = 4_000) -> RegionRun:
    region, invariants, partitions = _ready_region(seed)
    rng = region.rng.fork("faults")
    producer = _Producer(region, partitions, in_flight=2, interval_ms=40)
    producer.start()
    faults = 0
    end = region.now_ms + duration_ms
    while region.now_ms < end:
        region.run_for(rng.randint(200, 1200))
        kind = rng.choice(["crash", "isolate", "drop", "delay", "none"])
        victim = rng.choice(list(region.ids))
        faults += kind != "none"
        if kind == "crash":
            region.crash(victim)
            region.run_for(rng.randint(100, 1500))
            region.start(victim)
        elif kind == "isolate":
            region.network.isolate(victim, region.ids)
            region.run_for(rng.randint(100, 1500))
            region.network.heal()
        elif kind == "drop":
            region.network.add_filter(Drop(0.3), source=victim)
            region.run_for(rng.randint(100, 1000))
            region.network.clear_filters()
        elif kind == "delay":
            region.network.add_filter(Delay(1, 80))
            region.run_for(rng.randint(100, 1000))
            region.network.clear_filters()
    producer.running = False
    _settle(region, partitions)
    counts = invariants.check_final(partitions)
    return RegionRun(seed, counts["acked"], faults, region.scheduler.events_run, counts["checks"])


def kip101_scenario(seed: int) -> RegionRun:
    """R10 on replicas (A leader, B follower) of a topic with RF 2: B acknowledged m1
    but restarts before it learns the high watermark that covers it. KRaft fences
    the old incarnation out of the ISR; B must keep m1 (no truncation to its high
    watermark), rejoin the ISR without refetching history, and lead with m1 intact."""
    region, invariants, partitions = _ready_region(seed, partitions=1, min_isr=1, replication_factor=2)
    tp = partitions[0]
    leader = region.leader_of(tp)
    assert leader is not None
    image = region.node(leader).image.partition(tp)
    assert image is not None
    follower = next(r for r in image.replicas if r != leader)
    for i in range(2):
        before = len(region.acks)
        region.produce(tp, b"m%d" % i)
        if not region.run_until(lambda before=before: len(region.acks) > before, timeout_ms=5_000):
            raise InvariantViolation(f"m{i} was not acknowledged")
    end_before = region.node(follower).partitions[tp].log.log_end_offset
    hw_before = region.node(follower).partitions[tp].high_watermark
    region.crash(follower)
    region.start(follower)

    def rejoined() -> bool:
        state = region.node(leader).image.partition(tp)
        return state is not None and follower in state.isr and region.node(follower).is_ready
    region.run_until(lambda: region.node(follower).is_ready, timeout_ms=5_000)
    end_after = region.node(follower).partitions[tp].log.log_end_offset
    if end_after < end_before:
        raise InvariantViolation(f"the restarted follower truncated from {end_before} to {end_after} "
                                 f"(its high watermark was {hw_before})")
    if not region.run_until(rejoined, timeout_ms=10_000):
        raise InvariantViolation("the restarted follower did not rejoin the ISR")
    region.crash(leader)
    if not region.run_until(lambda: region.leader_of(tp) == follower, timeout_ms=10_000):
        raise InvariantViolation(f"{follower} did not become leader")
    _settle(region, partitions)
    counts = invariants.check_final(partitions)
    return RegionRun(seed, counts["acked"], 2, region.scheduler.events_run, counts["checks"])


def rapid_elections_scenario(seed: int) -> RegionRun:
    """R11: three leader elections while one follower fetch is still parked on the
    first leader (replica.fetch.wait.max.ms is longer than all three take). Each
    crashed leader restarts and rejoins the ISR before the next crash, so every
    election is clean."""
    fetch_wait_ms = 3000
    region, invariants, partitions = _ready_region(
        seed, partitions=1, configs={"replica_fetch_wait_max_ms": fetch_wait_ms, "replica_lag_time_max_ms": 6000})
    tp = partitions[0]
    producer = _Producer(region, partitions, in_flight=2, interval_ms=20)
    producer.start()
    region.run_for(300)
    start = region.now_ms
    for _ in range(3):
        leader = region.leader_of(tp)
        if leader is None:
            raise InvariantViolation(f"{tp} has no leader")
        region.crash(leader)
        if not region.run_until(lambda old=leader: region.leader_of(tp) not in (None, old), timeout_ms=5_000):
            raise InvariantViolation("no new leader after a crash")
        region.start(leader)

        def full_isr() -> bool:
            current = region.leader_of(tp)
            state = None if current is None else region.node(current).image.partition(tp)
            return state is not None and len(state.isr) == len(state.replicas)
        if not region.run_until(full_isr, timeout_ms=5_000):
            raise InvariantViolation("the restarted leader did not rejoin the ISR")
    took = region.now_ms - start
    producer.running = False
    _settle(region, partitions)
    counts = invariants.check_final(partitions)
    if took > fetch_wait_ms:
        raise InvariantViolation(f"three elections took {took} ms, more than one fetch interval ({fetch_wait_ms} ms)")
    return RegionRun(seed, counts["acked"], 3, region.scheduler.events_run, counts["checks"])
