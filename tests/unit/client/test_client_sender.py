"""RetryPolicy: the fate of each batch after a produce answer or failure."""

from mq.client.internals.accumulator import RecordAccumulator
from mq.client.internals.sender import RetryPolicy, build_produce_request
from mq.core.errors import ErrorCode, MqError
from mq.core.types import TopicPartition
from mq.protocol.messages import ProducePartitionResponse, ProduceResponse, ProduceTopicResponse

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def batches(*spec: tuple[TopicPartition, int], created_ms: int = 0):
    acc = RecordAccumulator(batch_size=1 << 20, linger_ms=0, buffer_memory=1 << 20)
    out = []
    for tp, count in spec:
        queue = acc.queue_for(tp)
        batch = acc.open_batch(queue, created_ms)
        for i in range(count):
            acc.append(queue, 1, None, b"v%d" % i, ())
        batch.close()
        batch.attempts = 1
        out.append(batch)
    return out


def response(*parts: tuple[TopicPartition, int, int]) -> ProduceResponse:
    return ProduceResponse(topics=[ProduceTopicResponse("t", [
        ProducePartitionResponse(tp.partition, code, base_offset=base) for tp, code, base in parts])])


def test_request_concatenates_a_partitions_batches_in_order() -> None:
    bs = batches((TP0, 2), (TP1, 1), (TP0, 3))
    req = build_produce_request(bs, acks=-1, timeout_ms=100)
    assert req.acks == -1 and req.timeout_ms == 100
    [topic] = req.topics
    p0, p1 = topic.partitions
    assert (p0.partition, p1.partition) == (0, 1)
    assert bytes(p0.records) == bs[0].payload + bs[2].payload


def test_success_gives_each_batch_its_base_offset() -> None:
    bs = batches((TP0, 2), (TP0, 3), (TP1, 1))
    policy = RetryPolicy(retries=5, delivery_timeout_ms=1000)
    out = policy.on_response(bs, response((TP0, 0, 10), (TP1, 0, 7)), now_ms=5)
    assert [(b, base) for b, base, _ in out.completed] == [(bs[0], 10), (bs[1], 12), (bs[2], 7)]
    assert not out.failed and not out.retry and not out.refresh_metadata


def test_not_leader_retries_and_refreshes_metadata() -> None:
    bs = batches((TP0, 1), (TP1, 1))
    policy = RetryPolicy(retries=5, delivery_timeout_ms=1000)
    out = policy.on_response(bs, response((TP0, ErrorCode.NOT_LEADER, -1), (TP1, 0, 3)), now_ms=5)
    assert out.retry == [bs[0]] and out.refresh_metadata
    assert [b for b, _, _ in out.completed] == [bs[1]]


def test_non_retriable_error_fails_with_the_brokers_code() -> None:
    [b] = batches((TP0, 1))
    policy = RetryPolicy(retries=5, delivery_timeout_ms=1000)
    out = policy.on_response([b], response((TP0, ErrorCode.RECORD_TOO_LARGE, -1)), now_ms=5)
    [(failed, error)] = out.failed
    assert failed is b and error.code == ErrorCode.RECORD_TOO_LARGE and not out.retry


def test_retries_stop_at_the_limit_and_at_the_delivery_timeout() -> None:
    [b] = batches((TP0, 1), created_ms=0)
    policy = RetryPolicy(retries=2, delivery_timeout_ms=1000)
    err = MqError(ErrorCode.NETWORK_EXCEPTION, "lost")
    assert policy.on_failure([b], err, now_ms=10).retry == [b]
    b.attempts = 3
    [(_, error)] = policy.on_failure([b], err, now_ms=10).failed
    assert error.code == ErrorCode.NETWORK_EXCEPTION
    b.attempts = 1
    out = policy.on_failure([b], err, now_ms=1000)
    [(_, error)] = out.failed
    assert error.code == ErrorCode.DELIVERY_TIMEOUT and "NETWORK_EXCEPTION" in error.message
    assert out.refresh_metadata


def test_missing_partition_in_answer_is_not_silently_acknowledged() -> None:
    [b] = batches((TP1, 1))
    out = RetryPolicy(retries=0, delivery_timeout_ms=1000).on_response(
        [b], response((TP0, 0, 1)), now_ms=1)
    assert out.failed and not out.completed


def test_acks_zero_completes_without_offsets() -> None:
    bs = batches((TP0, 1))
    out = RetryPolicy(retries=0, delivery_timeout_ms=1).on_sent_without_ack(bs)
    assert out.completed == [(bs[0], -1, -1)]
