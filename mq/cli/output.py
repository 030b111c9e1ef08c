"""Terminal output, one convention for every listing.

- Tables: ``table(...)`` on stdout, rich's SIMPLE_HEAD box, column headers in the style of
  Kafka's and rpk's tools (``LOG-END-OFFSET``: upper case, words joined by dashes; callers
  may write ``"log end offset"``), ``-`` for an empty cell (``cell``), plain rows that never
  wrap when piped (``print_table``).
- JSON: ``--json`` prints one document with ``print_json``; its shape is documented, field
  by field, in docs/reference/json-output.md (``mq.cli.schemas``, checked by the tests).
- Sizes for humans: ``human_bytes``.
"""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

_stdout: Console | None = None


def console() -> Console:
    global _stdout
    if _stdout is None:
        _stdout = Console(highlight=False, soft_wrap=True)
    return _stdout


def header(name: str) -> str:
    """``"log end offset"`` -> ``"LOG-END-OFFSET"`` (already-styled names pass through)."""
    return "-".join(name.upper().split())


def table(*columns: str, title: str | None = None) -> Table:
    return Table(*(header(c) for c in columns), title=title, box=box.SIMPLE_HEAD, title_justify="left",
                 pad_edge=False)


def cell(value: Any) -> str:
    """A table cell: ``-`` for nothing, ``yes``/``no``, ids joined by commas, 0.1 precision."""
    if value is None or value == "" or value == [] or value == ():
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def print_table(t: Table) -> None:
    """Tables never wrap cells when piped: width grows to fit, so grep/awk see whole rows."""
    out = console()
    if out.is_terminal:
        out.print(t)
    else:
        wide = Console(highlight=False, width=max(out.width, 200), color_system=None)
        wide.print(t)


def print_json(doc: Any) -> None:
    """One JSON document on stdout (indented, UTF-8 as is)."""
    print(json.dumps(doc, indent=2, ensure_ascii=False))


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
