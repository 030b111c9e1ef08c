"""The group-throughput peer: Redis streams consumer groups (``XREADGROUP``), each
consumer its own process, on a stream holding the same number of records."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

READ_COUNT = 10_000


def fill_stream(port: int, key: str, records: int, size_bytes: int, *, pipeline: int = 1000) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        value = b"g" * size_bytes
        for begin in range(0, records, pipeline):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(pipeline, records - begin)):
                pipe.xadd(key, {b"v": value})
            pipe.execute()
        assert client.xlen(key) == records
    finally:
        client.close()


def _reader(port: int, key: str, group: str, name: str, barrier: Any, out: Any) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        barrier.wait(timeout=60)
        started = time.monotonic()
        count, last = 0, started
        while True:
            response = client.xreadgroup(group, name, {key: ">"}, count=READ_COUNT, noack=True)
            entries = response[0][1] if response else []
            if not entries:
                break
            count += len(entries)
            last = time.monotonic()
        out.put({"count": count, "started": started, "last": last})
    except BaseException as exc:
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        client.close()


def read_group(port: int, key: str, group: str, consumers: int, records: int) -> dict[str, Any]:
    """``consumers`` processes in one new consumer group read the stream from the start."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    client.xgroup_create(key, group, id="0")
    client.close()
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(consumers + 1), ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(port, key, group, f"c{i}", barrier, out), daemon=True)
             for i in range(consumers)]
    spawned = time.monotonic()
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=60)
        joined = time.monotonic()
        reports = [out.get(timeout=120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"redis reader failed: {errors[0]}")
    total = sum(r["count"] for r in reports)
    assert total == records, f"redis group read {total} of {records}"
    seconds = max(r["last"] for r in reports) - min(r["started"] for r in reports)
    return {"records": total, "seconds": round(seconds, 4), "rec_per_s": round(total / seconds),
            "join_s": round(joined - spawned, 3), "per_consumer": [r["count"] for r in reports]}
