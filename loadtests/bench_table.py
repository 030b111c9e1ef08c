"""``python -m loadtests.bench_table``: how fast a table view applies records (issue 11).

``merge``: the sans-IO merge core alone (``mq.client.internals.table.TableState``), per
conflict policy: ``--records`` records over ``--keys`` keys, each key written in turn by two
regions with ``mq.hlc`` stamps, west's clock ``--skew-ms`` behind (so under
last-writer-wins about half the records lose), applied in one process; records/s of
``apply``.

``view``: end to end on one broker: a topic ``accounts`` and its remote copy
``west.accounts`` (what the active-active mirror writes), ``--records`` records of 100 B
split between them, then ``TableView(..., policy="last-writer-wins", region="east")``
started and caught up; records/s from ``start`` to ``catch_up`` returning, and the
digest (two runs over the same records must agree).

There is no peer: Kafka Streams' KTable (Java) cannot run on this machine, and MirrorMaker
2 has no conflict handling to compare with. Prints JSON lines like loadtests.bench.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any

from loadtests.stats import emit, load_average, median, versions
from mq.client import Admin, TableView
from mq.client.blocking import Producer
from mq.client.internals.table import TableState
from mq.core.conflict import ConflictPolicy, ConflictRules
from mq.core.hlc import HLC_HEADER, Hlc
from mq.lab import Cluster

WORKLOADS = ("merge", "view")
REGIONS = ("east", "west")
VALUE = b"v" * 100
PEER_NOTE = {"peer": "kafka-streams-ktable", "available": False,
             "reason": "Kafka Streams (Java) cannot be installed on this machine, and MirrorMaker 2 has no "
                       "conflict handling: no side-by-side figures"}


def stamped(records: int, keys: int, skew_ms: int) -> list[tuple[bytes, bytes, tuple, str]]:
    """``(key, value, headers, region)``: east and west write every key in turn, one after
    the other, west's clock ``skew_ms`` behind east's (so under last-writer-wins west's
    write of a pair, applied second, loses when ``skew_ms`` > 1: about half the records)."""
    base = 1_700_000_000_000
    out = []
    for i in range(records):
        region = REGIONS[i % 2]
        wall = base + i - (skew_ms if region == "west" else 0)
        out.append((b"k%06d" % ((i // 2) % keys), VALUE, ((HLC_HEADER, Hlc(wall, 0).encode()),), region))
    return out


def merge(*, records: int, keys: int, skew_ms: int, runs: int) -> list[dict[str, Any]]:
    data = stamped(records, keys, skew_ms)
    lines = []
    for policy in ConflictPolicy:
        rules = ConflictRules(policy, REGIONS if policy is ConflictPolicy.HOME_REGION else ())
        rates = []
        for run in range(1, runs + 1):
            state = TableState(rules)
            started = time.perf_counter()
            for key, value, headers, region in data:
                state.apply(key, value, headers, region=region)
            seconds = time.perf_counter() - started
            rates.append(records / seconds)
            line = {"workload": "table-merge", "system": "mq", "policy": policy.value, "run": run,
                    "records": records, "keys": keys, "seconds": round(seconds, 4),
                    "rec_per_s": round(records / seconds), "rows": len(state),
                    "applied": state.stats.applied, "superseded": state.stats.superseded,
                    "foreign": state.stats.foreign, "load_avg_1m": load_average()}
            emit(line)
            lines.append(line)
        lines.append({"summary": True, "workload": "table-merge", "policy": policy.value,
                      "median_rec_per_s": round(median(rates))})
        emit(lines[-1])
    return lines


def view(*, records: int, keys: int, skew_ms: int, runs: int) -> list[dict[str, Any]]:
    data = stamped(records, keys, skew_ms)
    lines: list[dict[str, Any]] = []
    with Cluster.start() as cluster:
        bootstrap = cluster.bootstrap

        async def create() -> None:
            async with Admin(bootstrap) as admin:
                for topic in ("accounts", "west.accounts"):
                    await admin.create_topic(topic, 3)

        asyncio.run(create())
        with Producer(bootstrap, linger_ms=20, batch_size=256 * 1024) as producer:
            for topic, region in (("accounts", "east"), ("west.accounts", "west")):
                mine = [(k, v, h) for k, v, h, r in data if r == region]
                for start in range(0, len(mine), 10_000):
                    producer.send_many(topic, mine[start:start + 10_000])

        async def read() -> tuple[float, int, str]:
            started = time.perf_counter()
            async with TableView(bootstrap, "accounts", policy="last-writer-wins", region="east",
                                 regions=REGIONS) as table:
                await table.catch_up()
                return time.perf_counter() - started, len(table), table.digest()

        rates = []
        for run in range(1, runs + 1):
            seconds, rows, digest = asyncio.run(read())
            rates.append(records / seconds)
            line = {"workload": "table-view", "system": "mq", "policy": "last-writer-wins", "run": run,
                    "records": records, "keys": keys, "seconds": round(seconds, 4),
                    "rec_per_s": round(records / seconds), "rows": rows, "digest": digest[:16],
                    "load_avg_1m": load_average()}
            emit(line)
            lines.append(line)
    lines.append({"summary": True, "workload": "table-view", "median_rec_per_s": round(median(rates)),
                  "digests_agree": len({line["digest"] for line in lines}) == 1})
    emit(lines[-1])
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=WORKLOADS, action="append", help="run only these workloads")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--skew-ms", type=int, default=50, help="west's clock behind east's")
    parser.add_argument("--runs", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    emit({"table_bench": True, "versions": versions(), "load_avg_1m": load_average()})
    emit(PEER_NOTE)
    for workload in args.only or WORKLOADS:
        run = merge if workload == "merge" else view
        run(records=args.records, keys=args.keys, skew_ms=args.skew_ms, runs=args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
