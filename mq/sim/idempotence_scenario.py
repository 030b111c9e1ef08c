"""R17 in virtual time: an idempotent producer on a simulated region whose network
drops answers, duplicates requests and delays them, while brokers crash and restart.

The client (``IdempotentClient``) takes a producer id with InitProducerId and sends
each partition's batches in sequence order, one in flight per partition; a batch
whose answer is lost (dropped, timed out) or retriable is sent again with the same
producer id, epoch and sequence. So the leaders receive many copies of the same batch
(network duplicates, resends, copies arriving after a fail-over) and must append each
batch once. At the end (``check_exactly_once``): every partition's log holds each
value exactly once, in the order sent, at the offsets acknowledged; the usual region
invariants hold after every event.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.core.errors import ErrorCode
from mq.core.types import TopicPartition
from mq.protocol.messages import (
    ProducePartitionData,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
    Response,
)
from mq.protocol.producer_messages import InitProducerIdRequest, InitProducerIdResponse
from mq.protocol.record_batch import build_batch
from mq.sim.network import Delay, Drop, Duplicate
from mq.sim.region import Ack, SimRegion
from mq.sim.region_scenarios import _ready_region, _settle
from mq.sim.scheduler import InvariantViolation

RECORDS_PER_BATCH = 3
RESEND_AFTER_MS = 20
PACE_MS = 8  # between a partition's acknowledged batch and its next


@dataclass(frozen=True, slots=True)
class IdempotenceRun:
    seed: int
    acked: int
    faults: int
    events: int
    resends: int
    duplicates_answered: int  # by leaders still up at the end (crashed ones lost their counts)


@dataclass(slots=True)
class _PartitionProducer:
    tp: TopicPartition
    next_batch: int = 0  # index of the batch being sent (its sequence: index * RECORDS_PER_BATCH)
    in_flight: bool = False


class IdempotentClient:
    def __init__(self, region: SimRegion, partitions: list[TopicPartition], *, batches: int) -> None:
        self.region = region
        self.batches = batches
        self.producer_id = -1
        self.producer_epoch = -1
        self.parts = [_PartitionProducer(tp) for tp in partitions]
        self.sends = 0
        self.resends = 0

    @staticmethod
    def values(tp: TopicPartition, batch: int) -> list[bytes]:
        return [b"p%d-%d" % (tp.partition, batch * RECORDS_PER_BATCH + i) for i in range(RECORDS_PER_BATCH)]

    @property
    def done(self) -> bool:
        return all(p.next_batch >= self.batches for p in self.parts)

    def start(self) -> None:
        live = self.region.live()
        if self.producer_id >= 0 or not live:
            self._later(self.start)
            return

        def answered(response: Response | None) -> None:
            if isinstance(response, InitProducerIdResponse) and response.error_code == ErrorCode.NONE:
                self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
                for part in self.parts:
                    self._send(part)
            else:
                self._later(self.start)
        self.region.request(live[self.sends % len(live)], InitProducerIdRequest(), answered, timeout_ms=500)

    def _later(self, action) -> None:  # type: ignore[no-untyped-def]
        self.region.scheduler.schedule(self.region.now_ms + RESEND_AFTER_MS, action)

    def _send(self, part: _PartitionProducer) -> None:
        if part.next_batch >= self.batches or part.in_flight:
            return
        leader = self.region.leader_of(part.tp)
        if leader is None or leader not in self.region.live():
            self._later(lambda: self._send(part))
            return
        index = part.next_batch
        batch = build_batch([(None, v, (), self.region.now_ms) for v in self.values(part.tp, index)],
                            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                            base_sequence=index * RECORDS_PER_BATCH)
        request = ProduceRequest(-1, 300, [ProduceTopicData(part.tp.topic, [ProducePartitionData(part.tp.partition, batch)])])
        part.in_flight = True
        self.sends += 1

        def answered(response: Response | None) -> None:
            if part.next_batch != index:
                return  # a late answer to a copy of a batch already acknowledged
            part.in_flight = False
            code = ErrorCode.REQUEST_TIMED_OUT
            if isinstance(response, ProduceResponse):
                answer = response.topics[0].partitions[0]
                code = ErrorCode(answer.error_code)
                if code == ErrorCode.NONE:
                    for i, value in enumerate(self.values(part.tp, index)):
                        self.region.acks.append(Ack(part.tp, value, answer.base_offset + i))
                    part.next_batch += 1
                    self.region.scheduler.schedule(self.region.now_ms + PACE_MS, lambda: self._send(part))
                    return
            if not code.retriable and code not in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
                raise InvariantViolation(f"{part.tp}: batch {index} refused with {code.name}")
            self.resends += 1
            self._later(lambda: self._send(part))
        self.region.request(leader, request, answered, timeout_ms=400)


def check_exactly_once(region: SimRegion, client: IdempotentClient) -> int:
    """Every value once, in the order sent, in each partition's log. Returns the
    records checked."""
    checked = 0
    for part in client.parts:
        leader = region.leader_of(part.tp)
        if leader is None:
            raise InvariantViolation(f"{part.tp} has no leader after healing")
        got = [value for _, value in region.records(leader, part.tp)]
        want = [v for b in range(client.batches) for v in client.values(part.tp, b)]
        if got != want:
            dups = len(got) - len(set(got))
            raise InvariantViolation(f"{part.tp}: log holds {len(got)} records ({dups} duplicates), "
                                     f"expected the {len(want)} sent once each, in order")
        checked += len(got)
    return checked


def idempotence_scenario(seed: int, *, batches: int = 100) -> IdempotenceRun:
    region, invariants, partitions = _ready_region(seed)
    rng = region.rng.fork("faults")
    client = IdempotentClient(region, partitions, batches=batches)
    client.start()
    faults = 0
    deadline = region.now_ms + 60_000
    while not client.done and region.now_ms < deadline:
        region.run_for(rng.randint(100, 600))
        kind = rng.choice(["crash", "drop-answers", "duplicate", "delay", "none"])
        victim = rng.choice(list(region.ids))
        faults += kind != "none"
        if kind == "crash":
            region.crash(victim)
            region.run_for(rng.randint(100, 800))
            region.start(victim)
        elif kind == "drop-answers":  # answers lost: the client resends what was appended
            region.network.add_filter(Drop(0.5), source=victim)
            region.run_for(rng.randint(100, 600))
            region.network.clear_filters()
        elif kind == "duplicate":  # every message may arrive twice
            region.network.add_filter(Duplicate(0.5, max_extra_ms=30))
            region.run_for(rng.randint(100, 600))
            region.network.clear_filters()
        elif kind == "delay":
            region.network.add_filter(Delay(1, 60))
            region.run_for(rng.randint(100, 600))
            region.network.clear_filters()
    if not client.done:
        raise InvariantViolation(f"the producer did not finish: {[p.next_batch for p in client.parts]}")
    _settle(region, partitions)
    counts = invariants.check_final(partitions)
    check_exactly_once(region, client)
    duplicates = sum(stats.duplicate_batches for i in region.live() for stats in region.node(i).stats.topics.values())
    return IdempotenceRun(seed, counts["acked"], faults, region.scheduler.events_run, client.resends, duplicates)
