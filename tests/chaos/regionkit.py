"""What every region chaos test (R1-R14) shares: a seeded run of a three-broker region
with an RF=3 topic, a workload writing a history, a monitor sampling the brokers'
views, and the closing phase (heal everything, drain, check, print the counts).

    with region_run(tmp_path, "r01") as run:
        workload = run.workload()
        ...faults through run.region / run.nemesis / run.region.proxy...
        result = run.finish(workload)
    result.assert_ok()

A run prints ``MQ_SEED=<seed>`` and the history path first, so a failing test's
captured output always says how to replay it (docs/how-to/run-the-chaos-suite.md).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mq.client.blocking import Admin
from mq.protocol import messages as m
from mq.protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, build_batch, read_header

from .harness import (
    CheckResult,
    DrainResult,
    History,
    Nemesis,
    Region,
    RegionMonitor,
    Workload,
    WorkloadConfig,
    check,
    drain,
)

TOPIC = "chaos"
PARTITIONS = 3
PROBE_TIMEOUT_MS = 1_000


def seed_from_env() -> int:
    return int(os.environ.get("MQ_SEED", time.time_ns() % 2**32))


@dataclass
class Run:
    name: str
    seed: int
    rng: random.Random
    history: History
    region: Region
    monitor: RegionMonitor
    nemesis: Nemesis
    topic: str = TOPIC
    partitions: int = PARTITIONS
    drained: DrainResult | None = None
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _probes: int = 0

    @property
    def context(self) -> str:
        return f"[{self.name}] MQ_SEED={self.seed} history={self.history.path}"

    def note(self, text: str) -> None:
        """Print now and keep for the summary (a measured figure, a fault done)."""
        line = f"[{self.name} {self.history.now_ms() / 1000:7.2f}s] {text}"
        print(line, flush=True)
        self.notes.append(line)

    def workload(self, *, acks: int | str = "all", rate_per_s: float = 1000, processes: int = 48,
                 readers: int = 1, prefix: str = "", bootstrap: str | None = None,
                 producer: Mapping[str, Any] | None = None) -> Workload:
        # 48 logical clients, one send in flight each: acks=all takes ~40 ms on three
        # Python brokers sharing 2 cores, so 16 clients would cap the rate near 400/s;
        # 48 let the pacing (rate_per_s) decide, as the catalogue's ~1,000 rec/s asks.
        settings = {"linger_ms": 2, "request_timeout_ms": 2_000, "delivery_timeout_ms": 12_000,
                    "retry_backoff_ms": 50, "max_block_ms": 5_000, **(producer or {})}
        return Workload(bootstrap or self.region.bootstrap, self.history, WorkloadConfig(
            self.topic, partitions=self.partitions, processes=processes, producers=2, acks=acks,
            rate_per_s=rate_per_s, readers=readers, seed=self.seed, value_prefix=prefix,
            producer=settings)).start()

    def hold(self, seconds: float) -> None:
        """Let the workload run (the fault's duration, not a wait for a condition)."""
        time.sleep(seconds)

    def leader(self, partition: int = 0) -> int:
        leader = self.region.leader_of(self.topic, partition)
        assert leader is not None, f"{self.context}: {self.topic}-{partition} has no leader"
        return leader

    def heal(self) -> None:
        """Undo every fault: links healed, paused nodes resumed, stopped nodes started."""
        region = self.region
        if region.proxy is not None:
            region.proxy.heal_all()
        for n in region.ids:
            if region.nodes[n].paused:
                region.resume(n)
        stopped = [n for n in region.ids if not region.nodes[n].running]
        if stopped:
            region.start_nodes(stopped)

    def finish(self, *workloads: Workload, drain_timeout_s: float = 60.0,
               settle_s: float = 1.0) -> CheckResult:
        """Stop the workloads, heal, wait for full ISRs, drain, check and print."""
        for w in workloads:
            w.stop()
        self.heal()
        self.region.wait_healthy(self.topic, self.partitions, timeout_s=60)
        self.hold(settle_s)
        self.drained = drain(self.region.bootstrap, self.history, self.topic, self.partitions,
                             timeout_s=drain_timeout_s)
        self.monitor.stop()
        result = check(self.history.ops, seed=self.seed, history_path=self.history.path,
                       allowed_gaps=self.drained.allowed_gaps())
        self.note(f"counts: {result.summary()}")
        self.note(f"drain: end offsets {dict(self.drained.end_offsets)}, {self.drained.records} "
                  f"records; gaps {list(self.drained.gaps)}; duration "
                  f"{time.monotonic() - self.started:.1f}s")
        return result

    def acks_between(self, partition: int, from_ms: int, to_ms: float, *,
                     invoked_after_ms: int | None = None) -> list[str]:
        """Values acknowledged on ``partition`` in [from_ms, to_ms] (and invoked after
        ``invoked_after_ms``, when given)."""
        invoked: dict[str, int] = {}
        out = []
        for op in self.history.ops:
            if op.op != "send":
                continue
            if op.type == "invoke":
                invoked[str(op.value)] = op.time_ms
            elif op.type == "ok" and op.partition == partition and from_ms <= op.time_ms <= to_ms \
                    and (invoked_after_ms is None or invoked.get(str(op.value), -1) >= invoked_after_ms):
                out.append(str(op.value))
        return out

    def first_ack_after(self, partition: int, at_ms: int) -> int | None:
        for op in self.history.ops:
            if op.op == "send" and op.type == "ok" and op.partition == partition and op.time_ms > at_ms:
                return op.time_ms
        return None

    def probe_produce(self, n: int, partition: int, *, acks: int = -1,
                      timeout_ms: int = PROBE_TIMEOUT_MS) -> int | None:
        """``probe_produce`` of one unique value, written to the history like any send
        (so the checker accounts for it: an acknowledged probe must not be lost, an
        unacknowledged one may or may not be in the log)."""
        self._probes += 1
        value = f"probe-{self._probes}"
        self.history.record("invoke", "send", value, partition=partition, process="probe")
        code, offset = probe_produce(self.region, n, self.topic, partition, value.encode(),
                                     acks=acks, timeout_ms=timeout_ms)
        if code == 0:
            self.history.record("ok", "send", value, partition=partition, offset=offset,
                                process="probe")
        else:
            self.history.record("info", "send", value, partition=partition, process="probe")
        return code

    def assert_no_tracebacks(self) -> None:
        bad = self.region.stderr_tracebacks()
        assert not bad, f"{self.context}: tracebacks in broker stderr: " + "\n".join(
            f"--- n{n}\n{text}" for n, text in bad.items())


@contextmanager
def region_run(tmp_path: Path, name: str, *, configs: Mapping[str, str] | None = None,
               topic_configs: Mapping[str, str] | None = None, partitions: int = PARTITIONS,
               failpoints: Mapping[int, str] | None = None, proxy_mode: str = "blackhole"
               ) -> Iterator[Run]:
    seed = seed_from_env()
    history = History(tmp_path / "history.jsonl")
    print(f"[{name}] MQ_SEED={seed}\n[{name}] history: {history.path}", flush=True)
    region = Region(tmp_path / "region", configs=configs, failpoints=failpoints, proxy_mode=proxy_mode)
    monitor = RegionMonitor(region, TOPIC, partitions, history.now_ms)
    run = Run(name, seed, random.Random(seed), history, region, monitor,
              Nemesis(history, rng=random.Random(seed + 1)), partitions=partitions)
    try:
        region.start()
        region.wait_controller()
        region.wait_registered()
        with Admin(region.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=partitions, replication_factor=3,
                               configs={"min.insync.replicas": "2", **(topic_configs or {})})
        region.wait_healthy(TOPIC, partitions)
        monitor.start()
        run.note(f"region up: controller {region.controller()}, leaders "
                 f"{[region.leader_of(TOPIC, p) for p in range(partitions)]}")
        yield run
    finally:
        monitor.stop()
        timeline = monitor.dump(tmp_path / "monitor.jsonl")
        region.close()
        history.close()
        for line in run.notes[-6:]:
            print(line)
        print(f"[{name}] replay: MQ_SEED={seed}  history: {history.path}  brokers' views: "
              f"{timeline}  broker logs: {region.root}/n*.stderr", flush=True)


# ---------------------------------------------------------------------- raw probes


def probe_produce(region: Region, n: int, topic: str, partition: int, value: bytes, *,
                  acks: int = -1, timeout_ms: int = PROBE_TIMEOUT_MS
                  ) -> tuple[int | None, int | None]:
    """One produce straight to node ``n`` (no client retries, no metadata):
    ``(error code, base offset)`` (code 0: acknowledged; None: no answer in time)."""
    records = build_batch([(None, value, (), int(time.time() * 1000))])
    request = m.ProduceRequest(acks, timeout_ms, [m.ProduceTopicData(topic, [
        m.ProducePartitionData(partition, records)])])
    response = region.ask(n, request, timeout_s=timeout_ms / 1000 + 1.0)
    if response is None:
        return None, None
    part = response.topics[0].partitions[0]
    return part.error_code, part.base_offset


def probe_fetch(region: Region, n: int, topic: str, partition: int, offset: int, *,
                current_leader_epoch: int) -> tuple[int, bytes] | None:
    """One consumer fetch to node ``n`` carrying ``current_leader_epoch`` (KIP-320
    fencing): ``(error_code, records)`` or None without an answer."""
    request = m.FetchRequest([m.FetchTopic(topic, [m.FetchPartition(
        partition, offset, current_leader_epoch=current_leader_epoch)])], max_wait_ms=0)
    response = region.ask(n, request)
    if response is None:
        return None
    part = response.topics[0].partitions[0]
    return part.error_code, bytes(part.records)


def probe_list_offsets(region: Region, n: int, topic: str, partition: int, *,
                       current_leader_epoch: int) -> int | None:
    request = m.ListOffsetsRequest([m.ListOffsetsTopic(topic, [m.ListOffsetsPartition(
        partition, -1, current_leader_epoch=current_leader_epoch)])])
    response = region.ask(n, request)
    return None if response is None else response.topics[0].partitions[0].error_code


def last_batch_epoch(records: bytes) -> tuple[int, int] | None:
    """``(next offset, partition leader epoch)`` of the last complete batch in a fetch
    answer: what a consumer remembers to validate its position after a leader change."""
    pos, last = 0, None
    view = memoryview(records)
    while pos + HEADER_SIZE <= len(view):
        header = read_header(view, pos)
        size = LOG_OVERHEAD + header.batch_length
        if pos + size > len(view):
            break
        last = (header.next_offset, header.partition_leader_epoch)
        pos += size
    return last
