"""Render docs/reference/mirror-cli.md from the mirror's argument parser, so the page cannot
drift: ``python -m mirror.reference --write`` regenerates it; a test checks that the
committed page equals ``render()``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mirror.__main__ import build_parser

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "mirror-cli.md"

INTRO = """\
# `python -m mirror` command reference

<!-- Generated from the argument parser by `python -m mirror.reference --write`. Do not edit. -->

`mq mirror ARGS...` runs `python -m mirror ARGS...` with the same arguments and exit code.
Commands that act on a running deployment read `<data_dir>/cluster.json` (written by `mq up`;
`--cluster PATH`, else `$MQ_DATA_DIR/cluster.json`, else `.mq/cluster.json`). Exit codes: 0
done, 1 the operation failed (the message on stderr says why), 2 bad arguments or
configuration. See [the mirror reference](mirror.md) for flow settings, the status file and
the metrics, and [how to fail over and fail back](../how-to/fail-over-and-fail-back.md).
"""


def _option(action: argparse.Action) -> str:
    if not action.option_strings:
        return str(action.metavar or action.dest.upper())
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:
        return flag
    text = f"{flag} {action.metavar or action.dest.upper()}"
    return f"{text} ..." if isinstance(action, argparse._AppendAction) else text


def _section(prog: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    options = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    usage = " ".join([prog, *(_option(a) if a.required else f"[{_option(a)}]" for a in options)])
    out = [f"## `{prog}`", "", summary[0].upper() + summary[1:] + ".", "", "```", usage, "```", "",
           "| argument | meaning |", "|---|---|"]
    for action in options:
        text = (action.help or "").replace("|", "\\|")
        if action.required:
            text = f"(required) {text}"
        if action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0:
            text = f"{text} (default `{action.default}`)".strip()
        out.append(f"| `{_option(action)}` | {text} |")
    return [*out, ""]


def render() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    lines = [INTRO]
    for name, command in sub.choices.items():
        lines += _section(f"python -m mirror {name}", helps[name], command)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mirror.reference", description=__doc__)
    p.add_argument("--write", action="store_true", help=f"write {PAGE} instead of printing")
    args = p.parse_args(argv)
    if args.write:
        PAGE.write_text(render(), encoding="utf-8")
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
