"""Broker-side throughput over the raw protocol (no client library in the way).

``python -m tests.integration.broker.raw_flood [--seconds 8] [--flush-policy replicated]``
starts a broker process, floods one partition with ~1 MiB batches of 100-byte records
(acks=1, 8 requests in flight), then fetches everything back from offset 0, and
prints one JSON line per phase: end-to-end rec/s and the broker's own CPU seconds, so
``broker_rec_per_cpu_s`` says what one core of broker can do whatever the client
costs. A test runs it for half a second so it cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import psutil

from mq.protocol.codec import decode_response, encode_request
from mq.protocol.frame import FrameDecoder
from mq.protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ProducePartitionData,
    ProduceRequest,
    ProduceTopicData,
)
from mq.protocol.record_batch import build_batch, iter_batches

from ..conftest import BrokerProcess, free_port

TOPIC = "flood"


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder(1 << 28)

    async def frame(self):
        while (frame := self.decoder.next_frame()) is None:
            data = await self.reader.read(1 << 22)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.decoder.feed(data)
        return frame


def _one_mib_batch(record_bytes: int = 100) -> tuple[bytes, int]:
    ts = int(time.time() * 1000)
    count, batch = 1000, b""
    while True:
        candidate = build_batch([(None, b"x" * record_bytes, (), ts)] * count)
        if len(candidate) > 1_000_000:
            return batch, count - 1000
        batch, count = candidate, count + 1000


async def flood(port: int, seconds: float, broker_pid: int, *, in_flight: int = 8) -> list[dict]:
    proc = psutil.Process(broker_pid)

    def cpu() -> float:
        t = proc.cpu_times()
        return t.user + t.system

    conn = _Conn(*await asyncio.open_connection("127.0.0.1", port, limit=1 << 24))
    conn.writer.write(encode_request(CreateTopicsRequest([CreatableTopic(TOPIC, 1)]), correlation_id=0))
    decode_response(await conn.frame(), CreateTopicsRequest)
    batch, count = _one_mib_batch()
    frame = encode_request(ProduceRequest(1, 30_000, [ProduceTopicData(TOPIC, [ProducePartitionData(0, batch)])]),
                           correlation_id=1)
    acked = pending = 0
    t0, c0 = time.perf_counter(), cpu()
    deadline = t0 + seconds
    while True:
        while pending < in_flight and time.perf_counter() < deadline:
            conn.writer.write(frame)
            pending += 1
        await conn.writer.drain()
        if pending == 0:
            break
        _, response = decode_response(await conn.frame(), ProduceRequest)
        assert response.topics[0].partitions[0].error_code == 0, response
        pending -= 1
        acked += 1
    elapsed, used = time.perf_counter() - t0, cpu() - c0
    records = acked * count
    results = [_result("produce 1 MiB batches of 100 B, acks=1", records, acked * len(batch), elapsed, used, proc)]
    offset = total = size = 0
    t0, c0 = time.perf_counter(), cpu()
    while offset < records:
        request = FetchRequest([FetchTopic(TOPIC, [FetchPartition(0, offset, 8 << 20)])], max_wait_ms=0,
                               max_bytes=64 << 20)
        conn.writer.write(encode_request(request, correlation_id=2))
        _, response = decode_response(await conn.frame(), FetchRequest)
        data = response.topics[0].partitions[0].records
        size += len(data)
        for _, header in iter_batches(data):
            total += header.next_offset - max(offset, header.base_offset)
            next_offset = header.next_offset
        offset = next_offset
    results.append(_result("fetch from offset 0, 8 MiB per request", total, size,
                           time.perf_counter() - t0, cpu() - c0, proc))
    conn.writer.close()
    return results


def _result(workload: str, records: int, size: int, seconds: float, cpu_s: float, proc: psutil.Process) -> dict:
    return {
        "workload": workload, "records": records, "bytes": size, "seconds": round(seconds, 3),
        "rec_per_s": int(records / seconds), "MB_per_s": round(size / seconds / 1e6, 1),
        "broker_cpu_s": round(cpu_s, 3), "broker_rec_per_cpu_s": int(records / max(cpu_s, 1e-9)),
        "broker_rss_mib": round(proc.memory_info().rss / 2**20),
    }


def run(seconds: float, flush_policy: str, data_root: Path) -> list[dict]:
    broker = BrokerProcess(data_root / "data", free_port(), configs={"log.flush.policy": flush_policy})
    broker.start()
    try:
        return asyncio.run(flood(broker.port, seconds, broker.proc.pid))
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--flush-policy", default="replicated", choices=["replicated", "always"])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for result in run(args.seconds, args.flush_policy, Path(tmp)):
            print(json.dumps({"flush_policy": args.flush_policy, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
