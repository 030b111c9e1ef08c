"""The machinery behind tests/docs/test_doc_blocks.py: read a Markdown page's fenced
blocks and their directives, run shell blocks in one bash session, compare printed
output with the page's samples.

A page says how each block is tested with an HTML comment on the line before its fence
(invisible when the page is rendered), directives separated by ``;``::

    <!-- doc-test: skip: opens a browser and never returns -->
    <!-- doc-test: wait; check: every-acked-record-readable -->
    <!-- doc-test: retry: 20; check: isr-without-broker-2 -->
    <!-- doc-test: output: exact -->

Fences carry their language: ``sh`` blocks are commands (run, unless ``skip: REASON``),
``text`` blocks are a sample of what the ``sh`` block before them prints (checked, unless
``output: none: REASON``), ``python`` blocks run only with ``run`` (else ``skip: REASON``).
Anything else (``yaml``, …) is a file's content, not checked here.

Directives:

- ``skip: REASON`` — not run; the reason is required and shown in the test's report;
- ``run`` — run a ``python`` block (``sh`` blocks run anyway);
- ``wait`` — wait for the background jobs of earlier blocks (``… &``) first, and fail if
  one of them failed;
- ``retry: SECONDS`` — something happens "a moment later": run the block again until
  its sample matches and its checks pass, for at most SECONDS;
- ``check: NAME`` — after the block, run the test's check NAME (a claim the prose makes:
  "both print 200000", "leadership moved");
- ``timeout: SECONDS`` — for a slow block (default 90);
- ``output: lines`` (default) / ``exact`` / ``tokens`` / ``none: REASON`` on a ``text``
  block: how its sample is compared (see ``sample_mismatch``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SHELL_LANGS = ("sh", "shell", "bash")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<body>.*?)\s*-->\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUMBER = re.compile(r"\d[\d,.]*")
_KNOWN = ("skip", "run", "wait", "retry", "check", "timeout", "output")


class DocError(Exception):
    """A page whose blocks say nothing, or something this harness cannot understand."""


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    directives: dict[str, list[str]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def get(self, name: str) -> str | None:
        values = self.directives.get(name)
        return values[-1] if values else None

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGS

    @property
    def skip_reason(self) -> str | None:
        return self.get("skip")


def parse_directives(body: str, where: str) -> dict[str, list[str]]:
    """``name: value; name; …`` — a ``skip:`` reason runs to the end of the comment (it
    may contain ``;``), so ``skip`` comes last."""
    out: dict[str, list[str]] = {}
    skip = re.search(r"(?:^|;)\s*skip\s*:(?P<reason>.*)$", body)
    if skip:
        out["skip"] = [skip.group("reason").strip()]
        body = body[:skip.start()]
    for part in (p.strip() for p in body.split(";")):
        if not part:
            continue
        name, _, value = part.partition(":")
        name, value = name.strip(), value.strip()
        if name not in _KNOWN:
            raise DocError(f"{where}: unknown doc-test directive {name!r} (known: {', '.join(_KNOWN)})")
        if name == "skip":  # "skip" without a colon: no reason given
            raise DocError(f"{where}: `skip` needs a reason: <!-- doc-test: skip: why it cannot run -->")
        out.setdefault(name, []).append(value)
    if out.get("skip") == [""]:
        raise DocError(f"{where}: `skip` needs a reason: <!-- doc-test: skip: why it cannot run -->")
    return out


def parse_blocks(path: Path, root: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the directives of the comment just
    before it (blank lines between are allowed)."""
    page = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    pending: dict[str, list[str]] | None = None
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        if directive:
            pending = parse_directives(directive.group("body"), f"{page}:{i + 1}")
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip():
                pending = None  # a directive applies to the next block only
            i += 1
            continue
        indent, marker = fence.group("indent"), fence.group("fence")
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        if i >= len(lines):
            raise DocError(f"{page}:{start + 1}: fence never closed")
        blocks.append(Block(page, start + 1, fence.group("info").strip().split(" ")[0],
                            "\n".join(body) + "\n", pending or {}))
        pending = None
        i += 1
    return blocks


# ---------------------------------------------------------------- samples


def normalise(text: str) -> list[str]:
    """Lines as a reader compares them: colours, table rules and runs of blanks gone."""
    out = []
    for raw in _ANSI.sub("", text).splitlines():
        line = " ".join(raw.split())
        if line and set(line) - set("─━-═ |+"):
            out.append(line)
    return out


def _line_pattern(line: str, *, mask_numbers: bool) -> re.Pattern[str]:
    prefix = line.endswith(("...", "…"))
    line = line.rstrip(".…").rstrip() if prefix else line
    pattern, last = [], 0
    for m in _NUMBER.finditer(line) if mask_numbers else ():
        pattern.append(re.escape(line[last:m.start()]))
        pattern.append(r"\d[\d,.]*")
        last = m.end()
    pattern.append(re.escape(line[last:]))
    return re.compile("".join(pattern) + ("" if prefix else r"\Z"))


def sample_mismatch(sample: str, actual: str, mode: str = "lines") -> str | None:
    """None if ``actual`` shows what ``sample`` shows, else what is missing.

    ``lines``: every sample line, in order, matches a line of the output, numbers
    masked (a pid, a time, a port differ from run to run; the words and the columns may
    not); a sample line ending in ``...`` matches any line it starts; a line that is only
    ``...`` stands for lines left out. ``exact``: the same with numbers compared too.
    ``tokens``: every word of the sample appears in the output, in any order (``ls``
    prints columns on a terminal, one name a line into a pipe)."""
    want = [line for line in normalise(sample) if line not in ("...", "…")]
    have = normalise(actual)
    if mode == "tokens":
        tokens = " ".join(have).split()
        missing = [w for w in " ".join(want).split()
                   if not any(_line_pattern(w, mask_numbers=True).match(t) for t in tokens)]
        return f"missing from the output: {missing}" if missing else None
    if mode not in ("lines", "exact"):
        raise DocError(f"unknown output mode {mode!r}: lines, exact, tokens or none: REASON")
    at = 0
    for line in want:
        pattern = _line_pattern(line, mask_numbers=mode == "lines")
        for j in range(at, len(have)):
            if pattern.match(have[j]):
                at = j + 1
                break
        else:
            return f"no line like {line!r} (in order) in the output"
    return None


# ---------------------------------------------------------------- a bash session


@dataclass
class Result:
    rc: int
    output: str
    failed: list[str]  # commands the ERR trap saw fail

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failed


class Session:
    """One ``bash`` fed block after block, as a reader types them into one terminal:
    ``cd``, variables, ``. .venv/bin/activate`` and background jobs carry over. Each
    block's output (stdout and stderr together, as on a terminal) goes to a file; an ERR
    trap records every command that failed, even mid-block."""

    def __init__(self, cwd: Path, env: dict[str, str], work: Path) -> None:
        self.cwd, self.work = cwd, work
        work.mkdir(parents=True, exist_ok=True)
        self._stderr = open(work / "bash.stderr", "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, cwd=cwd,
                                     env=env, text=True, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=self._stderr)
        self.n = 0
        self._reported = 0  # failure lines already returned by run()
        self._send("set -E; set +m\n")

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def run(self, script: str, *, timeout_s: float = 90.0) -> Result:
        self.n += 1
        n, work = self.n, self.work
        (work / f"{n}.sh").write_text(script)
        errors = work / f"{n}.failed"
        self._send(f"DOC_FAILED={errors}; trap 'echo \"exit $? from: $BASH_COMMAND\" >> \"$DOC_FAILED\"' ERR\n"
                   f"{{ . {work / f'{n}.sh'}; }} > {work / f'{n}.out'} 2>&1 < /dev/null\n"
                   f"echo $? > {work / f'{n}.rc.tmp'}; mv {work / f'{n}.rc.tmp'} {work / f'{n}.rc'}\n")
        rc_file = work / f"{n}.rc"
        deadline = time.monotonic() + timeout_s
        while not rc_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"bash exited ({self.proc.returncode}) during block {n}: a block ran "
                                   f"`exit`?\n{self.output(n)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"block still running after {timeout_s:g} s:\n{script}\noutput so far:\n"
                                   f"{self.output(n)}")
            time.sleep(0.05)  # polling for the block's end, with a deadline
        failed = errors.read_text().splitlines() if errors.exists() else []
        self._reported = len(self._all_failures())
        return Result(int(rc_file.read_text() or 1), self.output(n), failed)

    def _all_failures(self) -> list[str]:
        return [line for f in sorted(self.work.glob("*.failed")) for line in f.read_text().splitlines()]

    def output(self, n: int) -> str:
        path = self.work / f"{n}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def late_failures(self) -> list[str]:
        """Failures the ERR trap recorded after the last block ended (background jobs)."""
        return self._all_failures()[self._reported:]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # bash and its background jobs
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        self._stderr.close()


def wait_script() -> str:
    """Wait for every background job of the session; fail if one failed."""
    return ('doc_bad=0; for doc_job in $(jobs -p); do wait "$doc_job" || '
            '{ echo "a background job failed: exit $?"; doc_bad=1; }; done; [ "$doc_bad" = 0 ]\n')


def recorded_pids(root: Path) -> list[int]:
    """Every ``"pid"`` in every ``cluster.json`` under ``root`` (what ``mq up`` started)."""
    pids: list[int] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pid" and isinstance(value, int):
                    pids.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in root.rglob("cluster.json"):
        try:
            walk(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return pids
