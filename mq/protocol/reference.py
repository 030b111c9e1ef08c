"""Reference pages generated from the code: ``docs/reference/wire-protocol.md`` and
``docs/reference/record-batch.md``.

The pages are rendered from the message dataclasses, the batch header struct and
the error codes, so they cannot drift from what the code does; a test compares the
committed files with the rendered text. Regenerate with ``python -m mq.protocol.reference``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
import typing
from pathlib import Path
from typing import Any

from mq.core.errors import ErrorCode
from mq.core.types import CompressionType
from mq.protocol import messages
from mq.protocol.batch_builder import RECORD_OVERHEAD
from mq.protocol.batch_format import (
    CODEC_MASK,
    CONTROL_BIT,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from mq.protocol.codec import SUPPORTED_VERSIONS, encode_request
from mq.protocol.frame import unpack_header
from mq.protocol.apis import ALL_REQUESTS, CLIENT_REQUESTS, INTER_BROKER_REQUESTS
from mq.protocol.messages import Records, Request
from mq.protocol.schema import INT64_MAX, field_hints, optional_arg, type_name

WIRE_PROTOCOL_PATH = "docs/reference/wire-protocol.md"
RECORD_BATCH_PATH = "docs/reference/record-batch.md"
_GENERATED = "Generated from the code by `python -m mq.protocol.reference`; do not edit by hand."


def example_instance(cls: type) -> Any:
    """A deterministic instance of a message dataclass with every optional field set and
    every list non-empty (used by the docs, the tests and the fuzz corpus)."""
    return cls(**{f.name: _example(hint) for f, hint in field_hints(cls)})


def _example(hint: Any) -> Any:
    if hint == Records:
        return b"records"
    simple = {int: 1, bool: True, str: "s", bytes: b"b"}
    if hint in simple:
        return simple[hint]
    if dataclasses.is_dataclass(hint):
        return example_instance(hint)  # type: ignore[arg-type]
    inner = optional_arg(hint)
    if inner is not None:
        return _example(inner)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return [_example(args[0])]
    if origin is dict:
        return {_example(args[0]): _example(args[1])}
    raise TypeError(f"no example for {hint!r}")


def _doc(cls: type) -> str:
    doc = cls.__doc__ or ""
    if doc.startswith(f"{cls.__name__}("):  # dataclass's generated signature: no docstring
        return ""
    return inspect.cleandoc(doc).replace("``", "`")


def _field_comments(cls: type) -> dict[str, str]:
    """Trailing ``# comments`` on the field lines of ``cls``'s source."""
    comments = {}
    for line in inspect.getsource(cls).splitlines():
        match = re.match(r"\s+(\w+): [^#]+#\s*(.+)$", line)
        if match:
            comments[match.group(1)] = match.group(2).strip()
    return comments


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return f"`{f.default!r}`"
    if f.default_factory is not dataclasses.MISSING:
        return f"`{f.default_factory()!r}`"
    return "required"


def _fields_table(cls: type) -> list[str]:
    comments = _field_comments(cls)
    lines = ["| field | type | default | notes |", "|---|---|---|---|"]
    for f, hint in field_hints(cls):
        kind = type_name(hint).replace("|", "\\|")
        lines.append(f"| `{f.name}` | `{kind}` | {_default(f)} | {comments.get(f.name, '')} |")
    return lines


def _structures() -> list[type]:
    """Nested dataclasses used by the messages, in the order they first appear."""
    seen: list[type] = []

    def visit(cls: type) -> None:
        for _, hint in field_hints(cls):
            for arg in (hint, *typing.get_args(hint)):
                target = optional_arg(arg) or arg
                if dataclasses.is_dataclass(target) and target not in seen:
                    seen.append(target)  # type: ignore[arg-type]
                    visit(target)  # type: ignore[arg-type]

    for request in ALL_REQUESTS.values():
        visit(request)
        visit(request.RESPONSE)
    visit(messages.ErrorResponse)
    return seen


_WIRE_INTRO = f"""# Wire protocol reference

{_GENERATED}

## Frames

```
u32 length | u32 header_length | msgpack header | raw tail
```

Big-endian. `length` counts every byte after itself; `header_length` is the size of
the msgpack header; the tail is the rest. A broker refuses a frame whose `length`
exceeds its limit (512 KiB before authentication) as soon as the 4 length bytes
arrive, with `FRAME_TOO_LARGE`, and closes the connection.

- Request header: `[api_key, api_version, correlation_id, client_id, body]`.
- Response header: `[correlation_id, body]`, or `[correlation_id, body, 1]` when the body
  is an `ErrorResponse` (the request could not be decoded, or its API or version is
  unknown); the client matches it to its request by `correlation_id`.
- Bodies are msgpack maps keyed by field name. Fields with a default may be left out;
  unknown fields, missing required fields and values of the wrong type are refused
  with `INVALID_REQUEST`.
- A field of type `Records` holds `[tail_offset, length]` in the map; its bytes (record
  batches, see [record-batch.md](record-batch.md)) are in the frame's tail, so a
  broker moves them between socket and log without re-encoding them.

## Types

| type | msgpack | notes |
|---|---|---|
| `int` | integer | signed 64-bit: `-2^63` to `{INT64_MAX}` |
| `bool` | true / false | an integer is not a bool, nor a bool an integer |
| `str` | str (UTF-8) | |
| `bytes` | bin | |
| `Records` | `[tail_offset, length]` | must lie inside the tail |
| `X \\| None` | X or nil | |
| `list[X]` | array | |
| `dict[str, str]` | map | |
| a structure | map | keyed by field name, see below |
"""


def _worked_example() -> list[str]:
    """A request frame byte by byte, for someone writing a client in another language."""
    request = messages.MetadataRequest(topics=["orders"])
    data = encode_request(request, correlation_id=1, client_id="demo")
    header_length = int.from_bytes(data[4:8], "big")
    header = data[8 : 8 + header_length]
    return [
        "## A worked example", "",
        f"`{request!r}` with `correlation_id=1`, `client_id=\"demo\"` is "
        f"{len(data)} bytes:", "", "```",
        f"{data[:4].hex(' ')}    length = {len(data) - 4}",
        f"{data[4:8].hex(' ')}    header_length = {header_length}",
        *(header[i : i + 16].hex(" ") for i in range(0, len(header), 16)),
        "```", "",
        f"The header decodes (msgpack) to `{json.dumps(unpack_header(header))}`; "
        "the tail is empty.", "",
    ]


def _api_rows(apis: dict[Any, type[Request]]) -> list[str]:
    out = ["| key | API | request | response | versions |", "|---|---|---|---|---|"]
    for key, cls in apis.items():
        request, response = cls.__name__, cls.RESPONSE.__name__
        out.append(f"| {int(key)} | {key.name} | [{request}](#{request.lower()}) | "
                   f"[{response}](#{response.lower()}) | {cls.MIN_VERSION}–{cls.MAX_VERSION} |")
    return out


_INTER_BROKER_INTRO = """\
Replication, broker-lifecycle and Raft messages between brokers and the metadata
quorum (Kafka's keys and names; `Raft` is mq's own envelope). Every broker serves
them and ApiVersions lists them; clients never send them."""


def render_wire_protocol() -> str:
    """The wire protocol reference page (markdown)."""
    out = [_WIRE_INTRO, "## APIs", "",
           ("What clients send: Kafka's keys, and mq's own from 1000 (the mirror topic APIs "
            "`MirrorAppend` and `MirrorTruncate`)."), "",
           *_api_rows(CLIENT_REQUESTS)]
    out += ["", "## Inter-broker APIs", "", _INTER_BROKER_INTRO, "",
            *_api_rows(INTER_BROKER_REQUESTS)]
    out += ["", "## Messages", ""]
    message_classes: list[type] = []
    for request in ALL_REQUESTS.values():
        message_classes += [request, request.RESPONSE]
    message_classes.append(messages.ErrorResponse)
    for cls in message_classes:
        out.append(f"### {cls.__name__}")
        out.append("")
        if issubclass(cls, Request):
            out.append(f"Request of API {int(cls.API_KEY)} ({cls.API_KEY.name}), versions "
                       f"{cls.MIN_VERSION}–{cls.MAX_VERSION}; "
                       f"answered by `{cls.RESPONSE.__name__}`.")
            out.append("")
        if _doc(cls):
            out += [_doc(cls), ""]
        out += _fields_table(cls) + [""]
    out += _worked_example()
    out += ["## Structures", ""]
    for cls in _structures():
        out += [f"### {cls.__name__}", ""]
        if _doc(cls):
            out += [_doc(cls), ""]
        out += _fields_table(cls) + [""]
    out += ["## Error codes", "",
            ("Kafka's numbers where Kafka has the same error; mq-only errors from 1000 "
             "(those of mirror topics from 1100, of conflict policies from 1200)."), "",
            "| code | name | retriable | meaning |", "|---|---|---|---|"]
    for code in ErrorCode:
        out.append(f"| {int(code)} | `{code.name}` | {'yes' if code.retriable else 'no'} | "
                   f"{code.description} |")
    return "\n".join(out).rstrip() + "\n"


_STRUCT_TYPES = {"q": ("i64", 8), "i": ("i32", 4), "I": ("u32", 4), "h": ("i16", 2), "b": ("i8", 1)}
BATCH_FIELD_NOTES = {
    "base_offset": "Offset of the first record; assigned in place by the leader.",
    "batch_length": f"Bytes after this field: the batch's size minus {LOG_OVERHEAD}.",
    "partition_leader_epoch": "Epoch of the leader that appended the batch; stamped in place.",
    "magic": f"Format version, always {MAGIC}.",
    "crc": f"CRC-32C (Castagnoli) of bytes {CRC_START} to the end of the batch.",
    "attributes": "Codec, timestamp type, transactional and control flags (below).",
    "last_offset_delta": "Offset of the last record minus `base_offset`.",
    "first_timestamp": "Timestamp of the first record (ms); record timestamps are deltas from it.",
    "max_timestamp": "Largest record timestamp, or the append time under LogAppendTime.",
    "producer_id": "Idempotent/transactional producer id, -1 if none.",
    "producer_epoch": "Epoch of `producer_id`, -1 if none.",
    "base_sequence": "Sequence number of the first record for `producer_id`, -1 if none.",
    "record_count": "Number of records in the payload.",
}
_CODEC_NOTES = {
    CompressionType.NONE: "payload stored as is",
    CompressionType.GZIP: "gzip container (RFC 1952), one member",
    CompressionType.LZ4: "LZ4 frame format",
    CompressionType.ZSTD: "Zstandard frame",
}


def _header_rows() -> list[str]:
    rows = ["| offset | size | type | field | meaning |", "|---|---|---|---|---|"]
    offset = 0
    codes = HEADER.format.lstrip(">")
    for f, code in zip(dataclasses.fields(BatchHeader), codes, strict=True):
        kind, size = _STRUCT_TYPES[code]
        rows.append(f"| {offset} | {size} | {kind} | `{f.name}` | {BATCH_FIELD_NOTES[f.name]} |")
        offset += size
    rows.append(f"| {offset} | … | | payload | The records, compressed by the codec. |")
    return rows


def render_record_batch() -> str:
    """The record batch reference page (markdown)."""
    codecs = [f"| {int(c)} | `{c.name.lower()}` | {_CODEC_NOTES[c]} |" for c in CompressionType]
    return "\n".join([
        "# Record batch reference", "", _GENERATED, "",
        "A record batch is the unit a producer sends, a broker appends and stores, and a",
        "consumer fetches: the same bytes on the wire and on disk, modelled on Kafka's",
        "RecordBatch v2. Batches are concatenated in a log segment and in the `Records`",
        "fields of Produce and Fetch.", "",
        f"## Header ({HEADER_SIZE} bytes, big-endian)", "", *_header_rows(), "",
        "## Attributes", "", "| bits | meaning |", "|---|---|",
        f"| 0–2 (mask `{CODEC_MASK:#04x}`) | compression codec (below) |",
        f"| 3 (`{TIMESTAMP_TYPE_BIT:#04x}`) | timestamp type: 0 CreateTime, 1 LogAppendTime |",
        f"| 4 (`{TRANSACTIONAL_BIT:#04x}`) | transactional |",
        f"| 5 (`{CONTROL_BIT:#04x}`) | control batch |", "",
        "## Codecs", "", "| id | codec | format |", "|---|---|---|", *codecs, "",
        "Other ids (2 = snappy, 5–7) are refused with `UNSUPPORTED_COMPRESSION_TYPE`.", "",
        "## Payload", "",
        "A msgpack array of records, compressed as a whole by the codec; each record is",
        "", "```", "[offset_delta, timestamp_delta, key, value, headers]", "```", "",
        "- `offset_delta` (int): the record's offset minus `base_offset`; deltas increase",
        "  within `[0, last_offset_delta]` (gaps appear after compaction).",
        "- `timestamp_delta` (int): the record's timestamp minus `first_timestamp`. Under",
        "  LogAppendTime every record reads as `max_timestamp`.",
        "- `key`, `value`: bin or nil (nil value = tombstone on compacted topics).",
        "- `headers`: array of `[name (str), value (bin)]` pairs.",
        "", f"A producer estimates a batch's size as {HEADER_SIZE} bytes plus, per record,",
        f"{RECORD_OVERHEAD} bytes plus the sizes of its key, value and headers.", "",
        "## Integrity and in-place edits", "",
        f"The CRC covers `attributes` to the end (bytes {CRC_START}…), not `base_offset`,",
        "`batch_length` or `partition_leader_epoch`, so the leader assigns offsets and",
        "stamps its epoch in place without recomputing it. Switching a batch to",
        "LogAppendTime rewrites `attributes` and `max_timestamp` and recomputes the CRC.",
        "Followers, fetchers and the offset-preserving mirror keep the bytes as they are.", "",
        "## Decoding limits", "",
        f"- A header with the wrong magic, a `batch_length` below {HEADER_SIZE - LOG_OVERHEAD}, "
        "a negative `record_count`",
        "  or `last_offset_delta`, a CRC mismatch, or a payload whose record count, deltas",
        "  or types disagree with the header is `CORRUPT_MESSAGE`.",
        "- Decompression stops at a cap (64 MiB by default): a batch that would expand",
        "  beyond it is `RECORD_TOO_LARGE`, whatever sizes its codec's headers declare.",
        "- Recovery keeps the longest prefix of a segment made of whole batches with valid",
        "  headers and CRCs, and truncates the rest.",
    ]) + "\n"


def write_docs(root: Path) -> list[Path]:
    """Write both reference pages under ``root`` (the repository); returns the paths."""
    written = []
    for relative, text in ((WIRE_PROTOCOL_PATH, render_wire_protocol()),
                           (RECORD_BATCH_PATH, render_record_batch())):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    repo = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    for written_path in write_docs(repo):
        print(f"wrote {written_path}")
