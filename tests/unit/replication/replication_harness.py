"""A small in-memory partition log and a three-replica harness for the replication
cores: a controller (LeaderAndIsr with epoch checks on AlterPartition), brokers that
learn the committed state when told to, and fetches split into request / serve /
deliver so a test can interleave elections with fetches in flight.

Every batch is real RecordBatch bytes (``build_batch``): the epoch cache of a
follower is rebuilt from the ``partition_leader_epoch`` of the fetched headers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mq.core.errors import ErrorCode, MqError
from mq.core.types import Acks, TopicPartition
from mq.protocol.batch_format import iter_batches, set_base_offset, set_partition_leader_epoch
from mq.protocol.messages import FetchPartition
from mq.protocol.record_batch import build_batch, decode_records
from mq.replication import (
    AlterPartitionRequest,
    FollowerPartition,
    LeaderAndIsr,
    LeaderEpochCache,
    PartitionState,
    ReplicaFetchResponse,
)

TP = TopicPartition("payments", 0)


def record(value: str) -> bytes:
    return build_batch([(None, value.encode(), (), 1_000)])


class MemLog:
    """A partition log as a list of batches (the ReplicaLog protocol plus what a
    leader needs): offsets assigned on leader appends, kept on follower appends,
    truncation to a batch boundary."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self._start = 0

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        if not self.batches:
            return self._start
        return next(iter_batches(self.batches[-1]))[1].next_offset

    def append_as_leader(self, records: bytes, *, leader_epoch: int, now_ms: int = 0) -> int:
        buf = bytearray(records)
        first = self.log_end_offset
        next_offset = first
        for pos, header in list(iter_batches(buf)):
            set_base_offset(buf, pos, next_offset)
            set_partition_leader_epoch(buf, pos, leader_epoch)
            self.batches.append(bytes(buf[pos : pos + header.size]))
            next_offset += header.last_offset_delta + 1
        return first

    def append_as_follower(self, records: bytes | memoryview, *, now_ms: int = 0) -> None:
        data = bytes(records)
        for pos, header in iter_batches(data):
            if header.base_offset < self.log_end_offset:
                raise MqError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{header.base_offset} < {self.log_end_offset}")
            self.batches.append(data[pos : pos + header.size])

    def truncate_to(self, offset: int) -> None:
        self.batches = [b for b in self.batches if next(iter_batches(b))[1].last_offset < offset]

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.batches = []
        self._start = offset

    def delete_records(self, offset: int) -> int:
        """Move the log start up to ``offset`` (at most the log end), dropping the
        batches wholly below it."""
        if offset > self._start:
            self._start = min(offset, self.log_end_offset)
            self.batches = [b for b in self.batches if next(iter_batches(b))[1].last_offset >= self._start]
        return self._start

    def read(self, offset: int, *, max_bytes: int = 1 << 20) -> bytes:
        out = b""
        for batch in self.batches:
            header = next(iter_batches(batch))[1]
            if header.last_offset >= offset and (not out or len(out) + len(batch) <= max_bytes):
                out += batch
        return out

    def entries(self) -> list[tuple[int, int, bytes | None]]:
        """(offset, leader epoch, value) of every record."""
        out = []
        for batch in self.batches:
            epoch = next(iter_batches(batch))[1].partition_leader_epoch
            out += [(r.offset, epoch, r.value) for r in decode_records(batch)]
        return out

    def values(self) -> list[str]:
        return [v.decode() for _, _, v in self.entries() if v is not None]


@dataclass
class Broker:
    broker_id: int
    log: MemLog = field(default_factory=MemLog)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    leader: PartitionState | None = None
    follower: FollowerPartition | None = None
    known: LeaderAndIsr | None = None
    hw_checkpoint: int = 0

    @property
    def high_watermark(self) -> int:
        if self.leader is not None:
            return self.leader.high_watermark
        return self.follower.high_watermark if self.follower is not None else self.hw_checkpoint


@dataclass
class InFlight:
    """A follower fetch: the request as built, the broker it went to, the answer."""

    follower: int
    target: int
    request: FetchPartition
    response: ReplicaFetchResponse | None = None


class Cluster:
    def __init__(
        self, ids: tuple[int, ...] = (1, 2, 3), *, min_insync_replicas: int = 1,
        replica_lag_time_max_ms: int = 10_000,
    ) -> None:
        self.brokers = {i: Broker(i) for i in ids}
        self.state = LeaderAndIsr(ids[0], 0, ids, 0, ids)
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.now_ms = 0
        self.rejected_alters = 0
        # With ``async_alter`` the proposals wait here until ``process_alter`` (the
        # controller is slow): the leader runs with a pending ISR change meanwhile.
        self.async_alter = False
        self.alters: list[tuple[int, AlterPartitionRequest]] = []
        for i in ids:
            self.learn(i)

    # ---- controller

    def alter_partition(self, request: AlterPartitionRequest) -> LeaderAndIsr | None:
        """The controller's checks: current leader, epoch, partition epoch."""
        s = self.state
        if (
            request.leader != s.leader or request.leader_epoch != s.leader_epoch
            or request.partition_epoch != s.partition_epoch
            or not set(request.new_isr) <= set(s.replicas) or s.leader not in request.new_isr
        ):
            self.rejected_alters += 1
            return None
        self.state = replace(s, isr=request.new_isr, partition_epoch=s.partition_epoch + 1)
        return self.state

    def _send_alter(self, broker: Broker, request: AlterPartitionRequest | None) -> None:
        if request is None or broker.leader is None:
            return
        if self.async_alter:
            self.alters.append((broker.broker_id, request))
            return
        self._answer_alter(broker, request)

    def process_alter(self) -> None:
        """The controller handles the oldest queued AlterPartition and answers it."""
        if self.alters:
            broker_id, request = self.alters.pop(0)
            self._answer_alter(self.brokers[broker_id], request)

    def _answer_alter(self, broker: Broker, request: AlterPartitionRequest) -> None:
        committed = self.alter_partition(request)
        if broker.leader is None or broker.leader.pending_alter_partition != request:
            return  # the broker moved on (new epoch, no longer leader): the answer is moot
        if committed is None:
            broker.leader.on_alter_partition_error()
        else:
            broker.known = committed
            broker.leader.apply(committed, now_ms=self.now_ms)

    def elect(self, new_leader: int, *, remove_old: bool = False) -> None:
        """A clean election: only a member of the ISR may lead. ``remove_old`` is the
        controller fencing a failed leader (it leaves the ISR)."""
        s = self.state
        if new_leader not in s.isr:
            raise AssertionError(f"{new_leader} is not in the ISR {s.isr}")
        isr = tuple(r for r in s.isr if not (remove_old and r == s.leader and r != new_leader))
        self.state = LeaderAndIsr(new_leader, s.leader_epoch + 1, isr, s.partition_epoch + 1, s.replicas)

    # ---- brokers

    def learn(self, broker_id: int) -> None:
        """The broker applies the controller's committed state (metadata propagation)."""
        b = self.brokers[broker_id]
        s = self.state
        b.known = s
        if s.leader == broker_id:
            if b.leader is not None:
                b.leader.apply(s, now_ms=self.now_ms)
                return
            hw = b.follower.high_watermark if b.follower is not None else b.hw_checkpoint
            b.follower = None
            b.leader = PartitionState(
                TP, local_id=broker_id, state=s, log=b.log, epoch_cache=b.cache, high_watermark=hw,
                now_ms=self.now_ms, min_insync_replicas=self.min_insync_replicas,
                replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            )
            return
        if b.leader is not None:
            b.hw_checkpoint = b.leader.high_watermark
            b.leader = None
        if b.follower is None:
            b.follower = FollowerPartition(
                TP, log=b.log, epoch_cache=b.cache, leader_id=s.leader, leader_epoch=s.leader_epoch,
                high_watermark=b.hw_checkpoint,
            )
        b.follower.on_leader_change(s.leader, s.leader_epoch)

    def produce(self, broker_id: int, value: str, *, acks: Acks = Acks.ALL) -> int | ErrorCode:
        """Append at a broker that believes it leads; returns the offset or the error."""
        b = self.brokers[broker_id]
        if b.leader is None:
            return ErrorCode.NOT_LEADER
        error = b.leader.check_produce(acks)
        if error != ErrorCode.NONE:
            return error
        offset = b.log.append_as_leader(record(value), leader_epoch=b.leader.leader_epoch)
        b.leader.on_leader_append()
        return offset

    def send_fetch(self, follower_id: int) -> InFlight | None:
        b = self.brokers[follower_id]
        if b.follower is None or not b.follower.is_fetchable(self.now_ms):
            return None
        return InFlight(follower_id, b.follower.leader_id, b.follower.fetch_partition())

    def serve(self, flight: InFlight) -> ReplicaFetchResponse:
        t = self.brokers[flight.target]
        req = flight.request
        if t.leader is None:
            flight.response = ReplicaFetchResponse(error=ErrorCode.NOT_LEADER)
            return flight.response
        result = t.leader.fetch_from_follower(
            flight.follower, fetch_offset=req.fetch_offset, last_fetched_epoch=req.last_fetched_epoch,
            current_leader_epoch=req.current_leader_epoch, now_ms=self.now_ms,
        )
        self._send_alter(t, result.alter_partition)
        hw = t.leader.high_watermark if t.leader is not None else result.high_watermark
        if result.error != ErrorCode.NONE:
            flight.response = ReplicaFetchResponse(error=result.error, high_watermark=hw)
        elif result.diverging_epoch is not None:
            flight.response = ReplicaFetchResponse(high_watermark=hw, diverging_epoch=result.diverging_epoch)
        else:
            flight.response = ReplicaFetchResponse(high_watermark=hw, records=t.log.read(req.fetch_offset))
        return flight.response

    def deliver(self, flight: InFlight):  # type: ignore[no-untyped-def]
        b = self.brokers[flight.follower]
        assert flight.response is not None
        if b.follower is None:
            return None
        return b.follower.handle_response(flight.response, request=flight.request, now_ms=self.now_ms)

    def fetch(self, follower_id: int):  # type: ignore[no-untyped-def]
        """One full round trip (None when the broker is not fetching)."""
        flight = self.send_fetch(follower_id)
        if flight is None:
            return None
        self.serve(flight)
        return self.deliver(flight)

    def tick(self, elapsed_ms: int) -> None:
        """Time passes; every broker that believes it leads checks for lagging ISR members."""
        self.now_ms += elapsed_ms
        for broker_id in sorted(self.brokers):
            b = self.brokers[broker_id]
            if b.leader is not None:
                self._send_alter(b, b.leader.maybe_shrink_isr(self.now_ms))

    def restart(self, broker_id: int, *, hw_checkpoint: int | None = None) -> None:
        """A follower restarts: its in-memory high watermark comes back from the (stale)
        checkpoint; log and epoch cache are durable."""
        b = self.brokers[broker_id]
        assert b.leader is None, "restart followers only; fail a leader with elect(remove_old=True)"
        if hw_checkpoint is not None:
            b.hw_checkpoint = hw_checkpoint
        b.follower = None
        b.known = None
        self.learn(broker_id)

    def leader_broker(self) -> Broker:
        return self.brokers[self.state.leader]

    def heal(self, rounds: int = 12) -> None:
        """Everyone learns the current state, then fetches until converged."""
        while self.alters:
            self.process_alter()
        for broker_id in sorted(self.brokers):
            self.learn(broker_id)
        for _ in range(rounds):
            self.now_ms += 1_000  # past any fetch backoff; no ISR shrink check here
            for broker_id in sorted(self.brokers):
                self.fetch(broker_id)
            while self.alters:
                self.process_alter()
