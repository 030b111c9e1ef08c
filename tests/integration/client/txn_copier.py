"""A consume-transform-produce copier for the kill tests: reads ``source`` partition 0
under read_committed, writes each value to ``sink`` inside a transaction whose input
offsets commit with it (``send_offsets_to_transaction``), ``per_txn`` records per
transaction. Run as a process: ``python txn_copier.py BOOTSTRAP SOURCE SINK GROUP TXN_ID PER_TXN``."""

from __future__ import annotations

import asyncio
import sys

from mq.client import Consumer, Producer
from mq.core.types import TopicPartition


async def copy(bootstrap: str, source: str, sink: str, group: str, transactional_id: str, per_txn: int) -> None:
    tp = TopicPartition(source, 0)
    async with Producer(bootstrap, acks="all", transactional_id=transactional_id, linger_ms=1,
                        transaction_timeout_ms=10_000) as producer:
        # First fence an older instance (its open transaction is aborted), then read the
        # committed offset: OffsetFetch waits until that abort's markers are written.
        await producer.init_transactions()
        consumer = Consumer(bootstrap, group_id=group, enable_auto_commit=False, isolation_level="read_committed",
                            auto_offset_reset="earliest", fetch_max_wait_ms=50)
        await consumer.start()
        consumer.assign([tp])
        committed = (await consumer.committed([tp], timeout_ms=30_000)).get(tp)
        consumer.seek(tp, 0 if committed is None else committed.offset)
        print(f"start offset={0 if committed is None else committed.offset}", flush=True)
        while True:
            records = await consumer.poll(200, max_records=per_txn)
            if not records:
                continue
            producer.begin_transaction()
            for record in records:
                producer.send(sink, record.value)
            await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, consumer.group_metadata())
            await producer.commit_transaction()
            print(f"committed {records[-1].offset + 1}", flush=True)


if __name__ == "__main__":
    bootstrap, source, sink, group, tid, per_txn = sys.argv[1:7]
    asyncio.run(copy(bootstrap, source, sink, group, tid, int(per_txn)))
