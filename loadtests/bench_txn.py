"""Transactional produce throughput (issue 14): ``--per-txn`` records per transaction
(100 by default), against the same records produced idempotently with acks=all and
no transaction, alternating which goes first from run to run.

    python -m loadtests.bench_txn [--records 100000] [--per-txn 100] [--runs 3] [--size-bytes 100]

One broker on this machine (``mq.lab.cluster.BrokerHandle``). A transaction costs an
AddPartitionsToTxn (first record of each), an EndTxn (a replicated write to
``__transaction_state``) and a marker per partition; with 100 records per transaction
that is paid every 100 records. Prints one JSON line per run and a summary line with
the median ratio transactional / idempotent.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from loadtests.stats import emit, median
from mq.client import Admin, Producer
from mq.lab.cluster import BrokerHandle


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_txn", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--per-txn", type=int, default=100, help="records per transaction")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-bytes", type=int, default=100)
    parser.add_argument("--bootstrap", default="", help="an existing broker (default: start one)")
    return parser.parse_args(list(sys.argv[1:] if argv is None else argv))


async def produce(bootstrap: str, topic: str, values: list[bytes], *, per_txn: int, transactional: bool,
                  tag: str) -> float:
    """Records per second, from the first send to the last acknowledgement (commit)."""
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic)
    tid = f"bench-{tag}" if transactional else None
    async with Producer(bootstrap, acks="all", transactional_id=tid, linger_ms=5) as producer:
        if transactional:
            await producer.init_transactions()
        await producer.partitions_for(topic)
        start = time.perf_counter()
        for i in range(0, len(values), per_txn):
            chunk = values[i:i + per_txn]
            if transactional:
                producer.begin_transaction()
            for v in chunk:
                producer.send(topic, v)
            if transactional:
                await producer.commit_transaction()
            else:
                await producer.flush()  # the same wait per chunk (commit flushes first), without the transaction
        await producer.flush()
        return len(values) / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    values = [b"%0*d" % (args.size_bytes, i) for i in range(args.records)]
    root = None
    broker = None
    bootstrap = args.bootstrap
    if not bootstrap:
        root = Path(tempfile.mkdtemp(prefix="mq-bench-txn-"))
        broker = BrokerHandle.start(node_id=1, data_dir=root / "data", config={
            "transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4"})
        bootstrap = broker.bootstrap
    tag = f"{int(time.time())}"
    rates: dict[str, list[float]] = {"transactional": [], "idempotent": []}
    try:
        for run in range(args.runs):
            order = ["transactional", "idempotent"] if run % 2 == 0 else ["idempotent", "transactional"]
            for mode in order:
                rate = asyncio.run(produce(bootstrap, f"bench-txn-{tag}-{run}-{mode}", values, per_txn=args.per_txn,
                                           transactional=mode == "transactional", tag=f"{tag}-{run}"))
                rates[mode].append(rate)
                emit({"workload": "P-txn", "system": f"mq-{mode}", "run": run, "records": args.records,
                      "per_txn": args.per_txn, "size_bytes": args.size_bytes, "rec_per_s": round(rate)})
        ratios = [t / i for t, i in zip(rates["transactional"], rates["idempotent"])]
        emit({"workload": "P-txn", "ratio": "transactional / idempotent produce (acks=all)",
              "per_txn": args.per_txn, "median_transactional_rec_per_s": round(median(rates["transactional"])),
              "median_idempotent_rec_per_s": round(median(rates["idempotent"])),
              "median_ratio": round(median(ratios), 3), "per_run": [round(r, 3) for r in ratios]})
    finally:
        if broker is not None:
            broker.stop()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
