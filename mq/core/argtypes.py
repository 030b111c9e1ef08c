"""argparse types shared by the command line (``mq.cli``) and the processes ``mq up``
starts (``mq.deploy``): each checks its text and says what was wrong."""

from __future__ import annotations

import argparse
import re

from mq.core.durations import parse_duration_ms


def duration_ms(text: str) -> int:
    """A duration above zero (``500ms``, ``5s``, ``10m``), in ms."""
    try:
        ms = parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration above zero is needed")
    return ms


def regex(text: str) -> str:
    """A regular expression (checked, returned as text)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression ({exc})") from None
    return text
