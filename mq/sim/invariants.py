"""Invariants the simulation checks after every event (Raft paper, figure 3).

Per-node invariants run after each ``Ready`` the cluster handles (an event changes
nodes only through ``Ready``s, so that is after every event, at the cost of one node);
``LeaderLiveness`` looks at the whole cluster and runs from the scheduler.

- ``SingleLeaderPerEpoch``: Election Safety, at most one leader per epoch, ever.
- ``CommittedPrefix``: State Machine Safety, every node applies the same entry at each
  offset (checked on each apply through the applied-state digest).
- ``MonotonicHighWatermark``: a node's high watermark never moves back while it runs
  (a restart starts again from its snapshot).
- ``LeaderLiveness``: with a majority of voters up and connected for ``within_ms``
  there is a leader among them; with none, no node still acts as leader once its
  check-quorum timeout has passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mq.sim.scheduler import InvariantViolation

if TYPE_CHECKING:
    from mq.sim.raft_cluster import RaftCluster, SimNode


class CommittedPrefix:
    def __init__(self) -> None:
        self.digests: dict[int, tuple[int, bytes]] = {}
        self.checks = 0

    def check(self, node_id: int, offset: int, digest: bytes) -> None:
        if offset < 0:
            return
        self.checks += 1
        first = self.digests.setdefault(offset, (node_id, digest))
        if first[1] != digest:
            raise InvariantViolation(
                f"applied-index mismatch at offset {offset}: node {node_id} differs from "
                f"node {first[0]}")


class SingleLeaderPerEpoch:
    """Checked on a node after each of its ``Ready``s: only those change roles."""

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}

    def check(self, node: SimNode, now_ms: int) -> None:
        raft = node.raft
        if raft is not None and raft.is_leader:
            first = self.leaders.setdefault(raft.epoch, raft.node_id)
            if first != raft.node_id:
                raise InvariantViolation(
                    f"two leaders in epoch {raft.epoch}: {first} and {raft.node_id} at {now_ms} ms")


class MonotonicHighWatermark:
    """Checked on a node after each of its ``Ready``s: only those move its watermark."""

    def check(self, node: SimNode, now_ms: int) -> None:
        raft = node.raft
        if raft is None or raft.high_watermark == node.high_watermark_seen:
            return
        if raft.high_watermark < node.high_watermark_seen:
            raise InvariantViolation(
                f"node {node.node_id} high watermark went back {node.high_watermark_seen} -> "
                f"{raft.high_watermark} at {now_ms} ms")
        if raft.high_watermark > raft.log.end_offset:
            raise InvariantViolation(f"node {node.node_id} high watermark past its log end")
        node.high_watermark_seen = raft.high_watermark


class LeaderLiveness:
    def __init__(self, cluster: RaftCluster, within_ms: int) -> None:
        self.cluster = cluster
        self.within_ms = within_ms
        self.longest_wait_ms = 0  # longest time a connected majority waited for a leader
        self._satisfied_version = -1

    def __call__(self) -> None:
        cluster = self.cluster
        stable_ms = cluster.now_ms - cluster.topology_changed_ms
        group = cluster.connected_majority()
        if group is not None:
            leaders = [r.node_id for r in cluster.alive() if r.is_leader]
            if any(n in group for n in leaders):
                if self._satisfied_version != cluster.topology_version:
                    self._satisfied_version = cluster.topology_version
                    self.longest_wait_ms = max(self.longest_wait_ms, stable_ms)
            elif stable_ms > self.within_ms:
                raise InvariantViolation(
                    f"no leader among connected majority {group} after {stable_ms} ms "
                    f"(at {cluster.now_ms} ms)")
            return
        settle_ms = cluster.config.fetch_timeout_ms + 2 * cluster.config.request_timeout_ms
        if stable_ms > settle_ms:
            leaders = [r.node_id for r in cluster.alive() if r.is_leader]
            if leaders:
                raise InvariantViolation(
                    f"leader {leaders} without a connected majority at {cluster.now_ms} ms")
