"""What the consumer-group chaos tests (R21, R22) share: a region with a 12-partition
RF=3 topic, a producer of acknowledged records (the history's ``send`` ops), consumer
group members as processes (``tests/chaos/group_member.py``) that write what they were
assigned, revoked, consumed and committed, an observer of the group's committed
offsets, and the closing phase (stop the faults, let the group drain to the end,
check).

    with group_run(tmp_path, "R21", assignor="cooperative-sticky") as g:
        workload = g.run.workload(...)
        g.members.start("m0"); g.members.start("s0", instance_id="s0")
        ...faults: g.members.restart/kill, g.run.region.terminate/start_node...
        outcome = g.finish(workload)
    outcome.assert_ok()

Members are processes, not threads, because a hard kill must be honest: SIGKILL stops
the heartbeats, the commits and the consumption at one instant, as a crashed host
would, and leaves nothing for the group to be told.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mq.protocol.group_messages import (
    DescribedGroup,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    OffsetFetchRequest,
    OffsetFetchTopic,
)

from .harness import CheckResult, Workload
from .harness.group_checker import (
    GroupCheckResult,
    acked_records,
    check_group,
    events_from_dicts,
    write_group_history,
)
from .harness.region import Region, poll_until
from .regionkit import TOPIC, Run, region_run

GROUP = "chaos-group"
PARTITIONS = 12
REPO = Path(__file__).resolve().parents[2]

# Group timings short enough for faults to play out in a CI run: the first rebalance
# does not wait, sessions of a few seconds are allowed, and a small offsets topic.
GROUP_CONFIGS: Mapping[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "3",
    "offsets.commit.timeout.ms": "3000",
}
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 500
REBALANCE_TIMEOUT_MS = 8_000


# ---------------------------------------------------------------------- raw group requests


def find_coordinator(region: Region, group: str = GROUP) -> int | None:
    """The coordinator's node id as the first live broker that knows it says (None:
    not available right now)."""
    for n in region.live_ids():
        response = region.ask(n, FindCoordinatorRequest(group))
        if response is not None and response.error_code == 0 and response.node_id >= 0:
            return response.node_id
    return None


def describe_group(region: Region, group: str = GROUP) -> DescribedGroup | None:
    coordinator = find_coordinator(region, group)
    if coordinator is None:
        return None
    response = region.ask(coordinator, DescribeGroupsRequest([group]))
    if response is None or not response.groups or response.groups[0].error_code:
        return None
    return response.groups[0]


def committed_offsets(region: Region, topic: str, partitions: int, group: str = GROUP
                      ) -> tuple[int, dict[int, int]] | None:
    """``(coordinator, {partition: committed offset})`` (-1: nothing committed) from an
    OffsetFetch to the coordinator; None when it cannot answer now."""
    coordinator = find_coordinator(region, group)
    if coordinator is None:
        return None
    response = region.ask(coordinator, OffsetFetchRequest(
        group, [OffsetFetchTopic(topic, list(range(partitions)))]))
    if response is None or response.error_code:
        return None
    out: dict[int, int] = {}
    for t in response.topics:
        for p in t.partitions:
            if p.error_code:
                return None
            out[p.partition] = p.offset
    return coordinator, out


# ---------------------------------------------------------------------- members


@dataclass
class MemberProcess:
    """One incarnation of a member: ``python -m tests.chaos.group_member``."""

    name: str  # the slot the test addresses (m0, s0)
    member: str  # the logical member (checker's owner)
    incarnation: str  # unique per process (client id, file names)
    instance_id: str | None
    proc: subprocess.Popen
    events_path: Path
    stderr_path: Path
    go_path: Path
    started: bool = False

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_prepared(self, *, timeout_s: float = 60.0) -> None:
        ready = Path(f"{self.go_path}.ready")
        poll_until(lambda: ready.exists() or not self.running, timeout_s=timeout_s,
                   what=f"member {self.incarnation} prepared")
        assert self.running, f"member {self.incarnation} exited {self.proc.returncode}: " \
                             f"{self.stderr_tail()}"

    def go(self) -> None:
        self.go_path.touch()
        self.started = True

    def terminate(self, *, timeout_s: float = 20.0, signalled: bool = False) -> int | None:
        """SIGTERM: the member closes (revokes, commits, leaves unless static)."""
        if self.running:
            if not signalled:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.wait(timeout=10)

    def kill(self) -> None:
        if self.running:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def assigned_generations(self) -> list[int]:
        """Generations this incarnation recorded an ``assigned`` event for, so far."""
        try:
            lines = self.events_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "assigned":
                out.append(int(e["generation"]))
        return out

    def wait_assigned(self, *, timeout_s: float = 30.0) -> int:
        """The generation of this incarnation's first assignment."""
        return poll_until(lambda: (self.assigned_generations() or [None])[0], timeout_s=timeout_s,
                          what=f"an assignment for {self.incarnation}")

    def stderr_tail(self, chars: int = 2_000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class GroupMembers:
    """The member processes of one run. A dynamic member's restart is a new logical
    member (``m0`` -> incarnations ``m0.0``, ``m0.1``: each joins the group anew); a
    static member's incarnations all act as the one member of its instance id."""

    root: Path
    bootstrap: str
    topic: str
    t0: float  # time.monotonic() at the history's origin
    group: str = GROUP
    assignor: str = "range"
    commit_interval_ms: int = 100
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS
    processes: list[MemberProcess] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)
    _spares: dict[str, list[MemberProcess]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def current(self, name: str) -> MemberProcess | None:
        """The latest incarnation of ``name`` that was started."""
        for p in reversed(self.processes):
            if p.name == name and p.started:
                return p
        return None

    def live(self) -> list[MemberProcess]:
        return [p for p in self.processes if p.running]

    def spawn(self, name: str, *, instance_id: str | None = None) -> MemberProcess:
        """A new incarnation of ``name``; it prepares (imports, builds its consumer) and
        waits for ``go`` before joining."""
        number = self._counts.get(name, 0)
        self._counts[name] = number + 1
        incarnation = f"{name}.{number}"
        member = instance_id if instance_id else incarnation
        events = self.root / f"{incarnation}.jsonl"
        stderr = self.root / f"{incarnation}.stderr"
        go = self.root / f"{incarnation}.go"
        command = [sys.executable, "-m", "tests.chaos.group_member",
                   "--bootstrap", self.bootstrap, "--group", self.group, "--topic", self.topic,
                   "--member", member, "--incarnation", incarnation, "--events", str(events),
                   "--t0", repr(self.t0), "--assignor", self.assignor,
                   "--session-timeout-ms", str(self.session_timeout_ms),
                   "--heartbeat-interval-ms", str(self.heartbeat_interval_ms),
                   "--rebalance-timeout-ms", str(self.rebalance_timeout_ms),
                   "--commit-interval-ms", str(self.commit_interval_ms), "--go-file", str(go)]
        if instance_id:
            command += ["--instance-id", instance_id]
        with open(stderr, "ab") as err:
            proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"))
        p = MemberProcess(name, member, incarnation, instance_id, proc, events, stderr, go)
        self.processes.append(p)
        return p

    def prepare(self, *specs: tuple[str, str | None]) -> list[MemberProcess]:
        """Spawn ``(name, instance_id)`` incarnations together and wait until each is
        prepared: spares that a later ``start`` or ``restart`` of that name uses, so a
        restart costs what a real one does, not Python's start-up on a busy machine."""
        spawned = [self.spawn(name, instance_id=iid) for name, iid in specs]
        for p in spawned:
            p.wait_prepared()
            self._spares.setdefault(p.name, []).append(p)
        return spawned

    def _spare(self, name: str, instance_id: str | None) -> MemberProcess:
        if not self._spares.get(name):
            self.prepare((name, instance_id))
        p = self._spares[name].pop(0)
        assert p.instance_id == instance_id, f"spare {p.incarnation} has another instance id"
        return p

    def start(self, *specs: tuple[str, str | None]) -> list[MemberProcess]:
        """Start members ``(name, instance_id)`` (spares first, else new processes)."""
        missing = [(n, i) for n, i in specs if not self._spares.get(n)]
        if missing:
            self.prepare(*missing)
        started = [self._spare(n, i) for n, i in specs]
        for p in started:
            p.go()
        return started

    def restart(self, name: str, *, hard: bool = False) -> tuple[MemberProcess, int | None]:
        """Rolling (close, then the new process joins) or hard (SIGKILL, then the new
        process joins) restart of ``name``: the new incarnation and the old one's exit
        code. The new process is prepared before the old one stops."""
        old = self.current(name)
        assert old is not None, f"no member {name}"
        new = self._spare(name, old.instance_id)
        if hard:
            old.kill()
        else:
            old.terminate()
        new.go()
        return new, old.proc.returncode

    def stop_all(self) -> dict[str, int | None]:
        """SIGTERM every live member at once, then wait for each."""
        live = self.live()
        for p in live:
            p.proc.send_signal(signal.SIGTERM)
        return {p.incarnation: p.terminate(signalled=True) for p in live}

    def close(self) -> None:
        for p in self.processes:
            if p.running:
                p.kill()

    def events(self) -> list[dict[str, Any]]:
        """Every member's events in time order (a torn last line of a killed member is
        ignored)."""
        out: list[tuple[int, int, int, dict[str, Any]]] = []
        for i, p in enumerate(self.processes):
            if not p.events_path.exists():
                continue
            for j, line in enumerate(p.events_path.read_text(errors="replace").splitlines()):
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                out.append((e["t"], i, j, e))
        return [e for *_, e in sorted(out, key=lambda x: x[:3])]

    def errors(self) -> list[str]:
        """Members that died on their own (not by the test's signals) or logged a
        traceback, with the tail of their stderr."""
        bad = []
        for p in self.processes:
            code = p.proc.poll()
            died = code not in (None, 0, -signal.SIGKILL, -signal.SIGTERM)
            text = p.stderr_tail()
            if died or "Traceback" in text:
                bad.append(f"--- {p.incarnation} exit {code}\n{text}")
        return bad


# ---------------------------------------------------------------------- observer


@dataclass
class OffsetObserver:
    """Samples the group's committed offsets (OffsetFetch to the coordinator) every
    ``interval_s`` in a thread: what any new member would start from. ``regressions``
    lists every partition whose committed offset was seen going back."""

    region: Region
    topic: str
    partitions: int
    clock: Any
    interval_s: float = 0.25
    samples: list[tuple[int, int, dict[int, int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-offsets", daemon=True)

    def start(self) -> OffsetObserver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            got = committed_offsets(self.region, self.topic, self.partitions)
            if got is not None:
                self.samples.append((self.clock(), got[0], got[1]))
            self._stop.wait(self.interval_s)

    def regressions(self) -> list[str]:
        best: dict[int, tuple[int, int, int]] = {}
        out = []
        for t, node, offsets in list(self.samples):
            for p, off in sorted(offsets.items()):
                if p in best and off < best[p][0]:
                    seen, at, by = best[p]
                    out.append(f"p{p}: {seen} (t={at} ms, n{by}) then {off} (t={t} ms, n{node})")
                if p not in best or off >= best[p][0]:
                    best[p] = (off, t, node)
        return out


# ---------------------------------------------------------------------- a run


@dataclass
class GroupOutcome:
    log: CheckResult  # the partition-log checker over the producer's history + drain
    group: GroupCheckResult
    observed_regressions: list[str]
    member_errors: list[str]
    events: list[dict[str, Any]]
    context: str

    def assert_ok(self) -> None:
        ctx = self.context
        assert not self.member_errors, f"{ctx}: members failed:\n" + "\n".join(self.member_errors)
        assert not self.observed_regressions, \
            f"{ctx}: committed offsets went back (OffsetFetch): {self.observed_regressions[:10]}"
        self.log.assert_ok()  # idempotent producers: no duplicates
        try:
            self.group.assert_ok()
        except AssertionError as err:
            raise AssertionError(f"{ctx}: {err}") from None


@dataclass
class GroupRun:
    run: Run
    members: GroupMembers
    observer: OffsetObserver

    @property
    def region(self) -> Region:
        return self.run.region

    def note(self, text: str) -> None:
        self.run.note(text)

    def now_ms(self) -> int:
        return self.run.history.now_ms()

    def coordinator(self, *, timeout_s: float = 20.0) -> int:
        return poll_until(lambda: find_coordinator(self.region), timeout_s=timeout_s,
                          what="a group coordinator")

    def wait_stable(self, members: int, *, timeout_s: float = 30.0) -> DescribedGroup:
        """The group Stable with ``members`` members and every partition assigned."""
        def ok() -> DescribedGroup | None:
            g = describe_group(self.region)
            if g is None or g.state != "Stable" or len(g.members) != members:
                return None
            owned = sorted(p for mem in g.members for tps in mem.assignment for p in tps.partitions)
            return g if owned == list(range(self.run.partitions)) else None
        return poll_until(ok, timeout_s=timeout_s, what=f"group Stable with {members} members",
                          describe=lambda: repr(describe_group(self.region)))

    def wait_consumed_to_end(self, *, timeout_s: float = 45.0) -> dict[int, int]:
        """Every partition's committed offset at its end offset (the producer stopped)."""
        ends = self.region.end_offsets(self.run.topic, self.run.partitions)

        def ok() -> dict[int, int] | None:
            got = committed_offsets(self.region, self.run.topic, self.run.partitions)
            return got[1] if got is not None and got[1] == ends else None
        return poll_until(ok, timeout_s=timeout_s, what=f"committed offsets at the end {ends}",
                          describe=lambda: repr(committed_offsets(
                              self.region, self.run.topic, self.run.partitions)))

    def finish(self, *workloads: Workload, live_members: int, settle_timeout_s: float = 45.0
               ) -> GroupOutcome:
        """Stop the producers, heal, let the group settle and consume to the end, stop
        the members (close), then check the log and the group's events."""
        run = self.run
        for w in workloads:
            w.stop()
        run.heal()
        run.region.wait_healthy(run.topic, run.partitions, timeout_s=60)
        started = time.monotonic()
        self.wait_stable(live_members, timeout_s=settle_timeout_s)
        ends = self.wait_consumed_to_end(timeout_s=settle_timeout_s)
        run.note(f"group settled and consumed to the end {sum(ends.values())} records in "
                 f"{time.monotonic() - started:.1f}s")
        exits = self.members.stop_all()
        self.observer.stop()
        log = run.finish(*workloads)
        events = self.members.events()
        group = check_group_events(run, events)
        kinds = Counter(e["event"] for e in events)
        lost_tps = sum(len(e["tps"]) for e in events if e["event"] == "lost")
        run.note(f"group counts: {group.summary()}")
        run.note(f"member callbacks: assigned={kinds['assigned']} revoked={kinds['revoked']} "
                 f"lost={kinds['lost']} ({lost_tps} partitions); commits refused or failed: "
                 f"{kinds['commit_failed']}")
        bad_exits = {k: v for k, v in exits.items() if v != 0}
        errors = self.members.errors() + ([f"member exits {bad_exits}"] if bad_exits else [])
        return GroupOutcome(log, group, self.observer.regressions(), errors, events, run.context)


@contextmanager
def group_run(tmp_path: Path, name: str, *, assignor: str = "range", commit_interval_ms: int = 100,
              configs: Mapping[str, str] | None = None) -> Iterator[GroupRun]:
    with region_run(tmp_path, name, configs={**GROUP_CONFIGS, **(configs or {})},
                    partitions=PARTITIONS) as run:
        history = run.history
        t0 = time.monotonic() - history.now_ms() / 1000
        members = GroupMembers(tmp_path / "members", run.region.bootstrap, TOPIC, t0,
                               assignor=assignor, commit_interval_ms=commit_interval_ms)
        observer = OffsetObserver(run.region, TOPIC, PARTITIONS, history.now_ms)
        g = GroupRun(run, members, observer)
        try:
            observer.start()
            yield g
        finally:
            observer.stop()
            members.close()
            print(f"[{name}] member events: {members.root}/*.jsonl", flush=True)


# ---------------------------------------------------------------------- checking


def check_group_events(run: Run, events: Sequence[Mapping[str, Any]]) -> GroupCheckResult:
    """The group checker over the members' events and the producer's acknowledged
    sends; the events are also written next to the history (``group-history.jsonl``)."""
    checkable = events_from_dicts(events)
    write_group_history(run.history.path.parent / "group-history.jsonl", checkable)
    return check_group(checkable, acked_records(run.history.ops, run.topic), seed=run.seed)


def generations(events: Sequence[Mapping[str, Any]]) -> list[int]:
    return sorted({e["generation"] for e in events if e["event"] == "assigned"})
