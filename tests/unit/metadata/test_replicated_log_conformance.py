"""Every ``ReplicatedLog`` behaves alike: the in-memory one the simulation uses and the
one on ``mq.storage.Log`` the broker uses. Each test runs against both; crashes are
``MemoryReplicatedLog.crash()`` or ``MemoryFileIO.crash()`` followed by a reopen."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from mq.core.clock import ManualClock
from mq.core.rng import Rng
from mq.core.types import OffsetAndEpoch
from mq.metadata.raft_log import StorageReplicatedLog, snapshot_name
from mq.raft import LogEntry, MemoryReplicatedLog, Snapshot
from mq.raft.log import UNKNOWN, ReplicatedLog
from mq.storage.fileio import MemoryFileIO

DIRECTORY = "/data/__cluster_metadata-0"


@dataclass
class Subject:
    """A log under test and how to make it lose power and come back."""

    log: ReplicatedLog
    crash: Callable[[], None]
    reopen: Callable[[], None]
    fileio: MemoryFileIO | None = None

    def crash_and_reopen(self) -> None:
        self.crash()
        self.reopen()


def memory_subject() -> Subject:
    log = MemoryReplicatedLog()
    return Subject(log, log.crash, lambda: None)


def storage_subject() -> Subject:
    fileio, clock = MemoryFileIO(), ManualClock()
    subject = Subject(StorageReplicatedLog.open(fileio, DIRECTORY, clock=clock), fileio.crash, lambda: None,
                      fileio)

    def reopen() -> None:
        subject.log = StorageReplicatedLog.open(fileio, DIRECTORY, clock=clock)

    subject.reopen = reopen
    return subject


@pytest.fixture(params=[memory_subject, storage_subject], ids=["memory", "storage"])
def subject(request: pytest.FixtureRequest) -> Subject:
    return request.param()


def entries_with(*epochs: int, start: int = 0) -> list[LogEntry]:
    return [LogEntry(start + i, e, b"entry-%d" % (start + i)) for i, e in enumerate(epochs)]


def test_empty_log(subject: Subject) -> None:
    log = subject.log
    assert (log.start_offset, log.end_offset, log.last_epoch) == (0, 0, 0)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(0, 0)
    assert log.epoch_at(0) is None
    assert log.entries(0, 10) == []
    assert log.latest_snapshot() is None


def test_append_and_read_back_entries_with_epochs_and_control(subject: Subject) -> None:
    log = subject.log
    written = [LogEntry(0, 1, b"", control=True), LogEntry(1, 1, b"a"), LogEntry(2, 3, b"b" * 5000),
               LogEntry(3, 3, b"c")]
    log.append(written[:1])
    log.append(written[1:])
    assert (log.end_offset, log.last_epoch) == (4, 3)
    assert log.entries(0, 100) == written
    assert log.entries(1, 2) == written[1:3]
    assert log.entries(4, 10) == []
    assert [log.epoch_at(i) for i in range(-1, 5)] == [None, 1, 1, 3, 3, None]


# epochs of entries 0..6: 1 1 2 2 2 4 4
@pytest.mark.parametrize(("asked", "expected"), [
    (0, (0, 0)), (1, (2, 1)), (2, (5, 2)), (3, (5, 2)), (4, (7, 4)), (9, (7, 4)),
])
def test_end_offset_for_epoch(subject: Subject, asked: int, expected: tuple[int, int]) -> None:
    subject.log.append(entries_with(1, 1, 2, 2, 2, 4, 4))
    assert subject.log.end_offset_for_epoch(asked) == OffsetAndEpoch(*expected)


def test_append_rejects_gaps_and_older_epochs(subject: Subject) -> None:
    log = subject.log
    log.append(entries_with(2, 2))
    with pytest.raises(ValueError):
        log.append([LogEntry(3, 2, b"gap")])
    with pytest.raises(ValueError):
        log.append([LogEntry(2, 1, b"older")])
    assert (log.end_offset, log.last_epoch) == (2, 2)


def test_truncate_then_append_a_new_epoch(subject: Subject) -> None:
    log = subject.log
    log.append(entries_with(1, 1, 2, 2, 2))
    log.truncate_to(3)
    assert (log.end_offset, log.last_epoch) == (3, 2)
    log.truncate_to(9)  # beyond the end: nothing to do
    assert log.end_offset == 3
    log.truncate_to(2)
    assert (log.end_offset, log.last_epoch) == (2, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)
    log.append([LogEntry(2, 5, b"new")])
    assert log.entries(0, 10) == [*entries_with(1, 1), LogEntry(2, 5, b"new")]
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(3, 5)
    with pytest.raises(ValueError):
        log.truncate_to(-1)


def test_crash_keeps_exactly_what_was_flushed(subject: Subject) -> None:
    subject.log.append(entries_with(1, 1, 2))
    subject.log.flush()
    subject.log.append(entries_with(2, 3, start=3))
    subject.crash_and_reopen()
    log = subject.log
    assert (log.end_offset, log.last_epoch) == (3, 2)
    assert log.entries(0, 10) == entries_with(1, 1, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(3, 2)
    log.append(entries_with(3, start=3))  # the log goes on from what survived
    assert log.entries(3, 1) == entries_with(3, start=3)


def test_flushed_truncation_survives_a_crash(subject: Subject) -> None:
    subject.log.append(entries_with(1, 1, 2, 2))
    subject.log.flush()
    subject.log.truncate_to(2)
    subject.log.append(entries_with(3, start=2))
    subject.log.flush()
    subject.log.append(entries_with(3, start=3))
    subject.crash_and_reopen()
    assert subject.log.entries(0, 10) == entries_with(1, 1, 3)
    assert subject.log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)


def test_crash_without_any_flush_loses_everything(subject: Subject) -> None:
    subject.log.append(entries_with(1, 1))
    subject.crash_and_reopen()
    assert (subject.log.end_offset, subject.log.last_epoch) == (0, 0)


def test_compact_keeps_the_suffix_and_answers_epochs_across_the_snapshot(subject: Subject) -> None:
    log = subject.log
    log.append(entries_with(1, 1, 2, 2, 2, 4, 4))
    snapshot = Snapshot(OffsetAndEpoch(4, 2), b"state@4")
    log.compact(snapshot)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (4, 7, 4)
    assert log.latest_snapshot() == snapshot
    assert log.epoch_at(3) == 2  # the snapshot's epoch, just below the log start
    assert log.epoch_at(2) is None
    assert log.entries(4, 10) == entries_with(2, 4, 4, start=4)
    with pytest.raises(ValueError):
        log.entries(3, 1)
    with pytest.raises(ValueError):
        log.truncate_to(3)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(5, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 2)
    assert log.end_offset_for_epoch(1) == UNKNOWN  # below the snapshot
    # It is all durable: compaction flushes, and the snapshot is stored before use.
    subject.crash_and_reopen()
    log = subject.log
    assert (log.start_offset, log.end_offset, log.last_epoch) == (4, 7, 4)
    assert log.latest_snapshot() == snapshot
    assert log.entries(4, 10) == entries_with(2, 4, 4, start=4)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(5, 2)


def test_compact_the_whole_log(subject: Subject) -> None:
    log = subject.log
    log.append(entries_with(1, 3))
    log.compact(Snapshot(OffsetAndEpoch(2, 3), b"all"))
    assert (log.start_offset, log.end_offset, log.last_epoch) == (2, 2, 3)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(2, 3)
    assert log.end_offset_for_epoch(2) == UNKNOWN
    log.append(entries_with(5, start=2))
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(2, 3)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(3, 5)


def test_compact_rejects_a_snapshot_that_does_not_match(subject: Subject) -> None:
    log = subject.log
    log.append(entries_with(1, 1, 2))
    with pytest.raises(ValueError):
        log.compact(Snapshot(OffsetAndEpoch(4, 2), b"beyond the end"))
    with pytest.raises(ValueError):
        log.compact(Snapshot(OffsetAndEpoch(2, 2), b"wrong epoch"))
    assert (log.start_offset, log.latest_snapshot()) == (0, None)


def test_install_snapshot_replaces_the_log_durably(subject: Subject) -> None:
    log = subject.log
    log.append(entries_with(1, 1, 2))
    log.flush()
    snapshot = Snapshot(OffsetAndEpoch(10, 6), b"leader state")
    log.install_snapshot(snapshot)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (10, 10, 6)
    assert log.epoch_at(9) == 6
    assert log.entries(10, 5) == []
    subject.crash_and_reopen()
    log = subject.log
    assert (log.start_offset, log.end_offset, log.last_epoch) == (10, 10, 6)
    assert log.latest_snapshot() == snapshot
    log.append(entries_with(7, start=10))
    log.flush()
    subject.crash_and_reopen()
    assert subject.log.entries(10, 5) == entries_with(7, start=10)
    assert subject.log.end_offset_for_epoch(6) == OffsetAndEpoch(10, 6)


def test_install_snapshot_below_the_log_end(subject: Subject) -> None:
    subject.log.append(entries_with(1, 1, 2, 2))
    subject.log.install_snapshot(Snapshot(OffsetAndEpoch(2, 3), b"s"))
    assert (subject.log.start_offset, subject.log.end_offset, subject.log.last_epoch) == (2, 2, 3)
    assert subject.log.entries(2, 5) == []


# ---- storage only: what is on disk


def test_storage_append_is_all_or_nothing() -> None:
    """The storage log checks a whole append before writing any of it (the memory log
    may keep the valid prefix; the Protocol promises neither)."""
    log = storage_subject().log
    log.append(entries_with(2, 2))
    with pytest.raises(ValueError):
        log.append([LogEntry(2, 2, b"ok"), LogEntry(3, 1, b"older")])
    assert (log.end_offset, log.last_epoch) == (2, 2)


def test_storage_entries_are_batches_carrying_the_raft_epoch() -> None:
    subject = storage_subject()
    log = subject.log
    assert isinstance(log, StorageReplicatedLog)
    log.append([LogEntry(0, 7, b"x", control=True), LogEntry(1, 7, b"y"), LogEntry(2, 9, b"z")])
    from mq.protocol.record_batch import iter_batches

    data = log.log.read(0, max_bytes=1 << 20).records
    headers = [h for _, h in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control) for h in headers] == [
        (0, 7, True), (1, 7, False), (2, 9, False)]


def test_storage_flush_fsyncs_the_segment() -> None:
    subject = storage_subject()
    fileio = subject.fileio
    assert fileio is not None
    segment = f"{DIRECTORY}/{0:020d}.log"
    subject.log.append(entries_with(1, 1))
    assert fileio.durable_size(segment) == 0
    subject.log.flush()
    assert fileio.durable_size(segment) == len(fileio.files[segment].data) > 0


def test_storage_crash_after_storing_a_snapshot_finishes_the_compaction() -> None:
    """A crash between writing the snapshot file and trimming the log: reopening trims."""
    subject = storage_subject()
    log = subject.log
    assert isinstance(log, StorageReplicatedLog)
    log.append(entries_with(1, 1, 2, 2))
    log.flush()
    log._store_snapshot(Snapshot(OffsetAndEpoch(3, 2), b"s"))  # the first half of compact()
    subject.crash_and_reopen()
    assert (subject.log.start_offset, subject.log.end_offset) == (3, 4)
    assert subject.log.latest_snapshot() == Snapshot(OffsetAndEpoch(3, 2), b"s")
    assert subject.log.entries(3, 5) == entries_with(2, start=3)


def test_storage_torn_snapshot_file_is_ignored() -> None:
    subject = storage_subject()
    fileio = subject.fileio
    assert fileio is not None
    subject.log.append(entries_with(1, 1, 2))
    subject.log.compact(Snapshot(OffsetAndEpoch(2, 1), b"good"))
    torn = f"{DIRECTORY}/{snapshot_name(OffsetAndEpoch(3, 2))}"
    handle = fileio.open(torn)
    handle.append(b"\x00" * 30)
    handle.fsync()
    handle.close()
    subject.crash_and_reopen()
    assert subject.log.latest_snapshot() == Snapshot(OffsetAndEpoch(2, 1), b"good")
    assert not fileio.exists(torn)
    assert subject.log.entries(2, 5) == entries_with(2, start=2)


# ---- both at once: a seeded random history must look the same through either log


def observe(log: ReplicatedLog, max_epoch: int) -> tuple[object, ...]:
    start, end = log.start_offset, log.end_offset
    return (
        start, end, log.last_epoch, log.latest_snapshot(), log.entries(start, end - start + 1),
        [log.epoch_at(o) for o in range(start - 2, end + 1)],
        [log.end_offset_for_epoch(e) for e in range(max_epoch + 2)],
    )


def random_step(rng: Rng, subjects: list[Subject], epoch: int) -> int:
    """Apply one random operation to every subject; returns the epoch now in use."""
    log = subjects[0].log
    start, end = log.start_offset, log.end_offset
    roll = rng.random()
    if roll < 0.4:
        epoch += rng.choice([0, 0, 1])
        batch = [LogEntry(end + i, epoch, rng.randbytes(rng.randint(0, 40)), control=rng.random() < 0.1)
                 for i in range(rng.randint(1, 4))]
        for s in subjects:
            s.log.append(batch)
    elif roll < 0.55:
        offset = rng.randint(start, end)
        for s in subjects:  # the node's shell flushes before it acts on a truncation
            s.log.truncate_to(offset)
            s.log.flush()
    elif roll < 0.75:
        for s in subjects:
            s.log.flush()
    elif roll < 0.87:
        for s in subjects:
            s.crash_and_reopen()
    elif roll < 0.95 and end > start:
        offset = rng.randint(start + 1, end)
        snapshot = Snapshot(OffsetAndEpoch(offset, log.epoch_at(offset - 1) or 0), b"at %d" % offset)
        for s in subjects:
            s.log.compact(snapshot)
    else:
        epoch += 1
        snapshot = Snapshot(OffsetAndEpoch(end + rng.randint(0, 5), epoch), b"installed")
        for s in subjects:
            s.log.install_snapshot(snapshot)
    return epoch


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_agree(seed: int) -> None:
    rng = Rng(seed)
    subjects = [memory_subject(), storage_subject()]
    epoch = 1
    for step in range(60):
        epoch = random_step(rng, subjects, epoch)
        memory, storage = (observe(s.log, epoch) for s in subjects)
        assert memory == storage, f"seed={seed} step={step}"
