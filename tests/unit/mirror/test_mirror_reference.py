"""docs/reference/mirror-cli.md is generated from the mirror's argument parser: it must match."""

from __future__ import annotations

from mirror.reference import PAGE, render


def test_the_committed_cli_page_matches_the_parser() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/reference/mirror-cli.md is stale: run `python -m mirror.reference --write`")
