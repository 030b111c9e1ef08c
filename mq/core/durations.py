"""Durations as people type them: ``500ms``, ``1s``, ``1.5s``, ``10m``, ``2h``, ``1d``.

A bare number is seconds (``--interval 5``). ``parse_duration_ms`` raises ValueError
with a message that shows the accepted forms.
"""

from __future__ import annotations

import re

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_FORM = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*")


def parse_duration_ms(text: str) -> int:
    """``"10m"`` -> 600000; a bare number is seconds; ValueError for anything else."""
    match = _FORM.fullmatch(str(text))
    if match is None:
        raise ValueError(f"{text!r} is not a duration (for example 500ms, 5s, 10m, 2h, 1d; a bare number is seconds)")
    number, unit = match.groups()
    return round(float(number) * _UNITS_MS[unit or "s"])


def format_duration_ms(ms: int) -> str:
    """The shortest exact spelling: 600000 -> ``10m``, 1500 -> ``1500ms``."""
    for unit in ("d", "h", "m", "s"):
        if ms and ms % _UNITS_MS[unit] == 0:
            return f"{ms // _UNITS_MS[unit]}{unit}"
    return f"{ms}ms"
