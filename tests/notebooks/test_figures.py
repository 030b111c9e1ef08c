"""The labs' figures under docs/labs/ exist, come from the notebooks as they are now,
and are shown by the docs (``mq.lab.figures``; regenerate with
``python -m mq.lab.figures``).

"As they are now" is a content hash of each notebook recorded beside its PNGs: a fresh
clone gives every file the same mtime, so file times cannot tell which is newer.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from mq.lab import figures

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_saved_figures_are_current_and_shown() -> None:
    problems = figures.check(ROOT)
    assert not problems, "\n".join(problems)


def test_every_figure_a_lab_shows_is_saved() -> None:
    for notebook in NOTEBOOKS:
        source = notebook.read_text()
        shows = source.count("plt.show()")
        names = figures.figure_names(notebook)
        assert shows, f"{notebook.name} shows no figure"
        assert len(names) == shows, (f"{notebook.name}: {shows} plt.show() but {len(names)} "
                                     f"save_figure(...) calls ({names}): save each figure for docs/labs/")
        for show in re.finditer(r"plt\.show\(\)", source):
            before = source[:show.start()].rstrip().splitlines()[-1]
            assert "save_figure(" in before, f"{notebook.name}: save_figure(...) right before plt.show(): {before!r}"


def _lab_tree(tmp: Path) -> Path:
    (tmp / "notebooks").mkdir(parents=True)
    (tmp / "docs" / "explanation").mkdir(parents=True)
    (tmp / "notebooks" / "09_demo.py").write_text('save_figure(fig, "curve")\nplt.show()\n')
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    out = tmp / "docs" / "labs" / "09_demo"
    out.mkdir(parents=True)
    fig.savefig(out / "curve.png", dpi=40)
    plt.close(fig)
    (out / "figures.json").write_text(json.dumps({
        "notebook": "notebooks/09_demo.py",
        "notebook_sha256": figures.notebook_sha256(tmp / "notebooks" / "09_demo.py"),
        "figures": ["curve.png"]}))
    (tmp / "docs" / "explanation" / "demo.md").write_text("![curve](../labs/09_demo/curve.png)\n")
    return tmp


def test_check_passes_a_current_tree_and_catches_each_problem(tmp_path: Path) -> None:
    root = _lab_tree(tmp_path)
    assert figures.check(root) == []

    notebook = root / "notebooks" / "09_demo.py"
    notebook.write_text(notebook.read_text() + "# an edit\n")
    assert any("changed since its figures were made" in p for p in figures.check(root))

    root = _lab_tree(tmp_path / "paired")  # jupytext --set-formats rewrites only the header
    notebook = root / "notebooks" / "09_demo.py"
    body = notebook.read_text()
    notebook.write_text("# ---\n# jupyter:\n#   jupytext:\n#     formats: ipynb,py:percent\n# ---\n" + body)
    assert figures.check(root) == []

    root = _lab_tree(tmp_path / "unshown")
    (root / "docs" / "explanation" / "demo.md").write_text("no picture here\n")
    assert any("no page under docs/ shows it" in p for p in figures.check(root))

    root = _lab_tree(tmp_path / "stray")
    shutil.copyfile(root / "docs/labs/09_demo/curve.png", root / "docs/labs/09_demo/old.png")
    assert any("old.png: no lab saves it" in p for p in figures.check(root))

    root = _lab_tree(tmp_path / "missing")
    (root / "docs/labs/09_demo/curve.png").unlink()
    assert any("curve.png is missing" in p for p in figures.check(root))

    root = _lab_tree(tmp_path / "renamed")
    (root / "notebooks" / "09_demo.py").write_text('save_figure(fig, "other")\nplt.show()\n')
    assert any("the lab saves ['other.png']" in p for p in figures.check(root))


def test_save_figure_writes_only_when_asked(tmp_path: Path, monkeypatch) -> None:
    fig, _ax = plt.subplots(figsize=(2, 1))
    monkeypatch.delenv(figures.FIGURES_ENV, raising=False)
    assert figures.save_figure(fig, "quiet") is None
    monkeypatch.setenv(figures.FIGURES_ENV, str(tmp_path / "out"))
    path = figures.save_figure(fig, "saved")
    plt.close(fig)
    assert path == tmp_path / "out" / "saved.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
