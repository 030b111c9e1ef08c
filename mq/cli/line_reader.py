"""How ``mq produce`` turns a line of stdin into a record: Kafka's ``LineMessageReader``.

With ``--property parse.headers=true`` and ``parse.key=true`` a line is::

    name1:value1,name2:value2<TAB>key<TAB>value
    `----------- headers ---'    `- key -'

``headers.delimiter`` (default a tab) ends the headers, ``headers.separator`` (``,``)
separates them, ``headers.key.separator`` (``:``) splits a header into name and value;
``key.separator`` (a tab) ends the key. A line that lacks a separator it needs is an error
(``LineError``, reported with its line number by ``mq produce``) unless ``ignore.error=true``:
then a missing key separator makes the whole rest the value with no key (Kafka does the
same) and a header without ``headers.key.separator`` gets an empty value (Kafka: null, which
mq's record format has no room for). A key or value equal to ``null.marker`` is null (a
value of null is a tombstone). An empty header section means no headers. Separators take
the escapes ``\\t \\n \\r \\\\ \\xNN`` (Kafka's command line passes them literally).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mq.cli.formatter import FormatError, parse_bool, unescape

BOOLEANS = ("parse.key", "parse.headers", "ignore.error")
SEPARATORS = ("key.separator", "headers.delimiter", "headers.separator", "headers.key.separator", "null.marker")
PROPERTIES = BOOLEANS + SEPARATORS


class LineError(ValueError):
    """A line that does not match the input format; the message says what is missing."""


@dataclass(frozen=True)
class ParsedLine:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    no_key_separator: bool = False  # ignore.error let a line without key.separator through


@dataclass(frozen=True)
class LineFormat:
    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, pairs: Iterable[tuple[str, str]], **base: Any) -> LineFormat:
        """Kafka's reader properties over ``base`` (field values); raises FormatError."""
        values: dict[str, Any] = dict(base)
        for name, text in pairs:
            field = name.replace(".", "_")
            if name in BOOLEANS:
                values[field] = parse_bool(name, text)
            elif name in SEPARATORS:
                values[field] = unescape(text)
                if not values[field]:
                    raise FormatError(f"{name} must not be empty")
            else:
                raise FormatError(f"unknown reader property {name!r}; mq produce takes {', '.join(PROPERTIES)}")
        fmt = cls(**values)
        fmt._check()
        return fmt

    def _check(self) -> None:
        seps = [("headers.delimiter", self.headers_delimiter), ("headers.separator", self.headers_separator),
                ("headers.key.separator", self.headers_key_separator)]
        if self.parse_headers:
            for i, (a, x) in enumerate(seps):
                for b, y in seps[i + 1:]:
                    if x == y:
                        raise FormatError(f"{a} and {b} may not be equal (both {x!r})")
        if self.null_marker is not None:
            for name, sep in [("key.separator", self.key_separator), *seps]:
                if sep == self.null_marker:
                    raise FormatError(f"null.marker and {name} may not be equal")

    def parse(self, line: bytes) -> ParsedLine:
        rest = line
        headers: tuple[tuple[str, bytes], ...] = ()
        if self.parse_headers:
            section, found, after = rest.partition(self.headers_delimiter)
            if not found:
                if not self.ignore_error:
                    raise LineError(f"no headers delimiter {_show(self.headers_delimiter)} found")
            else:
                headers, rest = self._headers(section), after
        key, missing = None, False
        if self.parse_key:
            key_part, found, after = rest.partition(self.key_separator)
            if found:
                key, rest = self._nullable(key_part), after
            elif not self.ignore_error:
                raise LineError(f"no key separator {_show(self.key_separator)} found")
            else:
                missing = True
        return ParsedLine(key, self._nullable(rest), headers, missing)

    def _nullable(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data

    def _headers(self, section: bytes) -> tuple[tuple[str, bytes], ...]:
        if not section or (self.null_marker is not None and section == self.null_marker):
            return ()
        out = []
        for pair in section.split(self.headers_separator):
            name, found, value = pair.partition(self.headers_key_separator)
            if not found and not self.ignore_error:
                raise LineError(f"no header key separator {_show(self.headers_key_separator)} in header "
                                f"{_show(pair)}")
            if self.null_marker is not None and self.null_marker in (name, value):
                raise LineError(f"header {_show(pair)}: mq headers have a name and a value, neither may be "
                                f"the null marker {_show(self.null_marker)}")
            try:
                text = name.decode("utf-8")
            except UnicodeDecodeError:
                raise LineError(f"header name {_show(name)} is not UTF-8") from None
            out.append((text, value))
        return tuple(out)


def _show(data: bytes) -> str:
    """Bytes as the user would type them: ``'\\t'``, ``':'``."""
    return repr(data.decode("utf-8", errors="backslashreplace"))
