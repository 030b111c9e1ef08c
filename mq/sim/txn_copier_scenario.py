"""R19 in a seeded simulation: a transactional copier killed at random points, with
zombies, a coordinator that fails over, markers that arrive late and transactions
that time out — built from the real cores (``TransactionCoordinator``, ``Log`` with
its producer state, LSO and ``.txnindex``, the consumer's ``Fetcher``), driven one
step at a time by a seeded ``Rng``. One seed replays one run exactly.

Actors, each a generator advanced one step per event:

- **copiers**: init_transactions (fences the previous instance, aborts its open
  transaction), wait for stable group offsets, then repeatedly: take 1..``per_txn``
  input records from the committed offset, AddPartitionsToTxn, append a transactional
  batch to the output, TxnOffsetCommit (a transactional batch on the offsets
  partition, held until its marker), EndTxn(commit). A copier is killed at random
  points; sometimes it does not die but keeps going as a *zombie* beside its successor.
- **marker sender**: writes the markers the coordinator owes (output and offsets
  partitions, one at a time, so a crash can leave them half written) and then the
  Complete* record; it runs late at random.
- **coordinator fail-over**: a new coordinator (epoch + 1) replays ``__transaction_state``.
- **timeouts**: ``expire`` aborts transactions older than their timeout.

After every event: the LSO of the output never passes an open transaction, and what a
``read_committed`` reader sees is a prefix of the input, each record once, in order. At
the end: exactly the input.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

from mq.client.internals.fetcher import Fetcher
from mq.client.internals.subscription import SubscriptionState
from mq.coordinator.records import CoordinatorRecord
from mq.coordinator.txn_coordinator import TransactionCoordinator, TxnConfig, TxnResult
from mq.core.config import TopicConfig
from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.core.types import TopicPartition
from mq.protocol.batch_format import iter_batches
from mq.protocol.control_batch import ControlType, build_marker
from mq.protocol.messages import (
    AbortedTransaction,
    FetchPartitionResponse,
    FetchResponse,
    FetchTopicResponse,
)
from mq.protocol.record_batch import build_batch
from mq.sim.scheduler import InvariantViolation
from mq.storage.fileio import MemoryFileIO
from mq.storage.log import Log

OUT = TopicPartition("out", 0)
OFFSETS = TopicPartition("__consumer_offsets", 0)
TID = "copier"
TIMEOUT_MS = 400
Step = Generator[None, None, None]


@dataclass(frozen=True, slots=True)
class TxnCopierRun:
    seed: int
    copied: int
    kills: int
    zombies: int
    failovers: int
    timeouts: int
    transactions: int
    fenced_writes: int
    events: int


@dataclass
class _World:
    rng: Rng
    inputs: list[bytes]
    per_txn: int
    fs: MemoryFileIO = field(default_factory=MemoryFileIO)
    txn_log: list[CoordinatorRecord] = field(default_factory=list)
    committed: int = 0  # the group's committed input offset (what OffsetFetch returns)
    pending_offsets: dict[int, int] = field(default_factory=dict)  # producer id -> offset held by its txn
    now_ms: int = 0
    next_pid: int = 1000
    fenced_writes: int = 0
    transactions: int = 0
    checked: tuple[int, int] = (-1, -1)  # (log end, LSO) of the output at the last read_committed check

    def __post_init__(self) -> None:
        self.fs.makedirs("/sim")
        cfg = TopicConfig(segment_bytes=2048)
        self.out = Log.open(self.fs, "/sim/out-0", cfg, now_ms=0)
        self.offsets = Log.open(self.fs, "/sim/__consumer_offsets-0", cfg, now_ms=0)
        self.coordinator = TransactionCoordinator(0, TxnConfig(offsets_partitions=1), coordinator_epoch=0)

    def log_of(self, tp: TopicPartition) -> Log:
        return self.out if tp == OUT else self.offsets

    def apply(self, result: TxnResult) -> TxnResult:
        """The coordinator's write is replicated, then replayed."""
        self.txn_log.extend(result.records)
        self.coordinator.replay_all(result.records)
        return result

    def new_pid(self) -> int:
        self.next_pid += 1
        return self.next_pid


def _copier(w: _World) -> Step:
    while True:  # init_transactions: retried while the old instance's abort completes
        init = w.apply(w.coordinator.init_producer_id(TID, TIMEOUT_MS, now_ms=w.now_ms, new_producer_id=w.new_pid))
        if init.error == ErrorCode.NONE:
            break
        yield
    pid, epoch = init.producer_id, init.producer_epoch
    yield
    while w.pending_offsets:  # OffsetFetch: UNSTABLE_OFFSET_COMMIT until the markers land
        yield
    position = w.committed
    while position < len(w.inputs):
        chunk = w.inputs[position:position + w.rng.randint(1, w.per_txn)]
        while True:
            added = w.apply(w.coordinator.add_partitions(TID, pid, epoch, [OUT, OFFSETS], now_ms=w.now_ms))
            if added.error != ErrorCode.CONCURRENT_TRANSACTIONS:
                break
            yield
        if added.error != ErrorCode.NONE:
            w.fenced_writes += 1
            return  # fenced: this instance is a zombie and stops
        yield
        if not _append(w, OUT, pid, epoch, [(None, v) for v in chunk]):
            return
        yield
        end_offset = position + len(chunk)
        if not _append(w, OFFSETS, pid, epoch, [(b"copier", b"%d" % end_offset)]):
            return
        w.pending_offsets[pid] = end_offset
        yield
        ended = w.apply(w.coordinator.end_txn(TID, pid, epoch, True, now_ms=w.now_ms))
        if ended.error != ErrorCode.NONE:
            w.fenced_writes += 1
            return  # timed out or fenced meanwhile: the transaction was aborted
        w.transactions += 1
        epoch = ended.producer_epoch
        position = end_offset
        yield


def _append(w: _World, tp: TopicPartition, pid: int, epoch: int, records: list[tuple[bytes | None, bytes]]) -> bool:
    log = w.log_of(tp)
    entry = log.producer_state.entry(pid)
    seq = entry.last_seq + 1 if entry is not None and entry.producer_epoch == epoch and entry.batches else 0
    batch = build_batch([(k, v, (), w.now_ms) for k, v in records], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    try:
        log.append_as_leader(batch, leader_epoch=0, now_ms=w.now_ms)
    except MqError as err:
        if err.code != ErrorCode.INVALID_PRODUCER_EPOCH:
            raise InvariantViolation(f"{tp}: a copier's batch was refused with {err.code.name}: {err.message}") \
                from None
        w.fenced_writes += 1
        return False
    return True


def _marker_sender(w: _World) -> Step:
    while True:
        for job in w.coordinator.pending_markers():
            for tp in job.partitions:
                kind = ControlType.COMMIT if job.commit else ControlType.ABORT
                marker = build_marker(job.producer_id, job.producer_epoch, kind,
                                      coordinator_epoch=job.coordinator_epoch, timestamp_ms=w.now_ms)
                try:
                    w.log_of(tp).append_markers_as_leader(marker, leader_epoch=0, now_ms=w.now_ms)
                except MqError as err:
                    if err.code != ErrorCode.INVALID_PRODUCER_EPOCH:
                        raise
                if tp == OFFSETS:
                    held = w.pending_offsets.pop(job.producer_id, None)
                    if held is not None and job.commit:
                        w.committed = held
                yield  # a crash or fail-over may come between two partitions' markers
            w.apply(w.coordinator.markers_written(job.transactional_id, job.producer_epoch, now_ms=w.now_ms))
        yield


def read_committed(log: Log) -> list[bytes]:
    """What a read_committed consumer reads from offset 0 (the real Fetcher's filter)."""
    lso = log.last_stable_offset(log.log_end_offset)
    parts, offset = [], 0
    while offset < lso:  # a read returns one segment's batches at most
        found = log.read(offset, max_bytes=1 << 24, max_offset=lso).records
        if not found:
            break
        parts.append(found)
        offset = max(h.next_offset for _, h in iter_batches(found))
    data = b"".join(parts)
    aborted = [AbortedTransaction(t.producer_id, t.first_offset) for t in log.aborted_transactions(0, lso)]
    subs = SubscriptionState("earliest")
    subs.assign([OUT])
    subs.seek(OUT, 0)
    fetcher = Fetcher(subs, isolation_level="read_committed")
    [(node, _, sent)] = fetcher.prepare_fetches(lambda tp: 1, lambda tp: 0)
    fetcher.on_response(node, sent, FetchResponse([FetchTopicResponse(OUT.topic, [FetchPartitionResponse(
        0, 0, log.log_end_offset, lso, 0, data, aborted_transactions=aborted)])]))
    return [r.value for r in fetcher.fetch_records(1 << 20) if r.value is not None]


def _check(w: _World) -> None:
    lso = w.out.last_stable_offset(w.out.log_end_offset)
    first_open = w.out.producer_state.first_unstable_offset()
    if first_open is not None and lso > first_open:
        raise InvariantViolation(f"LSO {lso} passed the open transaction starting at {first_open}")
    if (w.out.log_end_offset, lso) == w.checked:
        return  # nothing a reader could see has changed
    w.checked = (w.out.log_end_offset, lso)
    seen = read_committed(w.out)
    if seen != w.inputs[:len(seen)]:
        raise InvariantViolation(f"read_committed sees {seen[:20]}..., not a prefix of the input "
                                 f"({len(seen) - len(set(seen))} duplicates)")


def txn_copier_scenario(seed: int, *, records: int = 60, per_txn: int = 7) -> TxnCopierRun:
    rng = Rng(seed)
    w = _World(rng.fork("world"), [b"v%03d" % i for i in range(records)], per_txn)
    copier: Step | None = _copier(w)
    restart_at = 0  # a killed copier's successor starts then (a hang lets its transaction time out)
    zombies: list[Step] = []
    sender: Step = _marker_sender(w)
    kills = zombie_count = failovers = timeouts = events = 0
    while True:
        events += 1
        if events > 20_000:
            raise InvariantViolation("no progress after 20,000 events")
        w.now_ms += rng.randint(1, 30)
        roll = rng.random()
        if roll < 0.06 and copier is not None:  # kill the copier; now and then it lives on as a zombie
            if rng.random() < 0.3:
                zombies.append(copier)
                zombie_count += 1
            kills += 1
            copier = None
            restart_at = w.now_ms + (rng.randint(TIMEOUT_MS, 2 * TIMEOUT_MS) if rng.random() < 0.1 else 0)
        elif roll < 0.09:
            failovers += 1
            w.coordinator = TransactionCoordinator(0, w.coordinator.config,
                                                   coordinator_epoch=w.coordinator.coordinator_epoch + 1)
            w.coordinator.replay_all(w.txn_log)
            sender = _marker_sender(w)  # the old coordinator's sender died with it
        elif roll < 0.11:
            for result in w.coordinator.expire(now_ms=w.now_ms):
                w.apply(result)
                timeouts += 1
        elif roll < 0.35:
            next(sender)
        elif zombies and roll < 0.45:
            zombie = rng.choice(zombies)
            if next(zombie, "stopped") == "stopped":
                zombies.remove(zombie)
        elif copier is None:
            if w.now_ms >= restart_at:
                copier = _copier(w)
        elif next(copier, "stopped") == "stopped":
            copier = _copier(w)  # a fenced or finished copier: start the next instance
        _check(w)
        if w.committed == records and not w.coordinator.pending_markers() and not w.pending_offsets:
            break
    final = read_committed(w.out)
    if final != w.inputs:
        raise InvariantViolation(f"output holds {len(final)} records ({len(final) - len(set(final))} duplicates), "
                                 f"expected the {records} inputs once each")
    return TxnCopierRun(seed, len(final), kills, zombie_count, failovers, timeouts, w.transactions,
                        w.fenced_writes, events)
