"""A seeded run of the mirror between two simulated regions on one virtual clock.

Source and target are ``SimRegion``s (3 real ``BrokerNode``s each, flush policy
``always``) sharing one ``EventScheduler``; topic ``orders`` (3 partitions, RF 3,
min.insync.replicas 2) is written in the source by ``SourceWorkload`` (acks=all) and
mirrored by ``SimMirror`` into a mirror topic of the same name in the target, while a
source group commits offsets the mirror syncs to the target. The inter-region link is
the mirror's traffic with the source region (10-30 ms each way); the mirror sits beside
the target region.

Faults, one at a time, each for a random while, 30% of them with a mirror restart in
the middle: the link cut both ways, only its answers cut, the target's answers to the
mirror cut (appends applied, acknowledgements lost), messages dropped or slowed on the
mirror's links, a mirror restart, a source or target broker crash (its unsynced bytes
lost) and restart, a source broker or a target partition leader isolated from its
region (the mirror still reaches it: a zombie leader for a while), records deleted in
the source (DeleteRecords, at any offset) before the mirror, cut off, copied them (half
of the time with a source broker down meanwhile, so it restarts below the log start).
Then everything heals, the producer and the group stop, and the mirror must catch up.

``MirrorInvariants`` checks after every event; the target region, whose partitions are
written by MirrorAppend, also keeps its own ``RegionInvariants`` (one leader per epoch,
high watermarks never back, one metadata leader per Raft epoch). A run depends only on
its seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from mirror_invariants import MirrorInvariants
from mirror_model import ADMIN_ID, MIRROR_ID, SimMirror, SourceWorkload

from mirror.partition import PartitionState
from mq.core.errors import ErrorCode
from mq.core.rng import Rng
from mq.core.types import FlushPolicy, TopicPartition
from mq.protocol import messages as m
from mq.sim.network import Delay, Drop
from mq.sim.region import START_MS, SimRegion
from mq.sim.region_invariants import RegionInvariants
from mq.sim.region_scenarios import FAST_TIMEOUTS
from mq.sim.scheduler import EventScheduler, InvariantViolation

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 3
LINK_DELAY = Delay(10, 30)
FAULTS = ("link_cut", "link_answers_cut", "target_answers_cut", "link_drop", "link_slow", "mirror_restart",
          "source_crash", "target_crash", "source_isolate", "target_isolate", "source_delete_records", "none")


@dataclass(frozen=True, slots=True)
class MirrorRun:
    seed: int
    acked_batches: int
    records: int  # mirrored, summed over partitions
    faults: int
    mirror_restarts: int
    duplicate_batches: int  # acknowledged by the target as already there
    append_errors: int
    offset_gap_refusals: int  # MIRROR_OFFSET_GAP answers (a resume point past the target's end)
    gap_records: int  # never in the target: deleted in the source before they were mirrored (all reported)
    events: int
    seconds: float


def _region(seed: int, scheduler: EventScheduler) -> SimRegion:
    settings = {**FAST_TIMEOUTS, "offsets_topic_num_partitions": 1}
    settings["log_flush_policy"] = FlushPolicy(settings["log_flush_policy"])
    return SimRegion(seed, configs=settings, scheduler=scheduler)


class MirrorSim:
    def __init__(self, seed: int, *, mirror_class: type[SimMirror] = SimMirror, sync_groups: bool = True) -> None:
        self.seed = seed
        root = Rng(seed)
        self.rng = root.fork("faults")
        scheduler = EventScheduler()
        scheduler.now_ms = START_MS
        self.scheduler = scheduler
        self.source = _region(root.fork("source").seed, scheduler)
        self.target = _region(root.fork("target").seed, scheduler)
        RegionInvariants(self.target)  # the source region's own are test_sim_region's subject
        if not scheduler.run_until(lambda: self.source.is_ready() and self.target.is_ready(),
                                   until_ms=scheduler.now_ms + 20_000):
            raise InvariantViolation("the regions never became ready")
        self.tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        for region, configs in ((self.source, {}), (self.target, {"mirror.source.region": "east"})):
            code = region.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2", **configs})
            if code != ErrorCode.NONE:
                raise InvariantViolation(f"creating {TOPIC} failed: {code.name}")
        self._link_filters()
        self.workload = SourceWorkload(self.source, self.tps, group=GROUP, rng=root.fork("workload"))
        self.mirror = mirror_class(self.source, self.target, self.tps, group=GROUP, rng=root.fork("mirror"),
                                   sync_interval_ms=300 if sync_groups else None)
        self.invariants = MirrorInvariants(self.source, self.target, self.tps, group=GROUP, workload=self.workload,
                                           synced=sync_groups)
        self.faults: list[str] = []
        self.deletions: list[tuple[TopicPartition, int]] = []  # DeleteRecords sent to the source

    def run_for(self, ms: int) -> None:
        self.scheduler.run_for(ms)

    # ------------------------------------------------------------------ faults

    def _link_filters(self) -> None:
        """Only the baseline WAN latency on the inter-region link."""
        self.source.network.clear_filters()
        self.target.network.clear_filters()
        self.source.network.add_filter(LINK_DELAY, source=MIRROR_ID)
        self.source.network.add_filter(LINK_DELAY, destination=MIRROR_ID)

    def _mirror_links(self, add: Callable[..., None]) -> None:
        for region in (self.source, self.target):
            add(region, source=MIRROR_ID)
            add(region, destination=MIRROR_ID)

    def inject(self, kind: str) -> Callable[[], None]:
        """Start a fault; returns what ends it."""
        rng, source, target = self.rng, self.source, self.target
        if kind == "link_cut":
            for b in source.ids:
                source.network.disconnect(MIRROR_ID, b)
            return source.network.heal
        if kind == "link_answers_cut":
            for b in source.ids:
                source.network.cut(b, MIRROR_ID)
            return source.network.heal
        if kind == "target_answers_cut":
            for b in target.ids:
                target.network.cut(b, MIRROR_ID)
            return target.network.heal
        if kind == "link_drop":
            self._mirror_links(lambda region, **link: region.network.add_filter(Drop(0.3), **link))
            return self._link_filters
        if kind == "link_slow":
            self._mirror_links(lambda region, **link: region.network.add_filter(Delay(50, 400), **link))
            return self._link_filters
        if kind == "mirror_restart":
            self.mirror.crash()
            return self.mirror.start
        if kind in ("source_crash", "target_crash"):
            region = source if kind == "source_crash" else target
            victim = rng.choice(list(region.ids))
            region.crash(victim)
            return lambda: region.start(victim)
        if kind == "source_delete_records":
            for b in source.ids:  # the mirror falls behind while the link is down...
                source.network.disconnect(MIRROR_ID, b)
            down = rng.choice(list(source.ids)) if rng.random() < 0.5 else None
            if down is not None:  # ...and so does a source broker, some of the time
                source.crash(down)

            def heal() -> None:
                self._delete_unmirrored_records()
                if down is not None:
                    source.start(down)
            return heal
        if kind == "source_isolate":
            source.network.isolate(rng.choice(list(source.ids)), source.ids)
            return source.network.heal
        if kind == "target_isolate":  # a target leader cut off from its region, not from the mirror
            leader = target.leader_of(rng.choice(self.tps))
            target.network.isolate(leader if leader is not None else rng.choice(list(target.ids)), target.ids)
            return target.network.heal
        return lambda: None

    def _delete_unmirrored_records(self) -> None:
        """...and the source deletes records it has not mirrored yet (DeleteRecords at any
        offset, often inside a batch), then the link heals: a gap the mirror must report."""
        tp = self.rng.choice(self.tps)
        leader = self.source.leader_of(tp)
        source_end = self.invariants.ends(self.source, tp)
        target_end = self.invariants.ends(self.target, tp) or 0
        if leader is not None and source_end is not None and source_end > target_end + 1:
            # a third of the time everything the source has (nothing left to mirror after the gap)
            offset = source_end if self.rng.random() < 0.33 else self.rng.randint(target_end + 1, source_end)
            request = m.DeleteRecordsRequest([m.DeleteRecordsTopic(tp.topic, [m.DeleteRecordsPartition(tp.partition, offset)])])
            self.source.request(leader, request, lambda _: None, source_id=ADMIN_ID)
            self.deletions.append((tp, offset))
        self.source.network.heal()

    def run_faults(self, duration_ms: int, faults: tuple[str, ...] = FAULTS) -> None:
        rng = self.rng
        end = self.scheduler.now_ms + duration_ms
        while self.scheduler.now_ms < end:
            self.run_for(rng.randint(50, 400))
            kind = rng.choice(faults)
            if kind != "none":
                self.faults.append(kind)
            heal = self.inject(kind)
            if kind != "mirror_restart" and rng.random() < 0.3:  # the mirror restarts during the fault
                self.run_for(rng.randint(0, 500))
                self.mirror.crash()
                self.run_for(rng.randint(0, 300))
                self.mirror.start()
            self.run_for(rng.randint(100, 1200))
            heal()

    def settle(self, timeout_ms: int = 20_000) -> None:
        """Heal everything, stop the traffic, and let the mirror catch up."""
        self.workload.stop()
        for region in (self.source, self.target):
            region.network.heal()
            for node_id in region.ids:
                region.start(node_id)
        self._link_filters()
        self.mirror.start()
        self.scheduler.run_until(lambda: self.invariants.caught_up() or bool(self.blocked()),
                                 until_ms=self.scheduler.now_ms + timeout_ms)
        if self.blocked():
            raise InvariantViolation(f"the mirror blocked with every fault healed: {self.blocked()}")

    def blocked(self) -> dict[str, str]:
        """Partitions the mirror gave up on (only an operator could unblock them)."""
        return {str(tp): pm.reason for tp, pm in self.mirror.partitions.items()
                if pm.state == PartitionState.BLOCKED}


def mirror_schedule(seed: int, *, duration_ms: int = 3_000, mirror_class: type[SimMirror] = SimMirror,
                    sync_groups: bool = True, faults: tuple[str, ...] = FAULTS) -> MirrorRun:
    started = time.perf_counter()
    sim = MirrorSim(seed, mirror_class=mirror_class, sync_groups=sync_groups)
    sim.run_faults(duration_ms, faults)
    sim.settle()
    counts = sim.invariants.check_final(sim.mirror.gaps)
    stats = sim.mirror.stats
    return MirrorRun(seed, len(sim.workload.acked), counts["records"], len(sim.faults), stats.restarts,
                     stats.duplicate_batches, sum(stats.append_errors.values()),
                     stats.append_errors.get("MIRROR_OFFSET_GAP", 0), counts["gap_records"], sim.scheduler.events_run,
                     time.perf_counter() - started)
