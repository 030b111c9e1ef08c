"""The broker's side of registration, heartbeats and controlled shutdown (Kafka's
``BrokerLifecycleManager``).

A starting broker registers with the active controller under a fresh incarnation id
and gets a broker epoch; it then heartbeats with the metadata offset it has applied.
It starts fenced (it leads nothing and is in no ISR) and the controller unfences it
once that offset reaches its registration: from then on the broker serves. A
heartbeat answered ``STALE_BROKER_EPOCH`` means the controller knows a newer
incarnation or forgot this one: register again. ``want_shutdown`` asks the
controller to move leadership away; ``should_shutdown`` says it is done.
"""

from __future__ import annotations

from mq.core.config import BrokerConfig
from mq.core.errors import ErrorCode
from mq.protocol.inter_broker import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerListener,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from mq.protocol.messages import Request, Response

FENCED_HEARTBEAT_MS = 50
"""Heartbeat interval while fenced: catching up should not wait a whole interval."""
RETRY_BACKOFF_MS = 100
SHUTDOWN_ATTEMPTS = 3
"""Controlled-shutdown heartbeats that may fail in a row before the broker exits anyway."""


class BrokerLifecycle:
    def __init__(self, config: BrokerConfig, *, incarnation_id: str, host: str, port: int,
                 cluster_id: str = "") -> None:
        self.config = config
        self.incarnation_id = incarnation_id
        self.listener = BrokerListener(host, port)
        self.cluster_id = cluster_id
        self.broker_epoch = -1
        self.is_fenced = True
        self.is_caught_up = False
        self.want_shutdown = False
        self.shutdown_complete = False
        self.in_flight = False
        self.next_send_ms = 0
        self.failed_shutdown_heartbeats = 0

    @property
    def is_ready(self) -> bool:
        return self.broker_epoch >= 0 and not self.is_fenced and self.is_caught_up

    def begin_shutdown(self, now_ms: int) -> None:
        self.want_shutdown = True
        self.next_send_ms = now_ms

    def next_request(self, *, now_ms: int, metadata_offset: int) -> Request | None:
        """The request to send to the controller now, if any (one at a time)."""
        if self.in_flight or now_ms < self.next_send_ms or self.shutdown_complete:
            return None
        self.in_flight = True
        if self.broker_epoch < 0:
            return BrokerRegistrationRequest(self.config.node_id, self.incarnation_id, [self.listener],
                                             cluster_id=self.cluster_id)
        return BrokerHeartbeatRequest(self.config.node_id, self.broker_epoch, metadata_offset,
                                      want_shutdown=self.want_shutdown)

    def deadline_ms(self) -> int | None:
        return None if self.in_flight or self.shutdown_complete else self.next_send_ms

    def on_response(self, response: Response | None, *, now_ms: int) -> None:
        self.in_flight = False
        if isinstance(response, BrokerRegistrationResponse):
            if response.error_code == ErrorCode.NONE:
                self.broker_epoch = response.broker_epoch
                self.is_fenced = True
                self.next_send_ms = now_ms  # the first heartbeat goes at once
                return
        elif isinstance(response, BrokerHeartbeatResponse):
            if response.error_code == ErrorCode.NONE:
                self.is_fenced = response.is_fenced
                self.is_caught_up = self.is_caught_up or response.is_caught_up
                if self.want_shutdown and response.should_shutdown:
                    self.shutdown_complete = True
                interval = self.config.broker_heartbeat_interval_ms
                self.next_send_ms = now_ms + (FENCED_HEARTBEAT_MS if self.is_fenced or self.want_shutdown else interval)
                return
            if response.error_code == ErrorCode.STALE_BROKER_EPOCH:
                self.broker_epoch = -1  # forgotten or replaced: register again
                self.is_fenced = True
        # No answer, NOT_CONTROLLER, a quorum in the middle of an election: try again soon.
        self.next_send_ms = now_ms + RETRY_BACKOFF_MS
        if self.want_shutdown:
            self.failed_shutdown_heartbeats += 1
            if self.failed_shutdown_heartbeats >= SHUTDOWN_ATTEMPTS:
                self.give_up_shutdown()

    def give_up_shutdown(self) -> None:
        """Nobody can move leadership for us (the controller is gone or the quorum is
        lost, e.g. the whole region is stopping): exit without waiting."""
        self.shutdown_complete = True
