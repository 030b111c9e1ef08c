"""Storage benchmarks (PERFORMANCE.md P8): append throughput, recovery of a large
active segment, opening many partitions. One JSON line per result.

    python -m loadtests.bench_storage                 # full size: 1 GiB segment, 1,000 partitions
    python -m loadtests.bench_storage --size-mb 8 --partitions 20   # smoke size (the test suite)

Recovery is measured warm (the segment still in the page cache, as after a process
crash) and cold (pages dropped with posix_fadvise, as after a power loss).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from importlib import metadata
from typing import Any

from mq.core.config import TopicConfig
from mq.protocol.record_batch import build_batch
from mq.storage import Log, OsFileIO

MIB = 1024 * 1024
NOW_MS = 1_700_000_000_000


def _versions() -> dict[str, str]:
    try:
        mq_version = metadata.version("mq")
    except metadata.PackageNotFoundError:
        mq_version = "unknown"
    return {"python": platform.python_version(), "mq": mq_version}


def _rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def emit(workload: str, *, records: int, nbytes: int, seconds: float, **extra: Any) -> dict[str, Any]:
    result = {
        "workload": workload, "records": records, "bytes": nbytes, "seconds": round(seconds, 4),
        "rec_s": round(records / seconds) if seconds > 0 else None,
        "mb_s": round(nbytes / MIB / seconds, 1) if seconds > 0 else None,
        **extra, "max_rss_mib": _rss_mib(), "versions": _versions(),
    }
    print(json.dumps(result), flush=True)
    return result


def request_bytes(*, record_bytes: int = 100, batch_records: int = 160, batches: int = 64) -> tuple[bytes, int]:
    """A produce request of ``batches`` batches of ``batch_records`` records (≈1 MiB)."""
    value = b"x" * record_bytes
    one = build_batch([(None, value, (), NOW_MS)] * batch_records)
    return one * batches, batch_records * batches


def fill(log: Log, size_bytes: int) -> tuple[int, int, float]:
    request, per_request = request_bytes()
    records = written = 0
    start = time.perf_counter()
    while written < size_bytes:
        log.append_as_leader(request, leader_epoch=0, now_ms=NOW_MS)
        written += len(request)
        records += per_request
    return records, written, time.perf_counter() - start


def bench_append(root: str, size_mb: int) -> dict[str, Any]:
    log = Log.open(OsFileIO(), os.path.join(root, "append-0"), TopicConfig(), now_ms=NOW_MS)
    records, written, seconds = fill(log, size_mb * MIB)
    result = emit("storage_append_1mib_requests", records=records, nbytes=written, seconds=seconds)
    log.close()
    return result


def _drop_page_cache(directory: str) -> bool:
    if not hasattr(os, "posix_fadvise"):
        return False
    for name in os.listdir(directory):
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def bench_recovery(root: str, size_mb: int) -> list[dict[str, Any]]:
    directory = os.path.join(root, "recover-0")
    config = TopicConfig(segment_bytes=max(2 * size_mb, 1024) * MIB)
    log = Log.open(OsFileIO(), directory, config, now_ms=NOW_MS)
    records, written, _ = fill(log, size_mb * MIB)
    log.close()
    results = []
    for cache in ("warm", "cold"):
        if cache == "cold" and not _drop_page_cache(directory):
            print(json.dumps({"workload": "storage_recovery_cold", "skipped": "no posix_fadvise"}))
            continue
        start = time.perf_counter()
        reopened = Log.open(OsFileIO(), directory, config, now_ms=NOW_MS, recovery_point=0)
        seconds = time.perf_counter() - start
        assert reopened.log_end_offset == records and reopened.bytes_truncated_on_open == 0
        assert len(reopened.segments) == 1
        results.append(emit(
            f"storage_recovery_{cache}", records=records, nbytes=written, seconds=seconds,
            segments_recovered=reopened.segments_recovered_on_open, target_seconds=5,
        ))
        reopened.close()
    start = time.perf_counter()
    clean = Log.open(OsFileIO(), directory, config, now_ms=NOW_MS)
    results.append(emit(
        "storage_open_after_clean_shutdown", records=records, nbytes=written,
        seconds=time.perf_counter() - start, segments_recovered=clean.segments_recovered_on_open,
    ))
    clean.close()
    return results


def bench_open_partitions(root: str, partitions: int) -> dict[str, Any]:
    base = os.path.join(root, "many")
    config = TopicConfig()
    request, per_request = request_bytes(batches=1)
    for p in range(partitions):
        log = Log.open(OsFileIO(), os.path.join(base, f"t-{p}"), config, now_ms=NOW_MS)
        log.append_as_leader(request, leader_epoch=0, now_ms=NOW_MS)
        log.close()
    start = time.perf_counter()
    logs = [
        Log.open(OsFileIO(), os.path.join(base, f"t-{p}"), config, now_ms=NOW_MS)
        for p in range(partitions)
    ]
    seconds = time.perf_counter() - start
    assert all(log.log_end_offset == per_request for log in logs)
    for log in logs:
        log.close()
    return emit(
        "storage_open_partitions", records=per_request * partitions,
        nbytes=len(request) * partitions, seconds=seconds, partitions=partitions, target_seconds=5,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="segment size for recovery and append")
    parser.add_argument("--partitions", type=int, default=1000, help="partitions to open")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="mq-bench-storage-", dir=args.dir)
    try:
        bench_append(root, args.size_mb)
        shutil.rmtree(os.path.join(root, "append-0"))
        bench_recovery(root, args.size_mb)
        shutil.rmtree(os.path.join(root, "recover-0"))
        bench_open_partitions(root, args.partitions)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
