"""Failpoints in a real broker process (``MQ_FAILPOINTS``, read by the runner only):
an injected EIO on fsync is a KAFKA_STORAGE_ERROR for the producer without a stack
trace, a ``panic`` ends the process at once with exit code 70, and a malformed string
stops the broker before it starts, naming the bad part."""

from __future__ import annotations

import pytest

from mq.core.errors import ErrorCode
from mq.core.failpoints import PANIC_EXIT_CODE
from mq.protocol.messages import (
    ErrorResponse,
    ProducePartitionData,
    ProduceRequest,
    ProduceTopicData,
)

from .raw import RawClient, batch, values_of

ALWAYS = {"log.flush.policy": "always"}


def test_fsync_eio_fails_the_produce_and_takes_only_that_partition_offline(broker_factory, monkeypatch):
    # Scoped to fp-0: the metadata log fsyncs through the same code when the topic is created.
    monkeypatch.setenv("MQ_FAILPOINTS", "storage.before_fsync@fp-0=oserror(EIO)")
    broker = broker_factory(ALWAYS)
    with RawClient.to(broker) as c:
        c.create_topic("fp", 2)
        failed = c.produce("fp", 0, batch([b"never-acked"]))
        assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR, failed
        assert "EIO" in failed.error_message, failed
        again = c.produce("fp", 0, batch([b"offline"]))  # the log is offline now
        assert again.error_code == ErrorCode.KAFKA_STORAGE_ERROR and "offline" in again.error_message
        assert c.produce("fp", 1, batch([b"fine"])).error_code == 0
        lost = c.fetch("fp", 0, 0)  # nothing of the failed partition was acknowledged
        assert lost.high_watermark == 0 and not values_of(lost.records), lost
        good = c.fetch("fp", 1, 0)
        assert good.error_code == 0 and [v for _, v in values_of(good.records)] == [b"fine"]
    text = broker.stderr_text()
    assert "failpoints_set storage.before_fsync@fp-0=oserror(EIO)" in text
    assert "Traceback" not in text, text
    assert broker.stop() == 0


def test_panic_before_append_exits_at_once_with_the_panic_code(broker_factory, monkeypatch):
    monkeypatch.setenv("MQ_FAILPOINTS", "storage.before_append@fp-0=1*panic")
    broker = broker_factory()
    with RawClient.to(broker) as c:
        c.create_topic("fp", 1)
        try:
            c.produce("fp", 0, batch([b"doomed"]))
        except (OSError, EOFError, ConnectionError):
            pass  # the broker died mid-request: the connection closes without an answer
        else:
            pytest.fail("a produce was answered by a broker that should have panicked")
    assert broker.proc.wait(timeout=10) == PANIC_EXIT_CODE
    text = broker.stderr_text()
    assert "failpoint_panic name=storage.before_append@fp-0 exit_code=70" in text
    assert "Traceback" not in text and "broker_stopping" not in text, text


@pytest.mark.parametrize("policy", ["always", "replicated"])
def test_error_before_produce_response_leaves_the_records_written_but_unacked(
        broker_factory, monkeypatch, policy):
    monkeypatch.setenv("MQ_FAILPOINTS", "broker.before_produce_response=1*error(REQUEST_TIMED_OUT)")
    broker = broker_factory({"log.flush.policy": policy})
    with RawClient.to(broker) as c:
        c.create_topic("fp", 1)
        answer = c.request(ProduceRequest(1, 10_000, [ProduceTopicData("fp", [
            ProducePartitionData(0, batch([b"written"]))])]))
        assert isinstance(answer, ErrorResponse), answer
        assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert "broker.before_produce_response" in answer.error_message
        acked = c.produce("fp", 0, batch([b"acked"]))  # fired once: the next is answered
        assert acked.error_code == 0 and acked.base_offset == 1, acked
        stored = c.fetch("fp", 0, 0)
        assert [v for _, v in values_of(stored.records)] == [b"written", b"acked"]
    assert "Traceback" not in broker.stderr_text()


def test_malformed_failpoints_stop_the_broker_naming_the_bad_part(broker_factory, monkeypatch):
    monkeypatch.setenv("MQ_FAILPOINTS", "storage.before_fsync=oserror(ENOTREAL)")
    with pytest.raises(RuntimeError) as info:
        broker_factory()
    assert "broker exited with 2" in str(info.value)
    assert "unknown errno 'ENOTREAL'" in str(info.value) and "Traceback" not in str(info.value)
