"""A hand-driven quorum for unit tests: messages wait in a queue until a test delivers
them, time moves only when a test says so, and crashes keep only flushed state.
etcd raft's interaction tests in miniature: each test reads as a scenario."""

from __future__ import annotations

from collections.abc import Callable

from mq.core.rng import Rng
from mq.raft import (
    ElectionState,
    LogEntry,
    MemoryReplicatedLog,
    RaftConfig,
    RaftMessage,
    RaftNode,
    Ready,
)

CONFIG = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=200, fetch_max_wait_ms=50,
                    request_timeout_ms=100)


class Harness:
    def __init__(self, voters: int = 3, *, config: RaftConfig = CONFIG) -> None:
        self.config = config
        self.now_ms = 0
        self.voters = tuple(range(1, voters + 1))
        self.logs = {v: MemoryReplicatedLog() for v in self.voters}
        self.persisted: dict[int, ElectionState | None] = {v: None for v in self.voters}
        self.applied: dict[int, list[LogEntry]] = {v: [] for v in self.voters}
        self.snapshots: dict[int, list[int]] = {v: [] for v in self.voters}
        self.deadlines: dict[int, int] = {}
        self.inflight: list[RaftMessage] = []
        self.delivered: list[RaftMessage] = []
        self.incarnation = {v: 0 for v in self.voters}
        self.nodes: dict[int, RaftNode] = {}
        for v in self.voters:
            self.restart(v)

    def restart(self, voter: int) -> None:
        """Crash (lose unflushed entries and all volatile state) and start again."""
        self.logs[voter].crash()
        self.incarnation[voter] += 1
        self.applied[voter] = []
        self.nodes[voter] = RaftNode(voter, self.voters, self.logs[voter], self.persisted[voter],
                                     Rng(voter * 100 + self.incarnation[voter]), self.config,
                                     now_ms=self.now_ms)
        self.absorb(voter, self.nodes[voter].tick(self.now_ms))

    def absorb(self, voter: int, ready: Ready) -> Ready:
        if ready.persist is not None:
            if ready.persist.election_state is not None:
                self.persisted[voter] = ready.persist.election_state
            self.logs[voter].flush()
        self.inflight.extend(ready.messages)
        if ready.snapshot is not None:
            self.snapshots[voter].append(ready.snapshot.snapshot_id.offset)
            self.applied[voter] = []
        self.applied[voter].extend(ready.committed)
        self.deadlines[voter] = ready.deadline_ms
        return ready

    # -- time --------------------------------------------------------------------------

    def fire(self, voter: int) -> Ready:
        """Move time to ``voter``'s deadline and tick it (and only it)."""
        self.now_ms = max(self.now_ms, self.deadlines[voter])
        return self.absorb(voter, self.nodes[voter].tick(self.now_ms))

    def advance(self, ms: int) -> None:
        """Move time and tick every node whose deadline passed."""
        self.now_ms += ms
        for voter in self.voters:
            if self.deadlines[voter] <= self.now_ms:
                self.absorb(voter, self.nodes[voter].tick(self.now_ms))

    # -- network -----------------------------------------------------------------------

    def deliver(self, *, allow: Callable[[RaftMessage], bool] = lambda m: True,
                max_messages: int = 10_000) -> int:
        """Deliver queued messages (and what they cause) in order; drop those ``allow``
        rejects. Returns how many were delivered."""
        count = 0
        while self.inflight and count < max_messages:
            message = self.inflight.pop(0)
            if not allow(message):
                continue
            count += 1
            self.delivered.append(message)
            node = self.nodes[message.destination_id]
            self.absorb(message.destination_id, node.step(message, self.now_ms))
        return count

    def drop_all(self) -> None:
        self.inflight.clear()

    def elect(self, voter: int) -> None:
        """Let ``voter`` time out and run a clean election that it wins."""
        self.fire(voter)
        self.deliver()
        assert self.nodes[voter].is_leader, self.describe()

    def propose(self, voter: int, *values: bytes) -> Ready:
        return self.absorb(voter, self.nodes[voter].propose(list(values), self.now_ms))

    def describe(self) -> str:
        return "; ".join(
            f"{v}:{n.role}@{n.epoch} end={n.log.end_offset} hw={n.high_watermark}"
            for v, n in self.nodes.items())


def between(*voters: int) -> Callable[[RaftMessage], bool]:
    """Allow only messages among ``voters`` (a partition, for one ``deliver``)."""
    group = set(voters)
    return lambda m: m.source_id in group and m.destination_id in group


def data(entries: list[LogEntry]) -> list[bytes]:
    return [e.data for e in entries if not e.control]
