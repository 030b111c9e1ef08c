"""A transactional consume-transform-produce copier, run as a process so a lab can
SIGKILL it mid-transaction and start it again (lab 04).

It reads ``source`` partition 0 under read_committed as a member of ``group`` (offsets
committed only through its transactions), writes ``b"processed " + value`` to ``sink``
and commits the input offsets in the same transaction (``send_offsets_to_transaction``),
``per_txn`` records per transaction. It prints ``start offset=N`` once it has fenced any
older instance and resumed, and ``committed N`` after each commit, so its caller can kill
it at a chosen point::

    python -m mq.lab.copier BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID PER_TXN

``Copier`` starts, counts and kills such processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from mq.client import Consumer, Producer
from mq.core.types import TopicPartition

PREFIX = b"processed "


def transform(value: bytes | None) -> bytes:
    """The pipeline's work: what ``sink`` holds for one ``source`` value."""
    return PREFIX + (value or b"")


async def copy(bootstrap: str, source: str, sink: str, group: str, transactional_id: str, per_txn: int) -> None:
    tp = TopicPartition(source, 0)
    async with Producer(bootstrap, acks="all", transactional_id=transactional_id, linger_ms=1,
                        transaction_timeout_ms=10_000) as producer:
        # Fence an older instance first (its open transaction is aborted), then read the
        # committed offset: OffsetFetch waits until that abort's markers are written.
        await producer.init_transactions()
        consumer = Consumer(bootstrap, group_id=group, enable_auto_commit=False, isolation_level="read_committed",
                            auto_offset_reset="earliest", fetch_max_wait_ms=50)
        await consumer.start()
        consumer.assign([tp])
        committed = (await consumer.committed([tp], timeout_ms=30_000)).get(tp)
        start = 0 if committed is None else committed.offset
        consumer.seek(tp, start)
        print(f"start offset={start}", flush=True)
        while True:
            records = await consumer.poll(200, max_records=per_txn)
            if not records:
                continue
            producer.begin_transaction()
            for record in records:
                producer.send(sink, transform(record.value), key=record.key)
            await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, consumer.group_metadata())
            await producer.commit_transaction()
            print(f"committed {records[-1].offset + 1}", flush=True)


class Copier:
    """One copier process at a time, its output appended to ``log``."""

    def __init__(self, bootstrap: str, source: str, sink: str, *, group: str, transactional_id: str,
                 per_txn: int, log: Path) -> None:
        self.argv = [sys.executable, "-m", "mq.lab.copier", bootstrap, source, sink, group, transactional_id,
                     str(per_txn)]
        self.log = Path(log)
        self.process: subprocess.Popen | None = None

    def start(self) -> Copier:
        with self.log.open("a") as out:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        return self

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def starts(self) -> list[int]:
        """The offset each instance resumed from, in order."""
        return [int(line.split("=", 1)[1]) for line in self.lines() if line.startswith("start offset=")]

    def commits(self) -> list[int]:
        """The input offset after each committed transaction, over all instances."""
        return [int(line.split()[1]) for line in self.lines() if line.startswith("committed ")]

    def kill(self) -> None:
        """SIGKILL: no goodbye, whatever transaction is open stays open."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def failed(self) -> str | None:
        """The log tail if the process ended on its own (it never should)."""
        if self.process is not None and self.process.poll() is not None:
            return "\n".join(self.lines()[-20:])
        return None


if __name__ == "__main__":
    bootstrap, source, sink, group, tid, per_txn = sys.argv[1:7]
    asyncio.run(copy(bootstrap, source, sink, group, tid, int(per_txn)))
