"""How ``mq consume`` prints a record: Kafka's formatter properties, an rpk-style format
string, or JSON. Pure functions of a record (and, for ``%i``, its index): no I/O here.

**Kafka's properties** (``--property print.key=true``, as ``kafka-console-consumer``'s
``DefaultMessageFormatter``): the fields printed, in Kafka's order and with its labels::

    CreateTime:1700000000000<sep>Partition:0<sep>Offset:5<sep>h1:v1,h2:v2<sep>key<sep>value<line>

``<sep>`` is ``key.separator`` (default a tab) and ``<line>`` is ``line.separator``
(default a newline); ``headers.separator`` (default ``,``) joins the headers, a record
without headers prints ``NO_HEADERS``, and ``null.literal`` (default ``null``) stands for
a missing key, value or header value. With ``print.value=false`` the last printed field
ends the line.

**A format string** (``--format '%p %o %k %v\\n'``, as ``rpk topic consume --format``):
percent verbs for the record's fields, backslash escapes for control characters. See
``FORMAT_HELP`` for the list (it is also the ``--format`` help in docs/reference/cli.md).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mq.cli.records import bytes_to_json, headers_to_json

FORMAT_HELP = (
    "text: the value (raw bytes) per line, as kafka-console-consumer prints it (shaped by --property); "
    "json: one object per record; or a format string with verbs as rpk's: "
    "%t topic, %p partition, %o offset, %k key, %v value, %d timestamp (epoch ms; "
    "%d{strftime[%Y-%m-%d %H:%M:%S.%f]} local time), %h headers as name:value,name:value "
    "(%h{%k=%v;} one inner format per header), %H header count, %T %K %V lengths of topic, key, "
    "value (-1 for null), %i records printed so far, %% %{ %} literal characters; "
    "%k{hex} %v{base64} (also on header names and values) encode bytes; escapes \\t \\n \\r \\\\ \\xNN. "
    "A null key or value prints nothing. A newline ends each record unless the format "
    "already ends with one (default: text)"
)

UNSUPPORTED_VERBS = {"e": "leader epoch", "x": "producer id", "y": "producer epoch", "a": "record attributes",
                     "[": "log start offset", "|": "last stable offset", "]": "high watermark"}
TEXT_MODIFIERS = ("hex", "base64")


class FormatError(ValueError):
    """A format string or formatter property that cannot be used; the message says why."""


# ---------------------------------------------------------------- escapes

_ESCAPES = {"t": b"\t", "n": b"\n", "r": b"\r", "\\": b"\\"}


def _escape_at(text: str, i: int) -> tuple[bytes, int]:
    """The bytes of the backslash escape at ``text[i]``, and the index after it.
    An unknown escape stays as written (backslash included)."""
    nxt = text[i + 1:i + 2]
    if nxt in _ESCAPES:
        return _ESCAPES[nxt], i + 2
    if nxt == "x":
        digits = text[i + 2:i + 4]
        try:
            if len(digits) != 2:
                raise ValueError
            return bytes([int(digits, 16)]), i + 4
        except ValueError:
            raise FormatError(f"\\x must be followed by two hex digits (at position {i})") from None
    return b"\\", i + 1


def unescape(text: str) -> bytes:
    """``\\t \\n \\r \\\\ \\xNN`` in ``text`` -> bytes (UTF-8 for the rest)."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "\\":
            chunk, i = _escape_at(text, i)
            out += chunk
        else:
            j = text.find("\\", i)
            j = len(text) if j < 0 else j
            out += text[i:j].encode("utf-8")
            i = j
    return bytes(out)


# ---------------------------------------------------------------- Kafka's formatter properties

KAFKA_BOOLEANS = ("print.timestamp", "print.key", "print.value", "print.partition", "print.offset",
                  "print.headers")
KAFKA_SEPARATORS = ("key.separator", "line.separator", "headers.separator", "null.literal")
KAFKA_PROPERTIES = KAFKA_BOOLEANS + KAFKA_SEPARATORS


def parse_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise FormatError(f"{name}={text!r}: use true or false")
    return value == "true"


@dataclass(frozen=True)
class KafkaFormat:
    """``kafka-console-consumer --property`` settings (``DefaultMessageFormatter``)."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, pairs: Iterable[tuple[str, str]], *, print_key: bool = False) -> KafkaFormat:
        values: dict[str, Any] = {"print_key": print_key}
        for name, text in pairs:
            if name in KAFKA_BOOLEANS:
                values[name.replace(".", "_")] = parse_bool(name, text)
            elif name in KAFKA_SEPARATORS:
                values[name.replace(".", "_")] = unescape(text)
            else:
                raise FormatError(f"unknown formatter property {name!r}; mq consume takes "
                                  f"{', '.join(KAFKA_PROPERTIES)}")
        return cls(**values)

    def render(self, record: Any) -> bytes:
        fields: list[bytes] = []
        if self.print_timestamp:
            if record.timestamp < 0:
                fields.append(b"NO_TIMESTAMP")
            else:
                label = "LogAppendTime" if int(record.timestamp_type) == 1 else "CreateTime"
                fields.append(f"{label}:{record.timestamp}".encode())
        if self.print_partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.print_offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            fields.append(self.headers_separator.join(
                name.encode("utf-8") + b":" + self._bytes(value) for name, value in record.headers)
                if record.headers else b"NO_HEADERS")
        if self.print_key:
            fields.append(self._bytes(record.key))
        if self.print_value:
            fields.append(self._bytes(record.value))
        if not fields:  # every print.* false: Kafka prints nothing at all
            return b""
        return self.key_separator.join(fields) + self.line_separator

    def _bytes(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else bytes(data)


# ---------------------------------------------------------------- rpk-style format strings

Piece = Callable[[Any, int], bytes]  # (record, index) -> bytes; for headers: ((name, value), index)


def _text(data: bytes | None, modifier: str | None) -> bytes:
    if data is None:
        return b""
    raw = bytes(data)
    if modifier == "hex":
        return raw.hex().encode("ascii")
    if modifier == "base64":
        return base64.b64encode(raw)
    return raw


def _length(data: bytes | str | None) -> bytes:
    if data is None:
        return b"-1"
    return b"%d" % len(data.encode("utf-8") if isinstance(data, str) else data)


def _timestamp(modifier: str | None) -> Piece:
    if modifier is None:
        return lambda r, i: b"%d" % r.timestamp
    if modifier.startswith("strftime[") and modifier.endswith("]"):
        pattern = modifier[len("strftime["):-1]
        return lambda r, i: datetime.fromtimestamp(r.timestamp / 1000).astimezone().strftime(pattern).encode()
    raise FormatError(f"%d{{{modifier}}}: the timestamp takes no modifier or strftime[FORMAT]")


def _headers_plain(record: Any, index: int) -> bytes:
    return b",".join(name.encode("utf-8") + b":" + bytes(value) for name, value in record.headers)


def _record_verb(verb: str, modifier: str | None, inner: list[Piece] | None) -> Piece:
    if verb in ("k", "v"):
        if modifier not in (None, *TEXT_MODIFIERS):
            raise FormatError(f"%{verb}{{{modifier}}}: modifiers are {', '.join(TEXT_MODIFIERS)}")
        if verb == "k":
            return lambda r, i: _text(r.key, modifier)
        return lambda r, i: _text(r.value, modifier)
    if verb == "d":
        return _timestamp(modifier)
    if verb == "h":
        if inner is None:
            return _headers_plain
        return lambda r, i: b"".join(piece(h, i) for h in r.headers for piece in inner)
    if modifier is not None:
        raise FormatError(f"%{verb} takes no {{modifier}} (write %{{ for a literal brace)")
    simple: dict[str, Piece] = {
        "t": lambda r, i: r.topic.encode("utf-8"),
        "T": lambda r, i: _length(r.topic),
        "K": lambda r, i: _length(r.key),
        "V": lambda r, i: _length(r.value),
        "H": lambda r, i: b"%d" % len(r.headers),
        "p": lambda r, i: b"%d" % r.partition,
        "o": lambda r, i: b"%d" % r.offset,
        "i": lambda r, i: b"%d" % i,
    }
    return simple[verb]


def _header_verb(verb: str, modifier: str | None) -> Piece:
    if verb in ("k", "v") and modifier not in (None, *TEXT_MODIFIERS):
        raise FormatError(f"%{verb}{{{modifier}}}: modifiers are {', '.join(TEXT_MODIFIERS)}")
    if verb in ("K", "V") and modifier is not None:
        raise FormatError(f"%{verb} takes no {{modifier}}")
    pieces: dict[str, Piece] = {
        "k": lambda h, i: _text(h[0].encode("utf-8"), modifier),
        "v": lambda h, i: _text(h[1], modifier),
        "K": lambda h, i: _length(h[0]),
        "V": lambda h, i: _length(h[1]),
    }
    return pieces[verb]


@dataclass(frozen=True)
class _Literal:
    chunk: bytes

    def __call__(self, record: Any, index: int) -> bytes:
        return self.chunk


RECORD_VERBS = "tTkKvVdhHpoi"
HEADER_VERBS = "kKvV"


def _modifier(text: str, i: int) -> tuple[str, int]:
    """The text inside ``{...}`` starting at ``text[i] == '{'`` (brackets may hold braces)."""
    depth = 0
    for j in range(i + 1, len(text)):
        c = text[j]
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        elif c == "}" and depth == 0:
            return text[i + 1:j], j + 1
    raise FormatError(f"the '{{' at position {i} is never closed (write %{{ for a literal brace)")


def _parse(text: str, i: int, *, in_header: bool) -> tuple[list[Piece], int]:
    """Pieces of ``text`` from ``i``; inside ``%h{...}`` it stops at the closing brace.
    A literal piece is a ``_Literal`` (so ``FormatString`` can see a trailing newline)."""
    pieces: list[Piece] = []
    literal = bytearray()

    def flush() -> None:
        if literal:
            pieces.append(_Literal(bytes(literal)))
            literal.clear()

    while i < len(text):
        c = text[i]
        if c == "\\":
            chunk, i = _escape_at(text, i)
            literal += chunk
            continue
        if c == "}" and in_header:
            break
        if c != "%":
            literal += c.encode("utf-8")
            i += 1
            continue
        if i + 1 >= len(text):
            raise FormatError("a lone % at the end of the format (write %% for a percent sign)")
        verb, i = text[i + 1], i + 2
        if verb in "%{}":
            literal += verb.encode()
            continue
        allowed = HEADER_VERBS if in_header else RECORD_VERBS
        if verb not in allowed:
            raise FormatError(_bad_verb(verb, in_header))
        modifier, inner = None, None
        if i < len(text) and text[i] == "{":
            if verb == "h":
                inner, i = _parse(text, i + 1, in_header=True)
                if i >= len(text):
                    raise FormatError("%h{ is never closed with }")
                i += 1
            else:
                modifier, i = _modifier(text, i)
        flush()
        pieces.append(_header_verb(verb, modifier) if in_header else _record_verb(verb, modifier, inner))
    flush()
    return pieces, i


def _bad_verb(verb: str, in_header: bool) -> str:
    if in_header:
        return f"%{verb} inside %h{{...}}: a header has only %k %v %K %V"
    if verb in UNSUPPORTED_VERBS:
        return f"%{verb} ({UNSUPPORTED_VERBS[verb]}) is an rpk verb mq consume does not print"
    return f"unknown verb %{verb}; the verbs are %t %T %p %o %k %K %v %V %d %h %H %i %% %{{ %}}"


@dataclass(frozen=True)
class FormatString:
    """A compiled ``--format`` string."""

    text: str
    pieces: tuple[Piece, ...]
    ends_line: bool

    @classmethod
    def compile(cls, text: str) -> FormatString:
        pieces, _ = _parse(text, 0, in_header=False)
        last = pieces[-1] if pieces else None
        ends_line = isinstance(last, _Literal) and last.chunk.endswith(b"\n")
        return cls(text, tuple(pieces), ends_line)

    def render(self, record: Any, index: int) -> bytes:
        out = b"".join(piece(record, index) for piece in self.pieces)
        return out if self.ends_line else out + b"\n"


# ---------------------------------------------------------------- JSON

def record_json(record: Any) -> bytes:
    doc = {
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "key": bytes_to_json(record.key), "value": bytes_to_json(record.value),
        "timestamp": record.timestamp, "headers": headers_to_json(record.headers),
    }
    return json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n"


# ---------------------------------------------------------------- choosing one

def is_format_string(text: str) -> bool:
    return text not in ("text", "json")


def renderer(fmt: str, properties: list[tuple[str, str]], *, print_key: bool = False
             ) -> Callable[[Any, int], bytes]:
    """``(record, index) -> bytes`` for ``--format fmt`` with ``--property`` pairs.

    ``fmt`` is ``text`` (Kafka's formatter, shaped by the properties), ``json``, or a
    format string with at least one ``%`` verb. Raises FormatError.
    """
    if fmt == "text":
        kafka = KafkaFormat.from_properties(properties, print_key=print_key)
        return lambda record, index: kafka.render(record)
    if properties or print_key:
        flag = "--print-key" if print_key and not properties else f"--property {properties[0][0]}"
        raise FormatError(f"{flag} shapes --format text only; --format {'json' if fmt == 'json' else 'STRING'} "
                          "prints every field its own way")
    if fmt == "json":
        return lambda record, index: record_json(record)
    if "%" not in fmt:
        raise FormatError(f"--format {fmt!r} is neither text, json nor a format string with % verbs "
                          "(for example '%p %o %k %v')")
    compiled = FormatString.compile(fmt)
    return compiled.render
