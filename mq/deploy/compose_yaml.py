"""Write a compose document as YAML that reads like a hand-written one, byte for byte the
same for the same input (a test compares docker/compose.yaml with the generator).

pyyaml's emitter cannot place comments, anchors it does not choose, or block scalars
for one value, and quotes by its own taste; the subset compose needs is small: mappings,
lists, strings, numbers, booleans, one block scalar with an anchor (``BlockText``) and
aliases to it (``Alias``). Strings that YAML could read as something else (``yes``,
``30s``, ``127.0.0.1:9092:9092``, which YAML 1.1 may read as a base-60 number) are
double-quoted; JSON's string syntax is valid YAML, so ``json.dumps`` quotes them. Every
``$`` is doubled: compose reads ``$NAME`` in any value as a variable.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

INDENT = "  "
FLOW_LIST_WIDTH = 100
# Plain (unquoted) when YAML reads it back as this string: no leading digit (numbers,
# 30s, base-60 127:0), no ": " or " #", and not one of YAML 1.1's booleans or null.
_PLAIN = re.compile(r"^(?:[A-Za-z_/]|-[A-Za-z-])[A-Za-z0-9_./@=+:-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


@dataclass(frozen=True)
class BlockText:
    """A literal block scalar (``|``) with an anchor other values can alias."""

    text: str
    anchor: str


@dataclass(frozen=True)
class Alias:
    """``*name``: the value of the BlockText anchored ``name``."""

    name: str


def scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Alias):
        return f"*{value.name}"
    if not isinstance(value, str):
        raise TypeError(f"cannot write {type(value).__name__} in a compose file")
    value = value.replace("$", "$$")
    if _PLAIN.match(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value, ensure_ascii=False)


def _key(key: str) -> str:
    return key if _PLAIN.match(key) and key.lower() not in _YAML_WORDS else json.dumps(key)


def _lines(value: Any, depth: int) -> list[str]:
    """The lines of a mapping or list nested ``depth`` levels deep."""
    pad = INDENT * depth
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _entry(f"{pad}{_key(key)}:", item, depth)
        return out
    for item in value:
        if isinstance(item, dict) and item:
            inner = _lines(item, depth + 1)
            out.append(f"{pad}- {inner[0].lstrip()}")
            out += inner[1:]
        else:
            out += _entry(f"{pad}-", item, depth)
    return out


def _entry(head: str, item: Any, depth: int) -> list[str]:
    if isinstance(item, BlockText):
        body = [f"{INDENT * (depth + 1)}{line}".rstrip() for line in item.text.replace("$", "$$").splitlines()]
        return [f"{head} &{item.anchor} |", *body]
    if isinstance(item, dict):
        if not item:
            return [f"{head} {{}}"]
        flow = _flow_map(head, item) if depth >= 2 else None
        return [flow] if flow is not None else [head, *_lines(item, depth + 1)]
    if isinstance(item, list):
        if not item:
            return [f"{head} []"]
        if all(not isinstance(x, (dict, list)) for x in item):
            return _flow_list(head, [scalar(x) for x in item])
        return [head, *_lines(item, depth + 1)]
    return [f"{head} {scalar(item)}"]


def _flow_map(head: str, item: dict[str, Any]) -> str | None:
    """``head {k: v, ...}`` for a short mapping of scalars, else None."""
    if any(isinstance(v, (dict, list, BlockText)) for v in item.values()):
        return None
    text = f"{head} {{{', '.join(f'{_key(k)}: {scalar(v)}' for k, v in item.items())}}}"
    return text if len(text) <= FLOW_LIST_WIDTH else None


def compact_json(value: Any, *, width: int = FLOW_LIST_WIDTH, _depth: int = 0) -> str:
    """JSON with every object or array that fits in ``width`` columns on one line and
    the others one item per line: a cluster document a person can scan."""
    flat = json.dumps(value, sort_keys=True, ensure_ascii=False)
    if not isinstance(value, (dict, list)) or not value or _depth + len(flat) <= width - 4:
        return flat
    pad = " " * (_depth + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {compact_json(v, width=width - len(k) - 4, _depth=_depth + 1)}"
                 for k, v in sorted(value.items())]
        return "{\n" + ",\n".join(items) + "\n" + " " * _depth + "}"
    items = [f"{pad}{compact_json(v, width=width, _depth=_depth + 1)}" for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * _depth + "]"


def _flow_list(head: str, items: list[str]) -> list[str]:
    """``head [a, b, ...]``, wrapped under its first item past FLOW_LIST_WIDTH."""
    lines = [f"{head} [{items[0]}"]
    indent = " " * (len(head) + 2)
    for item in items[1:]:
        if len(lines[-1]) + len(item) + 3 > FLOW_LIST_WIDTH:
            lines[-1] += ","
            lines.append(f"{indent}{item}")
        else:
            lines[-1] += f", {item}"
    lines[-1] += "]"
    return lines


def render(doc: dict[str, Any]) -> str:
    """The document's YAML; top-level sections separated by a blank line."""
    parts = ["\n".join(_entry(f"{_key(key)}:", value, 0)) for key, value in doc.items()]
    return "\n\n".join(parts) + "\n"
