"""Idempotent produce on the wire (TESTING.md "Bad input", R17's broker half):
InitProducerId, a resent batch answered with its original offset, and a sequence gap,
a stale epoch and an unknown producer id each refused with a named error, nothing
appended; the state survives a restart (snapshot + log)."""

from __future__ import annotations

import pytest

from mq.broker.producer_ids import IDS_PER_REGISTRATION
from mq.core.errors import ErrorCode
from mq.protocol.messages import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from mq.protocol.producer_messages import InitProducerIdRequest

from ..conftest import BrokerProcess, free_port
from .raw import RawClient, batch, until, values_of
from .test_bad_input import assert_no_traceback, assert_still_serving


@pytest.fixture(scope="module")
def idem_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("idem") / "data", free_port())
    proc.start()
    yield proc
    proc.stop()


def log_end(client: RawClient, topic: str) -> int:
    request = ListOffsetsRequest([ListOffsetsTopic(topic, [ListOffsetsPartition(0, -1)])])
    return client.request(request).topics[0].partitions[0].offset


def init(client: RawClient) -> tuple[int, int]:
    response = until(lambda: client.request(InitProducerIdRequest()))
    return response.producer_id, response.producer_epoch  # type: ignore[attr-defined]


def test_producer_ids_are_unique_and_from_this_registration(idem_broker):
    with RawClient.to(idem_broker) as client:
        ids = [init(client) for _ in range(5)]
    assert len({pid for pid, _ in ids}) == 5 and all(epoch == 0 for _, epoch in ids)
    assert all(pid >= IDS_PER_REGISTRATION for pid, _ in ids)


def test_transactional_id_goes_to_the_transaction_coordinator(idem_broker):
    with RawClient.to(idem_broker) as client:
        response = client.request(InitProducerIdRequest(transactional_id="payments-1", transaction_timeout_ms=1000))
    # no FindCoordinator(key_type=1) yet: __transaction_state does not exist
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "__transaction_state" in response.error_message


def test_resent_batch_is_answered_with_its_original_offset(idem_broker):
    with RawClient.to(idem_broker) as client:
        client.create_topic("idem-dup")
        pid, epoch = init(client)
        first = batch([b"a", b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
        answer = client.produce("idem-dup", 0, first, acks=-1)
        assert answer.error_code == 0 and answer.base_offset == 0
        client.produce("idem-dup", 0, batch([b"plain"]), acks=-1)  # a non-idempotent record between
        again = client.produce("idem-dup", 0, first, acks=-1)  # the answer was "lost": resent
        assert again.error_code == 0 and again.base_offset == 0
        assert log_end(client, "idem-dup") == 3
        nxt = client.produce("idem-dup", 0, batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=2),
                             acks=-1)
        assert nxt.error_code == 0 and nxt.base_offset == 3
        assert [v for _, v in values_of(client.fetch("idem-dup", 0, 0).records)] == [b"a", b"b", b"plain", b"c"]


@pytest.mark.parametrize(("name", "pid_delta", "epoch", "seq", "code"), [
    ("gap", 0, 1, 5, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    ("stale-epoch", 0, 0, 3, ErrorCode.INVALID_PRODUCER_EPOCH),
    ("unknown-producer", 1, 0, 7, ErrorCode.UNKNOWN_PRODUCER_ID),
])
def test_bad_sequences_get_named_errors_and_append_nothing(idem_broker, name, pid_delta, epoch, seq, code):
    topic = f"idem-bad-{name}"
    with RawClient.to(idem_broker) as client:
        client.create_topic(topic)
        pid, _ = init(client)
        other, _ = init(client)
        for e in (0, 1):  # epoch 0 then a bump to 1: sequences 0..2 in epoch 1
            answer = client.produce(topic, 0, batch([b"x", b"y", b"z"], producer_id=pid, producer_epoch=e,
                                                    base_sequence=0), acks=-1)
            assert answer.error_code == 0
        end = log_end(client, topic)
        bad_pid = other if pid_delta else pid
        answer = client.produce(topic, 0, batch([b"bad"], producer_id=bad_pid, producer_epoch=epoch,
                                                base_sequence=seq), acks=-1)
        assert answer.error_code == code, answer
        assert answer.error_message
        assert log_end(client, topic) == end
    assert_still_serving(idem_broker)
    assert_no_traceback(idem_broker)


def test_producer_state_survives_a_restart(tmp_path):
    proc = BrokerProcess(tmp_path / "data", free_port(), configs={"log.segment.bytes": "1024"})
    proc.start()
    try:
        with RawClient.to(proc) as client:
            client.create_topic("idem-restart")
            pid, epoch = init(client)
            batches = [batch([b"v%d" % i] * 4, producer_id=pid, producer_epoch=epoch, base_sequence=4 * i)
                       for i in range(20)]
            for b in batches:
                assert client.produce("idem-restart", 0, b, acks=-1).error_code == 0
        proc.kill()  # no clean close: the state comes from the last roll's snapshot and the log after it
        assert any(p.suffix == ".snapshot" for p in (tmp_path / "data").rglob("*.snapshot"))
        proc.start()
        with RawClient.to(proc) as client:
            again = until(lambda: client.produce("idem-restart", 0, batches[-1], acks=-1))
            assert again.base_offset == 76  # type: ignore[attr-defined]
            assert log_end(client, "idem-restart") == 80
            gap = client.produce("idem-restart", 0, batch([b"late"], producer_id=pid, producer_epoch=epoch,
                                                          base_sequence=81), acks=-1)
            assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    finally:
        proc.stop()
