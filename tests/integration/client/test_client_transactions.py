"""The transactional producer end to end against a broker process: committed and
aborted transactions under read_committed and read_uncommitted, a consume-transform-
produce step whose input offsets commit with its output (visible only after the
commit), zombie fencing of an older instance, and the named errors of misuse."""

from __future__ import annotations

import time

import pytest

from mq.client import Admin, Consumer, Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition

from ..conftest import BrokerProcess, free_port


@pytest.fixture(scope="module")
def txn_bootstrap(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("txn-client") / "broker-1", free_port(), configs={
        "transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2",
        "group.initial.rebalance.delay.ms": "0"})
    proc.start()
    yield proc.bootstrap
    proc.stop()


async def read(bootstrap: str, topic: str, isolation: str, *, at_least: int, settle_s: float = 0.3) -> list[bytes]:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50, isolation_level=isolation)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    quiet_until = None
    while time.monotonic() < deadline:
        batch = await consumer.poll(100)
        got += [r.value for r in batch]
        if len(got) >= at_least:
            quiet_until = quiet_until or time.monotonic() + settle_s
            if time.monotonic() >= quiet_until:
                break
    await consumer.close()
    return got


async def test_committed_and_aborted_transactions(txn_bootstrap, topic_name) -> None:
    async with Admin(txn_bootstrap) as admin:
        await admin.create_topic(topic_name)
    async with Producer(txn_bootstrap, acks="all", transactional_id=f"{topic_name}-tx") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic_name, b"c%d" % i)
        await producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"aborted-0")
        producer.send(topic_name, b"aborted-1")
        await producer.abort_transaction()
        producer.begin_transaction()
        await (producer.send(topic_name, b"c3"))
        await producer.commit_transaction()
        assert producer.metrics["producer_epoch"] == 3  # init 0, then one bump per transaction (KIP-890)
    assert await read(txn_bootstrap, topic_name, "read_committed", at_least=4) == [b"c0", b"c1", b"c2", b"c3"]
    uncommitted = await read(txn_bootstrap, topic_name, "read_uncommitted", at_least=6)
    assert sorted(uncommitted) == sorted([b"c0", b"c1", b"c2", b"aborted-0", b"aborted-1", b"c3"])


async def test_consume_transform_produce_commits_offsets_with_output(txn_bootstrap, topic_name) -> None:
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-g"
    async with Admin(txn_bootstrap) as admin:
        await admin.create_topic(source)
        await admin.create_topic(sink)
    async with Producer(txn_bootstrap, acks="all") as plain:
        for i in range(5):
            plain.send(source, b"%d" % i)
    consumer = Consumer(txn_bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                        isolation_level="read_committed", fetch_max_wait_ms=50)
    await consumer.start()
    consumer.subscribe([source])
    records: list = []
    deadline = time.monotonic() + 20
    while len(records) < 5 and time.monotonic() < deadline:
        records += await consumer.poll(200)
    assert len(records) == 5
    tp = TopicPartition(source, 0)
    async with Producer(txn_bootstrap, acks="all", transactional_id=f"{group}-copier") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for r in records:
            producer.send(sink, r.value * 2)
        await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, consumer.group_metadata())
        with pytest.raises(MqError) as err:  # not visible before the commit: OffsetFetch waits for it (KIP-447)
            await consumer.committed([tp], timeout_ms=300)
        assert err.value.code == ErrorCode.UNSTABLE_OFFSET_COMMIT
        await producer.commit_transaction()
    committed = await consumer.committed([tp])  # waits while the markers are written (UNSTABLE_OFFSET_COMMIT)
    assert committed[tp] is not None and committed[tp].offset == 5
    await consumer.close()
    assert await read(txn_bootstrap, sink, "read_committed", at_least=5) == [b"00", b"11", b"22", b"33", b"44"]


async def test_a_second_instance_fences_the_first(txn_bootstrap, topic_name) -> None:
    async with Admin(txn_bootstrap) as admin:
        await admin.create_topic(topic_name)
    tid = f"{topic_name}-zombie"
    async with Producer(txn_bootstrap, acks="all", transactional_id=tid) as old:
        await old.init_transactions()
        old.begin_transaction()
        await old.send(topic_name, b"from-the-zombie")
        async with Producer(txn_bootstrap, acks="all", transactional_id=tid) as new:
            await new.init_transactions()  # aborts the old instance's transaction
            new.begin_transaction()
            await new.send(topic_name, b"from-the-new-one")
            await new.commit_transaction()
        with pytest.raises(MqError) as err:
            await old.commit_transaction()
        assert err.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
        with pytest.raises(MqError):
            old.begin_transaction()  # fatal: the old instance must be closed
    assert await read(txn_bootstrap, topic_name, "read_committed", at_least=1) == [b"from-the-new-one"]


async def test_misuse_is_a_named_error(txn_bootstrap) -> None:
    with pytest.raises(MqError) as err:
        Producer(txn_bootstrap, acks=1, transactional_id="x")
    assert err.value.code == ErrorCode.INVALID_CONFIG
    async with Producer(txn_bootstrap, acks="all", transactional_id="misuse-1") as producer:
        with pytest.raises(MqError) as err:
            producer.send("anything", b"v")
        assert err.value.code == ErrorCode.INVALID_TXN_STATE and "begin_transaction" in err.value.message
        with pytest.raises(MqError) as err:
            producer.begin_transaction()
        assert err.value.code == ErrorCode.INVALID_TXN_STATE and "init_transactions" in err.value.message
    with pytest.raises(MqError) as err:
        Consumer(txn_bootstrap, isolation_level="serializable")
    assert err.value.code == ErrorCode.INVALID_CONFIG
