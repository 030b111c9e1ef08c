"""Several `mq consume --group` processes share a topic, as a new user starts them.

The bug these tests guard against (issue 9): three console consumers started together on
a three-broker region, two of them printed one partition each and then stalled, six
partitions were never read and the group ended with lag. Each scenario here starts real
`mq consume --group` processes against a real region from `mq up`, stamps every line they
print as it arrives (an independent reader: the test's own threads), and checks:

- every produced record was printed exactly once across the members;
- no partition was read by two members at once: ordered by offset, a partition's records
  form runs per member, and each run was printed after the previous run ended;
- `mq group describe --json` ends with lag 0 on every partition.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .helpers import LocalCluster, base_env, free_listen, mq_command, run_mq

PARTITIONS = 12
RECORDS = 12_000
IDLE_MS = 6000  # --timeout-ms: a member exits this long after its last record


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory):
    """Three brokers from `mq up FILE`, each a controller voter, as `mq up` starts them."""
    root = tmp_path_factory.mktemp("mq-console-groups")
    listens: list[str] = []
    while len(listens) < 3:
        candidate = free_listen()
        if candidate not in listens:
            listens.append(candidate)
    brokers = "\n".join(f"  - {{id: {i}, listen: {a}}}" for i, a in enumerate(listens, start=1))
    path = root / "region.yaml"
    path.write_text(f"region: test\ndata_dir: {root / 'data'}\nbrokers:\n{brokers}\n")
    env = base_env(MQ_BOOTSTRAP=",".join(listens))
    up = run_mq("up", str(path), "--timeout", "60", env=env, timeout=90)
    assert up.returncode == 0, (up.stdout + up.stderr).decode(errors="replace")
    try:
        yield LocalCluster(data_dir=root / "data", listen=listens[0], env=env)
    finally:
        run_mq("down", "--data-dir", str(root / "data"), env=env, timeout=90)


@dataclass
class Member:
    """One `mq consume --group` process; a thread stamps each line it prints."""

    name: str
    proc: subprocess.Popen
    lines: list[tuple[float, dict]] = field(default_factory=list)
    reader: threading.Thread | None = None

    def start_reading(self) -> None:
        def read() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                self.lines.append((time.monotonic(), json.loads(raw)))
        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()


def start_member(region: LocalCluster, name: str, topic: str, group: str, *extra: str) -> Member:
    args = [*mq_command(), "consume", topic, "--group", group, "--from-beginning", "--format", "json",
            "--timeout-ms", str(IDLE_MS), *extra]
    proc = subprocess.Popen(args, env=region.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    member = Member(name, proc)
    member.start_reading()
    return member


def produce(region: LocalCluster, topic: str, first: int, count: int, *, per_second: int = 0) -> None:
    """Keyed records `k<i>:v<i>` through `mq produce --key-separator : --acks all`; with
    ``per_second``, fed slowly so that members join while others read."""
    proc = subprocess.Popen([*mq_command(), "produce", topic, "--key-separator", ":", "--acks", "all"],
                            env=region.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None
    chunk = max(1, per_second // 10) if per_second else count
    for start in range(first, first + count, chunk):
        end = min(first + count, start + chunk)
        proc.stdin.write("".join(f"k{i}:v{i}\n" for i in range(start, end)).encode())
        proc.stdin.flush()
        if per_second:
            time.sleep(0.1)
    proc.stdin.close()
    proc.wait(timeout=120)
    assert proc.returncode == 0, (proc.stdout.read() + proc.stderr.read()).decode(errors="replace")


def finish(members: list[Member], timeout_s: float = 120) -> None:
    for m in members:
        try:
            m.proc.wait(timeout=timeout_s)
        finally:
            if m.proc.poll() is None:
                m.proc.kill()
        assert m.reader is not None
        m.reader.join(10)
        err = m.proc.stderr.read().decode(errors="replace") if m.proc.stderr else ""
        assert "Traceback" not in err, f"{m.name}: {err}"
        assert m.proc.returncode == 0, f"{m.name} exited {m.proc.returncode}: {err}"


def check_history(members: list[Member], expected: int) -> None:
    seen: dict[tuple[int, int], str] = {}
    by_partition: dict[int, list[tuple[int, float, str]]] = {}
    for m in members:
        for t, doc in m.lines:
            coords = (doc["partition"], doc["offset"])
            assert coords not in seen, f"record {coords} printed by {seen[coords]} and again by {m.name}"
            seen[coords] = m.name
            by_partition.setdefault(doc["partition"], []).append((doc["offset"], t, m.name))
    counts = {m.name: len(m.lines) for m in members}
    assert len(seen) == expected, f"{len(seen)} of {expected} records printed; per member {counts}"
    assert sorted(by_partition) == list(range(PARTITIONS))
    for p, rows in by_partition.items():
        rows.sort()
        offsets = [o for o, _, _ in rows]
        assert offsets == list(range(len(rows))), f"partition {p}: offsets not contiguous from 0"
        runs: list[tuple[str, float, float]] = []  # (member, first print, last print)
        for _, t, name in rows:
            if runs and runs[-1][0] == name:
                runs[-1] = (name, runs[-1][1], t)
            else:
                runs.append((name, t, t))
        for before, after in zip(runs, runs[1:]):
            assert after[1] >= before[2], (
                f"partition {p}: {after[0]} printed offsets while {before[0]} still owned it: {runs}")


def check_lag_zero(region: LocalCluster, group: str) -> None:
    result = region.mq("group", "describe", group, "--json")
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    doc = json.loads(result.stdout)
    lags = {p["partition"]: p["lag"] for p in doc["partitions"]}
    assert lags == {p: 0 for p in range(PARTITIONS)}, f"group {group} ends with lag {lags}"


def new_topic(region: LocalCluster, name: str) -> None:
    result = region.mq("topic", "create", name, "--partitions", str(PARTITIONS), "--replication-factor", "3")
    assert result.returncode == 0, result.stderr.decode(errors="replace")


SCENARIOS = {
    "eager-2": (2, ()),
    "eager-3": (3, ()),
    "eager-4": (4, ()),
    "cooperative-3": (3, ("--assignor", "cooperative-sticky")),
    "static-3": (3, ("static",)),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_members_started_together_share_every_record_once(region: LocalCluster, scenario: str):
    count, extra = SCENARIOS[scenario]
    topic, group = f"clicks-{scenario}", f"g-{scenario}"
    new_topic(region, topic)
    produce(region, topic, 0, RECORDS)
    members = []
    for i in range(count):
        flags = ("--group-instance-id", f"{group}-{i}") if extra == ("static",) else extra
        members.append(start_member(region, f"m{i}", topic, group, *flags))
    finish(members)
    check_history(members, RECORDS)
    check_lag_zero(region, group)


def wait_for_members(region: LocalCluster, group: str, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    doc: dict = {}
    while time.monotonic() < deadline:
        result = region.mq("group", "describe", group, "--json")
        if result.returncode == 0:
            doc = json.loads(result.stdout)
            if doc["state"] == "Stable" and len(doc["members"]) == count:
                return
        time.sleep(0.3)
    raise AssertionError(f"group {group} did not reach {count} stable members: {doc}")


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_a_member_joining_late_takes_over_without_loss_or_overlap(region: LocalCluster, assignor: str):
    topic, group = f"clicks-late-{assignor}", f"g-late-{assignor}"
    new_topic(region, topic)
    produce(region, topic, 0, RECORDS // 2)
    early = [start_member(region, f"m{i}", topic, group, "--assignor", assignor) for i in range(2)]
    wait_for_members(region, group, 2)
    stop = threading.Event()
    produced = [RECORDS // 2]

    def feed() -> None:  # keeps writing while the late member joins, and a while after
        while not stop.is_set():
            produce(region, topic, produced[0], 500)
            produced[0] += 500

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        late = start_member(region, "late", topic, group, "--assignor", assignor)
        wait_for_members(region, group, 3)
        time.sleep(2)  # the late member reads what the feeder writes to its partitions
    finally:
        stop.set()
        feeder.join(60)
    finish([*early, late])
    assert late.lines, "the late member was given nothing to read"
    check_history([*early, late], produced[0])
    check_lag_zero(region, group)
