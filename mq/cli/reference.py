"""Render docs/reference/cli.md from the argument parser, so the page cannot drift.

``python -m mq.cli.reference --write`` regenerates the page; a test checks that the
committed page equals ``render()``. Usage lines are built here from the parser's
actions rather than by argparse's help formatter, whose wrapping depends on the
terminal width and the Python version.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mq.cli.main import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
JSON_PAGE = PAGE.with_name("json-output.md")

INTRO = """\
# `mq` command reference

<!-- Generated from the argument parser by `python -m mq.cli.reference --write`. Do not edit. -->

Every command prints failures as one line on stderr, `error: <what was wrong> — <what to do>`,
and exits with a non-zero code (2 for a usage error). Set `MQ_DEBUG=1` to see Python
tracebacks. Client commands find the broker with `--bootstrap` (also spelled `-b` and, as
Kafka's tools spell it, `--bootstrap-server`), else `--region NAME` (a region of the topology
`mq up` started: its `cluster.json` in `$MQ_DATA_DIR`, else `./.mq`), else `$MQ_BOOTSTRAP`, else
`$MQ_REGION`, else the one region `mq up` started (with several regions running they ask for
`--region`), else `localhost:9092`.

Keys, values and header values in JSON output (`mq consume --format json`,
`mq produce --report`): bytes that are valid UTF-8 are a JSON string; other bytes are
`{"base64": "..."}`; a missing key or value is `null`. Headers are `[[name, value], ...]`.
Every listing has `--json`; [JSON output](json-output.md) documents each document's fields.
Tables share one style: upper-case column names joined by dashes (`LOG-END-OFFSET`), `-`
for an empty cell.
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _primary(action: argparse.Action) -> str:
    """The flag usage lines show: the first long spelling (``--bootstrap``, not its aliases)."""
    longs = [o for o in action.option_strings if o.startswith("--")]
    return longs[0] if longs else action.option_strings[0]


def _option(action: argparse.Action, *, every_spelling: bool = False) -> str:
    """``--flag METAVAR`` (usage), or ``-f, --flag, --alias METAVAR`` (argument tables)."""
    if not action.option_strings:
        name = action.metavar or action.dest.upper()
        if isinstance(action.nargs, str) and action.nargs in ("*", "+"):
            return f"{name} ..."
        return f"{name} ..." if action.nargs == argparse.REMAINDER else str(name)
    flag = ", ".join(action.option_strings) if every_spelling else _primary(action)
    if action.nargs == 0:
        return flag
    metavar = action.metavar or ("{" + ",".join(action.choices) + "}" if action.choices else action.dest.upper())
    text = f"{flag} {metavar}"
    return f"{text} ..." if isinstance(action, argparse._AppendAction) else text


def _usage(prog: str, parser: argparse.ArgumentParser) -> str:
    group_of = {id(a): g for g in parser._mutually_exclusive_groups for a in g._group_actions}
    parts, done = [], set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            parts.append("COMMAND ...")
            continue
        group = group_of.get(id(action))
        if group is not None:
            if id(group) not in done:
                done.add(id(group))
                inner = " | ".join(_option(a) for a in group._group_actions)
                parts.append(f"({inner})" if group.required else f"[{inner}]")
            continue
        text = _option(action)
        optional = action.nargs in ("?", "*") if not action.option_strings else not action.required
        parts.append(f"[{text}]" if optional else text)
    return " ".join([prog, *parts])


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        help_text = (action.help or "").replace("%%", "%").replace("|", "\\|")  # argparse's % escape
        if action.choices and action.metavar is None and not help_text.startswith("one of"):
            help_text = f"one of {', '.join(map(str, action.choices))}. {help_text}".strip()
        if action.required and action.option_strings:
            help_text = f"(required) {help_text}"
        rows.append(f"| `{_option(action, every_spelling=True)}` | {help_text} |")
    return ["| argument | meaning |", "|---|---|", *rows] if rows else []


def _section(prog: str, summary: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} `{prog}`", ""]
    if summary:
        out += [summary[0].upper() + summary[1:] + ".", ""]
    out += ["```", _usage(prog, parser), "```", ""]
    if parser.description and parser.description.rstrip(".").lower() != summary.lower():
        out += [parser.description.replace("\n", "  \n"), ""]
    table = _arguments(parser)
    if table:
        out += [*table, ""]
    for name, help_text, sub in _subcommands(parser):
        out += _section(f"{prog} {name}", help_text, sub, min(level + 1, 4))
    return out


def render() -> str:
    parser = build_parser()
    lines = [INTRO, "## Commands", ""]
    for name, help_text, _ in _subcommands(parser):
        lines.append(f"- `mq {name}` — {help_text}")
    lines.append("")
    for name, help_text, sub in _subcommands(parser):
        lines += _section(f"mq {name}", help_text, sub, 2)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mq.cli.reference", description=__doc__)
    p.add_argument("--write", action="store_true", help=f"write {PAGE} and {JSON_PAGE.name} instead of printing")
    args = p.parse_args(argv)
    from mq.cli import schemas

    pages = {PAGE: render(), JSON_PAGE: schemas.render()}
    for path, text in pages.items():
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
