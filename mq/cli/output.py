"""Terminal output, one convention for every listing.

- Tables: ``table(...)`` on stdout, rich's SIMPLE_HEAD box, column headers in the style of
  Kafka's and rpk's tools (``LOG-END-OFFSET``: upper case, words joined by dashes; callers
  may write ``"log end offset"``), ``-`` for an empty cell (``cell``), plain rows that never
  wrap when piped (``print_table``).
- Tables too wide for the terminal: ``print_fitted`` leaves out whole columns, least
  important first, and says which, rather than wrapping cells into a tangle.
- JSON: ``--json`` prints one document with ``print_json``; its shape is documented, field
  by field, in docs/reference/json-output.md (``mq.cli.schemas``, checked by the tests).
- Sizes for humans: ``human_bytes``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
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


def print_fitted(columns: Sequence[tuple[str, int]], rows: Sequence[Sequence[str]], *,
                 title: str | None = None) -> list[str]:
    """A table whose cells never wrap: ``columns`` are (name, priority), 0 for columns
    always shown; when the rows are wider than the terminal, the columns of the highest
    priority number go first (the rightmost of equals first) until the rest fit, and a
    line says which were left out. Piped output has every column (``print_table``).
    Returns the headers left out."""
    out = console()
    width = out.width if out.is_terminal else None  # piped: every column, for grep and awk
    keep = list(range(len(columns)))

    def build(indices: list[int]) -> Table:
        t = table(*(columns[i][0] for i in indices), title=title)
        for column in t.columns:
            column.no_wrap = True
            column.overflow = "ellipsis"
        for row in rows:
            t.add_row(*(row[i] for i in indices))
        return t

    probe = Console(width=10_000, file=io.StringIO(), color_system=None)
    t = build(keep)
    while width is not None and probe.measure(t).maximum > width:
        droppable = [i for i in keep if columns[i][1] > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda i: (columns[i][1], i))
        keep.remove(worst)
        t = build(keep)
    print_table(t)
    dropped = [header(columns[i][0]) for i in range(len(columns)) if i not in keep]
    if dropped:
        out.print(f"({', '.join(dropped)} left out to fit {width} columns; `--json` has every field)",
                  markup=False, soft_wrap=False)
    return dropped


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
