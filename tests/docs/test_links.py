"""Every relative link of the docs leads somewhere in the repository, and the docs do
not send readers to design files that live outside it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "notebooks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_ANCHOR = re.compile(r"^#+\s+(.*)$", re.MULTILINE)
# The project's design briefs are kept outside the repository: a page that names one
# points at something a reader of the repository cannot open.
OUTSIDE = ("ARCHITECTURE.md", "STYLE.md", "TESTING.md", "TOOLCHAIN.md", "PERFORMANCE.md", "../shared/")


def _slug(heading: str) -> str:
    heading = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def test_relative_links_resolve() -> None:
    broken = []
    for page in PAGES:
        for link in _LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link}")
            elif anchor and target.suffix == ".md":
                slugs = {_slug(h) for h in _ANCHOR.findall(target.read_text(encoding="utf-8"))}
                if anchor not in slugs:
                    broken.append(f"{page.relative_to(ROOT)}: {link} (no heading #{anchor})")
    assert not broken, "links to nothing:\n  " + "\n  ".join(broken)


def test_no_page_names_a_design_file_outside_the_repository() -> None:
    named = [f"{page.relative_to(ROOT)}: {name}" for page in PAGES for name in OUTSIDE
             if name in page.read_text(encoding="utf-8") and not (ROOT / name).exists()]
    assert not named, ("pages that point at files not in the repository (say what they hold, or link "
                       "a page that is):\n  " + "\n  ".join(named))
