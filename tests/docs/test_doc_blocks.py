"""Docs that are tested: every shell block of README.md and docs/tutorials/*.md runs.

Each page (the tutorials in the order a learner reads them: one after the other, in the
same directory) runs in one bash session in a scratch copy of the repository, as a
reader would type it into one terminal, against brokers the blocks start themselves with
`mq up`. How each block is tested is said on the page, in an HTML comment before it
(tests/docs/blocks.py lists the directives): a block that cannot run says why; a sample
of printed output is compared with what the command printed (numbers masked unless the
page asks for an exact match); a claim of the prose ("both print 200000") is a named
check below, run after its block.

The scratch copy differs from a fresh clone in four explicit ways (SUBSTITUTIONS; each
must still match its page, or the test says it is stale):

1. The repository's region files are copied with every HOST:PORT replaced by a free port
   (metrics ports = port + 10000 are kept free too), so `mq up` never touches 9092–9094
   or a region someone runs; whatever topology regions/default.yaml describes is what
   the README's `mq up` starts.
2. `python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'` becomes a link to the
   environment the tests run in (installing again takes minutes and the network).
3. `mq up --single` gets free ports, and a retention check every 0.5 s instead of every
   5 minutes so that the first tutorial's retention step shows its effect at once.
4. `seq 1 200000` becomes `seq 1 50000` (the region tutorial's acks=all loop: 200,000
   records take ~20 s to write and read back here; 50,000 still outlast the two seconds
   before the killed leader is replaced), and the checks compare with the scaled count.

`jupyter lab FILE` (opens a browser, never returns) becomes `test -s FILE`: the labs
themselves run in tests/notebooks.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs.blocks import (
    Block,
    DocError,
    Session,
    parse_blocks,
    recorded_pids,
    sample_mismatch,
    wait_script,
)

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)
TUTORIAL_ORDER = ["first-broker.md", "first-region.md"]  # the learner's path; others run after, alone
SEQ_SCALED = 50_000
COPIED = ("notebooks",)


def sessions() -> dict[str, list[Path]]:
    """Pages that share one terminal and one directory, by test id."""
    tutorials = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
    ordered = [ROOT / "docs" / "tutorials" / n for n in TUTORIAL_ORDER if (ROOT / "docs" / "tutorials" / n).exists()]
    out = {"README": [ROOT / "README.md"], "tutorials": ordered}
    for page in tutorials:
        if page not in ordered:
            out[page.stem] = [page]
    return out


def all_pages() -> list[Path]:
    return [page for pages in sessions().values() for page in pages]


# ---------------------------------------------------------------- ports and substitutions


def _port_pair() -> tuple[int, int]:
    """A free port whose port + 10000 is free too (the default metrics port)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port, port + 10000
    raise RuntimeError("no free port pair (port, port + 10000) found")


@dataclass
class Scratch:
    root: Path
    ports: dict[int, int] = field(default_factory=dict)  # a region file's port -> ours
    single: tuple[int, int] = (0, 0)

    def bootstrap(self, data_dir: str = ".mq") -> str:
        """The bootstrap list of the first region `mq up` recorded (east in the default
        topology, where the README's blocks run with MQ_REGION=east)."""
        from mq.cli.common import _recorded_regions

        regions = _recorded_regions(str(self.root / data_dir))
        assert regions, f"no {data_dir}/cluster.json with a bootstrap list in {self.root}: did `mq up` run?"
        return regions[0][1]


def make_scratch(base: Path) -> Scratch:
    """A copy of the repository to run pages in: links to everything but regions/, whose
    files are copied with free ports."""
    root = base / "clone"
    root.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in ("regions", ".git", ".venv") or entry.name.startswith(".mq"):
            continue
        if entry.name in COPIED:  # blocks write next to these files (jupytext --to ipynb)
            shutil.copytree(entry, root / entry.name, ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
        else:
            (root / entry.name).symlink_to(entry)
    scratch = Scratch(root, single=_port_pair())
    address = re.compile(r"(?P<host>\b(?:\d{1,3}(?:\.\d{1,3}){3}|localhost)):(?P<port>\d{2,5})\b")

    def rewrite(match: re.Match[str]) -> str:
        port = int(match.group("port"))
        if port not in scratch.ports:
            scratch.ports[port] = _port_pair()[0]
        return f"{match.group('host')}:{scratch.ports[port]}"

    for source in (ROOT / "regions").rglob("*"):
        target = root / "regions" / source.relative_to(ROOT / "regions")
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        text = source.read_text(encoding="utf-8")
        target.write_text(address.sub(rewrite, text) if source.suffix in (".yaml", ".yml") else text)
    return scratch


@dataclass(frozen=True)
class Substitution:
    pattern: str
    replacement: Callable[[Scratch], str]
    why: str
    langs: tuple[str, ...] = ("sh",)


SUBSTITUTIONS = [
    Substitution(r"python3 -m venv \.venv && \.venv/bin/pip install -e '\.\[dev\]'",
                 lambda s: f"ln -sfn {VENV} .venv",
                 "the tests run in an installed checkout; installing again takes minutes and the network"),
    Substitution(r"mq up --single(?![\w-])",
                 lambda s: (f"mq up --single --listen 127.0.0.1:{s.single[0]} --metrics-listen "
                            f"127.0.0.1:{s.single[1]} --config log.retention.check.interval.ms=500"),
                 "free ports; retention checked every 0.5 s instead of 5 minutes"),
    Substitution(r"seq 1 200000\b", lambda s: f"seq 1 {SEQ_SCALED}",
                 "200,000 acks=all records take ~20 s to write and read back; the checks use the scaled count"),
    Substitution(r"jupyter lab (\S+)", lambda s: r"test -s \1",
                 "opens a browser and never returns; tests/notebooks runs the labs"),
    Substitution(r"localhost:9092", lambda s: s.bootstrap(), "the scratch broker's port", langs=("python",)),
]


def substitute(block: Block, scratch: Scratch, used: set[str]) -> str:
    text = block.text
    for sub in SUBSTITUTIONS:
        if block.lang not in sub.langs and not (block.is_shell and "sh" in sub.langs):
            continue
        if re.search(sub.pattern, text):
            used.add(sub.pattern)
            text = re.sub(sub.pattern, sub.replacement(scratch), text)
    return text


# ---------------------------------------------------------------- the prose's claims


@dataclass
class Context:
    scratch: Scratch
    output: str


def _numbers(output: str) -> list[int]:
    """The lines of an output that are a bare count (what `wc -l` prints)."""
    return [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)(?:\s+\S+)?\s*$", output, re.MULTILINE)]


def _admin(ctx: Context):
    from mq.client.blocking import Admin

    return Admin(ctx.scratch.bootstrap())


def _partitions(ctx: Context, topic: str) -> list:
    admin = _admin(ctx)
    try:
        return list(admin.describe_topics([topic])[0].partitions)
    finally:
        admin.close()


def check_every_acked_record_readable(ctx: Context) -> None:
    """"Both print N: every acknowledged record is readable, none twice" — the count of
    acked.jsonl, then the count the consumer read: equal (the producer is idempotent, so a
    batch sent again after its acknowledgement died with the leader is not written twice),
    and every acknowledged value is there."""
    import json

    from mq.client.blocking import Consumer
    from mq.core.types import TopicPartition

    counts = _numbers(ctx.output)
    assert len(counts) >= 2, f"expected two counts (wc -l of acked.jsonl, then of the consumer):\n{ctx.output}"
    acked_n, read_n = counts[-2], counts[-1]
    assert acked_n == SEQ_SCALED, f"{acked_n} records acknowledged of {SEQ_SCALED}"
    assert read_n == acked_n, f"the consumer read {read_n} records, {acked_n} were acknowledged"
    acked = [json.loads(line)["value"] for line in (ctx.scratch.root / "acked.jsonl").read_text().splitlines()]
    consumer = Consumer(ctx.scratch.bootstrap(), auto_offset_reset="earliest")
    try:
        tps = [TopicPartition("payments", p.partition) for p in _partitions(ctx, "payments")]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            seen.update(r.value.decode() for r in consumer.poll(timeout_ms=500))
    finally:
        consumer.close()
    missing = sorted(set(acked) - seen)
    assert not missing, f"{len(missing)} acknowledged records not readable, e.g. {missing[:5]}"


def _isr_check(want: Callable[[list], str | None]) -> Callable[[Context], None]:
    def check(ctx: Context) -> None:
        problem = want(_partitions(ctx, "payments"))
        assert problem is None, problem
    return check


def _moved_off_2(partitions: list) -> str | None:
    bad = [(p.partition, p.leader, list(p.isr)) for p in partitions if p.leader == 2 or 2 in p.isr]
    return f"partitions still led by broker 2 or with it in the ISR: {bad}" if bad else None


def _full_isr(partitions: list) -> str | None:
    bad = [(p.partition, list(p.isr)) for p in partitions if len(p.isr) != len(p.replicas)]
    return f"partitions whose ISR is not every replica: {bad}" if bad else None


def check_group_counts(ctx: Context) -> None:
    """The group reads the 12,000 records, then, after --shift-by -100, the last 100 of
    each of the 12 partitions: 1,200."""
    assert _numbers(ctx.output) == [12000, 1200], f"expected the counts 12000 then 1200:\n{ctx.output}"


def check_retention_moved_log_start(ctx: Context) -> None:
    """"log start moves up to the first offset of the oldest segment kept" (partition 1)."""
    from mq.core.types import EARLIEST_TIMESTAMP, TopicPartition

    admin = _admin(ctx)
    try:
        tp = TopicPartition("orders", 1)
        start = admin.list_offsets({tp: EARLIEST_TIMESTAMP})[tp].offset
    finally:
        admin.close()
    segments = sorted(int(p.stem) for p in (ctx.scratch.root / ".mq" / "broker-1" / "orders-1").glob("*.log"))
    assert start > 0, "retention.bytes has not moved partition 1's log start yet"
    assert start == segments[0], f"log start {start} is not the base offset of the oldest segment kept {segments}"


def check_billing_lag_drained(ctx: Context) -> None:
    """docs/tutorials/load-and-lag.md: after the console consumer, billing lags nowhere."""
    admin = _admin(ctx)
    try:
        lags = admin.group_lag("billing")
    finally:
        admin.close()
    assert lags and all(r.lag == 0 for r in lags), [(str(r.tp), r.lag) for r in lags]


CHECKS: dict[str, Callable[[Context], None]] = {
    "every-acked-record-readable": check_every_acked_record_readable,
    "leaders-moved-off-broker-2": _isr_check(_moved_off_2),
    "every-isr-full": _isr_check(_full_isr),
    "group-counts": check_group_counts,
    "retention-moved-log-start": check_retention_moved_log_start,
    "billing-lag-drained": check_billing_lag_drained,
}


# ---------------------------------------------------------------- coverage (no processes)


def _plan(pages: list[Path]) -> list[tuple[Block, Block | None]]:
    """Each runnable or skipped block with the sample that follows it; raises DocError
    for a block whose treatment is not said."""
    plan: list[tuple[Block, Block | None]] = []
    for page in pages:
        blocks = parse_blocks(page, ROOT)
        for i, block in enumerate(blocks):
            if block.lang == "":
                raise DocError(f"{block.where}: a fence without a language: tag it `sh` (a command to run), "
                               "`text` (what a command printed), `python`, `yaml`, …")
            if block.lang in ("console",):
                raise DocError(f"{block.where}: `console` mixes commands and output: split it into `sh` and `text`")
            if block.lang == "text":
                before = blocks[i - 1] if i else None
                orphan = before is None or not (before.is_shell or before.lang == "python")
                if orphan and not (block.get("output") or "").startswith("none"):
                    raise DocError(f"{block.where}: a `text` sample must follow the `sh` block that prints it "
                                   "(or say <!-- doc-test: output: none: why -->)")
                continue
            if block.is_shell or block.lang == "python":
                if block.lang == "python" and "run" not in block.directives and not block.skip_reason:
                    raise DocError(f"{block.where}: a python block says <!-- doc-test: run --> or "
                                   "<!-- doc-test: skip: why -->")
                sample = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1].lang == "text" else None
                plan.append((block, sample))
                for name in block.directives.get("check", []):
                    if name not in CHECKS:
                        raise DocError(f"{block.where}: no check named {name!r} in {__file__}")
    return plan


def _output_mode(sample: Block) -> str:
    return (sample.get("output") or "lines").split(":")[0].strip()


def test_every_block_is_run_or_says_why_not() -> None:
    plan = _plan(all_pages())
    assert any(not b.skip_reason for b, _ in plan), "no runnable block found"
    skipped = [f"{b.where}: {b.skip_reason}" for b, _ in plan if b.skip_reason]
    print("not run:\n  " + "\n  ".join(skipped))


def test_substitutions_and_checks_are_all_used() -> None:
    text = {p: p.read_text() for p in all_pages()}
    for sub in SUBSTITUTIONS:
        assert any(re.search(sub.pattern, t) for t in text.values()), (
            f"substitution {sub.pattern!r} matches no page any more: remove it from SUBSTITUTIONS")
    named = {name for b, _ in _plan(all_pages()) for name in b.directives.get("check", [])}
    assert named == set(CHECKS), f"checks no page names: {sorted(set(CHECKS) - named)}"


# ---------------------------------------------------------------- running the pages


def _env(scratch: Scratch) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "VIRTUAL_ENV", "FORCE_COLOR"))}
    env.update(PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", PYTHONPATH=str(ROOT),
               NO_COLOR="1", TERM="dumb", COLUMNS="200", HOME=str(scratch.root.parent / "home"))
    (scratch.root.parent / "home").mkdir(exist_ok=True)
    return env


def _run_block(session: Session, block: Block, sample: Block | None, scratch: Scratch, used: set[str]) -> None:
    script = substitute(block, scratch, used)
    if block.lang == "python":
        path = session.work / f"block-{block.line}.py"
        path.write_text(script)
        script = f"python {path}\n"
    if "wait" in block.directives:
        result = session.run(wait_script(), timeout_s=120)
        assert result.ok, f"{block.where}: a background job of an earlier block failed:\n{result.output}"
    timeout_s = float(block.get("timeout") or 90)
    retry_s = float(block.get("retry") or 0)
    deadline = time.monotonic() + retry_s
    while True:
        result = session.run(script, timeout_s=timeout_s)
        problem = None
        if not result.ok:
            problem = f"exit {result.rc}; failed: {result.failed}"
        elif sample is not None and not (sample.get("output") or "").startswith("none"):
            mismatch = sample_mismatch(sample.text, result.output, _output_mode(sample))
            problem = mismatch and f"printed output differs from the sample at {sample.where}: {mismatch}"
        if problem is None:
            try:
                for name in block.directives.get("check", []):
                    CHECKS[name](Context(scratch, result.output))
            except AssertionError as error:
                problem = f"check failed: {error}"
        if problem is None:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{block.where}:\n{script}\n{problem}\n--- output:\n{result.output}")
        time.sleep(0.5)  # retry: the page says it happens a moment later


def _stop_everything(scratch: Scratch, env: dict[str, str]) -> None:
    import signal
    import subprocess

    for cluster in scratch.root.rglob("cluster.json"):
        subprocess.run([str(VENV / "bin" / "mq"), "down", "--data-dir", str(cluster.parent), "--timeout", "5"],
                       cwd=scratch.root, env=env, capture_output=True, timeout=60, check=False)
    for pid in recorded_pids(scratch.root):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.mark.parametrize("name", list(sessions()))
def test_pages_run_as_written(name: str, tmp_path: Path) -> None:
    pages = sessions()[name]
    plan = _plan(pages)
    scratch = make_scratch(tmp_path)
    env = _env(scratch)
    session = Session(scratch.root, env, tmp_path / "blocks")
    used: set[str] = set()
    started = time.monotonic()
    try:
        for block, sample in plan:
            if block.skip_reason:
                continue
            _run_block(session, block, sample, scratch, used)
        late = session.late_failures()
        assert not late, f"commands failed in the background: {late}"
    finally:
        session.close()
        _stop_everything(scratch, env)
        shutil.rmtree(scratch.root / ".mq", ignore_errors=True)
    print(f"{name}: {sum(1 for b, _ in plan if not b.skip_reason)} blocks in {time.monotonic() - started:.0f} s")
