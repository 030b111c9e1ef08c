"""What must hold in a simulated region, checked after every event and at the end.

After every event (``RegionInvariants.check``, registered with the scheduler):

- one metadata quorum leader per Raft epoch, ever;
- the committed metadata agrees: two brokers that applied the log up to the same
  offset hold the same image (State Machine Safety for the metadata log);
- one partition leader per leader epoch, ever (no split brain on the data path);
- each replica's high watermark never moves back while the broker runs.

At the end, after healing (``check_final``):

- no acknowledged record lost: every acked value is in the leader's log at the
  offset it was acknowledged with;
- every in-sync replica holds exactly the leader's records below the high watermark.
"""

from __future__ import annotations

from collections.abc import Iterable

from mq.core.types import TopicPartition
from mq.metadata.image import MetadataImage
from mq.sim.region import SimRegion
from mq.sim.scheduler import InvariantViolation


class RegionInvariants:
    def __init__(self, region: SimRegion) -> None:
        self.region = region
        self.raft_leaders: dict[int, int] = {}  # Raft epoch -> node
        self.images: dict[int, tuple[int, MetadataImage]] = {}  # offset -> (first node, image)
        self.seen_offsets: dict[int, int] = {}
        self.partition_leaders: dict[tuple[TopicPartition, int], int] = {}
        self.high_watermarks: dict[tuple[int, int, TopicPartition], int] = {}
        self.checks = 0
        region.scheduler.invariants.append(self.check)

    def check(self) -> None:
        region = self.region
        self.checks += 1
        for node_id in region.live():
            node = region.node(node_id)
            control = node.control
            raft = control.raft
            if raft is not None and raft.is_leader:
                first = self.raft_leaders.setdefault(raft.epoch, node_id)
                if first != node_id:
                    raise InvariantViolation(f"two metadata leaders in epoch {raft.epoch}: {first} and {node_id}")
            self._check_image(node_id, control.image)
            incarnation = region.brokers[node_id].incarnation
            for tp, partition in node.partitions.items():
                if partition.leader is not None:
                    key = (tp, partition.leader.leader_epoch)
                    first = self.partition_leaders.setdefault(key, node_id)
                    if first != node_id:
                        raise InvariantViolation(f"{tp}: two leaders in leader epoch {key[1]}: {first} and {node_id}")
                hw_key = (node_id, incarnation, tp)
                hw = partition.high_watermark
                if hw < self.high_watermarks.get(hw_key, -1):
                    raise InvariantViolation(f"{tp} on broker {node_id}: high watermark went back "
                                             f"from {self.high_watermarks[hw_key]} to {hw}")
                self.high_watermarks[hw_key] = hw

    def _check_image(self, node_id: int, image: MetadataImage) -> None:
        if self.seen_offsets.get(node_id) == image.offset or image.offset < 0:
            return
        self.seen_offsets[node_id] = image.offset
        first = self.images.setdefault(image.offset, (node_id, image))
        if first[1] != image:
            raise InvariantViolation(f"brokers {first[0]} and {node_id} applied different metadata "
                                     f"up to offset {image.offset}")

    def check_final(self, partitions: Iterable[TopicPartition]) -> dict[str, int]:
        """After healing and settling: no acknowledged record lost, in-sync replicas
        identical below the high watermark. Returns counts for the test's report."""
        region = self.region
        acked = 0
        for tp in partitions:
            leader = region.leader_of(tp)
            if leader is None:
                raise InvariantViolation(f"{tp} has no leader after healing")
            state = region.node(leader).partitions[tp]
            hw = state.high_watermark
            expected = region.records(leader, tp, below=hw)
            by_offset = dict(expected)
            for ack in region.acks:
                if ack.tp != tp:
                    continue
                acked += 1
                if by_offset.get(ack.offset) != ack.value:
                    raise InvariantViolation(f"{tp}: acknowledged {ack.value!r} at offset {ack.offset} is lost "
                                             f"(leader {leader} has {by_offset.get(ack.offset)!r}, hw {hw})")
            leader_state = state.leader
            isr = region.node(leader).image.partition(tp).isr if leader_state is None else leader_state.isr  # type: ignore[union-attr]
            for replica in isr:
                if replica == leader or replica not in region.live():
                    continue
                got = region.records(replica, tp, below=hw)
                if got != expected:
                    diverge = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
                    raise InvariantViolation(f"{tp}: replica {replica} differs from leader {leader} below the "
                                             f"high watermark {hw} at record #{diverge}")
        return {"acked": acked, "checks": self.checks}
