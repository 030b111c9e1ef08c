"""The shape of the tree: layer contracts, module size budget, a README map that is true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HARD_LIMIT_LINES = 700


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_module_over_the_hard_size_budget() -> None:
    too_big = []
    for package in ("mq", "mirror", "loadtests"):
        for path in (ROOT / package).rglob("*.py"):
            lines = path.read_text().count("\n")
            if lines > HARD_LIMIT_LINES:
                too_big.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not too_big, f"modules over {HARD_LIMIT_LINES} lines: split them: {too_big}"


def test_init_modules_only_reexport() -> None:
    offenders = []
    for path in (ROOT / "mq").rglob("__init__.py"):
        text = path.read_text()
        if re.search(r"^\s*(def|class) ", text, re.M) or text.count("\n") > 50:
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"__init__.py files must only re-export: {offenders}"


def _readme_map() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Repository map", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, re.M)


def test_readme_repo_map_matches_the_tree() -> None:
    listed = _readme_map()
    assert listed, "README.md has no repository map table"
    missing = [entry for entry in listed if not (ROOT / entry.rstrip("/")).exists()]
    assert not missing, f"README map lists paths that do not exist: {missing}"
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    top_dirs = sorted({p.split("/")[0] + "/" for p in tracked if "/" in p and not p.startswith(".")})
    unlisted = [d for d in top_dirs if d not in listed]
    assert not unlisted, f"top-level folders missing from the README map: {unlisted}"
    for package in sorted(p.name for p in (ROOT / "mq").iterdir() if (p / "__init__.py").exists()):
        assert f"mq/{package}/" in listed, f"mq/{package}/ is missing from the README map"


def test_relative_links_in_docs_and_readme_resolve() -> None:
    broken = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # an external address
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, f"broken relative links: {broken}"
