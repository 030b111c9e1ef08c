"""Terminal output: rich tables on stdout, plain lines when piped, sizes for humans."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

_stdout: Console | None = None


def console() -> Console:
    global _stdout
    if _stdout is None:
        _stdout = Console(highlight=False, soft_wrap=True)
    return _stdout


def table(*columns: str, title: str | None = None) -> Table:
    t = Table(*columns, title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    return t


def print_table(t: Table) -> None:
    """Tables never wrap cells when piped: width grows to fit, so grep/awk see whole rows."""
    out = console()
    if out.is_terminal:
        out.print(t)
    else:
        wide = Console(highlight=False, width=max(out.width, 200), color_system=None)
        wide.print(t)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
