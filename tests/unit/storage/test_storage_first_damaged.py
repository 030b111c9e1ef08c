"""``Log.first_damaged``: after a clean shutdown the segments below the recovery
point are trusted on open, so a bit flipped there meanwhile (TESTING.md R8) only shows
when someone reads it; ``first_damaged`` reads the whole log once and names where the
sound prefix ends, changing nothing (the broker decides whether to cut there)."""

from __future__ import annotations

from storage_helpers import NOW, batch, config, open_log

from mq.core.rng import Rng
from mq.protocol.record_batch import HEADER_SIZE, iter_batches
from mq.storage import Log, MemoryFileIO


def _closed_log(fs: MemoryFileIO, rng: Rng) -> Log:
    log = open_log(fs, config(segment_bytes=2048))
    for i in range(40):
        log.append_as_leader(batch(rng.randint(1, 6), tag=f"x{i}-", size=rng.randint(1, 300)),
                             leader_epoch=1, now_ms=NOW)
    assert len(log.segments) >= 3
    return log


def test_a_flip_in_a_trusted_segment_is_found_and_nothing_changes() -> None:
    for seed in range(50):
        rng = Rng(seed)
        fs = MemoryFileIO()
        log = _closed_log(fs, rng)
        end = log.log_end_offset
        victim = log.segments[rng.randint(0, len(log.segments) - 2)]
        log.close()  # clean: the recovery point is the log end
        data = fs.files[victim.log_path].data
        batches = list(iter_batches(bytes(data)))
        pos, header = batches[rng.randint(0, len(batches) - 1)]
        data[pos + rng.randint(HEADER_SIZE, header.size - 1)] ^= 1 << rng.randint(0, 7)

        again = open_log(fs, config(segment_bytes=2048))
        assert again.segments_recovered_on_open == 0  # trusted: opening does not see it
        found = again.first_damaged()
        assert found is not None, f"seed {seed}"
        assert found[0] == header.base_offset and "CRC" in found[1].problem, (seed, found)
        assert found[1].path == victim.log_path and found[1].position == pos
        assert again.log_end_offset == end  # nothing cut
        again.truncate_to(found[0])
        assert again.first_damaged() is None and again.verify() == []


def test_a_sound_log_has_no_damage() -> None:
    fs = MemoryFileIO()
    log = _closed_log(fs, Rng(7))
    log.close()
    assert open_log(fs, config(segment_bytes=2048)).first_damaged() is None
