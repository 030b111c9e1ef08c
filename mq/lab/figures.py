"""The labs' figures as PNGs under ``docs/labs/``, so the docs can show them.

A lab calls ``save_figure(fig, "name")`` beside ``plt.show()``. In an ordinary run
(jupyter lab, the notebook tests) that does nothing. ``python -m mq.lab.figures``
executes the labs headless with ``MQ_LAB_FIGURES`` naming a directory, where each
``save_figure`` writes ``name.png``; then it replaces ``docs/labs/<lab>/`` with those
PNGs and a ``figures.json``::

    {"notebook": "notebooks/02_replication.py", "notebook_sha256": "…",
     "figures": ["flush-policy.png", …], "executed_s": 41.3, "generated": "2026-…Z"}

``check`` (run by tests/notebooks/test_figures.py) compares ``notebook_sha256`` with the
notebook as it is now: a content hash, not a file time, because a fresh clone gives
every file the same mtime and a commit time says nothing about which notebook the PNGs
came from. Edit a lab and the check fails until its figures are made again:

    python -m mq.lab.figures                          # every lab (about two minutes)
    python -m mq.lab.figures notebooks/02_replication.py
    python -m mq.lab.figures --check                  # what the test checks
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIGURES_ENV = "MQ_LAB_FIGURES"
DPI = 90
ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = ROOT / "notebooks"
FIGURES_DIR = ROOT / "docs" / "labs"
MANIFEST = "figures.json"
MAX_PNG_BYTES = 250_000
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")
_SAVE_CALL = re.compile(r"""save_figure\(\s*[\w.\[\]]+\s*,\s*["']([^"']+)["']""")


def save_figure(fig: Any, name: str) -> Path | None:
    """Write ``fig`` as ``<$MQ_LAB_FIGURES>/<name>.png`` when figures are being made;
    otherwise do nothing and return None."""
    if not _NAME.match(name):
        raise ValueError(f"figure name {name!r}: use lower-case letters, digits and dashes")
    directory = os.environ.get(FIGURES_ENV)
    if not directory:
        return None
    path = Path(directory) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return path


def notebook_sha256(path: Path) -> str:
    """SHA-256 of the lab's cells: the text after jupytext's ``# ---`` header, so that
    pairing the file with an ``.ipynb`` (which rewrites the header's ``formats``) does not
    make its figures look stale."""
    text = path.read_text(encoding="utf-8")
    header = re.match(r"\A# ---\n(?:#.*\n)*?# ---\n", text)
    return hashlib.sha256(text[header.end() if header else 0:].encode("utf-8")).hexdigest()


def figure_names(source: Path) -> list[str]:
    """The names a lab passes to ``save_figure``, in order."""
    return _SAVE_CALL.findall(source.read_text(encoding="utf-8"))


def labs(root: Path = ROOT) -> list[Path]:
    """Every lab that saves figures."""
    return [p for p in sorted((root / "notebooks").glob("*.py")) if figure_names(p)]


@dataclass(frozen=True)
class Made:
    notebook: Path
    figures: tuple[str, ...]
    executed_s: float


# ---------------------------------------------------------------- making them


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def make(notebook: Path, *, root: Path = ROOT, cell_timeout_s: int = 300,
         executed_dir: Path | None = None) -> Made:
    """Execute one lab headless (a fresh kernel, cwd = the repository, as the notebook
    tests do) and replace ``docs/labs/<lab>/`` with the figures it saved; with
    ``executed_dir``, keep the executed ``.ipynb`` there (outputs included)."""
    import jupytext
    from nbclient import NotebookClient

    notebook = notebook.resolve()
    wanted = figure_names(notebook)
    if len(set(wanted)) != len(wanted):
        raise SystemExit(f"{notebook.name}: a figure name is used twice: {wanted}")
    digest = notebook_sha256(notebook)  # of what runs, even if the file is edited meanwhile
    with tempfile.TemporaryDirectory(prefix="mq-figures-") as tmp:
        out = Path(tmp) / notebook.stem
        nb = jupytext.read(notebook)
        client = NotebookClient(nb, timeout=cell_timeout_s, kernel_name="python3",
                                resources={"metadata": {"path": str(root)}})
        started = time.perf_counter()
        try:
            with _env(FIGURES_ENV, str(out)):
                client.execute()
        finally:
            if executed_dir is not None:
                import nbformat

                executed_dir.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, executed_dir / f"{notebook.stem}.ipynb")
        executed_s = time.perf_counter() - started
        made = sorted(p.stem for p in out.glob("*.png")) if out.is_dir() else []
        missing = [n for n in wanted if n not in made]
        if missing:
            raise SystemExit(f"{notebook.name} ran but did not save {missing}")
        target = root / "docs" / "labs" / notebook.stem
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in wanted:
            shutil.copyfile(out / f"{name}.png", target / f"{name}.png")
    manifest = {
        "notebook": notebook.relative_to(root).as_posix(),
        "notebook_sha256": digest,
        "figures": [f"{n}.png" for n in wanted],
        "executed_s": round(executed_s, 1),
        "generated": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "regenerate": f"python -m mq.lab.figures {notebook.relative_to(root).as_posix()}",
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return Made(notebook, tuple(wanted), executed_s)


# ---------------------------------------------------------------- checking them


def check(root: Path = ROOT) -> list[str]:
    """What is wrong with the saved figures (empty: nothing): a lab whose figures are
    missing or were made from another version of it, a PNG that is not one, too big,
    not listed, or not shown by any page under docs/ or notebooks/README.md."""
    problems: list[str] = []
    pages = [*sorted((root / "docs").rglob("*.md")), root / "notebooks" / "README.md"]
    shown = "\n".join(p.read_text(encoding="utf-8") for p in pages if p.is_file())
    expected_dirs = set()
    for notebook in labs(root):
        rel = notebook.relative_to(root).as_posix()
        target = root / "docs" / "labs" / notebook.stem
        expected_dirs.add(target.name)
        redo = f"run `python -m mq.lab.figures {rel}` and commit docs/labs/{notebook.stem}/"
        try:
            manifest = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            problems.append(f"{rel}: no docs/labs/{notebook.stem}/{MANIFEST}: {redo}")
            continue
        if manifest.get("notebook_sha256") != notebook_sha256(notebook):
            problems.append(f"{rel} changed since its figures were made: {redo}")
        listed = [f"{n}.png" for n in figure_names(notebook)]
        if manifest.get("figures") != listed:
            problems.append(f"{rel}: figures.json lists {manifest.get('figures')}, the lab saves {listed}: {redo}")
        for png in sorted(target.glob("*.png")):
            if png.name not in listed:
                problems.append(f"docs/labs/{notebook.stem}/{png.name}: no lab saves it: delete it ({redo})")
        for name in listed:
            problems += _check_png(target / name, f"docs/labs/{notebook.stem}/{name}", redo, shown)
    labs_dir = root / "docs" / "labs"
    for stray in sorted(labs_dir.iterdir()) if labs_dir.is_dir() else []:
        if stray.is_dir() and stray.name not in expected_dirs:
            problems.append(f"docs/labs/{stray.name}/: no notebook of that name saves figures: delete it")
    return problems


def _check_png(path: Path, rel: str, redo: str, shown: str) -> list[str]:
    if not path.is_file():
        return [f"{rel} is missing: {redo}"]
    head = path.read_bytes()[:8]
    out = []
    if head != b"\x89PNG\r\n\x1a\n":
        out.append(f"{rel} is not a PNG: {redo}")
    if path.stat().st_size > MAX_PNG_BYTES:
        out.append(f"{rel} is {path.stat().st_size:,} bytes (limit {MAX_PNG_BYTES:,}): save it smaller")
    if f"labs/{path.parent.name}/{path.name}" not in shown:
        out.append(f"{rel}: no page under docs/ shows it: add ![…](…/{rel.removeprefix('docs/')}) "
                   "where it explains something")
    return out


# ---------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mq.lab.figures",
        description="Execute the labs headless and save their figures under docs/labs/ "
                    "(or, with --check, say whether the saved ones are current).")
    parser.add_argument("notebooks", nargs="*", type=Path, metavar="NOTEBOOK",
                        help="labs to run (default: every notebooks/*.py that saves figures)")
    parser.add_argument("--check", action="store_true", help="only check the saved figures; exit 1 if stale")
    parser.add_argument("--executed", type=Path, metavar="DIR",
                        help="also write each executed notebook (with its outputs) to DIR")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for problem in problems:
            print(problem, file=sys.stderr)
        print("figures are current" if not problems else f"{len(problems)} problem(s)")
        return 1 if problems else 0
    for notebook in args.notebooks or labs():
        print(f"running {notebook} ...", flush=True)
        made = make(notebook, executed_dir=args.executed)
        print(f"  {len(made.figures)} figure(s) in docs/labs/{notebook.stem}/ "
              f"(the lab ran {made.executed_s:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
