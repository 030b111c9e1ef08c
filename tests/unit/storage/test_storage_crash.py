"""Crashes and damage (TESTING.md R8, R9): torn tails, power loss, flipped bits."""

from __future__ import annotations

import os
import posixpath

import pytest
from storage_helpers import NOW, batch, config, open_log, read_all

from mq.core.rng import Rng
from mq.protocol.record_batch import iter_batches
from mq.storage import Log, LogCorruptedError, MemoryFileIO, OsFileIO, power_loss

TORN_ITERATIONS = 200


def _stored_batches(fs: MemoryFileIO) -> dict[int, tuple[str, int, bytes]]:
    """``{base offset: (file, position, bytes)}`` of every stored batch."""
    out = {}
    for path in sorted(p for p in fs.files if p.endswith(".log")):
        data = bytes(fs.files[path].data)
        for pos, header in iter_batches(data):
            out[header.base_offset] = (path, pos, data[pos : pos + header.size])
    return out


def _append_random(log: Log, rng: Rng, n: int, tag: str) -> None:
    for i in range(n):
        count = rng.randint(1, 6)
        log.append_as_leader(
            batch(count, tag=f"{tag}{i}-", size=rng.randint(1, 300), ts=NOW + rng.randint(0, 10_000)),
            leader_epoch=1, now_ms=NOW,
        )


def _check_lookups(log: Log) -> None:
    assert log.verify() == []
    for offset in range(log.log_start_offset, log.log_end_offset):
        info = log.read(offset, max_bytes=1)
        header = next(h for _, h in iter_batches(info.records))
        assert header.base_offset <= offset <= header.last_offset


def _torn_tail_iteration(seed: int) -> None:
    rng = Rng(seed)
    fs = MemoryFileIO()
    cfg = config(
        segment_bytes=rng.choice([1024, 4096, 1 << 20]),
        index_interval_bytes=rng.choice([0, 100, 1000]),
    )
    log = open_log(fs, cfg)
    _append_random(log, rng, rng.randint(0, 15), "a")
    if rng.random() < 0.7:
        log.flush()
        if rng.random() < 0.5:
            log.checkpoint()
    durable = log.recovery_point
    _append_random(log, rng, rng.randint(1, 15), "b")
    model = read_all(log)
    before = _stored_batches(fs)
    fs.crash(rng, holes=rng.random() < 0.3)
    after = {path: bytes(f.data) for path, f in fs.files.items()}

    again = open_log(fs, cfg)
    end = again.log_end_offset
    assert durable <= end <= len(model)
    assert read_all(again) == model[:end]
    if end < len(model):  # the first batch not recovered really is damaged or gone
        path, pos, data = before[end]
        assert after.get(path, b"")[pos : pos + len(data)] != data
    _check_lookups(again)
    again.append_as_leader(batch(2, tag="c"), leader_epoch=2, now_ms=NOW)
    expected = read_all(again)
    again.close()
    reopened = open_log(fs, cfg)
    assert reopened.segments_recovered_on_open == 0
    assert read_all(reopened) == expected and len(expected) == end + 2


@pytest.mark.parametrize("chunk", range(4))
def test_torn_tail_recovers_to_the_last_valid_batch(chunk: int) -> None:
    per_chunk = TORN_ITERATIONS // 4
    for seed in range(chunk * per_chunk, (chunk + 1) * per_chunk):
        try:
            _torn_tail_iteration(seed)
        except AssertionError as exc:
            raise AssertionError(f"torn-tail seed {seed}: {exc}") from exc


def _closed_log(fs: MemoryFileIO, rng: Rng) -> Log:
    log = open_log(fs, config(segment_bytes=2048, index_interval_bytes=rng.choice([0, 200])))
    _append_random(log, rng, 40, "x")
    assert len(log.segments) >= 3
    return log


@pytest.mark.parametrize("region", ["crc-covered", "header-offsets-and-length"])
def test_flipped_bit_in_closed_segment_is_never_served(region: str) -> None:
    for seed in range(100):
        rng = Rng(seed)
        fs = MemoryFileIO()
        log = _closed_log(fs, rng)
        original = read_all(log)
        closed = log.segments[rng.randint(0, len(log.segments) - 2)]
        log.close()
        stored = _stored_batches(fs)
        victims = [(base, pos, data) for base, (p, pos, data) in stored.items() if p == closed.log_path]
        base, pos, data = rng.choice(victims)
        assert base in stored
        if region == "crc-covered":
            at = rng.randint(21, len(data) - 1)
        else:  # base_offset, batch_length (partition_leader_epoch is outside every check)
            at = rng.choice([*range(12)])
        fs.files[closed.log_path].data[pos + at] ^= 1 << rng.randint(0, 7)

        again = open_log(fs, config(segment_bytes=2048))
        assert again.segments_recovered_on_open == 0  # below the recovery point
        assert again.verify(), f"seed {seed}: verify() missed a flip at byte {at}"
        refused = 0
        for offset in range(again.log_start_offset, again.log_end_offset):
            try:
                info = again.read(offset, max_bytes=rng.choice([1, 500, 5000]))
            except LogCorruptedError:
                refused += 1
                continue
            assert not _differs_from_original(info.records, stored), (
                f"seed {seed}: damaged bytes served (flip at byte {at} of the batch at {base})"
            )
        assert refused > 0, f"seed {seed}: the damaged batch at {base} was never refused"
        assert len(original) == again.log_end_offset


def _differs_from_original(records: bytes, stored: dict[int, tuple[str, int, bytes]]) -> bool:
    pos = 0
    for _, header in iter_batches(records):
        entry = stored.get(header.base_offset)
        if entry is None or records[pos : pos + header.size] != entry[2]:
            return True
        pos += header.size
    return False


def test_truncated_active_segment_on_a_stopped_replica() -> None:
    fs = MemoryFileIO()
    log = open_log(fs, config(segment_bytes=1 << 20))
    _append_random(log, Rng(1), 30, "t")
    model = read_all(log)
    log.close()
    path = log.active_segment.log_path
    cut = len(fs.files[path].data) - 7
    del fs.files[path].data[cut:]
    again = open_log(fs, config(segment_bytes=1 << 20))
    assert again.bytes_truncated_on_open > 0
    assert read_all(again) == model[: again.log_end_offset]
    assert again.recovery_point == again.log_end_offset < len(model)
    _check_lookups(again)


def test_rolled_segments_survive_a_crash_only_the_active_tail_is_lost() -> None:
    fs = MemoryFileIO()
    cfg = config(segment_bytes=1024)
    log = open_log(fs, cfg)
    _append_random(log, Rng(2), 5, "p")
    log.flush()
    log.checkpoint()
    _append_random(log, Rng(3), 30, "q")  # rolls several segments, none flushed by the caller
    assert len(log.segments) > 2
    model = read_all(log)
    active_base = log.active_segment.base_offset
    fs.crash()
    again = open_log(fs, cfg)
    # A roll fsyncs the outgoing segment, so only the active segment's bytes are lost.
    assert again.log_end_offset == active_base
    assert read_all(again) == model[:active_base]
    again.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert [r.offset for r in read_all(again)][-1] == active_base


def test_lost_rolled_segment_does_not_leave_a_gap() -> None:
    """Files as a build without the fsync on roll could leave them: the rolled
    segments never reached the disk and come back empty after the durable prefix."""
    fs = MemoryFileIO()
    cfg = config(segment_bytes=1024)
    log = open_log(fs, cfg)
    _append_random(log, Rng(2), 5, "p")
    log.flush()
    log.checkpoint()
    durable = log.log_end_offset
    kept = read_all(log)
    synced = {s.log_path: fs.durable_size(s.log_path) for s in log.segments}
    _append_random(log, Rng(3), 30, "q")
    assert len(log.segments) > len(synced) + 1
    for segment in log.segments:
        fs.files[segment.log_path].durable = synced.get(segment.log_path, 0)
    fs.crash()
    again = open_log(fs, cfg)
    assert again.log_end_offset == durable
    assert read_all(again) == kept
    again.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert [r.offset for r in read_all(again)][-1] == durable


def test_os_fileio_power_loss_journal(tmp_path: object) -> None:
    root = str(tmp_path)
    journal = os.path.join(root, "journal")
    directory = os.path.join(root, "orders-0")
    cfg = config(segment_bytes=2048)
    log = Log.open(OsFileIO(journal=journal), directory, cfg, now_ms=NOW)
    _append_random(log, Rng(4), 10, "d")
    log.flush()
    log.checkpoint()
    kept = read_all(log)
    _append_random(log, Rng(5), 20, "u")
    model = read_all(log)
    for seg in log.segments:  # the process dies: descriptors go, nothing is flushed
        seg.close()
    power_loss(journal, rng=Rng(6))
    again = Log.open(OsFileIO(), directory, cfg, now_ms=NOW)
    end = again.log_end_offset
    assert len(kept) <= end <= len(model)
    assert read_all(again) == model[:end]
    _check_lookups(again)
    again.close()
    assert posixpath.exists(os.path.join(directory, "recovery-point-offset-checkpoint"))
