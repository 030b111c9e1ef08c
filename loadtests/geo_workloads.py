"""The geo workloads of ``loadtests.bench_geo``: P7 mirror throughput (a backlog, and live
beside the source's produce rate), P7 replication latency at a fixed rate, and fail-over
time with the records at risk. Each runs on a ``mq.lab.geo.GeoLab``: two regions, the
link process and the mirror, the processes ``mq up`` starts; the mirror is driven through
``python -m mirror`` and its status file only."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from loadtests.region_workloads import STALL_S, STAMP, latency_reader, p3
from loadtests.stats import latency_summary
from mq.client import Producer, blocking
from mq.core.errors import MqError
from mq.lab.geo import SOURCE, TARGET, GeoLab
from mq.lab.process import rss_mb, wait_until


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=_new_loop) as runner:
        return runner.run(coro)


def create_topic(lab: GeoLab, topic: str, partitions: int) -> dict[str, Any]:
    """In the source region, RF = min(3, brokers), min.insync.replicas = min(2, brokers);
    returns once every replica is in the ISR and the mirror topic exists in the target."""
    brokers = len(lab.deployment.region(SOURCE).brokers)
    rf, min_isr = min(3, brokers), min(2, brokers)
    admin = lab.admin(SOURCE)
    admin.create_topic(topic, partitions=partitions, replication_factor=rf,
                       configs={"min.insync.replicas": str(min_isr)})

    def full_isr() -> bool:
        try:
            parts = admin.describe_topic(topic).partitions
        except MqError:
            return False
        return len(parts) == partitions and all(p.leader is not None and p.leader >= 0
                                                and sorted(p.isr) == sorted(p.replicas) for p in parts)

    wait_until(full_isr, timeout_s=60, interval_s=0.05, what=f"{topic}: full ISR in {SOURCE}")
    return {"replication_factor": rf, "min_insync_replicas": min_isr, "partitions": partitions}


def _total(ends: dict[int, int]) -> int:
    return sum(ends.values())


class Progress:
    """Polls the ends of ``topic`` in both regions in a thread: when each region first held
    a record and when it held ``goal``."""

    def __init__(self, lab: GeoLab, topic: str, goal: int, *, every_s: float = 0.02) -> None:
        self.admins = {SOURCE: lab.admin(SOURCE), TARGET: lab.admin(TARGET)}
        self.lab = lab
        self.topic = topic
        self.goal = goal
        self.every_s = every_s
        self.first: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.error: str = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="geo-progress", daemon=True)

    def start(self) -> Progress:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set() and TARGET not in self.done:
            for region, admin in self.admins.items():
                if region in self.done:
                    continue
                try:
                    have = _total(self.lab.ends(region, self.topic, admin=admin))
                except MqError as exc:
                    self.error = str(exc)
                    continue
                now = time.monotonic()
                if have > 0:
                    self.first.setdefault(region, now)
                if have >= self.goal:
                    self.done[region] = now
            self._stop.wait(self.every_s)

    def wait(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        self._stop.set()
        return TARGET in self.done


def _cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of ``pid`` from /proc (None when it is gone)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds spent by the lab's processes between ``start()`` and ``stop()``: east's
    brokers, west's brokers, the link process, the mirror — where a P7 run's time goes."""

    def __init__(self, lab: GeoLab) -> None:
        self.lab = lab
        self.before: dict[str, dict[int, float]] = {}

    def pids(self) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {f"{SOURCE}_brokers": [], f"{TARGET}_brokers": []}
        for status in self.lab.launcher.status():
            if status.pid is not None:
                groups[f"{status.region}_brokers"].append(status.pid)
        links, _ = self.lab.launcher.service_status()
        groups["link"] = [s.pid for s in links if s.pid is not None]
        mirror = self.lab.mirror_pid()
        groups["mirror"] = [mirror] if mirror is not None else []
        return groups

    def _read(self) -> dict[str, dict[int, float]]:
        return {group: {pid: cpu for pid in pids if (cpu := _cpu_seconds(pid)) is not None}
                for group, pids in self.pids().items()}

    def start(self) -> CpuMeter:
        self.before = self._read()
        return self

    def stop(self) -> dict[str, float]:
        after = self._read()
        return {group: round(sum(cpu - self.before.get(group, {}).get(pid, 0.0) for pid, cpu in pids.items()), 2)
                for group, pids in after.items()}


def memory(lab: GeoLab) -> dict[str, float | None]:
    """Resident memory now, MiB: the largest broker of either region, and the mirror
    (whose fetched-but-not-appended bytes ``buffer.max.bytes`` bounds)."""
    groups = CpuMeter(lab).pids()
    brokers = [rss_mb(pid) for group in (f"{SOURCE}_brokers", f"{TARGET}_brokers") for pid in groups[group]]
    return {"broker_rss_mb": max((b for b in brokers if b is not None), default=None),
            "mirror_rss_mb": rss_mb(groups["mirror"][0]) if groups["mirror"] else None}


def _link_bytes(lab: GeoLab) -> int:
    return sum(s.bytes or 0 for s in lab.link_status() if s.source == SOURCE)


# ---------------------------------------------------------------- P7 throughput


def p7_backlog(lab: GeoLab, topic: str, *, records: int, partitions: int, producers: int, size_bytes: int,
               seed: int, chunk_records: int, batch_size: int) -> dict[str, Any]:
    """The mirror stopped, ``records`` produced into the source; the mirror started: the
    time from its first mirrored record to the last (and from its start)."""
    lab.stop_mirror()
    topic_settings = create_topic(lab, topic, partitions)
    produced = p3(lab.bootstrap(SOURCE), topic, partitions=partitions, producers=producers, records=records,
                  size_bytes=size_bytes, seed=seed, chunk_records=chunk_records, in_flight=4, linger_ms=5,
                  batch_size=batch_size)
    goal = _total(lab.ends(SOURCE, topic))
    bytes_before = _link_bytes(lab)
    started = time.monotonic()
    lab.start_mirror()
    cpu = CpuMeter(lab).start()
    progress = Progress(lab, topic, goal).start()
    if not progress.wait(STALL_S + records / 20_000):
        raise RuntimeError(f"P7 backlog: {topic} not mirrored ({progress.error or 'too slow'})")
    first, done = progress.first[TARGET], progress.done[TARGET]
    seconds = max(done - first, progress.every_s)  # a tiny run ends within one poll
    return {"records": goal, "bytes": goal * size_bytes, "seconds": round(seconds, 4),
            "rec_per_s": round(goal / seconds),
            "mb_per_s": round(goal * size_bytes / seconds / 2**20, 2),
            "start_to_first_s": round(first - started, 3),
            "rec_per_s_from_start": round(goal / (done - started)),
            "source_produce_rec_per_s": round(produced.rec_per_s),
            "link_bytes": _link_bytes(lab) - bytes_before, "cpu_s": cpu.stop(),
            "settings": {**topic_settings, "producers": producers, "batch_size": batch_size}}


def p7_live(lab: GeoLab, topic: str, *, records: int, partitions: int, producers: int, size_bytes: int,
            seed: int, chunk_records: int, batch_size: int) -> dict[str, Any]:
    """The mirror running while ``records`` are produced flat out. Both regions' ends are
    polled: the source's rate from its first record to its last, the mirror's from its
    first mirrored record to its last, and how long after the source the mirror finished."""
    topic_settings = create_topic(lab, topic, partitions)
    lab.wait_topic(TARGET, topic)
    bytes_before = _link_bytes(lab)
    cpu = CpuMeter(lab).start()
    progress = Progress(lab, topic, records).start()
    produced = p3(lab.bootstrap(SOURCE), topic, partitions=partitions, producers=producers, records=records,
                  size_bytes=size_bytes, seed=seed, chunk_records=chunk_records, in_flight=4, linger_ms=5,
                  batch_size=batch_size)
    if not progress.wait(STALL_S + records / 20_000):
        raise RuntimeError(f"P7 live: {topic} not mirrored ({progress.error or 'too slow'})")
    first, done = progress.first[TARGET], progress.done[TARGET]
    source_seconds = max(progress.done[SOURCE] - progress.first[SOURCE], progress.every_s)
    seconds = max(done - first, progress.every_s)
    return {"records": records, "bytes": records * size_bytes, "seconds": round(seconds, 4),
            "rec_per_s": round(records / seconds),
            "mb_per_s": round(records * size_bytes / seconds / 2**20, 2),
            "source_rec_per_s": round(records / source_seconds),
            "source_produce_rec_per_s": round(produced.rec_per_s),
            "finished_behind_source_s": round(done - progress.done[SOURCE], 3),
            "link_bytes": _link_bytes(lab) - bytes_before, "cpu_s": cpu.stop(),
            "settings": {**topic_settings, "producers": producers, "batch_size": batch_size}}


# ---------------------------------------------------------------- paced producer (a process)


def _paced_producer(bootstrap: str, topic: str, partitions: int, rate: int, count: int | None, size_bytes: int,
                    linger_ms: int, ready: Any, stop: Any, out: Any) -> None:
    """Send ``rate`` records/s round-robin over ``partitions`` (acks=all) until ``count``
    were sent or ``stop`` is set; every value starts with (sequence, monotonic_ns). Reports
    per send tick and partition the ack time and the offset after the record acked."""
    async def produce() -> dict[str, Any]:
        pad = b"x" * max(0, size_bytes - STAMP.size)
        acks: list[tuple[float, int, int]] = []
        failed = 0

        to_ack: list[int] = []  # send -> ack of the records whose acks are noted, ns

        def on_ack(partition: int, sent_ns: int) -> Callable[[Any], None]:
            def done(future: Any) -> None:
                nonlocal failed
                if future.exception() is None:
                    acks.append((time.monotonic(), partition, future.result().offset + 1))
                    to_ack.append(time.monotonic_ns() - sent_ns)
                else:
                    failed += 1
            return done

        async with Producer(bootstrap, acks="all", linger_ms=linger_ms) as producer:
            await producer.partitions_for(topic)
            ready.set()
            start = time.monotonic()
            sent, limit = 0, count if count is not None else 2**62
            while sent < limit and not stop.is_set():
                due = min(limit, int((time.monotonic() - start) * rate) + 1)
                last: dict[int, tuple[Any, int]] = {}
                while sent < due:
                    p, now_ns = sent % partitions, time.monotonic_ns()
                    last[p] = (producer.send(topic, STAMP.pack(sent, now_ns) + pad, partition=p), now_ns)
                    sent += 1
                for p, (future, sent_ns) in last.items():  # the last of each partition per tick
                    future.add_done_callback(on_ack(p, sent_ns))
                await asyncio.sleep(max(0.0, start + sent / rate - time.monotonic()))
            stopped = time.monotonic()
            await producer.flush()
        return {"acks": acks, "sent": sent, "failed": failed, "start": start, "stopped": stopped,
                "send_to_ack_ns": to_ack}

    try:
        out.put(_run(produce()))
    except BaseException as exc:  # reported by the parent, never hung on
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def _spawn(target: Callable[..., None], *args: Any) -> tuple[Any, Any, Any, Any]:
    """``target(*args, ready, stop, out)`` in a fresh process: (process, ready, stop, out)."""
    ctx = multiprocessing.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, ready, stop, out), daemon=True)
    proc.start()
    return proc, ready, stop, out


def _report(out: Any, proc: Any, what: str, timeout_s: float) -> Any:
    try:
        report = out.get(timeout=timeout_s)
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    if isinstance(report, dict) and "error" in report:
        raise RuntimeError(f"{what} failed: {report['error']}")
    return report


# ---------------------------------------------------------------- P7 replication latency


def p7_latency(lab: GeoLab, topic: str, *, rate: int, seconds: float, warmup_s: float, partitions: int,
               size_bytes: int, linger_ms: int) -> dict[str, Any]:
    """``rate`` records/s for ``warmup_s + seconds`` into the source; a reader in the target
    region (its own process) takes now - the send stamp of every mirrored record."""
    topic_settings = create_topic(lab, topic, partitions)
    lab.wait_topic(TARGET, topic)
    count, warmup = int(rate * (seconds + warmup_s)), int(rate * warmup_s)
    # keep every handle _spawn returns until the reports are in: a child unpickles the events
    # after the start, and a collected one takes its semaphore with it
    consumer = _spawn(latency_reader, lab.bootstrap(TARGET), topic, list(range(partitions)), count, 100)
    if not consumer[1].wait(60):
        raise RuntimeError("P7 latency: the reader in the target region did not start")
    producer = _spawn(_paced_producer, lab.bootstrap(SOURCE), topic, partitions, rate, count, size_bytes, linger_ms)
    sent = _report(producer[3], producer[0], "P7 latency producer", STALL_S + seconds + warmup_s)
    report = _report(consumer[3], consumer[0], "P7 latency reader", STALL_S)
    measured = [lat for seq, lat in report if seq >= warmup]
    status = lab.mirror_status() or {}
    heartbeats = status.get("heartbeats") or {}
    parts = [p for p in status.get("partitions", []) if p["topic"] == topic]
    p50s = sorted(p["latency_p50_ms"] for p in parts if p.get("latency_p50_ms") is not None)
    return {"records": count - warmup, "bytes": (count - warmup) * size_bytes, "target_rec_per_s": rate,
            "achieved_rec_per_s": round(sent["sent"] / (sent["stopped"] - sent["start"])),
            "latency": latency_summary(measured, of="send in the source -> read from the mirror topic in "
                                                    "the target region, every record"),
            "send_to_ack": latency_summary(sent.get("send_to_ack_ns", []),
                                           of="send -> acks=all acknowledgement in the source, the last record "
                                              "of each partition per send tick"),
            "mirror_heartbeat_latency_ms": {"p50": heartbeats.get("latency_p50_ms"),
                                            "p99": heartbeats.get("latency_p99_ms")},
            # as the mirror measures it per batch (arrival in west - the batch's max timestamp),
            # over the last minute: the median partition's p50 and the worst partition's p99
            "mirror_batch_latency_ms": {"p50": p50s[len(p50s) // 2] if p50s else None,
                                        "p99": max((p["latency_p99_ms"] or 0 for p in parts), default=None)},
            "records_failed": sent["failed"],
            "settings": {**topic_settings, "acks": "all", "linger_ms": linger_ms, "warmup_s": warmup_s,
                         "api": "send() per record, partitions round-robin"}}


# ---------------------------------------------------------------- fail-over


def _first_produce(lab: GeoLab, topic: str, started: threading.Event, result: dict[str, Any]) -> threading.Thread:
    """A writer in the target region that tries one record every 5 ms from ``started`` on,
    until one is acknowledged (the topic is read-only until the fail-over promotes it)."""
    producer = blocking.Producer(lab.bootstrap(TARGET), acks="all", linger_ms=0, delivery_timeout_ms=10_000,
                                 request_timeout_ms=5_000)
    producer.partitions_for(topic)

    def run() -> None:
        started.wait()
        attempts = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            attempts += 1
            try:
                producer.send(topic, b"first write in the target region", partition=0)
                result.update(at=time.monotonic(), attempts=attempts)
                break
            except MqError as exc:
                result["last_error"] = exc.code.name
                time.sleep(0.005)
        producer.close()

    thread = threading.Thread(target=run, name="first-produce", daemon=True)
    thread.start()
    return thread


def failover(lab: GeoLab, topic: str, *, rate: int, mode: str, steady_s: float, partitions: int,
             size_bytes: int, failback: bool) -> dict[str, Any]:
    """Produce ``rate`` records/s in the source for ``steady_s``; then at T0 the writers
    stop (``planned``), or the link is cut both ways as well (``disaster``), and
    ``mq mirror failover --to <target>`` runs once the writers have drained. Fail-over
    time: T0 to the first record acknowledged in the target region. Records at risk: as
    the command reports them, and the truth — what the source holds past the target's
    promotion point, and how many of those the writers had been told were acknowledged
    by T0."""
    topic_settings = create_topic(lab, topic, partitions)
    lab.wait_topic(TARGET, topic)
    proc, ready, stop, out = _spawn(_paced_producer, lab.bootstrap(SOURCE), topic, partitions, rate, None,
                                    size_bytes, 5)
    if not ready.wait(60):
        raise RuntimeError("fail-over: the source producer did not start")
    go, first = threading.Event(), {}
    prober = _first_produce(lab, topic, go, first)
    time.sleep(steady_s)
    t0 = time.monotonic()
    if mode == "disaster":
        lab.cut_link()
    stop.set()
    go.set()
    sent = _report(out, proc, "fail-over producer", STALL_S)  # the writers drained (a few ms)
    command = lab.failover(to=TARGET, topics=[topic])
    prober.join(130)
    acked: dict[int, int] = {}
    for t, p, end in sent["acks"]:
        if t <= t0:
            acked[p] = max(acked.get(p, 0), end)
    promoted = command.report["promotion_ends"][topic]
    source_ends = lab.ends(SOURCE, topic)  # read directly: the benchmark sees both regions
    line = {"rate": rate, "mode": mode, "failover_s": round(first["at"] - t0, 3) if "at" in first else None,
            "command_s": round(command.seconds, 3), "first_produce_attempts": first.get("attempts"),
            "records_at_risk_reported": command.report["records_at_risk"],
            # the source silent: the last known rate x the seconds since it was heard (null: exact)
            "records_at_risk_estimate": command.report.get("records_at_risk_estimate"),
            "records_at_risk_basis": sorted({p["basis"].split(" (")[0] for p in command.report["partitions"]}),
            # the truth: what the source holds past the promotion point (fail-back's .diverged)
            "records_at_risk_true": sum(max(0, e - promoted[p]) for p, e in source_ends.items()),
            # of those, the ones the writers had been told were acknowledged by T0
            "records_lost_acked_by_t0": sum(max(0, end - promoted[p]) for p, end in acked.items()),
            "records_acked_by_t0": sum(acked.values()),
            "achieved_rec_per_s": round(sent["sent"] / (sent["stopped"] - sent["start"])),
            "steps": [f"+{t:.2f} s {step}" for t, step in zip(command.step_times, command.steps)], "settings": {**topic_settings, "acks": "all", "steady_s": steady_s}}
    if mode == "disaster":
        lab.heal_link()
    if failback:
        back = lab.failback(to=SOURCE)
        line.update(failback_s=round(back.seconds, 3),
                    diverged_records=sum(back.report.get("diverged", {}).get(topic, [])))
    return line


__all__ = ["create_topic", "failover", "memory", "p7_backlog", "p7_latency", "p7_live"]
