"""``mq dump-log FILE``: what is inside a segment file, like Kafka's DumpLogSegments.

For a ``.log`` file: one line per record batch (offsets, position, size, timestamps,
codec, record count, CRC status), optionally its records. For ``.index`` and
``.timeindex``: one line per entry. The parsing lives in ``mq.storage.dump``; this
module only prints.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from mq.cli.common import CliError
from mq.cli.records import bytes_to_json
from mq.core.errors import MqError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dump-log", help="print the batches of a .log file or the entries of an index",
        description="Print the record batches of a segment .log file (offsets, timestamps, CRC check,\n"
                    "producer id/epoch/sequence, transaction markers), the entries of a .index / .timeindex\n"
                    "file, the aborted transactions of a .txnindex file, or the idempotent producers of a\n"
                    ".snapshot file. Reads the file directly: no broker needed.",
    )
    p.add_argument("file", metavar="FILE",
                   help="a <base-offset>.log, .index, .timeindex, .txnindex or .snapshot (producer state) file")
    p.add_argument("--print-records", action="store_true", help="also print each record of each batch")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    p.set_defaults(func=run_dump_log)


def run_dump_log(args: argparse.Namespace) -> int:
    path = args.file
    if not os.path.isfile(path):
        raise CliError(f"no such file: {path}",
                       "pass a segment file such as .mq/broker-1/orders-0/00000000000000000000.log")
    from mq.storage.dump import dump_segment
    from mq.storage.fileio import OsFileIO

    try:
        entries = dump_segment(OsFileIO(), path, decode=args.print_records)
    except MqError as exc:
        raise CliError(exc.message,
                       "pass a <20-digit base offset>.log, .index, .timeindex, .txnindex or .snapshot file") from None
    problems = 0
    if not args.json:
        print(f"Dumping {path}")
    count = 0
    for entry in entries:
        count += 1
        entry = dict(entry)
        kind = entry.pop("type", "entry")
        if (entry.get("crc_ok") is False or entry.get("ok") is False or entry.get("valid") is False
                or kind == "error" or "records_error" in entry):
            problems += 1
        if args.json:
            print(json.dumps({"type": kind, **entry}, default=_json_default))
            continue
        records = entry.pop("records", None)
        if kind == "record":
            print("    | " + _line(entry))
        else:
            print(f"{kind}: " + _line(entry))
        for record in records or ():
            print("    | " + _line(record))
    if count == 0 and path.endswith(".txnindex") and not args.json:
        print("(no transaction aborted in this segment)")
    elif count == 0 and path.endswith(".snapshot") and not args.json:
        print("(no idempotent producer had written to the partition at this offset)")
    elif count == 0 and not path.endswith(".log") and not args.json:
        print("(no entries on disk yet: a running broker writes index entries when it flushes,\n"
              " at shutdown or every log.flush.offset.checkpoint.interval.ms)")
    if problems:
        raise CliError(f"{problems} problem(s) in {path} (failed CRC, bad index entry or unreadable tail)",
                       "a broker truncates a corrupt tail and rebuilds indexes when it starts")
    return 0


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, memoryview)):
        return bytes_to_json(value)
    if hasattr(value, "name"):
        return value.name
    return str(value)


def _line(entry: dict[str, Any]) -> str:
    return " ".join(f"{key}: {_text(value)}" for key, value in entry.items())


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (bytes, memoryview)):
        return json.dumps(bytes_to_json(value))
    if isinstance(value, bool):
        return str(value).lower()
    if hasattr(value, "name") and not isinstance(value, str):
        return value.name.lower()
    if isinstance(value, str):
        return json.dumps(value) if (" " in value or not value) else value
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=_json_default)
    return str(value)
