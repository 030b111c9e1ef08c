"""mq.lab.copier (lab 04): the copier process resumes where its last transaction
committed after a SIGKILL, and Copier reads its progress from the log it writes."""

from __future__ import annotations

import asyncio

from mq.client import Consumer
from mq.core.types import TopicPartition
from mq.lab import Cluster, wait_until
from mq.lab.copier import Copier, transform


def test_copier_reads_its_progress_from_the_log(tmp_path) -> None:
    log = tmp_path / "copier.log"
    log.write_text("start offset=0\ncommitted 10\ncommitted 20\nstart offset=20\ncommitted 30\n")
    copier = Copier("127.0.0.1:1", "a", "b", group="g", transactional_id="t", per_txn=10, log=log)
    assert copier.starts() == [0, 20]
    assert copier.commits() == [10, 20, 30]
    assert copier.failed() is None  # never started
    assert transform(b"x") == b"processed x" and transform(None) == b"processed "


async def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    out: list[bytes] = []
    async with Consumer(bootstrap, isolation_level="read_committed", fetch_max_wait_ms=50) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        empty = 0
        while empty < 4:
            records = await consumer.poll(timeout_ms=200)
            out += [r.value for r in records]
            empty = 0 if records else empty + 1
    return out


def test_copier_killed_mid_stream_outputs_each_input_once(tmp_path) -> None:
    total = 300
    with Cluster.start(config={"offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1}) as cluster:
        admin = cluster.admin()
        admin.create_topic("in", partitions=1)
        admin.create_topic("out", partitions=1)
        inputs = [b"%d" % i for i in range(total)]
        with cluster.producer(acks="all") as producer:
            producer.send_many("in", [(None, v) for v in inputs])
            producer.flush()
        copier = Copier(cluster.bootstrap, "in", "out", group="g", transactional_id="copier", per_txn=5,
                        log=tmp_path / "copier.log")
        try:
            copier.start()
            wait_until(lambda: len(copier.commits()) >= 3 or copier.failed(), timeout_s=30, what="three commits")
            assert not copier.failed(), copier.failed()
            copier.kill()
            stopped_at = copier.commits()[-1]
            assert stopped_at < total, "the copier finished before the kill: give it more input"
            copier.start()
            wait_until(lambda: (copier.commits() and copier.commits()[-1] >= total) or copier.failed(),
                       timeout_s=60, what="the restarted copier to finish")
            assert not copier.failed(), copier.failed()
        finally:
            copier.kill()
        assert copier.starts()[0] == 0 and 0 < copier.starts()[1] <= total
        assert copier.starts()[1] >= stopped_at  # it resumed from the committed offset, not from 0
        out = asyncio.run(_read_committed(cluster.bootstrap, "out"))
    assert sorted(out) == sorted(transform(v) for v in inputs)
