"""A simulated Raft quorum: real ``RaftNode`` cores, a simulated network and disk.

Each node has a ``MemoryReplicatedLog`` (only flushed entries survive ``crash``), the
election state it last persisted, and a ``DigestMachine`` as its application. The
cluster plays the shell of ``node.py``: for every ``Ready`` it persists, then sends,
then applies, then arms the node's timer. Every applied entry is checked against what
every other node applied at that offset (State Machine Safety), and the scheduler runs
the invariants of ``invariants.py`` after every event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations

from mq.core.rng import Rng
from mq.raft import ElectionState, LogEntry, MemoryReplicatedLog, RaftConfig, RaftNode, Ready
from mq.raft.log import Snapshot
from mq.raft.messages import RaftMessage
from mq.raft.quorum import DEFAULT_CONFIG
from mq.sim.invariants import (
    CommittedPrefix,
    LeaderLiveness,
    MonotonicHighWatermark,
    SingleLeaderPerEpoch,
)
from mq.sim.network import SimNetwork
from mq.sim.scheduler import EventScheduler, InvariantViolation


class DigestMachine:
    """The replicated application: a hash chain over every applied entry. Two nodes with
    the same digest after offset N applied the same entries, in order, up to N."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.digest = b"\0" * 16

    def reset(self, snapshot: Snapshot) -> None:
        self.next_offset = snapshot.snapshot_id.offset
        self.digest = snapshot.data

    def apply(self, entry: LogEntry) -> None:
        if entry.offset != self.next_offset:
            raise InvariantViolation(f"applied offset {entry.offset}, expected {self.next_offset}")
        h = hashlib.blake2b(self.digest, digest_size=16)
        h.update(entry.epoch.to_bytes(8, "big") + bytes([entry.control]) + entry.data)
        self.digest = h.digest()
        self.next_offset += 1


@dataclass(slots=True)
class SimNode:
    node_id: int
    log: MemoryReplicatedLog = field(default_factory=MemoryReplicatedLog)
    election_state: ElectionState | None = None
    raft: RaftNode | None = None
    machine: DigestMachine | None = None
    incarnation: int = 0
    timer_at: int | None = None
    timer_generation: int = 0
    high_watermark_seen: int = 0  # for MonotonicHighWatermark; reset by a restart


class RaftCluster:
    def __init__(self, seed: int, *, voters: int = 3, config: RaftConfig = DEFAULT_CONFIG,
                 snapshot_every: int = 0, leader_within_ms: int | None = None) -> None:
        self.seed = seed
        self.rng = Rng(seed)
        self.config = config
        self.snapshot_every = snapshot_every
        self.scheduler = EventScheduler()
        self.network = SimNetwork(self.scheduler, self.rng.fork("network"), self._deliver)
        self.voters = tuple(range(1, voters + 1))
        self.nodes = {v: SimNode(v) for v in self.voters}
        self.committed = CommittedPrefix()
        self.topology_version = 0
        self.topology_changed_ms = 0
        self.applied_count = 0
        self.node_invariants = (SingleLeaderPerEpoch(), MonotonicHighWatermark())
        self.liveness = None if leader_within_ms is None else LeaderLiveness(self, leader_within_ms)
        if self.liveness is not None:
            self.scheduler.invariants.append(self.liveness)
        self._clique_cache: tuple[int, tuple[int, ...] | None] = (-1, None)
        for v in self.voters:
            self.start(v)

    @property
    def now_ms(self) -> int:
        return self.scheduler.now_ms

    # -- faults ----------------------------------------------------------------------

    def crash(self, node_id: int) -> None:
        """Kill a node: volatile state is gone, the log keeps only what was flushed."""
        node = self.nodes[node_id]
        node.raft = None
        node.machine = None
        node.log.crash()
        node.timer_at = None
        node.timer_generation += 1
        self._topology_changed()

    def start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.raft is not None:
            return
        node.incarnation += 1
        node.high_watermark_seen = 0
        node.machine = DigestMachine()
        node.raft = RaftNode(node_id, self.voters, node.log, node.election_state,
                             self.rng.fork("node", node_id, node.incarnation), self.config,
                             now_ms=self.now_ms)
        self._topology_changed()
        self._handle_ready(node, node.raft.tick(self.now_ms))

    def isolate(self, node_id: int) -> None:
        self.network.isolate(node_id, self.voters)
        self._topology_changed()

    def reconnect(self, node_id: int) -> None:
        """Undo ``isolate``: restore every link to and from ``node_id``."""
        for other in self.voters:
            self.network.connect(node_id, other)
        self._topology_changed()

    def partition(self, *groups: tuple[int, ...]) -> None:
        self.network.partition(*groups)
        self._topology_changed()

    def heal(self) -> None:
        self.network.heal()
        self._topology_changed()

    def _topology_changed(self) -> None:
        self.topology_version += 1
        self.topology_changed_ms = self.now_ms

    def connected_majority(self) -> tuple[int, ...] | None:
        """The largest set of live, pairwise connected voters if it is a majority."""
        version, cached = self._clique_cache
        if version == self.topology_version:
            return cached
        alive = [v for v in self.voters if self.nodes[v].raft is not None]
        majority = len(self.voters) // 2 + 1
        found = None
        for size in range(len(alive), majority - 1, -1):
            for group in combinations(alive, size):
                if all(self.network.connected(a, b) for a in group for b in group if a != b):
                    found = group
                    break
            if found:
                break
        self._clique_cache = (self.topology_version, found)
        return found

    # -- clients ---------------------------------------------------------------------

    def alive(self) -> list[RaftNode]:
        return [n.raft for n in self.nodes.values() if n.raft is not None]

    def leader(self) -> RaftNode | None:
        leaders = [r for r in self.alive() if r.is_leader]
        return max(leaders, key=lambda r: r.epoch) if leaders else None

    def propose(self, data: bytes) -> bool:
        """Propose to the leader of the highest epoch; False when there is none."""
        leader = self.leader()
        return leader is not None and self.propose_to(leader.node_id, data)

    def propose_to(self, node_id: int, data: bytes) -> bool:
        """Propose to one node if it believes it leads (a stale leader accepts too)."""
        node = self.nodes[node_id]
        if node.raft is None or not node.raft.is_leader:
            return False
        self._handle_ready(node, node.raft.propose([data], self.now_ms))
        return True

    def run_for(self, duration_ms: int) -> None:
        self.scheduler.run_for(duration_ms)

    def run_until(self, condition: Callable[[], bool], *, within_ms: int) -> bool:
        """Run until ``condition`` holds (True) or ``within_ms`` of virtual time pass."""
        return self.scheduler.run_until(condition, until_ms=self.now_ms + within_ms)

    # -- the shell -------------------------------------------------------------------

    def _deliver(self, message: RaftMessage) -> None:
        node = self.nodes[message.destination_id]
        if node.raft is not None:
            self._handle_ready(node, node.raft.step(message, self.now_ms))

    def _tick(self, node_id: int, generation: int) -> None:
        node = self.nodes[node_id]
        if node.raft is None or generation != node.timer_generation:
            return
        node.timer_at = None
        self._handle_ready(node, node.raft.tick(self.now_ms))

    def _handle_ready(self, node: SimNode, ready: Ready) -> None:
        if ready.persist is not None:
            if ready.persist.election_state is not None:
                node.election_state = ready.persist.election_state
            node.log.flush()
        for message in ready.messages:
            self.network.send(message)
        machine = node.machine
        assert machine is not None and node.raft is not None
        if ready.snapshot is not None:
            machine.reset(ready.snapshot)
            self.committed.check(node.node_id, machine.next_offset - 1, machine.digest)
        for entry in ready.committed:
            machine.apply(entry)
            self.committed.check(node.node_id, entry.offset, machine.digest)
            self.applied_count += 1
        if self.snapshot_every and machine.next_offset - node.log.start_offset >= self.snapshot_every:
            node.raft.create_snapshot(machine.next_offset, machine.digest)
        for invariant in self.node_invariants:
            invariant.check(node, self.now_ms)
        if ready.deadline_ms != node.timer_at:
            node.timer_at = ready.deadline_ms
            node.timer_generation += 1
            generation = node.timer_generation
            self.scheduler.schedule(ready.deadline_ms,
                                    lambda: self._tick(node.node_id, generation))
