"""``mq table show TOPIC``: the converged view of a keyed topic and its remote copies.

A ``TableView`` (``mq.client.table_view``) reads ``TOPIC`` and every ``<region>.TOPIC`` of
the region from the beginning, merges them under the topic's ``conflict.policy`` (or
``--policy``), waits until everything written before the command started is applied, and
prints the live rows with their stamps and origin regions, a summary and the table's
digest: run it in every region, and equal digests mean equal tables. The regions whose
copies count are the topic's ``conflict.home.regions`` and, when `mq up` started the
topology here, its regions.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from mq.cli.common import add_bootstrap, recorded_region_names, topic_partitions, unknown_topic
from mq.cli.output import print_json, print_table, table
from mq.cli.records import bytes_to_json
from mq.core.conflict import ConflictPolicy
from mq.core.errors import ErrorCode, MqError

if TYPE_CHECKING:
    from mq.client import TableView


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("table", help="show a keyed topic merged across regions",
                            description="Materialize a keyed topic and its remote copies (<region>.TOPIC) under\n"
                                        "the topic's conflict policy.")
    tsub = parser.add_subparsers(dest="table_command", metavar="COMMAND", title="commands",
                                 parser_class=type(parser))
    tsub.required = True
    p = tsub.add_parser("show", help="print the table's rows, summary and digest",
                        description="Read TOPIC and its remote copies from the beginning, merge them under the\n"
                                    "topic's conflict.policy and print the live rows (key, value, HLC stamp,\n"
                                    "origin region), then the summary and the digest (SHA-256 of the rows:\n"
                                    "equal digests in two regions mean equal tables).")
    p.add_argument("topic", metavar="TOPIC", help="the keyed topic (its remote copies are found by name)")
    add_bootstrap(p)
    p.add_argument("--policy", choices=[c.value for c in ConflictPolicy],
                   help="merge under this policy instead of the topic's conflict.policy")
    p.add_argument("--summary", action="store_true", help="print the summary and digest, not the rows")
    p.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                   help="give up if the records written before the command are not read within this "
                        "(default: 30000)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run_show)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


def run_show(args: argparse.Namespace) -> int:
    from mq.client import TableView

    topic_partitions(args.bootstrap, args.topic)  # no broker, no such topic: said at once

    async def materialize() -> tuple[dict, list]:
        view = TableView(args.bootstrap, args.topic, policy=args.policy, regions=recorded_region_names())
        try:
            await view.start()
            await view.catch_up(args.timeout_ms)
            return _document(view)
        finally:
            await view.close()

    try:
        doc, rows = asyncio.run(materialize())
    except MqError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC:
            raise unknown_topic(args.topic) from None
        raise
    if args.json:
        if args.summary:
            doc.pop("entries")
        print_json(doc)
        return 0
    if not args.summary:
        t = table("KEY", "VALUE", "HLC", "REGION")
        for key, value, hlc, region in rows:
            t.add_row(_text(key), _text(value), hlc or "-", region or "-")
        print_table(t)
    sources = ", ".join(f"{s['topic']} ({s['region'] or '-'})" for s in doc["sources"])
    s = doc["stats"]
    print(f"table {doc['topic']} in region {doc['region'] or '-'}: policy {doc['policy']}, {doc['rows']} rows, "
          f"from {sources}; records applied {s['applied']}, superseded {s['superseded']}, "
          f"foreign {s['foreign']}, unstamped {s['unstamped']}, keyless {s['keyless']}")
    print(f"digest {doc['digest']}")
    return 0


def _document(view: TableView) -> tuple[dict, list]:
    """The JSON document (``mq.cli.schemas.TABLE_SHOW``) and the rows for the text table."""
    stats = view.stats
    rows = [(key, entry.value, None if entry.hlc is None else str(entry.hlc), entry.region)
            for key, entry in view.table.live()]
    doc = {
        "topic": view.topic, "region": view.region or None, "policy": view.policy.value,
        "sources": [{"topic": t, "region": r or None} for t, r in sorted(view.sources.items())],
        "rows": len(rows), "digest": view.digest(),
        "stats": {"applied": stats.applied, "superseded": stats.superseded, "foreign": stats.foreign,
                  "unstamped": stats.unstamped, "keyless": stats.keyless},
        "entries": [{"key": bytes_to_json(k), "value": bytes_to_json(v), "hlc": h, "region": r}
                    for k, v, h, r in rows],
    }
    return doc, rows
