"""The indexes of a running broker are readable on disk: ``mq dump-log`` shows the
entries of the active segment's ``.index``/``.timeindex`` without a flush, a
checkpoint or a shutdown (Kafka mmaps its indexes, so the same holds there)."""

from __future__ import annotations

import subprocess
import sys
import time

from mq.storage import OsFileIO
from mq.storage.dump import dump_segment

from .raw import RawClient, batch

DEADLINE_S = 10.0
SEGMENT = "00000000000000000000"


def _entries(path) -> list[dict]:
    return list(dump_segment(OsFileIO(), str(path))) if path.exists() else []


def test_live_broker_index_files_show_entries(broker):
    with RawClient.to(broker) as c:
        c.create_topic("orders", 1)
        last_offset = -1
        for i in range(20):  # ~10 KiB batches: past index.interval.bytes (4096) each time
            result = c.produce("orders", 0, batch([b"order-%d-%d-%s" % (i, j, b"x" * 80) for j in range(100)]))
            assert result.error_code == 0, result
            last_offset = result.base_offset + 99
    directory = broker.data_dir / "orders-0"
    deadline = time.monotonic() + DEADLINE_S
    while True:
        offsets = _entries(directory / f"{SEGMENT}.index")
        times = _entries(directory / f"{SEGMENT}.timeindex")
        if len(offsets) >= 18 and len(times) >= 1:
            break
        assert time.monotonic() < deadline, (offsets, times)
        time.sleep(0.02)  # poll interval (not a wait for a condition: the loop checks it)
    assert broker.running  # live: nothing was written by a shutdown
    assert all(e["type"] == "index_entry" and e["valid"] for e in offsets), offsets
    assert all(e["type"] == "time_index_entry" and e["valid"] for e in times), times
    assert [e["offset"] for e in offsets] == sorted(e["offset"] for e in offsets)
    assert offsets[-1]["offset"] <= last_offset

    # The command a user runs against the live broker's data directory.
    dumped = subprocess.run(
        [sys.executable, "-m", "mq.cli.main", "dump-log", str(directory / f"{SEGMENT}.index")],
        capture_output=True, timeout=30, check=False,
    )
    assert dumped.returncode == 0, dumped.stderr
    assert dumped.stdout.decode().count("offset: ") == len(offsets), dumped.stdout[:500]
    assert broker.running
