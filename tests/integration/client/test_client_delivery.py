"""Delivery presets against a broker process (issue 14, item 4): at-most-once commits
what poll returns before the caller sees it; at-least-once commits it at the next poll
(a crash in between re-reads); exactly-once reads committed transactions only; the
producer presets set what they document."""

from __future__ import annotations

import pytest

from mq.client import Admin, Consumer, Producer
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition


async def _fill(bootstrap: str, topic: str, count: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic)
    async with Producer(bootstrap, delivery="at-least-once") as producer:
        assert producer.acks == -1 and producer.idempotence is not None
        for i in range(count):
            producer.send(topic, b"r%d" % i)
        await producer.flush()


async def _committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    async with Consumer(bootstrap, group_id=group, enable_auto_commit=False) as reader:
        found = (await reader.committed([tp])).get(tp)
    return None if found is None else found.offset


async def _first_poll(bootstrap: str, topic: str, group: str, delivery: str) -> tuple[int, int | None]:
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap, group_id=group, delivery=delivery, fetch_max_wait_ms=50,
                        auto_offset_reset="earliest", session_timeout_ms=6000) as consumer:
        consumer.subscribe([topic])
        records = []
        for _ in range(100):
            records = await consumer.poll(200)
            if records:
                break
        assert records
        # "the process crashes while handling them": what is committed at this moment?
        committed = await _committed(bootstrap, group, tp)
    return len(records), committed


async def test_at_most_once_commits_before_handing_records_over(shared_broker, topic_name) -> None:
    await _fill(shared_broker.bootstrap, topic_name, 20)
    count, committed = await _first_poll(shared_broker.bootstrap, topic_name, f"{topic_name}-amo", "at-most-once")
    assert committed == count  # a crash now would skip them: at most once


async def test_at_least_once_commits_only_at_the_next_poll(shared_broker, topic_name) -> None:
    await _fill(shared_broker.bootstrap, topic_name, 20)
    count, committed = await _first_poll(shared_broker.bootstrap, topic_name, f"{topic_name}-alo", "at-least-once")
    assert count > 0 and committed is None  # a crash now re-reads them: at least once


async def test_exactly_once_reads_committed_transactions_only(shared_broker, topic_name) -> None:
    async with Admin(shared_broker.bootstrap) as admin:
        await admin.create_topic(topic_name)
    async with Producer(shared_broker.bootstrap, delivery="exactly-once", transactional_id=f"{topic_name}-t") as p:
        await p.init_transactions()
        p.begin_transaction()
        p.send(topic_name, b"aborted")
        await p.abort_transaction()
        p.begin_transaction()
        p.send(topic_name, b"committed")
        await p.commit_transaction()
    async with Consumer(shared_broker.bootstrap, group_id=f"{topic_name}-eos", delivery="exactly-once",
                        auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer:
        consumer.subscribe([topic_name])
        values: list[bytes] = []
        for _ in range(50):
            values += [r.value for r in await consumer.poll(200)]
            if values:
                break
    assert values == [b"committed"]


def test_presets_refuse_what_contradicts_them() -> None:
    with pytest.raises(MqError) as err:
        Producer("localhost:1", delivery="at-most-once", acks="all")
    assert err.value.code == ErrorCode.INVALID_CONFIG and "acks" in err.value.message
    with pytest.raises(MqError) as err:
        Producer("localhost:1", delivery="exactly-once")
    assert "transactional_id" in err.value.message
    with pytest.raises(MqError) as err:
        Consumer("localhost:1", delivery="at-most-once")
    assert "group_id" in err.value.message
    with pytest.raises(MqError) as err:
        Consumer("localhost:1", group_id="g", delivery="at-least-once", enable_auto_commit=False)
    assert "enable_auto_commit" in err.value.message
    plain = Producer("localhost:1", delivery="at-most-once")
    assert (plain.acks, plain.idempotence) == (1, None)
