"""``__consumer_offsets``: created on first use, and FindCoordinator.

The first FindCoordinator for a group asks the active controller to create the
offsets topic, through the control plane exactly as a client's CreateTopics goes
(forwarded when another broker is the controller). One creation is in flight at a
time; a failed one is retried by a later FindCoordinator, not before
``CREATE_RETRY_BACKOFF_MS``. Until the group's partition has a leader the answer is
COORDINATOR_NOT_AVAILABLE (retriable); then it is that leader.

The topic: ``offsets.topic.num.partitions`` partitions, replication factor
``offsets.topic.replication.factor`` capped at the brokers registered in the image,
``cleanup.policy=compact``, ``segment.bytes=offsets.topic.segment.bytes`` and
``min.insync.replicas`` 2 when the replication factor is at least 3 (else 1): a commit
is acknowledged only once the whole ISR has it (acks=all), and with three replicas it
is refused rather than acknowledged by the leader alone, while one broker down still
leaves commits available (Kafka keeps the broker's default, usually 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mq.broker.control import CONTROLLER_REQUEST_TIMEOUT_MS
from mq.broker.outbound import Pending
from mq.coordinator import OFFSETS_TOPIC, group_partition
from mq.core.errors import ErrorCode
from mq.protocol.codec import RequestHeader
from mq.protocol.group_messages import FindCoordinatorRequest, FindCoordinatorResponse
from mq.protocol.messages import (
    ApiKey,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    Response,
)

if TYPE_CHECKING:
    from mq.broker.node import BrokerNode

CREATE_RETRY_BACKOFF_MS = 500
"""After a failed creation, FindCoordinator waits this long before asking again."""
GROUP_KEY_TYPE = 0
TXN_KEY_TYPE = 1

_CREATE_HEADER = RequestHeader(ApiKey.CREATE_TOPICS, 0, 0, "group-coordinator")


def offsets_topic_request(node: BrokerNode) -> CreateTopicsRequest:
    config = node.config
    registered = len(node.image.brokers)
    rf = max(1, min(config.offsets_topic_replication_factor, registered))
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": str(config.offsets_topic_segment_bytes),
        "min.insync.replicas": "2" if rf >= 3 else "1",
    }
    return CreateTopicsRequest([CreatableTopic(OFFSETS_TOPIC, config.offsets_topic_num_partitions, rf, configs)])


class OffsetsTopicCreator:
    """At most one CreateTopics for ``__consumer_offsets`` in flight."""

    def __init__(self, node: BrokerNode,
                 make_request: Callable[[BrokerNode], CreateTopicsRequest] | None = None) -> None:
        """``make_request``: the topic to create (default ``__consumer_offsets``)."""
        self.node = node
        self.make_request = make_request or offsets_topic_request
        self.op_id: int | None = None
        self.started_ms = 0
        self.retry_after_ms = 0
        self.last_error = ""
        self.requests_sent = 0

    def ensure(self, *, now_ms: int) -> None:
        if self.op_id is not None or now_ms < self.retry_after_ms:
            return
        self.requests_sent += 1
        self.started_ms = now_ms
        outcome = self.node.control.handle(_CREATE_HEADER, self.make_request(self.node), now_ms=now_ms)
        if isinstance(outcome, Pending):
            self.op_id = outcome.op_id
        elif outcome is not None:
            self._done(outcome, now_ms)

    def owns(self, op_id: int) -> bool:
        return op_id == self.op_id

    def on_completion(self, op_id: int, response: Response, *, now_ms: int) -> bool:
        """The control plane answered; False if ``op_id`` is not our creation."""
        if op_id != self.op_id:
            return False
        self.op_id = None
        self._done(response, now_ms)
        return True

    def poll(self, *, now_ms: int) -> int | None:
        """Give up on a creation the controller never answered (the control plane's
        own timeout answers REQUEST_TIMED_OUT through ``on_completion``)."""
        if self.op_id is None:
            return None
        deadline = self.started_ms + CONTROLLER_REQUEST_TIMEOUT_MS
        if now_ms >= deadline:
            self.node.control.expire(self.op_id, now_ms=now_ms)
            return None
        return deadline

    def _done(self, response: Response, now_ms: int) -> None:
        code = ErrorCode.UNKNOWN_SERVER_ERROR
        message = f"unexpected answer {type(response).__name__}"
        if isinstance(response, CreateTopicsResponse) and response.topics:
            code = ErrorCode(response.topics[0].error_code)
            message = response.topics[0].error_message
        if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            self.last_error = ""
            return
        self.last_error = f"{code.name}: {message}"
        self.retry_after_ms = now_ms + CREATE_RETRY_BACKOFF_MS


def coordinator_address(node: BrokerNode, topic_name: str, partition: int) -> FindCoordinatorResponse:
    """The leader of ``topic_name``-``partition`` as a FindCoordinator answer."""
    topic = node.image.topic(topic_name)
    image = None if topic is None else topic.partitions.get(partition)
    if image is None or image.leader < 0:
        return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       error_message=f"{topic_name}-{partition} has no leader yet; retry")
    broker = node.image.broker(image.leader)
    if broker is not None:
        host, port = broker.host, broker.port
    elif image.leader == node.node_id:
        host, port = node.advertised_host, node.advertised_port
    else:
        return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       error_message=f"the address of broker {image.leader} is unknown; retry")
    return FindCoordinatorResponse(ErrorCode.NONE, image.leader, host, port)


def find_coordinator(node: BrokerNode, creator: OffsetsTopicCreator, request: FindCoordinatorRequest, *,
                     now_ms: int) -> FindCoordinatorResponse:
    if request.key_type == TXN_KEY_TYPE and node.txns is not None:
        return node.txns.find_coordinator(request, now_ms=now_ms)
    if request.key_type != GROUP_KEY_TYPE:
        return FindCoordinatorResponse(ErrorCode.INVALID_REQUEST,
                                       error_message=f"key_type {request.key_type}: groups (0) and transactional ids (1) have coordinators")
    if not request.key:
        return FindCoordinatorResponse(ErrorCode.INVALID_GROUP_ID, error_message="the group id is empty")
    topic = node.image.topic(OFFSETS_TOPIC)
    if topic is None or not topic.partitions:
        creator.ensure(now_ms=now_ms)
        why = f" (last attempt failed: {creator.last_error})" if creator.last_error else ""
        return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       error_message=f"creating {OFFSETS_TOPIC}{why}; retry")
    partition = group_partition(request.key, len(topic.partitions))
    image = topic.partitions.get(partition)
    if image is None or image.leader < 0:
        return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       error_message=f"{OFFSETS_TOPIC}-{partition} has no leader yet; retry")
    broker = node.image.broker(image.leader)
    if broker is not None:
        host, port = broker.host, broker.port
    elif image.leader == node.node_id:
        host, port = node.advertised_host, node.advertised_port
    else:
        return FindCoordinatorResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       error_message=f"the address of broker {image.leader} is unknown; retry")
    return FindCoordinatorResponse(ErrorCode.NONE, image.leader, host, port)
