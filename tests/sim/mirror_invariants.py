"""What must hold between a source region, its mirror and the target region, checked
after every event of the shared scheduler and once more at the end.

After every event (``MirrorInvariants.check``):

1. **mirrored prefix identical**: every replica of the target, below its own high
   watermark, holds exactly the source's committed batches at the same offsets: same
   base and last offsets, same bytes (so same values, keys, headers and timestamps);
   only the partition leader epoch, outside the CRC, may differ. The target's log
   starts where the source's does (nothing below it lost). The reference is built from
   the source's committed batches, as the source replica furthest ahead holds them; each
   target replica is read only past what was already checked in its current life.
2. **synced group offsets never past the mirrored end**: every offset of the group that
   any target broker's coordinator holds is at most the highest high watermark the
   target partition ever had (what the target really has, committed), and at most the
   highest offset the source group ever committed (never ahead of the truth).

At the end (``check_final``, after healing and quiescence): the target's high watermark
equals the source's for every partition; every target replica is byte-identical to the
source below it; every record the source acknowledged (acks=all) is in the target at its
offset (unless the source deleted it); the target group's offsets equal the source
group's; every offset the target never held is in a gap the mirror reported, and no gap
claims records the target held (but the rest of the batch holding a log start).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator

from mirror_model import SourceWorkload

from mirror.partition import Gap
from mq.broker.node import BrokerNode
from mq.core.types import TopicPartition
from mq.protocol.batch_format import LEADER_EPOCH_AT, iter_batches
from mq.sim.region import SimRegion
from mq.sim.scheduler import InvariantViolation
from mq.storage import Log

Batch = tuple[int, bytes]  # (next offset, bytes with the partition leader epoch blanked)


def read_batches(log: Log, start: int, end: int) -> Iterator[tuple[int, int, bytes]]:
    """``(base, next, bytes)`` of the batches holding offsets ``[start, end)``, each
    with its partition leader epoch zeroed (the one field a mirror may change)."""
    offset = start
    while offset < end:
        data = bytes(log.read(offset, max_bytes=1 << 16, max_offset=end).records)
        if not data:
            return
        progressed = False
        for pos, header in iter_batches(data):
            if header.next_offset <= offset:
                continue
            body = data[pos:pos + header.size]
            yield header.base_offset, header.next_offset, body[:LEADER_EPOCH_AT] + bytes(4) + body[LEADER_EPOCH_AT + 4:]
            offset, progressed = header.next_offset, True
        if not progressed:
            return


def group_offsets(node: BrokerNode, group: str) -> dict[TopicPartition, int]:
    """The group's committed offsets on every coordinator shard ``node`` has loaded."""
    out: dict[TopicPartition, int] = {}
    for index in sorted(node.groups.shards):
        coordinator = node.groups.coordinator(index)
        if coordinator is not None and group in coordinator.groups:
            out.update({tp: v.offset for tp, v in coordinator.groups[group].offsets.items()})
    return out


class MirrorInvariants:
    def __init__(self, source: SimRegion, target: SimRegion, partitions: list[TopicPartition], *,
                 group: str, workload: SourceWorkload, synced: bool = True) -> None:
        """``synced``: the mirror syncs the group (the end requires the offsets to agree)."""
        self.source, self.target = source, target
        self.synced = synced
        self.tps = list(partitions)
        self.group = group
        self.workload = workload
        self.reference: dict[TopicPartition, dict[int, Batch]] = {tp: {} for tp in partitions}
        self.reference_end = {tp: 0 for tp in partitions}
        self.target_end = {tp: 0 for tp in partitions}  # the highest target high watermark ever
        self.source_start = {tp: 0 for tp in partitions}  # the highest source log start ever
        self.held: dict[TopicPartition, list[tuple[int, int]]] = {tp: [] for tp in partitions}  # verified ranges
        self._checked: dict[tuple[int, int, int], int] = {}  # (target broker, its life, partition)
        self.checks = 0
        self.batches_compared = 0
        source.scheduler.invariants.append(self.check)

    # ------------------------------------------------------------------ after every event

    def check(self) -> None:
        """Cheap when nothing moved: one high watermark read per replica and partition.
        The reference grows from whichever source replica is ahead (the source's replicas
        agreeing with each other is ``RegionInvariants``' business); each target replica
        is read only past what was checked in its current life."""
        self.checks += 1
        for broker in self.source.brokers.values():
            if broker.node is not None:
                hosted = broker.node.partitions
                for tp in self.tps:
                    partition = hosted.get(tp)
                    if partition is None:
                        continue
                    if partition.high_watermark > self.reference_end[tp]:
                        self._learn(broker.node_id, tp, partition.log, self.reference_end[tp],
                                    partition.high_watermark)
                    self.source_start[tp] = max(self.source_start[tp], partition.log_start_offset)
        checked = self._checked
        for node_id, broker in self.target.brokers.items():
            if broker.node is None:
                continue
            hosted = broker.node.partitions
            for tp in self.tps:
                partition = hosted.get(tp)
                if partition is None:
                    continue
                hw = partition.high_watermark
                key = (node_id, broker.incarnation, tp.partition)
                done = checked.get(key, 0)
                if hw > done:
                    checked[key] = hw
                    self._compare(node_id, tp, partition.log, done, hw)
                    self.target_end[tp] = max(self.target_end[tp], hw)
        self._check_group_offsets()

    def _learn(self, node_id: int, tp: TopicPartition, log: Log, start: int, end: int) -> None:
        reference = self.reference[tp]
        for base, nxt, body in read_batches(log, start, end):
            known = reference.get(base)
            if known is None:
                if base != self.reference_end[tp]:
                    raise InvariantViolation(f"source {tp} on broker {node_id}: committed batch [{base}, {nxt}) "
                                             f"does not continue the committed log at {self.reference_end[tp]}")
                reference[base] = (nxt, body)
                self.reference_end[tp] = nxt
            elif known != (nxt, body):
                raise InvariantViolation(f"source {tp}: broker {node_id} holds a different committed batch "
                                         f"at offset {base} than another source replica")

    def _compare(self, node_id: int, tp: TopicPartition, log: Log, start: int, end: int) -> None:
        where = f"target {tp} on broker {node_id} (high watermark {end})"
        if log.log_start_offset > start:
            if log.log_start_offset > self.source_start[tp]:
                raise InvariantViolation(
                    f"{where}: its log starts at {log.log_start_offset}, the source's at {self.source_start[tp]}: "
                    f"records [{start}, {log.log_start_offset}) are lost")
            start = log.log_start_offset  # a gap: the source deleted them before they were mirrored
        self.held[tp].append((start, end))
        reference = self.reference[tp]
        expected = start
        for base, nxt, body in read_batches(log, start, end):
            if base > expected:
                raise InvariantViolation(f"{where}: offsets [{expected}, {base}) are missing")
            known = reference.get(base)
            if known is None:
                raise InvariantViolation(
                    f"{where}: batch [{base}, {nxt}) is not a committed source batch (source has batches "
                    f"up to {self.reference_end[tp]}; a duplicate, a reordering or a shifted offset)")
            if known[0] != nxt:
                raise InvariantViolation(f"{where}: batch [{base}, {nxt}) has different offsets than the "
                                         f"source's [{base}, {known[0]})")
            if known[1] != body:
                raise InvariantViolation(f"{where}: batch [{base}, {nxt}) differs in its bytes from the source's")
            self.batches_compared += 1
            expected = nxt
        if expected < end:
            raise InvariantViolation(f"{where}: the log holds records only up to {expected}")

    def _check_group_offsets(self) -> None:
        sent = self.workload.committed_sent
        for node_id, broker in self.target.brokers.items():
            if broker.node is None:
                continue
            for shard in broker.node.groups.shards.values():
                group = shard.coordinator.groups.get(self.group) if shard.loaded else None
                if group is None:
                    continue
                for tp, value in group.offsets.items():
                    end, offset = self.target_end.get(tp), value.offset
                    if end is None:
                        raise InvariantViolation(f"target group {self.group}: offset for unmirrored {tp}")
                    if offset > end:
                        raise InvariantViolation(
                            f"target group {self.group} (coordinator on broker {node_id}): {tp} committed at "
                            f"{offset}, past the mirrored end {end}: a consumer failing over would skip records")
                    if offset > sent.get(tp, 0):
                        raise InvariantViolation(
                            f"target group {self.group}: {tp} committed at {offset}, ahead of anything the "
                            f"source group committed ({sent.get(tp, 0)})")

    # ------------------------------------------------------------------ at the end

    def ends(self, region: SimRegion, tp: TopicPartition) -> int | None:
        leader = region.leader_of(tp)
        if leader is None or leader not in region.live():
            return None
        partition = region.node(leader).partitions.get(tp)
        return None if partition is None or partition.leader is None else partition.high_watermark

    def _isr(self, tp: TopicPartition) -> list[int] | None:
        leader = self.source.leader_of(tp)
        state = None if leader is None else self.source.node(leader).partitions[tp].leader
        return None if state is None else sorted(state.isr)

    def group_of(self, region: SimRegion) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for node_id in region.live():
            out.update(group_offsets(region.node(node_id), self.group))
        return out

    def caught_up(self) -> bool:
        """The source settled (every replica in the ISR; the leader's high watermark is its
        log end, and not below anything it ever committed: a new leader's may lag for a
        moment), the target's ends equal it on every replica, and the groups agree."""
        for tp in self.tps:
            source_end = self.ends(self.source, tp)
            if source_end is None or source_end < self.reference_end[tp] or source_end != self.ends(self.target, tp):
                return False
            leader = self.source.leader_of(tp)
            partition = None if leader is None else self.source.node(leader).partitions[tp]
            if partition is None or partition.log.log_end_offset != source_end or partition.leader is None \
                    or len(partition.leader.isr) != len(self.source.ids):
                return False  # (a replica left out of the ISR for good would end the run here)
            for node_id in self.target.live():
                partition = self.target.node(node_id).partitions.get(tp)
                if partition is None or partition.high_watermark != source_end:
                    return False
        return not self.synced or self.group_of(self.source) == self.group_of(self.target)

    def check_gaps(self, tp: TopicPartition, end: int, gaps: list[Gap]) -> int:
        """Every offset the target never held is in a gap the mirror reported, and a gap
        ``[a, b)`` claims nothing the target held but the few records of the batch holding
        ``b`` (the target restarts at that batch's base when ``b`` is inside it); ``b``
        is never past what the source deleted. Returns how many offsets were never held."""
        held = {o for a, b in self.held[tp] for o in range(a, b)}
        never = set(range(end)) - held
        mine = [g for g in gaps if g.tp == tp]
        reported = {o for g in mine for o in range(g.from_offset, g.to_offset)}
        if not never <= reported:
            raise InvariantViolation(f"{tp}: the target never held {_spans(never - reported)}, and no gap "
                                     f"reported says so (gaps {_spans(reported)}): lost silently")
        for gap in mine:
            where = f"{tp}: gap [{gap.from_offset}, {gap.to_offset})"
            if gap.to_offset > self.source_start[tp]:
                raise InvariantViolation(f"{where} reaches past the source's log start {self.source_start[tp]}: "
                                         f"those records were not deleted")
            base = self._batch_base(tp, gap.to_offset)
            claimed_held = {o for o in range(gap.from_offset, min(base, gap.to_offset)) if o in held}
            if claimed_held:
                raise InvariantViolation(f"{where} claims {_spans(claimed_held)}, which the target held")
        return len(never)

    def _batch_base(self, tp: TopicPartition, offset: int) -> int:
        """The base of the source batch holding ``offset`` (``offset`` at a boundary)."""
        reference = self.reference[tp]
        bases = sorted(reference)
        i = bisect_right(bases, offset) - 1
        if i >= 0 and reference[bases[i]][0] > offset:
            return bases[i]
        return offset

    def check_final(self, gaps: list[Gap]) -> dict[str, int]:
        if not self.caught_up():
            raise InvariantViolation("the regions did not settle or the mirror did not catch up: " + ", ".join(
                f"{tp} source {self.ends(self.source, tp)} (ISR {self._isr(tp)}) target {self.ends(self.target, tp)}"
                for tp in self.tps) + f"; groups source {self.group_of(self.source)} target {self.group_of(self.target)}")
        records = lost = 0
        for tp in self.tps:
            end = self.ends(self.target, tp)
            assert end is not None
            lost += self.check_gaps(tp, end, gaps)
            records += end
            if self.reference_end[tp] < end:
                raise InvariantViolation(f"{tp}: the reference holds {self.reference_end[tp]}, the target {end}")
            for node_id in self.target.live():
                partition = self.target.node(node_id).partitions.get(tp)
                assert partition is not None
                self._compare(node_id, tp, partition.log, partition.log_start_offset, end)
            leader = self.target.leader_of(tp)
            assert leader is not None
            values = dict(self.target.records(leader, tp, below=end))
            start = self.source_start[tp]
            for batch in self.workload.acked:
                if batch.tp != tp or batch.base_offset < start:
                    continue
                for i, value in enumerate(batch.values):
                    if values.get(batch.base_offset + i) != value:
                        raise InvariantViolation(f"{tp}: acknowledged {value!r} at offset {batch.base_offset + i} "
                                                 f"is not in the target ({values.get(batch.base_offset + i)!r})")
        return {"records": records, "gap_records": lost, "checks": self.checks, "batches": self.batches_compared}


def _spans(offsets: set[int]) -> str:
    """``{1, 2, 3, 7}`` as ``[1, 4) [7, 8)``."""
    out, ordered = [], sorted(offsets)
    for i, offset in enumerate(ordered):
        if i == 0 or ordered[i - 1] != offset - 1:
            out.append([offset, offset + 1])
        else:
            out[-1][1] = offset + 1
    return " ".join(f"[{a}, {b})" for a, b in out) or "nothing"
